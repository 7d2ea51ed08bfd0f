"""Quoted strings of a DFA with low..high characters, as a DFA whose states are built as read.

`maxLength` beside a `pattern`: the eager product of the pattern's DFA with a chain that counts
characters has (pattern states) x (bound) states, 300,000 for a 30-word pattern under
``maxLength: 300``, and nearly none of them is ever read. `CountedDFA` is that product built
state by state: a state is (pattern state, state inside the current character, characters read
so far). A state is built only when some completion ends the string within the bound, so every
state is live, as a lexeme automaton's must be.

Characters count as JSON decodes them: a raw UTF-8 sequence or an escape is one character (a
surrogate pair too, when the strings spell every escape). What a state may still read is known
from `CompletionLengths`, computed once on the canonical DFA: an escape only respells a
character, so the number of characters a pattern state can still read is the same in every
spelling.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from constrain.engine.regex.bytedfa import BYTE_PREFERENCE, DEAD, ByteDFA, ByteWalk
from constrain.engine.regex.escapes import EscapedDFA
from constrain.engine.regex.products import joint_byte_classes
from constrain.errors import RegexError
from constrain.fuel import burn

__all__ = ["CompletionLengths", "CountedDFA", "walk_spec"]

_QUOTE = 0x22
_OUTSIDE = -1  # the character state of a string not yet opened, or closed
MAX_LENGTH_CELLS = 1 << 24  # (lengths tracked) x (boundary states): the table's bound
_BUILT_STATE_BYTES = 256  # a state built on first read: its key, rows and ids (an estimate)


def _canonical(walk: ByteDFA | EscapedDFA) -> ByteDFA:
    return walk.base if isinstance(walk, EscapedDFA) else walk


def walk_spec(walk: ByteDFA | EscapedDFA) -> tuple:
    """A DFA's tables for the native core: the canonical table over `walk`'s own classes, its
    accepting states, the class of each byte, the start, and None or whether the escapes
    start inside a string (an `EscapedDFA`: C++ builds them from the canonical table)."""
    base = _canonical(walk)
    own = walk.byte_classes()
    first_byte = np.unique(own, return_index=True)[1]
    return (
        np.ascontiguousarray(base.columns(first_byte), dtype=np.int32),
        base.accepting.astype(np.uint8),
        own.astype(np.int32),
        int(base.start),
        walk.in_string if isinstance(walk, EscapedDFA) else None,
    )


class CompletionLengths:
    """How many characters each character boundary of a quoted-strings DFA can still read
    before its closing quote: `fits` answers "can a string read n characters so far, at this
    boundary, end with low..high?".

    Boundaries are the states inside the string reached from its opening quote by whole
    characters (of `char`, the DFA of one character). With S_l the boundaries that can end
    after exactly l more characters, S_0 are those the closing quote accepts and S_(l+1) those
    one character away from S_l. The sequence is eventually periodic (it is a walk over
    finitely many sets); it is computed until it repeats, or up to `high`.
    """

    def __init__(self, strings: ByteDFA, char: ByteDFA, high: int | None):
        self.pattern = strings.pattern
        inside = strings.step(strings.start, _QUOTE) if not strings.is_empty() else DEAD
        self.index: dict[int, int] = {}
        self._of: dict[int, np.ndarray] = {}  # per boundary: the lengths it can read
        if inside == DEAD:
            self.first = self.period = 0
            self.lengths = np.zeros((0, 0), dtype=bool)
            return
        _, representatives = joint_byte_classes([strings, char])
        table, char_table = strings.columns(representatives), char.columns(representatives)
        order, sources, targets = [inside], [], []
        self.index[inside] = 0
        frontier = [inside]
        while frontier:  # character steps out of the boundaries found last
            burn(1 + len(frontier) // 64)
            origin = np.array([self.index[q] for q in frontier], dtype=np.int64)
            at = np.array(frontier, dtype=np.int64)
            within = np.full(len(frontier), char.start, dtype=np.int64)
            ends = []
            while len(at):  # one byte deeper into the characters (at most 6)
                nxt = table[at]
                inner = char_table[within]
                alive = (nxt != DEAD) & (inner != DEAD)
                done = alive & char.accepting[inner]
                ends.append(
                    np.stack([np.broadcast_to(origin[:, None], nxt.shape)[done], nxt[done]])
                )
                going = alive & ~done
                rows = np.stack(
                    [np.broadcast_to(origin[:, None], nxt.shape)[going], nxt[going], inner[going]]
                )
                rows = np.unique(rows, axis=1) if rows.shape[1] else rows
                origin, at, within = rows[0], rows[1], rows[2]
            pairs = np.concatenate(ends, axis=1)
            pairs = np.unique(pairs, axis=1) if pairs.shape[1] else pairs
            frontier = []
            for q in pairs[1].tolist():
                if q not in self.index:
                    self.index[q] = len(order)
                    order.append(q)
                    frontier.append(q)
            sources.append(pairs[0])
            targets.append(np.array([self.index[q] for q in pairs[1].tolist()], dtype=np.int64))
        src, dst = np.concatenate(sources), np.concatenate(targets)
        closing = strings.table[np.array(order), strings.classes[_QUOTE]]
        now = strings.accepting[closing] & (closing != DEAD)
        seen = {now.tobytes(): 0}
        rows = [now]
        cap = max(1, MAX_LENGTH_CELLS // len(order))
        while high is None or len(rows) <= high:
            burn(1 + len(src) // 4096)
            nxt = np.zeros(len(order), dtype=bool)
            nxt[src[now[dst]]] = True
            key = nxt.tobytes()
            if key in seen:  # periodic from here on
                self.first, self.period = seen[key], len(rows) - seen[key]
                break
            if len(rows) >= cap:
                raise RegexError(
                    f"counting characters up to {high} needs more than {MAX_LENGTH_CELLS} cells "
                    f"({len(order)} character boundaries)",
                    self.pattern[:200],
                )
            seen[key] = len(rows)
            rows.append(nxt)
            now = nxt
        else:  # every length up to `high` is known: nothing beyond is asked
            self.first, self.period = len(rows), 0
        self.lengths = np.stack(rows)  # (lengths, boundaries)

    @property
    def nbytes(self) -> int:
        """The memory held: the table and the lengths read per boundary (the native core's
        copy is counted by its lexer)."""
        return self.lengths.nbytes + sum(64 + row.nbytes for row in list(self._of.values()))

    def next_length(self, boundary: int, at_least: int) -> int | None:
        """The fewest characters, at least `at_least`, that `boundary` can read and close."""
        i = self.index[boundary]
        found = self._of.get(i)
        if found is None:
            found = self._of[i] = np.flatnonzero(self.lengths[:, i])
        window = len(self.lengths)
        if at_least < window:
            j = int(np.searchsorted(found, at_least))
            if j < len(found):
                return int(found[j])
        if not self.period:
            return None
        cycle = found[found >= self.first] - self.first  # offsets within one period
        if not len(cycle):
            return None
        turns, offset = divmod(max(at_least, window) - self.first, self.period)
        j = int(np.searchsorted(cycle, offset))
        if j == len(cycle):
            turns, j = turns + 1, 0
        return self.first + turns * self.period + int(cycle[j])

    def fits(self, boundary: int, read: int, low: int, high: int | None) -> bool:
        """Whether a string at `boundary` with `read` characters can close with low..high."""
        found = self.next_length(boundary, max(0, low - read))
        return found is not None and (high is None or read + found <= high)


class CountedDFA(ByteWalk):
    """The quoted strings of `strings` with `low`..`high` characters (see the module docstring):
    the methods of a `ByteDFA` a lexer reads, over states built on first use.

    Args:
        strings: quoted strings (a `ByteDFA`, or an `EscapedDFA` spelling every escape).
        char: one character inside a string, spelled as `strings` spells them.
        low, high: the bounds on the characters (high None: unbounded).
    """

    def __init__(
        self,
        strings: ByteDFA | EscapedDFA,
        char: ByteDFA | EscapedDFA,
        low: int,
        high: int | None,
    ):
        self.strings, self.char, self.low, self.high = strings, char, low, high
        self.lengths = CompletionLengths(_canonical(strings), _canonical(char), high)
        self.pattern = f"{strings.pattern} of {low}..{'' if high is None else high} characters"
        quote = np.zeros(256, dtype=np.int64)
        quote[_QUOTE] = 1  # the quote alone: it opens and closes the string
        columns = np.stack([strings.byte_classes(), char.byte_classes(), quote])
        _, first, classes = np.unique(columns, axis=1, return_index=True, return_inverse=True)
        self._classes = classes.ravel().astype(np.int64)
        self._quote = int(self._classes[_QUOTE])
        # of each class: the class of `strings`, of `char` it lies in
        self._own = (strings.byte_classes()[first], char.byte_classes()[first])
        self._joint_rows: tuple[dict[int, np.ndarray], dict[int, np.ndarray]] = ({}, {})
        rank = np.argsort(BYTE_PREFERENCE)  # of each byte: lower reads more naturally
        self._bytes = [  # each class by its most natural byte (so shortest texts read well)
            int(min(np.flatnonzero(self._classes == c), key=lambda b: rank[b]))
            for c in range(len(first))
        ]
        self._class_rank = [int(rank[b]) for b in self._bytes]
        self._ids: dict[tuple[int, int, int], int] = {}
        self._keys: list[tuple[int, int, int] | None] = [None]  # state 0 is dead
        self._class_rows: list[list[tuple[int, int]] | None] = [None]
        self._rows: dict[int, np.ndarray] = {}
        self._ends: dict[tuple[int, int], tuple[int, ...]] = {}  # mid-character -> boundaries
        start = (strings.start, _OUTSIDE, 0)
        live = not strings.is_empty() and self._closes_somewhere(start)
        self.start = self._id(start) if live else DEAD

    # -- the ByteDFA methods a lexer reads ----------------------------------------------------

    @property
    def n_states(self) -> int:
        return len(self._keys)

    @property
    def nbytes(self) -> int:
        """The memory held: its parts' and the length table's, and an estimate for each state
        built so far."""
        parts = self.strings.nbytes + self.char.nbytes + self.lengths.nbytes
        return parts + _BUILT_STATE_BYTES * len(self._keys)

    def is_empty(self) -> bool:
        return self.start == DEAD

    def accepts(self, state: int) -> bool:
        key = self._keys[state]
        return key is not None and key[1] == _OUTSIDE and self.strings.accepts(key[0])

    def byte_classes(self) -> np.ndarray:
        return self._classes

    def live_classes(self, state: int) -> list[tuple[int, int]]:
        """``[(class, next)]`` of the classes `state` can read (cached)."""
        found = self._class_rows[state]
        if found is not None:
            return found
        burn(1)  # the active fuel: a state's row
        key = self._keys[state]
        assert key is not None
        at, inner, read = key
        after = self._joint_row(0, at)
        found = []
        if inner == _OUTSIDE:  # the opening quote (a closed string reads nothing more)
            target = int(after[self._quote])
            nxt = (target, self.char.start, read)
            if target != DEAD and (nxt in self._ids or self._closes_somewhere(nxt)):
                found.append((self._quote, self._id(nxt)))
            self._class_rows[state] = found
            return found
        within = self._joint_row(1, inner)
        targets: dict[tuple[int, int], int] = {}  # (strings, char) -> the state they make
        for c in np.flatnonzero(after).tolist():
            if c == self._quote and inner == self.char.start:  # the closing quote
                if self.low <= read and (self.high is None or read <= self.high):
                    found.append((c, self._id((int(after[c]), _OUTSIDE, read))))
                continue
            pair = (int(after[c]), int(within[c]))
            if pair[1] == DEAD:
                continue
            target = targets.get(pair)
            if target is None:
                target = targets[pair] = self._enter(*pair, read)
            if target != DEAD:
                found.append((c, target))
        self._class_rows[state] = found
        return found

    def _joint_row(self, which: int, state: int) -> np.ndarray:
        """Where each class leads `strings` (which 0) or `char` (1) from `state` (cached)."""
        cache = self._joint_rows[which]
        found = cache.get(state)
        if found is None:
            walk = self.char if which else self.strings
            targets = dict(walk.live_classes(state))
            found = cache[state] = np.array(
                [targets.get(int(o), DEAD) for o in self._own[which]], dtype=np.int64
            )
        return found

    def _enter(self, at: int, inner: int, read: int) -> int:
        """The state at (`at`, `inner`) having read `read` characters before this byte, or
        dead when no completion fits the bound."""
        if self.char.accepts(inner):  # a whole character (past `low`, unbounded: no count)
            counted = self.high is not None or read < self.low
            nxt = (at, self.char.start, read + 1 if counted else read)
        else:
            nxt = (at, inner, read)
        found = self._ids.get(nxt)
        if found is not None:
            return found
        return self._id(nxt) if self._closes_somewhere(nxt) else DEAD

    def step(self, state: int, byte: int) -> int:
        return int(self._row(state)[byte])

    def rows(self, states: np.ndarray) -> np.ndarray:
        return np.stack([self._row(s) for s in np.asarray(states).tolist()]).reshape(-1, 256)

    def _row(self, state: int) -> np.ndarray:
        """The dense row of `state` (cached)."""
        row = self._rows.get(state)
        if row is None:
            by_class = np.zeros(len(self._bytes), dtype=np.int32)
            for c, t in self.live_classes(state):
                by_class[c] = t
            row = self._rows[state] = by_class[self._classes]
        return row

    def shortest_from(self, state: int, max_bytes: int | None = None) -> bytes | None:
        """A shortest completion from live `state` (breadth first over its states); None
        when it is longer than `max_bytes`."""
        parent: dict[int, tuple[int, int]] = {state: (DEAD, 0)}
        depth = {state: 0}
        queue = deque([state])
        while queue:
            here = queue.popleft()
            if max_bytes is not None and depth[here] > max_bytes:
                return None
            if self.accepts(here):
                out = bytearray()
                while here != state:
                    here, byte = parent[here][0], parent[here][1]
                    out.append(byte)
                return bytes(reversed(out))
            for c, t in sorted(self.live_classes(here), key=lambda ct: self._class_rank[ct[0]]):
                if t not in parent:
                    parent[t] = (here, self._bytes[c])
                    depth[t] = depth[here] + 1
                    queue.append(t)
        raise ValueError(f"state {state} of {self.pattern} cannot accept")

    def native_spec(self) -> tuple:
        """What the native core builds the same product from (`native/counted.hpp`)."""
        lengths = self.lengths
        index = np.full(_canonical(self.strings).n_states, -1, dtype=np.int32)
        for state, boundary in lengths.index.items():
            index[state] = boundary
        return (
            walk_spec(self.strings),
            walk_spec(self.char),
            self.low,
            -1 if self.high is None else self.high,
            index,
            np.ascontiguousarray(lengths.lengths, dtype=np.uint8),
            lengths.first,
            lengths.period,
            np.array(self._bytes, dtype=np.uint8),
            self._quote,
        )

    # -- the product, built as it is read -----------------------------------------------------

    def _id(self, key: tuple[int, int, int]) -> int:
        found = self._ids.get(key)
        if found is None:
            found = self._ids[key] = len(self._keys)
            self._keys.append(key)
            self._class_rows.append(None)
        return found

    def _closes_somewhere(self, key: tuple[int, int, int]) -> bool:
        """Whether some completion of the string at `key` has low..high characters."""
        at, inner, read = key
        if inner == _OUTSIDE:  # before the opening quote
            inside = self.strings.step(at, _QUOTE)
            return inside != DEAD and self._closes_somewhere((inside, self.char.start, 0))
        if self.high is not None and read > self.high:
            return False
        if inner == self.char.start:
            return self.lengths.fits(at, read, self.low, self.high)
        return any(
            self.lengths.fits(end, read + 1, self.low, self.high)
            for end in self._ends_of(at, inner)
        )

    def _ends_of(self, at: int, inner: int) -> tuple[int, ...]:
        """The boundaries where the character begun at (`at`, `inner`) can end."""
        found = self._ends.get((at, inner))
        if found is None:
            ends: set[int] = set()
            for byte in self._bytes:
                target = self.strings.step(at, byte)
                further = self.char.step(inner, byte) if target != DEAD else DEAD
                if further == DEAD:
                    continue
                if self.char.accepts(further):
                    ends.add(target)
                else:
                    ends.update(self._ends_of(target, further))
            found = self._ends[(at, inner)] = tuple(sorted(ends))
        return found

    def __repr__(self) -> str:
        return f"CountedDFA({self.pattern!r}, built={self.n_states})"
