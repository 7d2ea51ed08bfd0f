"""`ByteDFA`: the byte-level DFA every stage of the regex compiler builds and every user reads.

With what it needs of its own: the dead state `DEAD`, byte classes (bytes that lead every state
alike) and the hashing `weights` they are computed with, and shortest strings to acceptance
(`first_bytes_to_accept`, ties broken by `BYTE_PREFERENCE`). The construction stages import
it and it imports none of them (only the shared work accounting of `budget`).
"""

from __future__ import annotations

import numpy as np

from constrain.engine.regex._limits import STEPS_PER_UNIT
from constrain.engine.regex.budget import NUMPY_STEPS
from constrain.fuel import burn

DEAD = 0
MAX_DESCRIPTION = 400  # characters of a DFA's `pattern` kept: products describe their operands
_FORCED_CAP = 4096
_SMALL_TABLE = 8192  # cells: below this, byte classes are found in plain Python


class ByteWalk:
    """`walk` and `matches` over a DFA's `step` and `accepts`: the dense `ByteDFA` and the
    lazily built `EscapedDFA` share them."""

    __slots__ = ()
    start: int

    def step(self, state: int, byte: int) -> int:
        raise NotImplementedError

    def accepts(self, state: int) -> bool:
        raise NotImplementedError

    def walk(self, state: int, data: bytes) -> int:
        """The state after reading `data` from `state` (0 once dead)."""
        for b in data:
            state = self.step(state, b)
            if state == DEAD:
                return DEAD
        return state

    def matches(self, data: bytes | str) -> bool:
        """Whether the whole of `data` is in the language."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        return self.accepts(self.walk(self.start, data))


class ByteDFA(ByteWalk):
    """A DFA over bytes, minimal unless built by `every_escape`. State 0 is dead; every other
    state is reachable and live.

    Stored over its byte classes (bytes that lead every state alike): a DFA reading a few
    distinct bytes holds a few columns, not 256 (a property name's DFA is 30x smaller).

    Attributes:
        table: int32 array (n_states, n_classes) of next states, per byte class.
        classes: uint8 array (256,): the class of each byte (0..n_classes-1, each read by
            some byte).
        accepting: bool array (n_states,).
        start: the start state (1, or 0 when the language is empty).
        pattern: the source, for messages (at most `MAX_DESCRIPTION` characters).
    """

    __slots__ = (
        "table",
        "classes",
        "accepting",
        "start",
        "pattern",
        "_class_of",
        "_rows",
        "_first",
        "_dist",
        "_native",
    )

    def __init__(self, transitions: np.ndarray, accepting: np.ndarray, start: int, pattern: str):
        """From a dense table (n_states, 256) of next states (see `from_classes`)."""
        burn(NUMPY_STEPS // STEPS_PER_UNIT + len(transitions) // 4)  # 256 x n cells
        classes, representatives = _byte_classes(transitions)
        self._set(transitions[:, representatives], classes, accepting, start, pattern)

    @classmethod
    def from_classes(
        cls, table: np.ndarray, classes: np.ndarray, accepting: np.ndarray, start: int, pattern: str
    ) -> ByteDFA:
        """From a table per byte class (n_states, k) and the class of each byte (256 ints in
        0..k-1); classes that lead every state alike are merged, columns no byte reads dropped."""
        burn(NUMPY_STEPS // STEPS_PER_UNIT + len(table) * table.shape[1] // 1024)
        merged, representatives = _byte_classes(table)  # over the k classes
        per_byte = merged[np.asarray(classes)]
        used = np.bincount(per_byte, minlength=len(representatives))
        if not used.all():  # renumber the classes some byte reads
            kept = np.flatnonzero(used)
            number = np.cumsum(used > 0) - 1
            per_byte, representatives = number[per_byte], representatives[kept]
        dfa = cls.__new__(cls)
        dfa._set(table[:, representatives], per_byte, accepting, start, pattern)
        return dfa

    def _set(self, table, classes, accepting, start, pattern) -> None:
        self.table = np.ascontiguousarray(table, dtype=np.int32)
        self.classes = np.asarray(classes, dtype=np.uint8)  # at most 256 classes
        self.accepting = np.asarray(accepting, dtype=bool)
        self.start = start
        # a description for messages, bounded: a product of products would double it each time
        self.pattern = pattern if len(pattern) <= MAX_DESCRIPTION else pattern[:397] + "..."
        # `classes` and the rows a walk stepped through, as tuples (the collector untracks
        # tuples of ints: a compiled grammar's thousands of DFAs cost a full collection nothing)
        self._class_of: tuple[int, ...] | None = None
        self._rows: dict[int, tuple[int, ...]] = {}
        self._first: np.ndarray | None = None  # per state, the first byte of a shortest string
        self._dist: np.ndarray | None = None  # and its length (huge where none)
        self._native = None
        self.table.flags.writeable = False
        self.classes.flags.writeable = False
        self.accepting.flags.writeable = False

    @property
    def transitions(self) -> np.ndarray:
        """The dense table (n_states, 256) of next states, built on each call (for
        constructions that work byte by byte; `row` and `columns` read less)."""
        return self.table[:, self.classes]

    @property
    def n_states(self) -> int:
        return len(self.table)

    @property
    def nbytes(self) -> int:
        """The memory this DFA holds: its tables, the distances and rows its walks computed,
        and its copy in the native core."""
        held = self.table.nbytes + self.classes.nbytes + self.accepting.nbytes
        if self._dist is not None:
            held += self._first.nbytes + self._dist.nbytes
        if self._native is not None:
            held += self.table.nbytes + 256
        return held + len(self._rows) * (64 + 8 * self.table.shape[1])

    def is_empty(self) -> bool:
        return self.start == DEAD

    def native_table(self):
        """The transitions over byte classes copied into the native core (once: kept with the
        DFA, so a vocabulary's slice languages are copied once, not once per grammar)."""
        if self._native is None:
            from constrain.engine.native import DFATable

            self._native = DFATable(self.table, self.classes)
        return self._native

    def accepts(self, state: int) -> bool:
        """Whether `state` is accepting."""
        return bool(self.accepting[state])

    def row(self, state: int) -> np.ndarray:
        """The next state of `state` at each of the 256 bytes."""
        return self.table[state][self.classes]

    def rows(self, states: np.ndarray) -> np.ndarray:
        """The next states of `states` at each of the 256 bytes, (len, 256)."""
        return self.table[states][:, self.classes]

    def columns(self, byte_values: np.ndarray) -> np.ndarray:
        """The next states of every state at each of `byte_values`, (n_states, len)."""
        return self.table[:, self.classes[byte_values]]

    def byte_classes(self) -> np.ndarray:
        """The class of each byte (256 ints): bytes in one class lead every state alike."""
        return self.classes

    def live_classes(self, state: int) -> list[tuple[int, int]]:
        """The byte classes `state` can read, with the state each leads to: ``[(class, next)]``
        (a sparse row, so products step only through what is alive)."""
        return [(c, t) for c, t in enumerate(self._row(state)) if t]

    def longest(self) -> int | None:
        """The length in bytes of the longest string of the language (None: unbounded, or
        empty language). Every state is live, so a cycle means infinitely many strings."""
        if self.is_empty():
            return None
        rows = [sorted(set(row) - {DEAD}) for row in self.table.tolist()]
        indegree = [0] * len(rows)
        for row in rows:
            for t in row:
                indegree[t] += 1
        order = [q for q in range(1, len(rows)) if indegree[q] == 0]
        for q in order:  # Kahn's topological order; a cycle leaves states out
            for t in rows[q]:
                indegree[t] -= 1
                if indegree[t] == 0:
                    order.append(t)
        if len(order) < len(rows) - 1:
            return None
        depth = [-1] * len(rows)
        depth[self.start] = 0
        for q in order:
            if depth[q] >= 0:
                for t in rows[q]:
                    depth[t] = max(depth[t], depth[q] + 1)
        return max(d for q, d in enumerate(depth) if self.accepting[q])

    def shortest_from(self, state: int, max_bytes: int | None = None) -> bytes | None:
        """A shortest string leading from live `state` to acceptance (ties broken towards
        letters and digits, then printable ASCII); None when it is longer than `max_bytes`."""
        if self.shortest_length(state) > (max_bytes if max_bytes is not None else np.inf):
            return None
        out = bytearray()
        while self._first[state] >= 0:
            out.append(int(self._first[state]))
            state = self.step(state, out[-1])
        return bytes(out)

    def shortest_length(self, state: int) -> int:
        """The length of a shortest string from live `state` to acceptance (not spelled)."""
        if self._dist is None:  # `_first` is stored before `_dist`: threads see both or none
            self._first, self._dist = first_bytes_to_accept(self)
        return int(self._dist[state])

    def _row(self, state: int) -> tuple[int, ...]:
        """`state`'s next states per byte class (cached: a walk steps in Python)."""
        row = self._rows.get(state)
        if row is None:
            row = self._rows[state] = tuple(self.table[state].tolist())
        return row

    def step(self, state: int, byte: int) -> int:
        if self._class_of is None:
            self._class_of = tuple(self.classes.tolist())
        return self._row(state)[self._class_of[byte]]

    def forced_bytes(self, state: int) -> bytes:
        """Bytes forced next: taken while the state is not accepting and one byte leads on."""
        out = bytearray()
        seen = {state}
        while state != DEAD and not self.accepting[state] and len(out) < _FORCED_CAP:
            row = self.row(state)
            nxt = np.flatnonzero(row)
            if len(nxt) != 1:
                break
            out.append(int(nxt[0]))
            state = int(row[nxt[0]])
            if state in seen:
                break
            seen.add(state)
        return bytes(out)

    def __repr__(self) -> str:
        return f"ByteDFA({self.pattern!r}, n_states={self.n_states})"


_WEIGHTS = np.zeros(0, dtype=np.int64)


def _byte_preference() -> np.ndarray:
    alnum = [b for b in range(256) if chr(b).isascii() and chr(b).isalnum()]
    printable = [b for b in range(0x20, 0x7F) if b not in alnum]
    rest = [b for b in range(256) if b not in alnum and b not in printable]
    return np.array(alnum + printable + rest)


# the order in which shortest strings break ties: letters and digits, other printable ASCII,
# the rest (so they read naturally and tokenize like text)
BYTE_PREFERENCE = _byte_preference()


def first_bytes_to_accept(dfa: ByteDFA) -> tuple[np.ndarray, np.ndarray]:
    """Per state of a DFA (dead state 0): the first byte of a shortest string to acceptance
    (-1 at accepting states and where acceptance is unreachable), and its length (a huge
    number where acceptance is unreachable)."""
    n = dfa.n_states
    big = np.iinfo(np.int64).max // 2
    dist = _distances_to_accept(dfa.table, dfa.accepting, big)
    # per byte class, its most preferred byte; the classes in the order of those bytes
    rank = np.empty(256, dtype=np.int64)
    rank[BYTE_PREFERENCE] = np.arange(256)
    best = np.full(dfa.table.shape[1], 256, dtype=np.int64)
    np.minimum.at(best, dfa.classes.astype(np.int64), rank)
    order = np.argsort(best)
    first = np.full(n, -1, dtype=np.int64)
    todo = (dist > 0) & (dist < big)
    if todo.any():
        burn(NUMPY_STEPS // STEPS_PER_UNIT + int(todo.sum()) * len(order) // 16)
        ahead = dfa.table[todo][:, order]  # (states, classes), preferred first
        column = np.argmax(dist[ahead] == (dist[todo] - 1)[:, None], axis=1)
        first[todo] = BYTE_PREFERENCE[best[order[column]]]
    return first, dist


def _distances_to_accept(table: np.ndarray, accepting: np.ndarray, big: int) -> np.ndarray:
    """Steps from each state to acceptance (`big` where it is out of reach), by one
    breadth-first search backwards from the accepting states over the distinct edges (`table`
    has a column per byte class), so the work is linear in the DFA."""
    n = len(table)
    targets = table.ravel().astype(np.int64)
    sources = np.repeat(np.arange(n, dtype=np.int64), table.shape[1])
    keep = (targets != DEAD) & (sources != DEAD)
    edges = np.unique(targets[keep] * n + sources[keep])  # sorted by target
    into = np.searchsorted(edges // n, np.arange(n + 1)).tolist()
    sources = (edges % n).tolist()
    dist = [-1] * n
    frontier = [q for q in np.flatnonzero(accepting).tolist() if q != DEAD]
    for q in frontier:
        dist[q] = 0
    level = 0
    while frontier:
        burn(2 * len(frontier))
        level += 1
        found = []
        for q in frontier:
            for p in sources[into[q] : into[q + 1]]:
                if dist[p] < 0:
                    dist[p] = level
                    found.append(p)
        frontier = found
    out = np.array(dist, dtype=np.int64)
    out[out < 0] = big
    return out


def _byte_classes(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The columns of `table` (n, m) that are alike, merged: (the class of each column, in
    0..k-1 numbered by first occurrence; the first column of each class)."""
    if table.size <= _SMALL_TABLE:  # plain Python costs less than numpy's passes
        ids: dict[tuple, int] = {}
        column_class = [ids.setdefault(tuple(column), len(ids)) for column in table.T.tolist()]
        first = [0] * len(ids)
        for j in range(len(column_class) - 1, -1, -1):
            first[column_class[j]] = j
        return np.array(column_class, dtype=np.int64), np.array(first, dtype=np.int64)
    columns = table.T.astype(np.int64)
    signature = columns @ weights(len(table))  # wraps: a 64-bit hash
    _, first, inverse = np.unique(signature, return_index=True, return_inverse=True)
    inverse = inverse.ravel()
    if not np.array_equal(columns[first][inverse], columns):  # a collision: compare
        _, first, inverse = np.unique(columns, axis=0, return_index=True, return_inverse=True)
        inverse = inverse.ravel()
    order = np.argsort(first, kind="stable")  # classes in order of their first column
    number = np.empty(len(order), dtype=np.int64)
    number[order] = np.arange(len(order))
    return number[inverse], first[order]


def weights(n: int) -> np.ndarray:
    """n fixed odd pseudo-random 64-bit weights (for hashing rows of states)."""
    global _WEIGHTS
    if len(_WEIGHTS) < n:
        rng = np.random.default_rng(len(_WEIGHTS) + 1)
        more = rng.integers(1, 2**62, size=max(n, 2 * len(_WEIGHTS)) - len(_WEIGHTS)) | 1
        _WEIGHTS = np.concatenate([_WEIGHTS, more.astype(np.int64)])
    return _WEIGHTS[:n]
