"""Numeric ranges as regexes over JSON number text (canonical digits, no leading zeros).

Bounds are integers. A bounded number is written without an exponent (the regex never admits
`1e2` for ``maximum: 200``: narrower than the schema, never wider).
"""

from __future__ import annotations

__all__ = ["integer_range_regex", "number_bound_regex", "magnitude_range"]

_FRACTION = r"(?:\.[0-9]+)?"
_NONZERO_FRACTION = r"\.[0-9]*[1-9][0-9]*"
_ZERO_FRACTION = r"(?:\.0+)?"


def _same_length(lo: str, hi: str) -> str:
    """Digit strings of equal length between lo and hi (inclusive)."""
    if not lo:
        return ""
    if lo[0] == hi[0]:
        return lo[0] + _group(_same_length(lo[1:], hi[1:]))
    rest = len(lo) - 1
    if set(lo[1:]) <= {"0"} and set(hi[1:]) <= {"9"}:
        return f"[{lo[0]}-{hi[0]}][0-9]{{{rest}}}" if rest else f"[{lo[0]}-{hi[0]}]"
    parts = [lo[0] + _group(_same_length(lo[1:], "9" * rest))]
    if int(hi[0]) - int(lo[0]) > 1:
        parts.append(f"[{int(lo[0]) + 1}-{int(hi[0]) - 1}][0-9]{{{rest}}}")
    parts.append(hi[0] + _group(_same_length("0" * rest, hi[1:])))
    return "|".join(parts)


def _group(regex: str) -> str:
    return f"(?:{regex})" if "|" in regex else regex


def magnitude_range(lo: int, hi: int | None) -> str | None:
    """Canonical non-negative integers in [lo, hi] (hi None: unbounded); None when empty."""
    lo = max(lo, 0)
    if hi is not None and hi < lo:
        return None
    parts = []
    length = len(str(lo))
    while hi is None or length <= len(str(hi)):
        start = lo if length == len(str(lo)) else 10 ** (length - 1)
        end = 10**length - 1 if hi is None or length < len(str(hi)) else hi
        if hi is None and start == 10 ** (length - 1) and length > 1:
            parts.append(f"[1-9][0-9]{{{length - 1},}}")
            break
        parts.append(_same_length(str(start), str(end)))
        length += 1
        if hi is None and length > len(str(lo)) + 1:
            parts.append(f"[1-9][0-9]{{{length - 1},}}")
            break
    return "|".join(parts)


def integer_range_regex(lo: int | None, hi: int | None) -> str | None:
    """JSON integers in [lo, hi] (None: unbounded), also written with a zero fraction (`1.0`)."""
    parts = []
    if hi is None or hi >= 0:
        nonneg = magnitude_range(max(lo or 0, 0), hi)
        if nonneg is not None:
            parts.append(_group(nonneg))
    if lo is None or lo < 0:
        negative = magnitude_range(
            max(1, -hi) if hi is not None else 1, None if lo is None else -lo
        )
        if negative is not None:
            parts.append("-" + _group(negative))
    if not parts:
        return None
    return f"(?:{'|'.join(parts)}){_ZERO_FRACTION}"


def _at_least(bound: int, strict: bool) -> tuple[str | None, str | None]:
    """Numbers x >= bound (x > bound when strict) as (non-negative part, magnitudes of the
    negative part), each a regex or None when empty."""
    if bound >= 0:
        whole = magnitude_range(bound + 1 if strict else bound, None)
        positive = f"(?:{whole}){_FRACTION}"
        if strict:
            return f"{positive}|{bound}{_NONZERO_FRACTION}", None
        return positive, (f"0{_ZERO_FRACTION}" if bound == 0 else None)  # -0 >= 0
    positive = r"(?:0|[1-9][0-9]*)" + _FRACTION
    top = -bound
    below = magnitude_range(0, top - 1)
    negative = f"(?:{below}){_FRACTION}"
    if not strict:
        negative = f"{negative}|{top}{_ZERO_FRACTION}"
    return positive, negative


def number_bound_regex(
    lo: int | None, lo_strict: bool, hi: int | None, hi_strict: bool
) -> tuple[str, ...]:
    """Regexes whose intersection is the JSON numbers within the bounds (one per bound given;
    the unbounded JSON number when there is none)."""
    if lo is None and hi is None:
        return (r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?",)
    out = []
    if lo is not None:
        out.append(_join(*_at_least(lo, lo_strict)))
    if hi is not None:
        negative, positive = _at_least(-hi, hi_strict)  # x <= hi  <=>  -x >= -hi
        out.append(_join(positive, negative))
    return tuple(out)


def _join(positive: str | None, negative: str | None) -> str:
    parts = [f"(?:{positive})"] if positive else []
    if negative:
        parts.append(f"-(?:{negative})")
    return "|".join(parts) if parts else "[^\\x00-\\xff]"  # nothing
