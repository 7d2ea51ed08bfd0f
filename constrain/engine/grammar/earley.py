"""An Earley parser over lexemes whose charts are interned, so parser states are shared.

Every context-free grammar works: ambiguous, left- or right-recursive, with empty rules
(nullable symbols are handled by advancing over them at prediction time, after Aycock and
Horspool, so completion never needs to look back into the set being built).

A `ChartNode` is one Earley set together with everything before it that can still matter: its
items are ``(dotted_rule, origin)`` where `origin` is the `ChartNode` the item started in (None
meaning the node itself). A node's future depends only on its items and, recursively, on its
origins, so two nodes with equal items are interchangeable. Nodes are therefore *interned*:
scanning builds the item set and returns the existing node when one is equal. Consequences:

* parser states are position-free: the same nesting in two places, or in two sequences, is the
  same node, and everything cached on a node (its scans, its lexer, the masks keyed by it) is
  reused;
* a sequence's parse is a path of nodes, so rollback is popping and fork is copying pointers.

Building a node burns the active fuel (`constrain.fuel`): a unit per item, before the node is
interned, so a parse stopped by its fuel leaves no half-built node behind.

Memory is bounded: once the interned nodes hold `max_items` items, the parser forgets them
(the intern table and the scans remembered since it last forgot), so what it keeps no longer
grows with every state ever visited. Nodes still in use stay valid and rebuild their scans on
demand; a node equal to a forgotten one may then be built again, a duplicate that costs cache
misses, never a different answer.

The native parser (`native/earley.hpp`, through `constrain.engine.grammar.native_chart`) runs
these same dotted rules (`dotted_rules`) and builds the same nodes, item for item; this one
stays the reference.

Invariant: every nonterminal is productive (`GrammarIR.validated` prunes the rest), so every item
in a node can be completed and a node with items always has a continuation in the language.
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

from constrain.engine.grammar.ir import GrammarIR, derivable
from constrain.fuel import burn

__all__ = ["ChartNode", "DottedRules", "EarleyParser", "dotted_rules", "items_waiting"]

_SUPER_START = "$start"
_SERIALS = itertools.count()
MAX_ITEMS_HELD = 1 << 18  # items in interned nodes before the parser forgets them (~25 MB)
_ITEM_BYTES, _NODE_BYTES = 112, 640  # an interned item (a tuple); a node (sets, dicts)


class DottedRules(NamedTuple):
    """A grammar as dotted rules: what both parsers (this one and the native one) run."""

    next_sym: tuple[int | None, ...]  # per dotted rule: nonterminal id >= 0, ~lexeme id, None
    lhs: tuple[int, ...]  # per dotted rule: its rule's nonterminal
    first_dotted: tuple[tuple[int, ...], ...]  # per nonterminal: its rules' first dotted rules
    nullable: tuple[bool, ...]  # per nonterminal: derives the empty text
    start: int  # the nonterminal the root predicts ("$start")


def dotted_rules(ir: GrammarIR, lexeme_ids: dict[str, int]) -> DottedRules:
    """`ir`'s rules after a super start rule, numbered by dotted position (lexemes by
    `lexeme_ids`); "$start -> start ." is dotted rule 1."""
    nts = sorted(ir.nonterminals() | {_SUPER_START})
    nt_id = {n: i for i, n in enumerate(nts)}
    rules = [(_SUPER_START, (ir.start,)), *ir.rules]
    next_sym: list[int | None] = []
    lhs_of: list[int] = []
    first_dotted: dict[int, list[int]] = {i: [] for i in range(len(nts))}
    code = {**{name: ~i for name, i in lexeme_ids.items()}, **nt_id}  # a symbol's number
    for lhs, rhs in rules:
        burn(1 + len(rhs))  # the active fuel: a unit per dotted rule
        a = nt_id[lhs]
        first_dotted[a].append(len(next_sym))
        next_sym.extend([code[sym] for sym in rhs])
        next_sym.append(None)
        lhs_of.extend([a] * (len(rhs) + 1))
    found = derivable(rules, ())
    # tuples of ints, which the garbage collector untracks (lists it traverses at every
    # full collection: for large grammars, pauses of hundreds of milliseconds)
    return DottedRules(
        tuple(next_sym),
        tuple(lhs_of),
        tuple(tuple(first_dotted[a]) for a in range(len(nts))),
        tuple(name in found for name in nts),
        nt_id[_SUPER_START],
    )


class ChartNode:
    """One interned Earley set (see the module docstring)."""

    __slots__ = (
        "items", "expected", "accepts", "scans", "lexer_start", "serial", "_waiting", "__weakref__"
    )  # fmt: skip

    def __init__(self, items: tuple, expected: frozenset[int], accepts: bool):
        self.items = items
        self.serial = next(_SERIALS)  # never reused: names the node in memos that outlive it
        self.expected = expected  # lexeme ids the parser can scan next
        self.accepts = accepts  # the text so far is a sentence
        self.scans: dict[frozenset[int], ChartNode | None] = {}  # cache of scan(tags)
        self.lexer_start: int | None = None  # where the next lexemes start (set by the automaton)
        self._waiting: dict[int, list[tuple[int, ChartNode | None]]] | None = None

    def __repr__(self) -> str:
        return f"ChartNode(items={len(self.items)}, expected={sorted(self.expected)}, accepts={self.accepts})"


class EarleyParser:
    """The grammar compiled to dotted rules; builds and interns `ChartNode`s."""

    def __init__(self, rules: DottedRules):
        self.max_items = MAX_ITEMS_HELD
        self.items_held = 0  # items in the interned nodes
        self.forgotten = 0  # times the interned nodes were forgotten
        self._scanned: list[ChartNode] = []  # nodes whose scans were filled since then
        self.next_sym = rules.next_sym
        self.lhs = rules.lhs
        self.accept_item = 1  # "$start -> start ." is the second dotted rule
        self.nullable = rules.nullable
        # everything predicting nonterminal A adds: its items (all with origin None, i.e. the
        # node itself, as dict keys so a closure merges them in one update) and nonterminals;
        # computed on first use (a left-nested chain of n rules has closures of total size n^2)
        self._first_dotted = rules.first_dotted
        self._predict: list[tuple[dict[tuple, None], frozenset[int]] | None] = [None] * len(
            rules.nullable
        )
        self._interned: dict[frozenset, ChartNode] = {}
        self.root = self._close([], predict=rules.start)

    @property
    def n_nodes(self) -> int:
        return len(self._interned)

    @property
    def nbytes(self) -> int:
        """The memory held (an estimate): its interned nodes, their items and the rules."""
        return (
            self.items_held * _ITEM_BYTES + len(self._interned) * _NODE_BYTES
            + len(self.next_sym) * 24
        )  # fmt: skip

    def waiting(self, node: ChartNode) -> dict[int, list[tuple[int, ChartNode | None]]]:
        """The items of `node` grouped by the nonterminal after their dot."""
        return items_waiting(node, self.next_sym)

    def scan(self, node: ChartNode, lexemes: frozenset[int]) -> ChartNode | None:
        """The node after scanning one of `lexemes` at `node` (None if none can be scanned).

        Scanning several lexemes at once covers texts that match more than one terminal.
        """
        try:
            return node.scans[lexemes]
        except KeyError:
            pass
        wanted = {~i for i in lexemes}
        next_sym = self.next_sym
        kernel = [(d + 1, node if o is None else o) for d, o in node.items if next_sym[d] in wanted]
        result = self._close(kernel) if kernel else None
        if not node.scans:  # (after `_close`, which may forget)
            self._scanned.append(node)
        node.scans[lexemes] = result
        return result

    def _close(self, kernel: list, predict: int | None = None) -> ChartNode:
        next_sym, lhs, nullable = self.next_sym, self.lhs, self.nullable
        items: dict[tuple, None] = {}
        predicted: set[int] = set()
        agenda = list(kernel)
        if predict is not None:
            self._add_prediction(predict, items, predicted)
        while agenda:
            item = agenda.pop()
            if item in items:
                continue
            burn(1)  # the active fuel: a unit per item
            items[item] = None
            d, origin = item
            sym = next_sym[d]
            if sym is None:  # complete: advance the items of the origin waiting for lhs
                for d2, o2 in items_waiting(origin, next_sym).get(lhs[d], ()):
                    agenda.append((d2 + 1, origin if o2 is None else o2))
            elif sym >= 0:
                if sym not in predicted:
                    self._add_prediction(sym, items, predicted)
                if nullable[sym]:
                    agenda.append((d + 1, origin))
        burn(1 + len(kernel))
        key = frozenset(items)
        node = self._interned.get(key)
        if node is None:
            if self.items_held + len(items) > self.max_items:
                self._forget()
            self.items_held += len(items)
            expected = frozenset(
                ~next_sym[d] for d, _ in items if next_sym[d] is not None and next_sym[d] < 0
            )
            accepts = any(d == self.accept_item for d, _ in items)
            node = self._interned[key] = ChartNode(tuple(items), expected, accepts)
        return node

    def __del__(self) -> None:
        # nodes refer to each other in cycles (a node's scans lead to nodes whose items point
        # back to it as their origin): cut them, so the nodes are freed now by reference
        # counting, not later by a full collection inside whichever mask it interrupts
        self._drop_scans()

    def _drop_scans(self) -> None:
        """Empty every node's scans filled since the last time (old nodes' too)."""
        for node in self._scanned:
            node.scans = {}
        self._scanned = []

    def _forget(self) -> None:
        """Drop the interned nodes and the scans remembered (see the module docstring)."""
        self._drop_scans()
        self._interned = {}
        self.items_held = 0
        self.forgotten += 1

    def _add_prediction(self, a: int, items: dict, predicted: set[int]) -> None:
        found = self._predict[a]
        if found is None:
            found = self._predict[a] = self._prediction(a)
        added, nts = found
        items.update(added)
        predicted |= nts

    def _prediction(self, a: int) -> tuple[dict[tuple, None], frozenset[int]]:
        """The items predicting nonterminal `a` adds, with the nullable ones advanced over, and
        the nonterminals it predicts."""
        items, predicted, stack = [], {a}, [a]
        while stack:
            first = self._first_dotted[stack.pop()]
            burn(1 + len(first))  # a unit per item (as it is added, so the work can stop)
            for d in first:
                while True:
                    items.append(d)
                    sym = self.next_sym[d]
                    if sym is None or sym < 0:
                        break
                    if sym not in predicted:
                        predicted.add(sym)
                        stack.append(sym)
                    if not self.nullable[sym]:
                        break
                    d += 1
        return dict.fromkeys((d, None) for d in items), frozenset(predicted)


def items_waiting(node: ChartNode, next_sym: list) -> dict[int, list]:
    """Items of `node` grouped by the nonterminal after their dot (built on first use)."""
    waiting = node._waiting
    if waiting is None:
        waiting = {}
        for d, o in node.items:
            sym = next_sym[d]
            if sym is not None and sym >= 0:
                waiting.setdefault(sym, []).append((d, o))
        node._waiting = waiting
    return waiting
