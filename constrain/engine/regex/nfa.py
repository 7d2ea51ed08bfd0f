"""Thompson construction: an interegular syntax tree to an `NFA` over code-point range sets.

Lookaheads (marked by `_syntax`) become assertion edges, an inner ``^`` an edge crossed only
from the start (`NFA.at_start`). Also here, what subset construction
reads off the NFA: its atoms, the elementary code-point intervals it distinguishes
(`atoms_of`), and its memoised epsilon closure (`closure_of`), both charged to the NFA's limits.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

import numpy as np
from interegular.patterns import Pattern, _CharGroup, _Concatenation, _Repeated

from constrain.engine.regex._limits import SET_ENTRY_BYTES, STEPS_PER_UNIT, CompileLimits
from constrain.engine.regex._syntax import START_MARKER, Lookahead, lookahead_index
from constrain.engine.regex._utf8 import MAX_CODE_POINT
from constrain.engine.regex.budget import CHECK_EVERY
from constrain.errors import RegexError

_NFA_STATE_BYTES = 512  # two lists, an edge with its range tuple, the state's int
_EDGE_BYTES = 160  # an edge over atoms: a range and a tuple

CodeRanges = tuple[tuple[int, int], ...]


def _complement(ranges: CodeRanges) -> CodeRanges:
    """Every code point not in `ranges`, surrogates excluded (they have no UTF-8 encoding)."""
    out, prev = [], 0
    for lo, hi in sorted((*ranges, SURROGATES)):
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
SURROGATES = (0xD800, 0xDFFF)


class NFA:
    """Thompson NFA whose edges carry code-point range sets.

    A lookahead is an assertion edge ``state -> (negative, start, final, end)``: crossing it to
    `end` sets an obligation on the rest of the text, to be (or, negative, not to be) in the
    language of the lookahead's own automaton from `start` to `final`. A prefix lookahead's
    `final` loops on every character (it is then `universal`: once reached, the rest matches).
    An ``^`` inside the pattern is an edge in `at_start`, which only the start's closure takes.
    """

    def __init__(self, pattern: str, limits: CompileLimits, lookaheads: Sequence[Lookahead] = ()):
        self.eps: list[list[int]] = []
        self.edges: list[list[tuple[CodeRanges, int]]] = []
        self.pattern = pattern
        self.limits = limits
        self.lookaheads = lookaheads
        self.asserts: dict[int, list[tuple[bool, int, int, int]]] = {}
        self.universal: set[int] = set()
        self.at_start: dict[int, list[int]] = {}  # ``^`` inside the pattern: first closure only
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
            marks = {c for c in node.chars if c == START_MARKER or lookahead_index(c) is not None}
            if marks:  # (?:^|a|b) may reach here as one group: each mark its own branch
                if node.negated:
                    raise RegexError("a lookahead or anchor inside [^...]", self.pattern)
                end = self.new()
                for c in sorted(marks):
                    self.eps[self._zero_width(start, c)].append(end)
                if len(node.chars) > len(marks):
                    rest = _CharGroup(frozenset(node.chars - marks), False)
                    self.eps[self.build(rest, start)].append(end)
                return end
            ranges = _ranges_of(node.chars)
            ranges = self._ranges[key] = _complement(ranges) if node.negated else ranges
            return self._edge(start, ranges)
        name = type(node).__name__
        if name == "__DotCls":
            return self._edge(start, _complement(_NEWLINE))
        if name == "__EmptyCls":
            return start
        raise RegexError(f"unsupported regex construct {name}", self.pattern)

    def _zero_width(self, start: int, mark: str) -> int:
        """The end of an anchor ``^`` or lookahead `mark` crossed from `start`."""
        if mark == START_MARKER:
            end = self.new()
            self.at_start.setdefault(start, []).append(end)
            return end
        return self._assertion(start, lookahead_index(mark))

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


def atoms_of(nfa: NFA) -> tuple[list[tuple[int, int]], list[list[tuple[range, int]]]]:
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


def closure_of(nfa: NFA):
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
                if work > CHECK_EVERY:
                    limits.check(len(seen) * SET_ENTRY_BYTES, work)
                    work = 0
            limits.did(work)
            got = closures[q] = frozenset(seen)
            limits.charge(len(got) * SET_ENTRY_BYTES)
        return got

    return closure
