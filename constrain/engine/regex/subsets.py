"""Subset construction: an `NFA` to a character DFA over its atoms (`determinize`).

States are subsets of NFA states or, when the pattern has lookaheads or an inner ``^``, subsets
of configurations (NFA state, obligations) that carry each lookahead's automaton along the rest
of the text. The
numbering of the new states and the moves out of a subset check the limits as they grow.
"""

from __future__ import annotations

from constrain.engine.regex._limits import SET_ENTRY_BYTES, CompileLimits
from constrain.engine.regex.budget import CHECK_EVERY
from constrain.engine.regex.nfa import NFA, atoms_of, closure_of

_SUBSET_BYTES = 256  # a DFA state's frozenset, its key in the numbering, its row
_CONFIG_BYTES = 2 * SET_ENTRY_BYTES + 64  # a configuration (state, obligations) in a set


class _Subsets:
    """Numbering of the DFA's states (subsets of NFA states or configurations), with the
    limits checked: the state cap, the deadline, and the memory of the subsets and rows kept."""

    def __init__(self, nfa: NFA, first: frozenset):
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
            if work > CHECK_EVERY:
                limits.check(sum(map(len, moves.values())) * SET_ENTRY_BYTES, work)
                work = 0
    limits.did(work + len(current))
    return moves


def determinize(
    nfa: NFA, start: int, final: int
) -> tuple[list[dict[int, int]], list[bool], list[tuple[int, int]]]:
    """Subset construction. Returns per-state {atom: next state}, accepting flags and the atoms."""
    if nfa.asserts or nfa.at_start:
        return _determinize_with_lookaheads(nfa, start, final)
    atoms, edge_atoms = atoms_of(nfa)
    closure = closure_of(nfa)
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
    nfa: NFA, start: int, final: int
) -> tuple[list[dict[int, int]], list[bool], list[tuple[int, int]]]:
    """Subset construction over configurations ``(NFA state, obligations)``.

    An obligation ``(negative, final, states)`` is a lookahead's automaton run on the text read
    since its assertion: the rest of the text must (negative: must not) take it from `states`
    to `final`. It is settled early when its states die (a positive one fails, a negative one
    holds) or reach a universal final (the reverse); a configuration whose obligation fails is
    dropped. At the end of the text a configuration accepts when its NFA state is final and
    each obligation's states hold `final` exactly when it is positive.
    """
    atoms, edge_atoms = atoms_of(nfa)
    closure = closure_of(nfa)
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

    def close(q: int, obligations: frozenset, first: bool = False) -> frozenset:
        """The closure of a configuration; `first`: the start's, which takes inner ``^``."""
        key = (q, obligations, first)
        got = closes.get(key)
        if got is None:
            seen: set = set()
            stack = [(q, obligations)]
            while stack:
                config = stack.pop()
                if config in seen:
                    continue
                seen.add(config)
                p, held = config
                stack.extend((r, held) for r in nfa.eps[p])
                if first:
                    stack.extend((r, held) for r in nfa.at_start.get(p, ()))
                for negative, sub_start, sub_final, end in nfa.asserts.get(p, ()):
                    settled = settle(negative, sub_final, closure(sub_start))
                    if settled is not False:
                        stack.append((end, held if settled is True else held | {settled}))
                if len(seen) % CHECK_EVERY == 0:
                    limits.check(len(seen) * _CONFIG_BYTES, CHECK_EVERY)
            got = closes[key] = frozenset(seen)
            limits.charge(len(got) * _CONFIG_BYTES)
        return got

    def accepts(config) -> bool:
        q, obligations = config
        return q == final and all((end in states) != neg for neg, end, states in obligations)

    subsets = _Subsets(nfa, close(start, frozenset(), first=True))
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
                if work > CHECK_EVERY:
                    limits.check(sum(map(len, moves.values())) * SET_ENTRY_BYTES, work)
                    work = 0
        limits.did(work + len(current))
        row = {a: subsets.id(frozenset(configs)) for a, configs in moves.items() if configs}
        table.append(row)
        accepting.append(any(accepts(c) for c in current))
    return table, accepting, atoms
