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
  escaped spelling of a character, where the character's own text leads. The result is not
  minimised (on large string DFAs that took most of the compile): its subtrees are interned
  by what they lead to, so it stays within a few states of minimal.

Numbers with an exponent (``1e2``) are spelled in neither: the number universe has none.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable
from functools import cache

import numpy as np

from constrain.engine.cache import BoundedCache
from constrain.engine.regex import (
    DEAD,
    ByteDFA,
    combine,
    compile_regex,
    dfa_from_table,
    is_empty_combination,
)

__all__ = [
    "MAX_FRACTION_DIGITS",
    "MAX_INTEGER_DIGITS",
    "MAX_SIGNIFICANT_DIGITS",
    "SPELLINGS",
    "canonical_numbers",
    "every_escape",
]

SPELLINGS = ("canonical", "all")
_KEPT = 512  # expanded DFAs kept (see every_escape) ...
_KEPT_BYTES = 128 * 2**20  # ... and their tables' bytes at most

_ZERO, _MINUS, _QUOTE, _BACKSLASH = (ord(c) for c in '0-"\\')
_QUOTING = (_QUOTE, _BACKSLASH)  # bytes a string reads raw only to end or to escape
_SHORT = {0x08: "b", 0x09: "t", 0x0A: "n", 0x0C: "f", 0x0D: "r", 0x22: '"', 0x5C: "\\"}
# (code point, its escape after the backslash) of the characters JSON requires escaped
_REQUIRED_ESCAPES = [
    (cp, (_SHORT[cp] if cp in _SHORT else f"u{cp:04x}").encode())
    for cp in [*range(0x20), 0x22, 0x5C]
]
_PAYLOAD = {1: 0x1F, 2: 0x0F, 3: 0x07}  # the payload bits of a lead byte
_HEX = [(ord(str(d)),) for d in range(10)] + [
    (ord(c), ord(c.upper())) for c in "abcdef"
]  # the bytes of each hex digit (letters in either case)


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
    row = dfa.transitions[dfa.start]
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

Runs = tuple[tuple[int, int, int], ...]  # (first, last, target): code points, sorted, disjoint


def _merge(runs: list[tuple[int, int, int]]) -> Runs:
    out: list[list[int]] = []
    for lo, hi, t in sorted(runs):
        if out and out[-1][2] == t and out[-1][1] + 1 == lo:
            out[-1][1] = hi
        else:
            out.append([lo, hi, t])
    return tuple((lo, hi, t) for lo, hi, t in out)


def _clip(runs: Runs, lo: int, hi: int, shift: int) -> Runs:
    """The runs within [lo, hi], moved down by `shift`."""
    out = []
    for a, b, t in runs[bisect.bisect_left(runs, lo, key=lambda r: r[1]) :]:
        if a > hi:
            break
        out.append((max(a, lo) - shift, min(b, hi) - shift, t))
    return tuple(out)


def _byte_runs(row: np.ndarray, lo: int, hi: int) -> list[tuple[int, int, int]]:
    """The maximal runs of bytes lo..hi that `row` sends to one live state: (first, last, to)."""
    part = row[lo : hi + 1]
    cuts = np.flatnonzero(np.diff(part)) + 1
    starts = [0, *cuts.tolist()]
    ends = [*(cuts - 1).tolist(), len(part) - 1]
    targets = part[starts].tolist()
    return [(lo + a, lo + z, t) for a, z, t in zip(starts, ends, targets) if t != DEAD]


def _without(run: tuple[int, int, int], excluded: tuple[int, ...]) -> list[tuple[int, int, int]]:
    """`run` minus the code points in `excluded` (sorted)."""
    lo, hi, t = run
    out = []
    for x in excluded:
        if lo <= x <= hi:
            if lo < x:
                out.append((lo, x - 1, t))
            lo = x + 1
    if lo <= hi:
        out.append((lo, hi, t))
    return out


class _Escapes:
    """Builds the escaped spellings of one DFA: new states appended after its own."""

    def __init__(self, dfa: ByteDFA):
        self.dfa = dfa
        self.trans = dfa.transitions
        self.rows: list[dict[int, int]] = []  # the new states' edges
        self.nodes: dict[tuple, int] = {}  # interned new states
        self._cont: dict[tuple[int, int], Runs] = {}
        self._required: dict[int, list[tuple[int, int, int]]] = {}

    # -- the characters a state reads ---------------------------------------------------------

    def continuations(self, state: int, k: int) -> Runs:
        """Where `k` continuation bytes lead from `state`, by their 6k payload bits."""
        key = (state, k)
        found = self._cont.get(key)
        if found is None:
            runs = []
            for first, last, nxt in _byte_runs(self.trans[state], 0x80, 0xBF):
                if k == 1:
                    runs.append((first - 0x80, last - 0x80, nxt))
                    continue
                tails = self.continuations(nxt, k - 1)
                for c in range(first - 0x80, last - 0x7F):
                    base = c << (6 * (k - 1))
                    runs.extend((base + a, base + b, t) for a, b, t in tails)
            found = self._cont[key] = _merge(runs)
        return found

    def characters(self, state: int) -> Runs:
        """Where each character leads from `state` (at a character boundary in a string),
        read in the canonical encoding: raw UTF-8, or its escape where JSON requires one."""
        row = self.trans[state]
        runs = [piece for r in _byte_runs(row, 0x20, 0x7F) for piece in _without(r, _QUOTING)]
        for lead_lo, lead_hi, k in ((0xC2, 0xDF, 1), (0xE0, 0xEF, 2), (0xF0, 0xF4, 3)):
            span = 1 << (6 * k)
            for first, last, nxt in _byte_runs(row, lead_lo, lead_hi):
                tails = self.continuations(nxt, k)
                base = (first & _PAYLOAD[k]) << (6 * k)
                if len(tails) == 1 and tails[0][:2] == (0, span - 1):  # every tail alike
                    runs.append((base, ((last & _PAYLOAD[k]) << (6 * k)) + span - 1, tails[0][2]))
                    continue
                for b in range(first, last + 1):
                    base = (b & _PAYLOAD[k]) << (6 * k)
                    runs.extend((base + a, base + z, t) for a, z, t in tails)
        after = int(row[_BACKSLASH])
        if after != DEAD:
            runs.extend(self.required_escapes(after))
        return _merge(runs)

    def required_escapes(self, after: int) -> list[tuple[int, int, int]]:
        """The characters JSON requires escaped, read from `after` (past a backslash)."""
        found = self._required.get(after)
        if found is None:
            found = self._required[after] = [
                (cp, cp, target)
                for cp, rest in _REQUIRED_ESCAPES
                if (target := self.dfa.walk(after, rest)) != DEAD
            ]
        return found

    # -- new states ---------------------------------------------------------------------------

    def node(self, key: tuple, edges) -> int:
        """The new state interned as `key`; `edges()` gives its {byte: target} once."""
        found = self.nodes.get(key)
        if found is None:
            found = self.nodes[key] = self.dfa.n_states + len(self.rows)
            self.rows.append({})
            self.rows[found - self.dfa.n_states] = edges()
        return found

    def hex_digits(self, leaves: Runs, level: int = 0) -> int:
        """The state reading the remaining ``4 - level`` hex digits of a code unit whose
        value (relative to this subtree) leads to the leaf in `leaves`."""
        size = 16 ** (3 - level)

        def edges() -> dict[int, int]:
            out = {}
            if len(leaves) == 1 and leaves[0][:2] == (0, 16 * size - 1):  # one leaf for all
                child = leaves[0][2]
                if level < 3:
                    child = self.hex_digits(((0, size - 1, child),), level + 1)
                return {b: child for spellings in _HEX for b in spellings}
            parts: dict[int, list[tuple[int, int, int]]] = {}  # digit -> its runs, moved down
            for a, z, t in leaves:
                for d in range(a // size, z // size + 1):
                    base = d * size
                    parts.setdefault(d, []).append(
                        (max(a, base) - base, min(z, base + size - 1) - base, t)
                    )
            for d, part in parts.items():
                target = part[0][2] if level == 3 else self.hex_digits(tuple(part), level + 1)
                for b in _HEX[d]:
                    out[b] = target
            return out

        return self.node(("hex", level, leaves), edges)

    def low_surrogate(self, runs: Runs) -> int:
        """After a high surrogate ``\\uD8xx``: ``\\u`` and a low surrogate, whose offset in
        DC00..DFFF leads as in `runs` (offsets 0..3FF of this block of code points)."""
        leaves = tuple((a + 0xDC00, b + 0xDC00, t) for a, b, t in runs)

        def edges() -> dict[int, int]:
            u = self.node(("u", leaves), lambda: {ord("u"): self.hex_digits(leaves)})
            return {_BACKSLASH: u}

        return self.node(("low", runs), edges)

    def code_units(self, chars: Runs) -> Runs:
        """The leaves of the ``\\uXXXX`` tree: a BMP character's target, or for a high
        surrogate the state expecting its low surrogate."""
        leaves = set(_clip(chars, 0, 0xD7FF, 0) + _clip(chars, 0xE000, 0xFFFF, 0))
        astral = _clip(chars, 0x10000, 0x10FFFF, 0)
        for a, b, t in astral:
            first, last = (a - 0x10000) >> 10, (b - 0x10000) >> 10
            for h in {first, last}:  # blocks the run may share with others
                lo = 0x10000 + (h << 10)
                block = _clip(astral, lo, lo + 0x3FF, lo)
                leaves.add((0xD800 + h, 0xD800 + h, self.low_surrogate(block)))
            if last - first > 1:  # the blocks between: wholly this run's
                uniform = self.low_surrogate(((0, 0x3FF, t),))
                leaves.add((0xD800 + first + 1, 0xD800 + last - 1, uniform))
        return _merge(list(leaves))

    def escape(self, chars: Runs) -> int:
        """The state after a backslash, at a boundary whose characters lead as in `chars`."""

        def edges() -> dict[int, int]:
            out = {}
            units = self.code_units(chars)
            if units:
                out[ord("u")] = self.hex_digits(units)
            for cp, letter in [*_SHORT.items(), (0x2F, "/")]:
                found = _clip(chars, cp, cp, 0)
                if found:
                    out[ord(letter)] = found[0][2]
            return out

        return self.node(("escape", chars), edges)


def _boundaries(
    dfa: ByteDFA, in_string: bool, escapes: _Escapes, tick: Callable[[], object]
) -> dict[int, Runs]:
    """The states at a character boundary inside a string, with their characters: found by
    following the text from the start (outside a string, unless `in_string`)."""
    inside: dict[int, Runs] = {}
    outside: set[int] = set()
    todo = [(dfa.start, in_string)]
    while todo:
        if len(inside) % 256 == 255:
            tick()
        state, in_str = todo.pop()
        if state == DEAD or (state in inside if in_str else state in outside):
            continue
        if (state in outside) if in_str else (state in inside):
            raise ValueError(
                f"state {state} of /{dfa.pattern}/ is both inside and outside a string"
            )
        if in_str:
            chars = inside[state] = escapes.characters(state)
            todo.extend((t, True) for t in {t for _, _, t in chars})
            todo.append((int(dfa.transitions[state, _QUOTE]), False))
        else:
            outside.add(state)
            row = dfa.transitions[state]
            for b in np.flatnonzero(row).tolist():
                todo.append((int(row[b]), b == _QUOTE))
    return inside


_EXPANDED: BoundedCache[tuple[ByteDFA, bool], ByteDFA] = BoundedCache(
    _KEPT, max_bytes=_KEPT_BYTES, size=lambda dfa: dfa.transitions.nbytes
)
_EXPANDED_LOCK = threading.Lock()


def every_escape(
    dfa: ByteDFA, in_string: bool = False, tick: Callable[[], object] = lambda: None
) -> ByteDFA:
    """`dfa` (over values in the canonical encoding, or over string content when
    `in_string`) with every character of every string also spelled as each escape JSON
    allows. Languages stay exact: each spelling decodes to one character. `tick` is called
    now and then (a compilation's deadline check: it raises to stop).

    Kept for the DFAs expanded last (by identity: shared DFAs, the string universe, chunks,
    compiled regexes and key texts, are expanded once for every compilation)."""
    key = (dfa, in_string)
    with _EXPANDED_LOCK:
        found = _EXPANDED.get(key)
    if found is None:
        found = _expanded(dfa, in_string, tick)
        with _EXPANDED_LOCK:
            _EXPANDED[key] = found
    return found


def _expanded(dfa: ByteDFA, in_string: bool, tick: Callable[[], object]) -> ByteDFA:
    if dfa.is_empty():
        return dfa
    escapes = _Escapes(dfa)
    inside = _boundaries(dfa, in_string, escapes, tick)
    if not inside:
        return dfa
    # a state that reads no character gets no backslash (it would lead nowhere)
    backslash = {state: escapes.escape(chars) for state, chars in inside.items() if chars}
    n = dfa.n_states
    trans = np.zeros((n + len(escapes.rows), 256), dtype=np.int32)
    trans[:n] = dfa.transitions
    for state, target in backslash.items():
        trans[state, _BACKSLASH] = target
    for i, row in enumerate(escapes.rows):
        for b, t in row.items():
            trans[n + i, b] = t
    accepting = np.zeros(len(trans), dtype=bool)
    accepting[:n] = dfa.accepting
    # Not minimised (that took most of the time): `dfa`'s states stay distinct and the new
    # ones are interned by what they lead to. Only the canonical escapes' states may be
    # unreachable now: they are dropped, so every state stays reachable and live.
    keep = _reachable(dfa, backslash, escapes.rows)
    number = np.cumsum(keep) - 1
    table = number[trans[keep]].astype(np.int32)
    table[trans[keep] == DEAD] = DEAD
    return ByteDFA(table, accepting[keep], int(number[dfa.start]), f"escapes({dfa.pattern})")


def _reachable(dfa: ByteDFA, backslash: dict[int, int], rows: list[dict[int, int]]) -> np.ndarray:
    """The states of the expanded DFA reachable from the start (state 0, dead, kept)."""
    n = dfa.n_states
    seen = np.zeros(n + len(rows), dtype=bool)
    seen[0] = seen[dfa.start] = True
    stack = [dfa.start]
    classes = dfa.byte_classes()
    backslash_class = int(classes[_BACKSLASH])  # dropped below only if backslash's alone
    alone = int((classes == backslash_class).sum()) == 1
    while stack:
        state = stack.pop()
        if state < n:
            nexts = [t for c, t in dfa.live_classes(state)]
            if state in backslash:  # its backslash edge leads to the new subtree instead
                if alone:
                    nexts = [t for c, t in dfa.live_classes(state) if c != backslash_class]
                nexts.append(backslash[state])
        else:
            nexts = rows[state - n].values()
        for t in nexts:
            if not seen[t]:
                seen[t] = True
                stack.append(t)
    return seen
