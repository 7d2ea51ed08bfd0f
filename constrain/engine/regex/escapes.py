"""Every JSON escape spelling of a DFA's strings, as a DFA whose new states are built lazily.

A JSON string may spell each character as itself or as an escape: ``\\uXXXX`` with hex digits
in either case, a surrogate pair above U+FFFF, the short escapes, ``\\/``. `EscapedDFA` is a
DFA over canonically encoded JSON (raw UTF-8, escapes only where JSON requires them) with all
those spellings added: a state at a character boundary inside a string reads a backslash into
a subtree that leads, for every escaped spelling of each character, where the character's own
text leads. Languages stay exact: each spelling decodes to one character.

Nothing is expanded up front: building one costs a few array operations. Which base states
are inside a string is learnt as they are reached, a subtree state is interned by what it
leads to (two boundaries reading the same characters share their subtrees), and its row is
computed the first time something reads it.
A schema with a thousand keys therefore costs nothing until a mask reaches one, and what a
generation never reads is never built: the eager expansion this replaces took half of a
compile and most of a compiled schema's memory.

States ``0 .. base.n_states - 1`` are the base DFA's (state 0 dead), the subtree states follow
in the order they are first reached. Every state is live (a subtree only leads to live
characters). The native core builds the same subtrees (``native/escapes.hpp``); the byte
classes are the base DFA's with every byte an escape reads in a class of its own, so a
subtree row is a row over those classes.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from constrain.engine.cache import BoundedCache
from constrain.engine.regex.bytedfa import DEAD, ByteDFA, ByteWalk
from constrain.fuel import burn

__all__ = ["ESCAPE_BYTES", "EscapedDFA", "has_strings"]

_QUOTE, _BACKSLASH = 0x22, 0x5C
_SHORT = {0x08: "b", 0x09: "t", 0x0A: "n", 0x0C: "f", 0x0D: "r", 0x22: '"', 0x5C: "\\"}
# (code point, its escape after the backslash) of the characters JSON requires escaped
REQUIRED_ESCAPES = [
    (cp, (_SHORT[cp] if cp in _SHORT else f"u{cp:04x}").encode())
    for cp in [*range(0x20), 0x22, 0x5C]
]
_PAYLOAD = {1: 0x1F, 2: 0x0F, 3: 0x07}  # the payload bits of a lead byte
_BUILT_STATE_BYTES = 256  # a state built on first read: its key, edges and rows (an estimate)
_HEX = [(ord(str(d)),) for d in range(10)] + [
    (ord(c), ord(c.upper())) for c in "abcdef"
]  # the bytes of each hex digit (letters in either case)
# the bytes a subtree reads: each in a byte class of its own
ESCAPE_BYTES = tuple(
    sorted({_BACKSLASH, ord("u"), *(b for d in _HEX for b in d), *(ord(c) for c in 'bfnrt"/')})
)

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


def _byte_runs(row: list[int], lo: int, hi: int) -> list[tuple[int, int, int]]:
    """The maximal runs of bytes lo..hi that `row` sends to one live state: (first, last, to)."""
    out: list[tuple[int, int, int]] = []
    start = lo
    for b in range(lo + 1, hi + 2):
        if b > hi or row[b] != row[start]:
            if row[start] != DEAD:
                out.append((start, b - 1, row[start]))
            start = b
    return out


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


class _EscapedClasses(NamedTuple):
    classes: np.ndarray  # the class of each byte: the base's, each of ESCAPE_BYTES alone
    refined: tuple[int, ...]  # the classes here, by base class (flat: one object per DFA)
    starts: tuple[int, ...]  # base class c's are refined[starts[c] : starts[c + 1]]
    base_bytes: int  # the base's table, which the entry keeps alive


# per base DFA (bounded: the same key texts and string universes are escaped by every
# compilation)
_CLASSES: BoundedCache[ByteDFA, _EscapedClasses] = BoundedCache(
    4096, max_bytes=64 * 2**20, size=lambda found: found.base_bytes
)


def _escaped_classes(base: ByteDFA) -> _EscapedClasses:
    """The byte classes of `base` escaped."""
    own = base.byte_classes().astype(np.int64)
    labels = own.copy()
    labels[list(ESCAPE_BYTES)] = own.max() + 1 + np.arange(len(ESCAPE_BYTES))
    _, first, classes = np.unique(labels, return_index=True, return_inverse=True)
    classes = classes.ravel().astype(np.uint8)  # at most 256 classes
    classes.flags.writeable = False
    of_class = own[first]  # the base class of each class here
    refined = np.argsort(of_class, kind="stable")
    starts = np.searchsorted(of_class[refined], np.arange(int(own.max()) + 2))
    return _EscapedClasses(
        classes, tuple(refined.tolist()), tuple(starts.tolist()), base.table.nbytes
    )


def has_strings(dfa: ByteDFA, in_string: bool = False) -> bool:
    """Whether `dfa` reads any string (from inside one when `in_string`): else escaping
    changes nothing."""
    return not dfa.is_empty() and (in_string or bool(dfa.table[:, dfa.classes[_QUOTE]].any()))


class EscapedDFA(ByteWalk):
    """`base` with every escaped spelling of its strings' characters (see the module
    docstring): the methods of a `ByteDFA` a lexer reads, over states built on first use.

    Whether a base state is inside a string is learnt as it is reached: from the start
    (outside, unless `in_string`), a quote crosses a string's edge, any other byte keeps to
    its side, and an escape leads back inside. A state reached on both sides would make a
    backslash ambiguous; it is an error (`ValueError`), which no DFA over JSON texts has.

    Attributes:
        base: the DFA in the canonical encoding; its states keep their numbers here.
        in_string: whether the start is inside a string.
        start, pattern: as a `ByteDFA`'s.
    """

    def __init__(self, base: ByteDFA, in_string: bool = False):
        self.base = base
        self.in_string = in_string
        self.start = base.start
        self.pattern = f"escapes({base.pattern})"
        self._inside: dict[int, bool] = {base.start: in_string}  # base states reached
        self._n = base.n_states
        classes = _CLASSES.get_or_build(base, lambda: _escaped_classes(base))
        self._classes = classes.classes
        self._refined, self._starts = classes.refined, classes.starts
        self._backslash = int(self._classes[_BACKSLASH])
        self._quote = int(self._classes[_QUOTE])
        self._escape_of: dict[int, int] = {}  # base state inside a string -> its subtree
        self._keys: dict[tuple, int] = {}  # interned subtree states
        self._build: list[Callable[[], dict[int, int]] | None] = []
        self._edges: list[dict[int, int] | None] = []  # per subtree state: {byte: next}
        self._class_rows: dict[int, list[tuple[int, int]]] = {}
        self._base_rows: dict[int, list[int]] = {}
        self._chars: dict[int, Runs] = {}
        self._cont: dict[tuple[int, int], Runs] = {}
        self._required: dict[int, list[tuple[int, int, int]]] = {}

    # -- the ByteDFA methods a lexer reads ----------------------------------------------------

    @property
    def n_states(self) -> int:
        """The states built so far (the base's and the subtree states reached)."""
        return self._n + len(self._edges)

    @property
    def nbytes(self) -> int:
        """The memory held: the base DFA's, and an estimate for each state built since."""
        return self.base.nbytes + _BUILT_STATE_BYTES * (len(self._edges) + len(self._base_rows))

    def is_empty(self) -> bool:
        return self.base.is_empty()

    def accepts(self, state: int) -> bool:
        return state < self._n and bool(self.base.accepting[state])

    def byte_classes(self) -> np.ndarray:
        """The class of each byte: the base's, with each of `ESCAPE_BYTES` alone."""
        return self._classes

    def step(self, state: int, byte: int) -> int:
        """The state after `byte` (0: dead)."""
        if state >= self._n:
            return self._edges_of(state).get(byte, DEAD)
        inside = self._inside_of(state)
        if byte == _BACKSLASH and inside:
            return self.escape_of(state)
        target = self._base_row(state)[byte]
        if target != DEAD:
            self._reached(target, inside != (byte == _QUOTE))
        return target

    def live_classes(self, state: int) -> list[tuple[int, int]]:
        """``[(class, next)]`` of the classes `state` can read (cached)."""
        found = self._class_rows.get(state)
        if found is None:
            if state >= self._n:
                edges = self._edges_of(state)
                found = sorted((int(self._classes[b]), t) for b, t in edges.items())
            else:
                inside = self._inside_of(state)
                found = [
                    (c, t)
                    for own, t in self.base.live_classes(state)
                    for c in self._refined[self._starts[own] : self._starts[own + 1]]
                    if not (inside and c == self._backslash)
                ]
                for c, t in found:
                    self._reached(t, inside != (c == self._quote))
                if inside and (e := self.escape_of(state)) != DEAD:
                    found = sorted([*found, (self._backslash, e)])
            self._class_rows[state] = found
        return found

    def rows(self, states: np.ndarray) -> np.ndarray:
        """The transitions of `states`, (len, 256)."""
        out = np.zeros((len(states), 256), dtype=np.int32)
        for i, state in enumerate(np.asarray(states).tolist()):
            for c, t in self.live_classes(state):
                out[i, self._classes == c] = t
        return out

    def shortest_from(self, state: int, max_bytes: int | None = None) -> bytes | None:
        """A shortest completion from a base state: the base's (an escape is never shorter
        than the character's own text); None when it is longer than `max_bytes`."""
        if state >= self._n:
            raise ValueError("shortest_from takes a state of the base DFA")
        return self.base.shortest_from(state, max_bytes)

    # -- which side of a string a base state is on -------------------------------------------

    def _inside_of(self, state: int) -> bool:
        found = self._inside.get(state)
        if found is None:
            raise ValueError(f"state {state} of {self.pattern} was read before it was reached")
        return found

    def _reached(self, state: int, inside: bool) -> None:
        found = self._inside.setdefault(state, inside)
        if found != inside:
            raise ValueError(
                f"state {state} of /{self.base.pattern}/ is both inside and outside a string"
            )

    # -- the characters a state reads ---------------------------------------------------------

    def _base_row(self, state: int) -> list[int]:
        found = self._base_rows.get(state)
        if found is None:
            found = self._base_rows[state] = self.base.row(state).tolist()
        return found

    def continuations(self, state: int, k: int) -> Runs:
        """Where `k` continuation bytes lead from `state`, by their 6k payload bits."""
        key = (state, k)
        found = self._cont.get(key)
        if found is None:
            runs = []
            for first, last, nxt in _byte_runs(self._base_row(state), 0x80, 0xBF):
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
        """Where each character leads from `state` (a boundary inside a string), read in the
        canonical encoding: raw UTF-8, or its escape where JSON requires one."""
        found = self._chars.get(state)
        if found is not None:
            return found
        burn(1)  # the active fuel: the character runs of a state
        row = self._base_row(state)
        runs = [p for r in _byte_runs(row, 0x20, 0x7F) for p in _without(r, (_QUOTE, _BACKSLASH))]
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
        after = row[_BACKSLASH]
        if after != DEAD:
            runs.extend(self.required_escapes(after))
        found = self._chars[state] = _merge(runs)
        return found

    def required_escapes(self, after: int) -> list[tuple[int, int, int]]:
        """The characters JSON requires escaped, read from `after` (past a backslash)."""
        found = self._required.get(after)
        if found is None:
            found = self._required[after] = [
                (cp, cp, target)
                for cp, rest in REQUIRED_ESCAPES
                if (target := self.base.walk(after, rest)) != DEAD
            ]
        return found

    # -- subtree states -----------------------------------------------------------------------

    def escape_of(self, state: int) -> int:
        """The state after a backslash from base `state` inside a string (0: it reads no
        character, so a backslash leads nowhere)."""
        found = self._escape_of.get(state)
        if found is None:
            chars = self.characters(state)
            found = self._escape_of[state] = self.escape(chars) if chars else DEAD
        return found

    def _edges_of(self, state: int) -> dict[int, int]:
        i = state - self._n
        found = self._edges[i]
        if found is None:
            burn(1)  # the active fuel: a subtree state's row
            build = self._build[i]
            self._build[i] = None
            found = self._edges[i] = build()
            for t in found.values():
                if DEAD < t < self._n:  # a character read: back inside the string
                    self._reached(t, True)
        return found

    def node(self, key: tuple, edges: Callable[[], dict[int, int]]) -> int:
        """The subtree state interned as `key`; `edges()` gives its {byte: next} when first read."""
        found = self._keys.get(key)
        if found is None:
            found = self._keys[key] = self._n + len(self._edges)
            self._edges.append(None)
            self._build.append(edges)
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

    def __repr__(self) -> str:
        return f"EscapedDFA({self.base.pattern!r}, built={self.n_states})"
