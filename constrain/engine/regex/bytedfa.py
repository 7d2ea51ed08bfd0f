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
_FORCED_CAP = 4096


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

    Attributes:
        transitions: int32 array (n_states, 256) of next states.
        accepting: bool array (n_states,).
        start: the start state (1, or 0 when the language is empty).
        pattern: the source, for messages.
    """

    __slots__ = (
        "transitions",
        "accepting",
        "start",
        "pattern",
        "_rows",
        "_classes",
        "_first",
        "_class_rows",
        "_representatives",
        "_native",
    )

    def __init__(self, transitions: np.ndarray, accepting: np.ndarray, start: int, pattern: str):
        self.transitions = transitions
        self.accepting = accepting
        self.start = start
        self.pattern = pattern
        self._rows: list[list[int] | None] = [None] * len(transitions)
        self._classes: np.ndarray | None = None
        self._class_rows: list[list[tuple[int, int]] | None] = [None] * len(transitions)
        self._representatives: np.ndarray | None = None
        self._first: np.ndarray | None = None
        self._native = None
        transitions.flags.writeable = False
        accepting.flags.writeable = False

    @property
    def n_states(self) -> int:
        return len(self.transitions)

    def is_empty(self) -> bool:
        return self.start == DEAD

    def native_table(self):
        """The transitions copied into the native core (once: kept with the DFA, so a
        vocabulary's slice languages are copied once, not once per grammar)."""
        if self._native is None:
            from constrain.engine.native import DFATable

            self._native = DFATable(self.transitions)
        return self._native

    def accepts(self, state: int) -> bool:
        """Whether `state` is accepting."""
        return bool(self.accepting[state])

    def rows(self, states: np.ndarray) -> np.ndarray:
        """The transitions of `states`, (len, 256)."""
        return self.transitions[states]

    def byte_classes(self) -> np.ndarray:
        """The class of each byte (256 ints): bytes in one class lead every state alike."""
        if self._classes is None:
            burn(NUMPY_STEPS // STEPS_PER_UNIT + len(self.transitions) // 4)  # 256 x n cells
            columns = self.transitions.T.astype(np.int64)
            signature = columns @ weights(len(self.transitions))  # wraps: a 64-bit hash
            _, first, inverse = np.unique(signature, return_index=True, return_inverse=True)
            inverse = inverse.ravel()
            if not np.array_equal(columns[first][inverse], columns):  # a collision: compare
                _, inverse = np.unique(columns, axis=0, return_inverse=True)
            self._classes = inverse.ravel().astype(np.int64)
        return self._classes

    def live_classes(self, state: int) -> list[tuple[int, int]]:
        """The byte classes `state` can read, with the state each leads to: ``[(class, next)]``
        (cached; a sparse row, so products step only through what is alive)."""
        found = self._class_rows[state]
        if found is None:
            if self._representatives is None:
                self._representatives = np.unique(self.byte_classes(), return_index=True)[1]
            row = self.transitions[state][self._representatives].tolist()
            found = self._class_rows[state] = [(c, t) for c, t in enumerate(row) if t]
        return found

    def longest(self) -> int | None:
        """The length in bytes of the longest string of the language (None: unbounded, or
        empty language). Every state is live, so a cycle means infinitely many strings."""
        if self.is_empty():
            return None
        rows = [sorted(set(row) - {DEAD}) for row in self.transitions.tolist()]
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

    def shortest_from(self, state: int) -> bytes:
        """A shortest string leading from live `state` to acceptance (ties broken towards
        letters and digits, then printable ASCII)."""
        if self._first is None:
            self._first = first_bytes_to_accept(self.transitions, self.accepting)
        out = bytearray()
        while self._first[state] >= 0:
            out.append(int(self._first[state]))
            state = self._row(state)[out[-1]]
        return bytes(out)

    def _row(self, state: int) -> list[int]:
        row = self._rows[state]
        if row is None:
            row = self._rows[state] = self.transitions[state].tolist()
        return row

    def step(self, state: int, byte: int) -> int:
        return self._row(state)[byte]

    def forced_bytes(self, state: int) -> bytes:
        """Bytes forced next: taken while the state is not accepting and one byte leads on."""
        out = bytearray()
        seen = {state}
        while state != DEAD and not self.accepting[state] and len(out) < _FORCED_CAP:
            nxt = np.flatnonzero(self.transitions[state])
            if len(nxt) != 1:
                break
            out.append(int(nxt[0]))
            state = int(self.transitions[state, nxt[0]])
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


def first_bytes_to_accept(transitions: np.ndarray, accepting: np.ndarray) -> np.ndarray:
    """Per state of a DFA (dead state 0): the first byte of a shortest string to acceptance
    (-1 at accepting states and where acceptance is unreachable)."""
    n = len(transitions)
    big = np.iinfo(np.int64).max // 2
    dist = _distances_to_accept(transitions, accepting, big)
    ordered = transitions[:, BYTE_PREFERENCE]
    first = np.full(n, -1, dtype=np.int64)
    todo = (dist > 0) & (dist < big)
    if todo.any():
        column = np.argmax(dist[ordered[todo]] == (dist[todo] - 1)[:, None], axis=1)
        first[todo] = BYTE_PREFERENCE[column]
    return first


def _distances_to_accept(transitions: np.ndarray, accepting: np.ndarray, big: int) -> np.ndarray:
    """Bytes from each state to acceptance (`big` where it is out of reach), by one
    breadth-first search backwards from the accepting states over the distinct edges (bytes
    that lead every state alike are one edge), so the work is linear in the DFA."""
    n = len(transitions)
    columns = transitions[:, _class_representatives(transitions)]
    targets = columns.ravel().astype(np.int64)
    sources = np.repeat(np.arange(n, dtype=np.int64), columns.shape[1])
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
        burn(len(frontier))
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


def _class_representatives(transitions: np.ndarray) -> np.ndarray:
    """One byte per class of bytes that lead every state alike (all 256 if hashing the
    columns collides)."""
    columns = transitions.T.astype(np.int64)
    signature = columns @ weights(len(transitions))  # wraps: a 64-bit hash
    _, first, inverse = np.unique(signature, return_index=True, return_inverse=True)
    if not np.array_equal(columns[first][inverse.ravel()], columns):
        return np.arange(256)
    return first


def weights(n: int) -> np.ndarray:
    """n fixed odd pseudo-random 64-bit weights (for hashing rows of states)."""
    global _WEIGHTS
    if len(_WEIGHTS) < n:
        rng = np.random.default_rng(len(_WEIGHTS) + 1)
        more = rng.integers(1, 2**62, size=max(n, 2 * len(_WEIGHTS)) - len(_WEIGHTS)) | 1
        _WEIGHTS = np.concatenate([_WEIGHTS, more.astype(np.int64)])
    return _WEIGHTS[:n]
