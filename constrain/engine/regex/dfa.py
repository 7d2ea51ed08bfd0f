"""Regex -> minimal byte-level DFA.

Pipeline: interegular syntax tree -> Thompson NFA over code-point sets -> subset construction
over *atoms* (the elementary code-point intervals the regex distinguishes) -> UTF-8 expansion
(each code-point range becomes byte-range sequences; intermediate states are interned by the
structure that remains, so "any continuation byte, then state t" exists once) -> pruning to
reachable and live states -> Moore minimisation with byte-class compression.

Invariants of the result: state 0 is dead (all its transitions lead to 0); every other state is
reachable from the start state (1) and live, i.e. can still reach an accepting state.
"""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Iterable, Sequence
from functools import lru_cache

import numpy as np
from interegular.patterns import Pattern, _CharGroup, _Concatenation, _Repeated

from constrain.engine.cache import BoundedCache
from constrain.engine.regex._limits import (
    DEFAULT_MAX_MEMORY,
    SET_ENTRY_BYTES,
    STEPS_PER_UNIT,
    CompileLimits,
)
from constrain.engine.regex._syntax import Lookahead, lookahead_index, parse
from constrain.engine.regex._utf8 import MAX_CODE_POINT, json_sequences, utf8_sequences
from constrain.errors import RegexError
from constrain.fuel import burn

DEAD = 0
_FORCED_CAP = 4096
_MERGE_LIMIT = 600  # products larger than this are pruned but not minimised (Moore is O(n * depth))


def _unlimited() -> CompileLimits:
    """Limits that never stop anything (for callers that bound their inputs themselves)."""
    return CompileLimits("", timeout=math.inf, max_states=2**62, max_memory=2**62)


_CHECK_EVERY = 1 << 16  # inner loops check the limits after this many steps
_CELLS_PER_STEP = 12  # cells of a numpy pass over a table per step of work (see `CompileLimits`)
_NUMPY_STEPS = 64  # the steps of a handful of numpy calls on small arrays (their overhead)
_SUBSET_BYTES = 256  # a DFA state's frozenset, its key in the numbering, its row
_CONFIG_BYTES = 2 * SET_ENTRY_BYTES + 64  # a configuration (state, obligations) in a set
_NFA_STATE_BYTES = 512  # two lists, an edge with its range tuple, the state's int
_EDGE_BYTES = 160  # an edge over atoms: a range and a tuple
_CELL_COPIES = 5  # dense int64 tables minimisation holds at once (table, full, compact, ...)
_BYTE_STATE_BYTES = 256 * 4 + 256  # a row of the byte DFA and its edges while expanding

CodeRanges = tuple[tuple[int, int], ...]


class ByteDFA:
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
        transitions.flags.writeable = False
        accepting.flags.writeable = False

    @property
    def n_states(self) -> int:
        return len(self.transitions)

    def is_empty(self) -> bool:
        return self.start == DEAD

    def accepts(self, state: int) -> bool:
        """Whether `state` is accepting."""
        return bool(self.accepting[state])

    def rows(self, states: np.ndarray) -> np.ndarray:
        """The transitions of `states`, (len, 256)."""
        return self.transitions[states]

    def byte_classes(self) -> np.ndarray:
        """The class of each byte (256 ints): bytes in one class lead every state alike."""
        if self._classes is None:
            burn(_NUMPY_STEPS // STEPS_PER_UNIT + len(self.transitions) // 4)  # 256 x n cells
            columns = self.transitions.T.astype(np.int64)
            signature = columns @ _weights(len(self.transitions))  # wraps: a 64-bit hash
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

    def walk(self, state: int, data: bytes) -> int:
        """The state after reading `data` from `state` (0 once dead)."""
        for b in data:
            state = self._row(state)[b]
            if state == DEAD:
                return DEAD
        return state

    def matches(self, data: bytes | str) -> bool:
        """Whether the whole of `data` is in the language."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        return bool(self.accepting[self.walk(self.start, data)])

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
    signature = columns @ _weights(len(transitions))  # wraps: a 64-bit hash
    _, first, inverse = np.unique(signature, return_index=True, return_inverse=True)
    if not np.array_equal(columns[first][inverse.ravel()], columns):
        return np.arange(256)
    return first


def _weights(n: int) -> np.ndarray:
    """n fixed odd pseudo-random 64-bit weights (for hashing rows of states)."""
    global _WEIGHTS
    if len(_WEIGHTS) < n:
        rng = np.random.default_rng(len(_WEIGHTS) + 1)
        more = rng.integers(1, 2**62, size=max(n, 2 * len(_WEIGHTS)) - len(_WEIGHTS)) | 1
        _WEIGHTS = np.concatenate([_WEIGHTS, more.astype(np.int64)])
    return _WEIGHTS[:n]


# -- syntax tree -> NFA ---------------------------------------------------------------------------


def _complement(ranges: CodeRanges) -> CodeRanges:
    """Every code point not in `ranges`, surrogates excluded (they have no UTF-8 encoding)."""
    out, prev = [], 0
    for lo, hi in sorted((*ranges, _SURROGATES)):
        if lo > prev:
            out.append((prev, lo - 1))
        prev = max(prev, hi + 1)
    if prev <= MAX_CODE_POINT:
        out.append((prev, MAX_CODE_POINT))
    return tuple(sorted(out))


def _ranges_of(chars: Iterable[str]) -> CodeRanges:
    points = np.unique(np.fromiter(map(ord, chars), dtype=np.int64))
    if not len(points):
        return ()
    breaks = np.flatnonzero(np.diff(points) != 1)
    starts = np.concatenate(([points[0]], points[breaks + 1]))
    ends = np.concatenate((points[breaks], [points[-1]]))
    return tuple(zip(starts.tolist(), ends.tolist()))


_NEWLINE = _ranges_of("\n")
_EVERY: CodeRanges = ((0, MAX_CODE_POINT),)
_SURROGATES = (0xD800, 0xDFFF)


class _NFA:
    """Thompson NFA whose edges carry code-point range sets.

    A lookahead is an assertion edge ``state -> (negative, start, final, end)``: crossing it to
    `end` sets an obligation on the rest of the text, to be (or, negative, not to be) in the
    language of the lookahead's own automaton from `start` to `final`. A prefix lookahead's
    `final` loops on every character (it is then `universal`: once reached, the rest matches).
    """

    def __init__(self, pattern: str, limits: CompileLimits, lookaheads: Sequence[Lookahead] = ()):
        self.eps: list[list[int]] = []
        self.edges: list[list[tuple[CodeRanges, int]]] = []
        self.pattern = pattern
        self.limits = limits
        self.lookaheads = lookaheads
        self.asserts: dict[int, list[tuple[bool, int, int, int]]] = {}
        self.universal: set[int] = set()
        self._built: dict[int, tuple[bool, int, int]] = {}  # lookahead -> its automaton
        self._ranges: dict[tuple, CodeRanges] = {}  # (chars, negated) -> ranges, for repeats

    def new(self) -> int:
        n = len(self.eps)
        if n >= 4 * self.limits.max_states:
            self.limits.states(n + 1, "regex NFA", n)
        if n % 1024 == 0:  # the time, and the memory of the next 1024 states
            self.limits.charge(1024 * _NFA_STATE_BYTES)
        self.eps.append([])
        self.edges.append([])
        return len(self.eps) - 1

    def build(self, node, start: int) -> int:
        """Add `node` starting at state `start`; return its end state."""
        if isinstance(node, Pattern):
            end = self.new()
            for option in node.options:
                s = self.new()
                self.eps[start].append(s)
                self.eps[self.build(option, s)].append(end)
            return end
        if isinstance(node, _Concatenation):
            for part in node.parts:
                start = self.build(part, start)
            return start
        if isinstance(node, _Repeated):
            if node.max is not None and node.max < node.min:
                raise RegexError(
                    f"repetition {{{node.min},{node.max}}} has its minimum above its maximum",
                    self.pattern,
                )
            for _ in range(node.min):
                start = self.build(node.base, start)
            if node.max is None:
                loop = self.new()
                self.eps[start].append(loop)
                self.eps[self.build(node.base, loop)].append(loop)
                return loop
            end = self.new()
            for _ in range(node.max - node.min):
                self.eps[start].append(end)
                start = self.build(node.base, start)
            self.eps[start].append(end)
            return end
        if isinstance(node, _CharGroup):
            key = (node.chars, node.negated)
            ranges = self._ranges.get(key)
            if ranges is not None:  # a group seen before (a repetition's copies)
                return self._edge(start, ranges)
            self.limits.check(work=len(node.chars) * STEPS_PER_UNIT)  # a unit per character
            marks = [k for c in node.chars if (k := lookahead_index(c)) is not None]
            if marks:
                if node.negated or len(node.chars) > 1:
                    raise RegexError(
                        "a lookahead must stand alone, not as one of several single characters",
                        self.pattern,
                    )
                return self._assertion(start, marks[0])
            ranges = _ranges_of(node.chars)
            ranges = self._ranges[key] = _complement(ranges) if node.negated else ranges
            return self._edge(start, ranges)
        name = type(node).__name__
        if name == "__DotCls":
            return self._edge(start, _complement(_NEWLINE))
        if name == "__EmptyCls":
            return start
        raise RegexError(f"unsupported regex construct {name}", self.pattern)

    def _assertion(self, start: int, k: int) -> int:
        built = self._built.get(k)
        if built is None:
            lookahead = self.lookaheads[k]
            sub_start = self.new()
            sub_final = self.build(lookahead.body, sub_start)
            if not lookahead.whole:
                self.edges[sub_final].append((_EVERY, sub_final))
                self.universal.add(sub_final)
            built = self._built[k] = (lookahead.negative, sub_start, sub_final)
        end = self.new()
        self.asserts.setdefault(start, []).append((*built, end))
        return end

    def _edge(self, start: int, ranges: CodeRanges) -> int:
        end = self.new()
        if ranges:
            self.edges[start].append((ranges, end))
        return end


# -- NFA -> character DFA over atoms --------------------------------------------------------------


def _atoms(nfa: _NFA) -> tuple[list[tuple[int, int]], list[list[tuple[range, int]]]]:
    """The elementary code-point intervals the NFA distinguishes, and each state's edges as
    ranges of atom indices."""
    cuts = {0, MAX_CODE_POINT + 1}
    for edges in nfa.edges:
        for ranges, _ in edges:
            for lo, hi in ranges:
                cuts.add(lo)
                cuts.add(hi + 1)
    bounds = sorted(cuts)
    atoms = list(zip(bounds[:-1], (b - 1 for b in bounds[1:])))
    edge_atoms: list[list[tuple[range, int]]] = []
    for edges in nfa.edges:
        out = []
        for ranges, target in edges:
            for lo, hi in ranges:
                out.append(
                    (
                        range(bisect.bisect_left(bounds, lo), bisect.bisect_left(bounds, hi + 1)),
                        target,
                    )
                )
        edge_atoms.append(out)
    nfa.limits.charge(len(atoms) * 64 + sum(map(len, edge_atoms)) * _EDGE_BYTES)
    return atoms, edge_atoms


def _closure(nfa: _NFA):
    """The epsilon closure of one NFA state (memoised; the memo is charged to the limits)."""
    closures: dict[int, frozenset[int]] = {}
    limits = nfa.limits

    def closure(q: int) -> frozenset[int]:
        got = closures.get(q)
        if got is None:
            seen, stack = {q}, [q]
            work = 0
            while stack:
                for r in nfa.eps[stack.pop()]:
                    if r in seen:
                        continue
                    known = closures.get(r)
                    if known is not None:  # a finished closure is complete: no need to walk it
                        seen |= known
                        work += len(known)
                    else:
                        seen.add(r)
                        stack.append(r)
                work += 1
                if work > _CHECK_EVERY:
                    limits.check(len(seen) * SET_ENTRY_BYTES, work)
                    work = 0
            limits.did(work)
            got = closures[q] = frozenset(seen)
            limits.charge(len(got) * SET_ENTRY_BYTES)
        return got

    return closure


class _Subsets:
    """Numbering of the DFA's states (subsets of NFA states or configurations), with the
    limits checked: the state cap, the deadline, and the memory of the subsets and rows kept."""

    def __init__(self, nfa: _NFA, first: frozenset):
        self.limits = nfa.limits
        self.ids = {first: 0}
        self.order = [first]

    def id(self, subset: frozenset) -> int:
        dest = self.ids.get(subset)
        if dest is None:
            self.limits.states(len(self.order) + 1, "regex DFA")
            self.limits.charge(len(subset) * SET_ENTRY_BYTES + _SUBSET_BYTES)
            dest = self.ids[subset] = len(self.order)
            self.order.append(subset)
        return dest

    def pending(self, rows: list[dict[int, int]]) -> frozenset | None:
        """The next subset whose row is to be built (None: all done), after charging the row
        built last."""
        if rows:
            self.limits.charge(len(rows[-1]) * SET_ENTRY_BYTES)
        else:
            self.limits.check()
        return None if len(rows) == len(self.order) else self.order[len(rows)]


def _moves(current, edges, limits: CompileLimits) -> dict[int, set]:
    """``{atom: targets}`` of the members of `current` (`edges(member)` gives ``(atoms, target)``
    pairs), checking the limits as the sets grow."""
    moves: dict[int, set] = {}
    work = 0
    for q in current:
        for atom_range, target in edges(q):
            for a in atom_range:
                moves.setdefault(a, set()).add(target)
            work += len(atom_range)
            if work > _CHECK_EVERY:
                limits.check(sum(map(len, moves.values())) * SET_ENTRY_BYTES, work)
                work = 0
    limits.did(work + len(current))
    return moves


def _determinize(
    nfa: _NFA, start: int, final: int
) -> tuple[list[dict[int, int]], list[bool], list[tuple[int, int]]]:
    """Subset construction. Returns per-state {atom: next state}, accepting flags and the atoms."""
    if nfa.asserts:
        return _determinize_with_lookaheads(nfa, start, final)
    atoms, edge_atoms = _atoms(nfa)
    closure = _closure(nfa)
    subsets = _Subsets(nfa, closure(start))
    table: list[dict[int, int]] = []
    accepting: list[bool] = []
    while (current := subsets.pending(table)) is not None:
        moves = _moves(current, edge_atoms.__getitem__, nfa.limits)
        row: dict[int, int] = {}
        by_targets: dict[frozenset[int], int] = {}
        for a, targets in moves.items():
            key = frozenset(targets)
            dest = by_targets.get(key)
            if dest is None:
                subset = frozenset().union(*(closure(t) for t in targets))
                dest = by_targets[key] = subsets.id(subset)
            row[a] = dest
        table.append(row)
        accepting.append(final in current)
    return table, accepting, atoms


def _determinize_with_lookaheads(
    nfa: _NFA, start: int, final: int
) -> tuple[list[dict[int, int]], list[bool], list[tuple[int, int]]]:
    """Subset construction over configurations ``(NFA state, obligations)``.

    An obligation ``(negative, final, states)`` is a lookahead's automaton run on the text read
    since its assertion: the rest of the text must (negative: must not) take it from `states`
    to `final`. It is settled early when its states die (a positive one fails, a negative one
    holds) or reach a universal final (the reverse); a configuration whose obligation fails is
    dropped. At the end of the text a configuration accepts when its NFA state is final and
    each obligation's states hold `final` exactly when it is positive.
    """
    atoms, edge_atoms = _atoms(nfa)
    closure = _closure(nfa)
    limits = nfa.limits
    raw: dict[int, dict[int, list[int]]] = {}  # state -> atom -> targets (not closed)
    closed: dict[int, dict[int, frozenset[int]]] = {}  # state -> atom -> closed targets

    def targets(q: int) -> dict[int, list[int]]:
        got = raw.get(q)
        if got is None:
            got = raw[q] = {}
            for atom_range, target in edge_atoms[q]:
                for a in atom_range:
                    got.setdefault(a, []).append(target)
            limits.charge(sum(map(len, got.values())) * SET_ENTRY_BYTES)
        return got

    def step(q: int) -> dict[int, frozenset[int]]:
        got = closed.get(q)
        if got is None:
            got = closed[q] = {
                a: frozenset().union(*(closure(t) for t in ts)) for a, ts in targets(q).items()
            }
            limits.charge(sum(map(len, got.values())) * SET_ENTRY_BYTES)
        return got

    def settle(negative: bool, end: int, states: frozenset[int]):
        """The obligation, or True (it holds whatever follows) or False (it has failed)."""
        if not states:
            return negative
        if end in nfa.universal and end in states:
            return not negative
        return (negative, end, states)

    def advance(obligations: frozenset, a: int) -> frozenset | None:
        out = set()
        for negative, end, states in obligations:
            moved = frozenset().union(*(step(s).get(a, ()) for s in states))
            settled = settle(negative, end, moved)
            if settled is False:
                return None
            if settled is not True:
                out.add(settled)
        return frozenset(out)

    closes: dict[tuple, frozenset] = {}

    def close(q: int, obligations: frozenset) -> frozenset:
        key = (q, obligations)
        got = closes.get(key)
        if got is None:
            seen: set = set()
            stack = [key]
            while stack:
                config = stack.pop()
                if config in seen:
                    continue
                seen.add(config)
                p, held = config
                stack.extend((r, held) for r in nfa.eps[p])
                for negative, sub_start, sub_final, end in nfa.asserts.get(p, ()):
                    settled = settle(negative, sub_final, closure(sub_start))
                    if settled is not False:
                        stack.append((end, held if settled is True else held | {settled}))
                if len(seen) % _CHECK_EVERY == 0:
                    limits.check(len(seen) * _CONFIG_BYTES, _CHECK_EVERY)
            got = closes[key] = frozenset(seen)
            limits.charge(len(got) * _CONFIG_BYTES)
        return got

    def accepts(config) -> bool:
        q, obligations = config
        return q == final and all((end in states) != neg for neg, end, states in obligations)

    subsets = _Subsets(nfa, close(start, frozenset()))
    table: list[dict[int, int]] = []
    accepting: list[bool] = []
    while (current := subsets.pending(table)) is not None:
        moves: dict[int, set] = {}
        work = 0
        for q, obligations in current:
            for a, ts in targets(q).items():
                held = advance(obligations, a)
                if held is not None:
                    bucket = moves.setdefault(a, set())
                    for t in ts:
                        bucket |= close(t, held)
                        work += 1
                if work > _CHECK_EVERY:
                    limits.check(sum(map(len, moves.values())) * SET_ENTRY_BYTES, work)
                    work = 0
        limits.did(work + len(current))
        row = {a: subsets.id(frozenset(configs)) for a, configs in moves.items() if configs}
        table.append(row)
        accepting.append(any(accepts(c) for c in current))
    return table, accepting, atoms


# -- pruning and minimisation (over any alphabet: atoms or bytes) ---------------------------------


_SMALL = 40_000  # tables with fewer cells are traversed in plain Python (no per-level numpy)


def _reachable(trans: np.ndarray, start: int) -> np.ndarray:
    if trans.size <= _SMALL:
        return _python_reachable(trans.tolist(), [start], len(trans))
    seen = np.zeros(len(trans), dtype=bool)
    seen[start] = True
    frontier = np.array([start])
    while len(frontier):
        nxt = np.unique(trans[frontier])
        nxt = nxt[~seen[nxt]]
        seen[nxt] = True
        frontier = nxt
    return seen


def _python_reachable(rows: list, starts: list[int], n: int) -> np.ndarray:
    """The states reachable from `starts` along `rows` (lists of successors)."""
    seen = bytearray(n)
    for s in starts:
        seen[s] = 1
    stack = list(starts)
    while stack:
        for t in rows[stack.pop()]:
            if not seen[t]:
                seen[t] = 1
                stack.append(t)
    return np.frombuffer(bytes(seen), dtype=np.uint8).astype(bool)


def _live(trans: np.ndarray, accepting: np.ndarray) -> np.ndarray:
    n = len(trans)
    if trans.size <= _SMALL:
        preds: list[list[int]] = [[] for _ in range(n)]
        for s, row in enumerate(trans.tolist()):
            for t in set(row):
                preds[t].append(s)
        return _python_reachable(preds, np.flatnonzero(accepting).tolist(), n)
    src = np.repeat(np.arange(n), trans.shape[1])
    dst = trans.ravel()
    order = np.argsort(dst, kind="stable")
    src, dst = src[order], dst[order]
    starts = np.searchsorted(dst, np.arange(n + 1))
    live = accepting.copy()
    frontier = np.flatnonzero(live)
    while len(frontier):
        preds = np.unique(np.concatenate([src[starts[s] : starts[s + 1]] for s in frontier]))
        preds = preds[~live[preds]]
        live[preds] = True
        frontier = preds
    return live


def _column_representatives(table: np.ndarray) -> np.ndarray:
    """One column index per class of equal columns of `table` (hashed, checked exactly)."""
    columns = table.T.astype(np.int64)
    signature = columns @ _weights(len(table))
    _, first, inverse = np.unique(signature, return_index=True, return_inverse=True)
    if np.array_equal(columns[first][inverse.ravel()], columns):
        return first
    _, first = np.unique(columns, axis=0, return_index=True)
    return first


_MIX = np.random.default_rng(0).integers(1, 2**62, size=(257,), dtype=np.int64) | 1


def _refine(
    cls: np.ndarray, n_classes: int, compact: np.ndarray, acc: np.ndarray, limits: CompileLimits
):
    """Moore refinement to the coarsest congruence. Rows are compared through 64-bit hashes
    (one cheap 1-D unique per round); the result is then checked exactly, and recomputed with
    exact row comparison in the (astronomically unlikely) case a collision merged two states.
    The rounds can be as many as the states (a chain), so each checks the deadline."""
    hashed, initial = cls, n_classes
    work = compact.size // _CELLS_PER_STEP + _NUMPY_STEPS  # one round's work
    while True:
        limits.check(work=work)
        signature = hashed * _MIX[0] + (hashed[compact] * _MIX[1 : compact.shape[1] + 1]).sum(1)
        _, hashed = np.unique(signature, return_inverse=True)
        hashed = hashed.ravel()
        if hashed.max() + 1 == n_classes:
            break
        n_classes = int(hashed.max()) + 1
    rows = np.column_stack([acc, hashed[compact]])
    rep = np.zeros(n_classes, dtype=np.int64)
    rep[hashed] = np.arange(len(hashed))
    if np.array_equal(rows, rows[rep[hashed]]):  # every class is a congruence class
        return hashed, n_classes
    n_classes = initial
    while True:  # exact fallback
        limits.check(work=work)
        _, cls = np.unique(np.column_stack([cls, cls[compact]]), axis=0, return_inverse=True)
        cls = cls.ravel()
        if cls.max() + 1 == n_classes:
            return cls, n_classes
        n_classes = int(cls.max()) + 1


def _minimize(
    trans: np.ndarray,
    accepting: np.ndarray,
    start: int,
    merge: bool = True,
    expand: np.ndarray | None = None,
    limits: CompileLimits | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Prune to reachable and live states and merge equivalent ones (Moore refinement; skipped
    when `merge` is false, e.g. for large products whose refinement would take long), within
    `limits` (the dense copies it makes are checked against the memory budget up front).

    `trans` is (n, k) with -1 for "no transition". The result is (m, k) with state 0 dead (all
    its transitions and every missing one lead to 0), start state 1, the others in BFS order;
    m == 1 when the language is empty. With `expand` (the column of each output symbol), the
    columns of `trans` are classes of symbols and the result has one column per symbol.
    """
    n = len(trans) + 1
    limits = limits or _unlimited()
    # the work: small tables are pruned in Python (a step per cell), large ones with numpy
    cells = n * trans.shape[1]
    work = 4 * _NUMPY_STEPS + (cells if cells <= _SMALL else cells // _CELLS_PER_STEP)
    limits.check(cells * 8 * _CELL_COPIES, work)
    full = np.zeros((n, trans.shape[1]), dtype=np.int64)
    full[1:] = trans + 1
    acc = np.zeros(n, dtype=bool)
    acc[1:] = accepting
    start += 1
    keep = _reachable(full, start) & _live(full, acc)
    keep[0] = False
    width = trans.shape[1] if expand is None else len(expand)
    if not keep[start]:
        return np.zeros((1, width), dtype=np.int32), np.zeros(1, dtype=bool)
    full[~keep[full]] = 0
    full[~keep] = 0
    compact = full[:, _column_representatives(full)]  # one column per class of symbols
    cls = np.where(keep, acc.astype(np.int64) + 1, 0)
    n_classes = len(np.unique(cls))
    if not merge:
        cls = np.where(keep, np.cumsum(keep), 0)
        n_classes = int(cls.max()) + 1
    if merge:
        cls, n_classes = _refine(cls, n_classes, compact, acc, limits)
    rep = np.zeros(n_classes, dtype=np.int64)
    rep[cls[::-1]] = np.arange(n - 1, -1, -1)  # a representative state of each class
    class_trans = cls[full[rep]]
    number = np.full(n_classes, -1, dtype=np.int64)
    number[cls[0]] = 0
    number[cls[start]] = 1
    next_id = 2
    if class_trans.size <= _SMALL:  # breadth-first numbering
        rows = class_trans.tolist()
        numbers = number.tolist()
        queue = [int(cls[start])]
        for state in queue:
            for t in rows[state]:
                if numbers[t] < 0:
                    numbers[t] = next_id
                    next_id += 1
                    queue.append(t)
        number = np.array(numbers, dtype=np.int64)
    else:  # one level at a time
        frontier = np.array([cls[start]])
        while frontier.size:
            reached = np.unique(class_trans[frontier])
            fresh = reached[number[reached] < 0]
            number[fresh] = np.arange(next_id, next_id + fresh.size)
            next_id += fresh.size
            frontier = fresh
    valid = number >= 0
    out = np.zeros((next_id, trans.shape[1]), dtype=np.int32)
    out_acc = np.zeros(next_id, dtype=bool)
    out[number[valid]] = number[class_trans[valid]]
    out_acc[number[valid]] = acc[rep[valid]]
    out[0] = 0
    out_acc[0] = False
    if expand is not None:
        out = np.ascontiguousarray(out[:, expand])
    return out, out_acc


# -- minimal character DFA -> byte DFA ------------------------------------------------------------


@lru_cache(maxsize=4096)
def _sequences(lo: int, hi: int, encoding: str) -> tuple:
    return tuple((json_sequences if encoding == "json" else utf8_sequences)(lo, hi))


class _ByteBuilder:
    """Expands a character DFA into bytes; intermediate states are interned by what remains.

    Interning makes the expansion of a minimal character DFA minimal over bytes: two
    intermediate states with the same remaining structure are the same state.
    """

    def __init__(self, n_char_states: int):
        self.rows: list[list[tuple[int, int, int]]] = [[] for _ in range(n_char_states)]
        self._interned: dict[tuple, int] = {}

    def edges(
        self, items: list[tuple[tuple[tuple[int, int], ...], int]]
    ) -> list[tuple[int, int, int]]:
        cuts = sorted({seq[0][0] for seq, _ in items} | {seq[0][1] + 1 for seq, _ in items})
        out = []
        for lo, nxt in zip(cuts, cuts[1:]):
            covering = [
                (seq[1:], t) for seq, t in items if seq[0][0] <= lo and nxt - 1 <= seq[0][1]
            ]
            if not covering:
                continue
            if not covering[0][0]:
                dest = covering[0][1]  # a whole character read: on to the character state
            else:
                dest = self.intermediate(tuple(sorted(covering)))
            out.append((lo, nxt - 1, dest))
        return out

    def intermediate(self, key: tuple) -> int:
        state = self._interned.get(key)
        if state is None:
            state = self._interned[key] = len(self.rows)
            self.rows.append([])
            self.rows[state] = self.edges(list(key))
        return state


def _to_bytes(
    table: np.ndarray,
    accepting: np.ndarray,
    atoms: list[tuple[int, int]],
    pattern: str,
    limits: CompileLimits,
    encoding: str = "utf-8",
) -> ByteDFA:
    """Expand a minimal character DFA (dead 0, start 1, columns = atoms) into a byte DFA."""
    builder = _ByteBuilder(len(table))
    work = 0  # sequences expanded since the last check
    for state in range(1, len(table)):
        if state % 256 == 0:
            limits.check(len(builder.rows) * _BYTE_STATE_BYTES, work)
            work = 0
        row = table[state].tolist()
        items = []
        lo = 0
        for a in range(1, len(row) + 1):  # runs of adjacent atoms with the same live target
            if a == len(row) or row[a] != row[lo]:
                if row[lo] != DEAD:
                    items.extend(
                        (seq, row[lo])
                        for seq in _sequences(atoms[lo][0], atoms[a - 1][1], encoding)
                    )
                lo = a
        builder.rows[state] = builder.edges(items)
        work += len(row) + 40 * len(items) + 8  # an item's sequences cut and interned
    limits.check(len(builder.rows) * _BYTE_STATE_BYTES, work)
    trans = np.zeros((len(builder.rows), 256), dtype=np.int32)
    for state, row in enumerate(builder.rows):
        for lo, hi, dest in row:
            trans[state, lo : hi + 1] = dest
    acc = np.zeros(len(builder.rows), dtype=bool)
    acc[: len(accepting)] = accepting
    return ByteDFA(trans, acc, 1 if len(table) > 1 else DEAD, pattern)


# -- public constructors --------------------------------------------------------------------------

# compiled regexes by (pattern, max_states, max_memory, dialect, encoding): the timeout is not
# part of the key, so callers passing the time left of a larger compilation still share entries;
# bounded by their tables' bytes too (a DFA's dense table is 1 KiB per state)
_COMPILED: BoundedCache[tuple, ByteDFA] = BoundedCache(
    256, max_bytes=128 * 2**20, size=lambda dfa: dfa.transitions.nbytes
)
_COMPILED_LOCK = threading.Lock()


def compile_regex(
    pattern: str,
    *,
    max_states: int = 100_000,
    timeout: float = 10.0,
    max_memory: int = DEFAULT_MAX_MEMORY,
    dialect: str = "python",
    encoding: str = "utf-8",
) -> ByteDFA:
    """Compile `pattern` (full-match semantics over UTF-8 bytes) to a minimal byte DFA (cached:
    the 256 most recently compiled are kept; `compile_regex.cache_clear()` forgets them).

    Args:
        pattern: the regex; see docs/regex.md for the supported syntax.
        max_states: cap on character-DFA states (and 4x that on NFA states).
        timeout: cap on compile time, in seconds, checked by every stage.
        max_memory: cap on the memory the compilation holds, in bytes (an estimate counted
            by every stage: sets of states, tables).
        dialect: "python", or "ecma" for ECMA-262 meanings of ``.``, ``\\s`` and ``\\S`` (as
            JSON Schema's ``pattern`` uses them).
        encoding: "utf-8" (the text itself), or "json": the text as it appears between the
            quotes of a JSON string (``"``, ``\\`` and control characters escaped).

    Raises:
        RegexError: malformed or unsupported syntax (with its position), or a limit exceeded
            (naming it: ``max_states=``, ``timeout=``, ``max_memory=``).
    """
    if not isinstance(pattern, str):
        raise RegexError(f"a regex must be a str, got {type(pattern).__name__}", repr(pattern))
    if dialect not in ("python", "ecma") or encoding not in ("utf-8", "json"):
        raise ValueError(f"unknown dialect {dialect!r} or encoding {encoding!r}")
    key = (pattern, max_states, max_memory, dialect, encoding)
    with _COMPILED_LOCK:
        found = _COMPILED.get(key)
    if found is None:
        limits = CompileLimits(
            pattern, timeout=timeout, max_states=max_states, max_memory=max_memory
        )
        found = _compile(pattern, limits, dialect, encoding)
        with _COMPILED_LOCK:
            _COMPILED[key] = found
    return found


def _clear_compiled() -> None:
    with _COMPILED_LOCK:
        _COMPILED.clear()


compile_regex.cache_clear = _clear_compiled  # type: ignore[attr-defined]  (as lru_cache's)


def _compile(pattern: str, limits: CompileLimits, dialect: str, encoding: str) -> ByteDFA:
    """The pipeline of `compile_regex`, every stage within `limits`."""
    tree, lookaheads = parse(pattern, ecma=dialect == "ecma")
    nfa = _NFA(pattern, limits, lookaheads=lookaheads)
    start = nfa.new()
    final = nfa.build(tree, start)
    rows, accepting, atoms = _determinize(nfa, start, final)
    limits.check(len(rows) * len(atoms) * 8, len(rows) * 4 * STEPS_PER_UNIT)  # 4 per row
    table = np.full((len(rows), len(atoms)), -1, dtype=np.int64)
    for state, row in enumerate(rows):
        if row:
            table[state, list(row)] = list(row.values())
    table, acc = _minimize(table, np.array(accepting), 0, limits=limits)
    return _to_bytes(table, acc, atoms, pattern, limits, encoding)


def joint_byte_classes(dfas: Sequence[ByteDFA]) -> tuple[np.ndarray, np.ndarray]:
    """Bytes every DFA of `dfas` treats alike share a class: (class of each byte, one byte of
    each class). Products and lexers step once per class instead of once per byte."""
    if not dfas:
        return np.zeros(256, dtype=np.int64), np.zeros(1, dtype=np.int64)
    columns = np.stack([dfa.byte_classes() for dfa in dfas])  # (len(dfas), 256)
    signature = _weights(len(dfas)) @ columns  # wraps: a 64-bit hash of each byte's column
    _, representatives, classes = np.unique(signature, return_index=True, return_inverse=True)
    classes = classes.ravel()
    if not np.array_equal(columns[:, representatives][:, classes], columns):  # a collision
        _, representatives, classes = np.unique(
            columns, axis=1, return_index=True, return_inverse=True
        )
        classes = classes.ravel()
    return classes.astype(np.int64), representatives


def _product_search(a: ByteDFA, b: ByteDFA, op: str, limits: CompileLimits, stop=None):
    """Breadth-first search of the pairs of states of `a` and `b` reachable for `op` (pairs
    where the result can no longer accept are dropped), within `limits`. Pairs are numbered in
    order of discovery; returns (pair keys, rows of next pair keys per byte class (-1: none),
    classes), or None as soon as `stop(x, y)` holds for a pair of the frontier."""
    classes, representatives = joint_byte_classes((a, b))
    width = np.int64(b.n_states)
    start = int(a.start) * int(width) + int(b.start)
    index = {start: 0}
    order = [start]
    levels = []
    frontier = np.array([start], dtype=np.int64)
    while frontier.size:  # one level of pairs at a time
        x, y = np.divmod(frontier, width)
        if stop is not None and stop(x, y):
            return None
        kx = a.transitions[x][:, representatives].astype(np.int64)
        ky = b.transitions[y][:, representatives].astype(np.int64)
        dead = kx == DEAD
        if op == "or":
            dead &= ky == DEAD
        elif op == "and":
            dead |= ky == DEAD
        keys = np.where(dead, -1, kx * width + ky)
        levels.append(keys)
        fresh = [k for k in np.unique(keys[~dead]).tolist() if k not in index]
        for k in fresh:
            index[k] = len(order)
            order.append(k)
        limits.states(len(order), f"the {op} of two automata")
        limits.did(2 * _NUMPY_STEPS + keys.size // _CELLS_PER_STEP + 4 * len(fresh))
        limits.charge(keys.nbytes + len(fresh) * SET_ENTRY_BYTES)
        frontier = np.array(fresh, dtype=np.int64)
    return np.array(order, dtype=np.int64), np.concatenate(levels), classes


def combine(
    a: ByteDFA,
    b: ByteDFA,
    op: str,
    pattern: str,
    max_states: int = 100_000,
    *,
    timeout: float = 10.0,
    max_memory: int = DEFAULT_MAX_MEMORY,
) -> ByteDFA:
    """The minimal DFA of ``a & b`` (op "and"), ``a | b`` ("or") or ``a - b`` ("minus"): a
    product search over byte classes, then minimisation.

    Raises:
        RegexError: the product exceeds `max_states` states, `timeout` seconds or `max_memory`
            bytes.
    """
    if op not in ("and", "or", "minus"):
        raise ValueError(f"unknown operation {op!r}")
    limits = CompileLimits(
        pattern[:200], timeout=timeout, max_states=max_states, max_memory=max_memory
    )
    pairs, table, classes = _product_search(a, b, op, limits)
    sorter = np.argsort(pairs)
    live = table >= 0
    table[live] = sorter[np.searchsorted(pairs, table[live], sorter=sorter)]
    x, y = np.divmod(pairs, np.int64(b.n_states))
    ax, by = a.accepting[x], b.accepting[y]
    accepting = {"and": ax & by, "or": ax | by, "minus": ax & ~by}[op]
    merge = len(pairs) <= _MERGE_LIMIT
    table, acc = _minimize(table, accepting, 0, merge=merge, expand=classes, limits=limits)
    return ByteDFA(table, acc, 1 if len(table) > 1 else DEAD, pattern)


def is_empty_combination(a: ByteDFA, b: ByteDFA, op: str) -> bool:
    """Whether ``a & b`` (op "and") or ``a - b`` ("minus") is empty, without building it: the
    product search stops at the first pair accepting the result."""
    if op not in ("and", "minus"):
        raise ValueError(f"unknown operation {op!r}")
    if a.is_empty() or (op == "and" and b.is_empty()):
        return True

    def accepts(x, y) -> bool:
        other = b.accepting[y] if op == "and" else ~b.accepting[y]
        return bool((a.accepting[x] & other).any())

    return _product_search(a, b, op, _unlimited(), stop=accepts) is not None


def dfa_from_table(
    transitions: np.ndarray, accepting: np.ndarray, start: int, pattern: str
) -> ByteDFA:
    """The minimal DFA of a table of byte transitions (n, 256) with -1 for "none"."""
    table, acc = _minimize(np.asarray(transitions, dtype=np.int64), np.asarray(accepting), start)
    return ByteDFA(table, acc, 1 if len(table) > 1 else DEAD, pattern)


def quoted(body: ByteDFA, quote: int = 0x22) -> ByteDFA:
    """The DFA of ``quote + body + quote``, for a body that never reads a raw `quote` between
    characters (true of every "json"-encoded regex: a raw ``"`` only follows a backslash)."""
    n = body.n_states
    trans = np.zeros((n + 2, 256), dtype=np.int32)
    trans[2 : n + 1] = np.where(body.transitions[1:] == DEAD, DEAD, body.transitions[1:] + 1)
    if body.is_empty():
        return ByteDFA(trans[:1], np.zeros(1, dtype=bool), DEAD, f"{chr(quote)}{body.pattern}")
    trans[1, quote] = body.start + 1
    ends = np.flatnonzero(body.accepting) + 1
    if trans[ends, quote].any():
        raise ValueError(f"/{body.pattern}/ reads a raw quote between characters")
    trans[ends, quote] = n + 1
    accepting = np.zeros(n + 2, dtype=bool)
    accepting[n + 1] = True
    # minimal already: body states keep their distinctions (acceptance became "has a quote")
    return ByteDFA(trans, accepting, 1, chr(quote) + body.pattern + chr(quote))


def repeat_unit(unit: ByteDFA, low: int, high: int | None) -> ByteDFA:
    """The DFA of `unit` repeated low..high times (high None: unbounded), for a unit whose
    accepting states have no way out (one character, say): copies chained end to start."""
    if unit.accepting.any() and unit.transitions[unit.accepting].any():
        raise ValueError(f"/{unit.pattern}/ continues after accepting")
    if high is not None and high < low:
        return dfa_from_strings([])
    final = np.flatnonzero(unit.accepting)
    inner = [q for q in range(1, unit.n_states) if not unit.accepting[q]]  # start first
    k = len(inner)
    copies = (high if high is not None else low + 1) + 1  # the last copy is the end state
    position = np.zeros(unit.n_states, dtype=np.int64)
    position[inner] = np.arange(k)
    trans = np.zeros((1 + copies * k, 256), dtype=np.int32)
    accepting = np.zeros(1 + copies * k, dtype=bool)
    for j in range(copies - 1):
        base = 1 + j * k
        rows = unit.transitions[inner].astype(np.int64)
        into_final = np.isin(rows, final)
        nxt = j + 1 if (high is not None or j < low) else j  # unbounded: copy `low` loops
        mapped = np.where(into_final, 1 + nxt * k, base + position[rows])
        trans[base : base + k] = np.where(rows == DEAD, DEAD, mapped)
        accepting[base] = j >= low
    last = 1 + (copies - 1) * k
    accepting[last] = high is not None and high >= low
    keep = 1 + (copies - 1) * k + (1 if high is not None else 0)
    return ByteDFA(trans[:keep], accepting[:keep], 1, f"({unit.pattern}){{{low},{high or ''}}}")


def dfa_from_code_points(ranges: Iterable[tuple[int, int]], pattern: str) -> ByteDFA:
    """The minimal DFA of the one-character texts whose code point lies in one of `ranges`
    (inclusive pairs, in any order, overlapping or not). Surrogates, which UTF-8 cannot encode,
    are left out; no code point is left (``[]``, or only surrogates): the empty language. Built
    without the regex parser, so any set of code points works, the private-use ones included."""
    pieces = sorted(
        (max(a, 0), min(b, MAX_CODE_POINT))
        for lo, hi in ranges
        for a, b in ((lo, min(hi, _SURROGATES[0] - 1)), (max(lo, _SURROGATES[1] + 1), hi))
    )
    merged: list[list[int]] = []
    for a, b in pieces:
        if a > b:
            continue
        if merged and a <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    if not merged:
        return ByteDFA(np.zeros((1, 256), dtype=np.int32), np.zeros(1, dtype=bool), DEAD, pattern)
    atoms, inside, prev = [], [], 0  # atoms partition the code points, gaps included
    for a, b in merged:
        if a > prev:
            atoms.append((prev, a - 1))
            inside.append(False)
        atoms.append((a, b))
        inside.append(True)
        prev = b + 1
    if prev <= MAX_CODE_POINT:
        atoms.append((prev, MAX_CODE_POINT))
        inside.append(False)
    table = np.zeros((3, len(atoms)), dtype=np.int64)  # dead, start, after one character
    table[1, inside] = 2
    accepting = np.array([False, False, True])
    return _to_bytes(table, accepting, atoms, pattern, _unlimited())


def dfa_from_byte_classes(classes: Sequence[Iterable[int]], pattern: str) -> ByteDFA:
    """The minimal DFA of the strings whose i-th byte is in ``classes[i]`` (a chain of states;
    e.g. an ASCII keyword matched in any case)."""
    n = len(classes)
    trans = np.zeros((n + 2, 256), dtype=np.int32)
    for i, allowed in enumerate(classes):
        trans[i + 1, list(allowed)] = i + 2
    accepting = np.zeros(n + 2, dtype=bool)
    accepting[n + 1] = True
    return ByteDFA(trans, accepting, 1, pattern)


def dfa_from_strings(strings: Iterable[bytes | str]) -> ByteDFA:
    """The minimal DFA of a finite set of strings (str items are UTF-8 encoded).

    Builds the trie of the set, then merges equivalent states bottom-up (the trie is acyclic,
    so one pass over states in reverse creation order, keyed by their outgoing edges, is exact).
    """
    items = sorted({s.encode("utf-8") if isinstance(s, str) else bytes(s) for s in strings})
    rows: list[dict[int, int]] = [{}]
    accepting = [False]
    for data in items:
        state = 0
        for b in data:
            nxt = rows[state].get(b)
            if nxt is None:
                nxt = rows[state][b] = len(rows)
                rows.append({})
                accepting.append(False)
            state = nxt
        accepting[state] = True
    burn(_NUMPY_STEPS // STEPS_PER_UNIT + len(rows))  # the active fuel: a unit per trie node
    canonical = [0] * len(rows)
    registry: dict[tuple, int] = {}
    for state in range(len(rows) - 1, -1, -1):  # children are created after their parents
        key = (accepting[state], tuple((b, canonical[t]) for b, t in sorted(rows[state].items())))
        canonical[state] = registry.setdefault(key, state)
    # renumber the canonical states: dead 0, start 1, then in creation order
    kept = sorted(set(canonical))
    number = {old: i + 1 for i, old in enumerate(kept)}
    trans = np.zeros((len(kept) + 1, 256), dtype=np.int32)
    acc = np.zeros(len(kept) + 1, dtype=bool)
    for old in kept:
        for b, t in rows[old].items():
            trans[number[old], b] = number[canonical[t]]
        acc[number[old]] = accepting[old]
    summary = " | ".join(repr(s) for s in items[:3]) + (
        f" ... ({len(items)} strings)" if len(items) > 3 else ""
    )
    return ByteDFA(trans, acc, 1 if items else DEAD, summary)
