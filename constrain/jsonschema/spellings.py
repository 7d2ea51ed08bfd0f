"""How JSON values are spelled: the one canonical text generation writes, or every text.

A JSON value has many texts: ``1972`` is also ``1972.0`` and ``1972.00``, ``"é"`` is also
``"\\u00e9"`` and ``"\\u00E9"``, ``"/"`` is also ``"\\/"``. The shape algebra works in one
universe (numbers without exponent, every fraction and sign of zero; strings in one encoding,
as ``json.dumps(..., ensure_ascii=False)`` writes them), exact under intersection and
complement. The emitter then spells each value lexeme in one of two ways (`SPELLINGS`):

* ``"canonical"`` (generation): each number in its one shortest text, as few digits as its
  value needs: a fraction never ends in ``0`` (``0.3``, never ``0.30``; an integer is written
  ``1972``, never ``1972.0``, so ``json.loads`` gives an `int`) and zero is never ``-0``
  (``-0.5`` stays). A model that wrote ``0.30`` must go on to a non-zero digit, so the digits
  are bounded too: at most 20 before the point and, with a fraction, 17 significant digits
  (as many as a double holds) and 20 after the point. `canonical_numbers` intersects a value
  DFA with those texts. Strings keep their one encoding.
* ``"all"`` (validation): every character of a string (key, value, `enum` or `const`) may
  also be written as any escape JSON allows (``\\uXXXX`` in either case, surrogate pairs
  above U+FFFF, the short escapes, ``\\/``). `every_escape` adds those paths to a DFA: each
  state at a character boundary inside a string gets a backslash subtree leading, for every
  escaped spelling of a character, where the character's own text leads, built only as a
  mask or a check reads it (`constrain.engine.regex.escapes`).

Numbers with an exponent (``1e2``) are spelled in neither: the number universe has none.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from constrain.engine.regex import (
    ByteDFA,
    combine,
    compile_regex,
    dfa_from_table,
    is_empty_combination,
)
from constrain.engine.regex.escapes import EscapedDFA, has_strings

__all__ = [
    "MAX_FRACTION_DIGITS",
    "MAX_INTEGER_DIGITS",
    "MAX_SIGNIFICANT_DIGITS",
    "SPELLINGS",
    "canonical_numbers",
    "every_escape",
]

SPELLINGS = ("canonical", "all")

_ZERO, _MINUS = (ord(c) for c in "0-")


# -- canonical numbers ---------------------------------------------------------------------------

MAX_INTEGER_DIGITS = 20  # digits before the point: every 64-bit integer (2**64 has 20)
MAX_SIGNIFICANT_DIGITS = 17  # of a number with a fraction: as many as a double holds
MAX_FRACTION_DIGITS = 20  # after the point: the exponent bound, magnitudes down to 1e-20


def _significant(n: int) -> str:
    """Digit strings of length 1..n that start and end with a non-zero digit."""
    return "[1-9]" if n == 1 else f"[1-9](?:[0-9]{{0,{n - 2}}}[1-9])?"


def _bounded_number() -> str:
    """The canonical number texts within the digit bounds, as a regex."""
    fractions = [  # an integer part of k + 1 digits, then 1..16 - k fraction digits: 17 in all
        f"[1-9][0-9]{{{k}}}\\.[0-9]{{0,{MAX_SIGNIFICANT_DIGITS - k - 2}}}[1-9]"
        for k in range(MAX_SIGNIFICANT_DIGITS - 1)
    ]
    small = [  # 0.000ddd: j leading zeros, then 17 significant digits at most, 20 in all
        "0" * j + _significant(min(MAX_SIGNIFICANT_DIGITS, MAX_FRACTION_DIGITS - j))
        for j in range(MAX_FRACTION_DIGITS)
    ]
    return (
        f"0|-?(?:[1-9][0-9]{{0,{MAX_INTEGER_DIGITS - 1}}}|{'|'.join(fractions)}"
        f"|0\\.(?:{'|'.join(small)}))"
    )


def _not_numbers() -> ByteDFA:
    """Every byte string that does not start like a number (with ``-`` or a digit)."""
    trans = np.full((2, 256), 1, dtype=np.int64)
    trans[0, [_MINUS, *range(_ZERO, _ZERO + 10)]] = -1
    return dfa_from_table(trans, np.array([False, True]), 0, "not a number")


# a fraction ends in a non-zero digit (no "1.0", "0.30"), zero is never "-0"
_CANONICAL = r"0|-?(?:[1-9][0-9]*(?:\.[0-9]*[1-9])?|0\.[0-9]*[1-9])"
_BOUNDED = _bounded_number()


@cache
def _universes() -> tuple[ByteDFA, ByteDFA, ByteDFA, ByteDFA]:
    """(canonical numbers, bounded ones, and each with every text that is no number)."""
    canonical, bounded = compile_regex(_CANONICAL), compile_regex(_BOUNDED)
    others = _not_numbers()
    return (
        canonical,
        bounded,
        combine(canonical, others, "or", "canonical values"),
        combine(bounded, others, "or", "bounded canonical values"),
    )


def canonical_numbers(dfa: ByteDFA) -> ByteDFA:
    """`dfa` (a value lexeme) with each number in its one canonical text, within the digit
    bounds: no fraction ending in ``0`` (``0.3``, never ``0.30``; ``1``, never ``1.0``), never
    ``-0``, at most `MAX_INTEGER_DIGITS` before the point, and with a fraction at most
    `MAX_SIGNIFICANT_DIGITS` significant digits and `MAX_FRACTION_DIGITS` after the point (so a
    model cannot run away on digits). Numbers past the bounds stay when the schema admits only
    finitely many of them (an `enum`, an integer range) or none within them (``minimum:
    1e30``): the schema itself bounds them then."""
    row = dfa.row(dfa.start)
    if dfa.is_empty() or not row[[_MINUS, *range(_ZERO, _ZERO + 10)]].any():
        return dfa  # no number
    canonical, bounded, canonical_values, bounded_values = _universes()
    numbers = combine(dfa, canonical, "and", "numbers")
    beyond = combine(numbers, bounded, "minus", "numbers beyond the bounds")
    unbounded = beyond.longest() is None and not beyond.is_empty()
    if unbounded and not is_empty_combination(numbers, bounded, "and"):
        return combine(dfa, bounded_values, "and", f"canonical({dfa.pattern})")
    return combine(dfa, canonical_values, "and", f"canonical({dfa.pattern})")


# -- every escape --------------------------------------------------------------------------------


def every_escape(dfa: ByteDFA, in_string: bool = False) -> ByteDFA | EscapedDFA:
    """`dfa` (over values in the canonical encoding, or over string content when
    `in_string`) with every character of every string also spelled as each escape JSON
    allows, its new states built as they are read (`EscapedDFA`). Languages stay exact: each
    spelling decodes to one character. A DFA without strings is returned as it is."""
    return EscapedDFA(dfa, in_string) if has_strings(dfa, in_string) else dfa
