"""Numbers as languages over their JSON text: ranges with decimal bounds and `multipleOf`.

The universe is `NUMBER`: JSON numbers without an exponent (one spelling per written value up
to trailing fraction zeros and the sign of zero). Every language here is exact within it, so
intersections and complements of numeric constraints stay exact.
"""

from __future__ import annotations

from decimal import Decimal

import numpy as np

from constrain.engine.regex import ByteDFA, combine, compile_regex, dfa_from_table

__all__ = [
    "INTEGER",
    "INTEGER_LITERAL",
    "NUMBER",
    "bound_regex",
    "magnitude_range",
    "multiple_of_dfa",
]


def _same_length(lo: str, hi: str) -> list[str]:
    """Digit strings of equal length between lo and hi (inclusive), as flat alternatives:
    groups nested one per digit would overflow the regex parser's stack on long bounds."""
    if not lo:
        return [""]
    if lo[0] == hi[0]:
        return [lo[0] + term for term in _same_length(lo[1:], hi[1:])]
    rest = len(lo) - 1
    if set(lo[1:]) <= {"0"} and set(hi[1:]) <= {"9"}:
        return [f"[{lo[0]}-{hi[0]}][0-9]{{{rest}}}" if rest else f"[{lo[0]}-{hi[0]}]"]
    parts = [lo[0] + term for term in _same_length(lo[1:], "9" * rest)]
    if int(hi[0]) - int(lo[0]) > 1:
        parts.append(f"[{int(lo[0]) + 1}-{int(hi[0]) - 1}][0-9]{{{rest}}}")
    parts += [hi[0] + term for term in _same_length("0" * rest, hi[1:])]
    return parts


def magnitude_range(lo: int, hi: int | None) -> str | None:
    """Canonical non-negative integers in [lo, hi] (hi None: unbounded); None when empty.
    The lengths strictly between those of lo and hi are one term (``[1-9][0-9]{a,b}``), so a
    bound of 300 digits stays a small regex."""
    lo = max(lo, 0)
    if hi is not None and hi < lo:
        return None
    n = len(str(lo))
    if hi is not None and len(str(hi)) == n:
        return "|".join(_same_length(str(lo), str(hi)))
    parts = _same_length(str(lo), "9" * n)
    if hi is None:
        parts.append(f"[1-9][0-9]{{{n},}}")
        return "|".join(parts)
    top = len(str(hi))
    if top - 2 >= n:  # lengths n + 1 .. top - 1
        parts.append(f"[1-9][0-9]{{{n},{top - 2}}}")
    parts += _same_length("1" + "0" * (top - 1), str(hi))
    return "|".join(parts)


# -- decimal bounds and multipleOf over the no-exponent number language -------------------------

NUMBER = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?"
INTEGER = r"-?(?:0|[1-9][0-9]*)(?:\.0+)?"  # integer-valued: 1.0 is an integer
INTEGER_LITERAL = r"-?(?:0|[1-9][0-9]*)"  # draft 4's integers: no fraction part
_ANY_FRACTION = r"(?:\.[0-9]+)?"


def _digits(bound: Decimal) -> tuple[int, str]:
    """A non-negative decimal as (integer part, fraction digits without trailing zeros)."""
    whole = int(bound)
    fraction = format(bound - whole, "f").partition(".")[2].rstrip("0")
    return whole, fraction


def _fraction_at_least(f: str, strict: bool) -> str | None:
    """Optional fractions ``.G`` (or none) with 0.G >= 0.f (> when strict)."""
    if not f:
        return r"\.[0-9]*[1-9][0-9]*" if strict else _ANY_FRACTION
    alts = [rf"\.{f[:i]}[{int(d) + 1}-9][0-9]*" for i, d in enumerate(f) if d != "9"]
    alts.append(rf"\.{f}[0-9]*[1-9][0-9]*" if strict else rf"\.{f}[0-9]*")
    return "(?:" + "|".join(alts) + ")"


def _fraction_at_most(f: str, strict: bool) -> str | None:
    """Optional fractions ``.G`` (or none) with 0.G <= 0.f (< when strict)."""
    if not f:
        return None if strict else r"(?:\.0+)?"
    alts = [""]  # no fraction: 0 < 0.f
    alts += [rf"\.{f[:i]}[0-{int(d) - 1}][0-9]*" for i, d in enumerate(f) if d != "0"]
    alts += [rf"\.{f[:k]}" for k in range(1, len(f))]
    if not strict:
        alts.append(rf"\.{f}0*")
    return "(?:" + "|".join(alts) + ")"


def _magnitudes_at_least(bound: Decimal, strict: bool) -> str | None:
    """Unsigned number texts with value >= bound (> when strict)."""
    if bound < 0:
        return r"(?:0|[1-9][0-9]*)" + _ANY_FRACTION
    whole, f = _digits(bound)
    alts = [f"(?:{magnitude_range(whole + 1, None)}){_ANY_FRACTION}"]
    alts.append(f"{whole}{_fraction_at_least(f, strict)}")
    return "|".join(alts)


def _magnitudes_at_most(bound: Decimal, strict: bool) -> str | None:
    """Unsigned number texts with value <= bound (< when strict); None when there is none."""
    if bound < 0:
        return None
    whole, f = _digits(bound)
    alts = []
    if whole >= 1:
        alts.append(f"(?:{magnitude_range(0, whole - 1)}){_ANY_FRACTION}")
    fraction = _fraction_at_most(f, strict)
    if fraction is not None:
        alts.append(f"{whole}{fraction}")
    return "|".join(alts) or None


def bound_regex(bound: Decimal, strict: bool, lower: bool) -> str:
    """Number texts x with x >= bound (lower) or x <= bound, strict or not. ``-0`` is 0."""
    if lower:
        positive, negative = (
            _magnitudes_at_least(bound, strict),
            _magnitudes_at_most(-bound, strict),
        )
    else:
        positive, negative = (
            _magnitudes_at_most(bound, strict),
            _magnitudes_at_least(-bound, strict),
        )
    parts = [f"(?:{positive})"] if positive else []
    if negative:
        parts.append(f"-(?:{negative})")
    return "|".join(parts) if parts else "[^\\x00-\\U0010ffff]"  # matches nothing


def multiple_of_dfa(step: Decimal, max_states: int = 200_000) -> ByteDFA:
    """The number texts whose value is a multiple of `step` (> 0), exactly.

    With step = p / 10**d, x is a multiple iff x * 10**d is an integer divisible by p: the DFA
    tracks the residue modulo p of the digits read so far and allows only zeros after the d-th
    fraction digit. Syntax is left to an intersection with `NUMBER`.
    """
    sign, digits, exponent = step.normalize().as_tuple()
    if sign or not digits or step <= 0:
        raise ValueError(f"multipleOf must be > 0, got {step}")
    p = int("".join(map(str, digits)))
    d = max(0, -exponent)
    if exponent > 0:
        p *= 10**exponent
    n_states = p * (d + 2)
    if n_states > max_states:
        raise ValueError(
            f"multipleOf {step} needs {n_states} automaton states (limit {max_states})"
        )
    # states: 0 dead; integer part with residue r -> 1 + r; after the point with k fraction
    # digits read (k <= d) and residue r -> 1 + (k + 1) * p + r
    trans = np.full((n_states + 1, 256), -1, dtype=np.int64)
    accepting = np.zeros(n_states + 1, dtype=bool)
    digits_ = np.arange(ord("0"), ord("9") + 1)
    for r in range(p):
        after = (10 * r + np.arange(10)) % p
        trans[1 + r, digits_] = 1 + after
        trans[1 + r, ord("-")] = 1 + r
        trans[1 + r, ord(".")] = 1 + p + r
        accepting[1 + r] = (r * 10**d) % p == 0
        for k in range(d + 1):
            state = 1 + (k + 1) * p + r
            if k < d:
                trans[state, digits_] = 1 + (k + 2) * p + after
            else:
                trans[state, ord("0")] = state
            accepting[state] = (r * 10 ** (d - k)) % p == 0
    arithmetic = dfa_from_table(trans[1:] - (trans[1:] > 0), accepting[1:], 0, f"multipleOf {step}")
    return combine(compile_regex(NUMBER), arithmetic, "and", f"multipleOf {step}")
