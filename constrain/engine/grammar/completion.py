"""Shortest completions of parser states: the fewest bytes that finish a sentence.

A token budget (`Matcher` with ``max_tokens``) needs, for the state after each candidate token,
how much text is still owed. A byte-by-byte search would explore every short continuation of
the text (in a JSON string, every character) before it finds the closing brackets; instead the
answer is read off the grammar's structure.

* Every symbol has a shortest yield: a lexeme the shortest string of its DFA, a nonterminal the
  cheapest of its rules (Knuth's generalised Dijkstra, in time O(size log size) however deep
  the grammar's chains). ``rest[d]`` is the shortest yield of the symbols after the dot of
  dotted rule `d`.
* ``owed(N, A)``: the fewest bytes that finish the sentence once nonterminal `A`, predicted in
  Earley node `N`, has been completed. An item ``(d, o)`` of `N` waiting for `A` moves its dot
  and then owes ``rest[d + 1]`` plus ``owed(o, lhs(d))``. Origins are earlier nodes (a node's
  origins exist before it is built, and interning never makes a cycle), so they are solved
  first; items predicted in `N` itself link nonterminals of the same node, solved together
  by Dijkstra's algorithm.
* A state ``(node, s)`` owes the shortest way to end the lexeme in progress (a search of the
  lexer's DFA from `s`, one answer per set of lexemes that can end it) plus what the node
  reached then owes: the cheapest item ``(d, o)`` with ``rest[d] + owed(o, lhs(d))``.

Gluing shortest yields can lex differently from the derivation (longest match may merge two
lexemes, as in ``None`` ``else``), so every answer is checked by running the automaton over
it; a failed check retries with the shortest ignored text (a space) between lexemes, then
falls back to a bounded breadth-first search over bytes.

A completion longer than `MAX_COMPLETION_BYTES`, or whose derivation takes more than
`MAX_SPELL_STEPS` steps to spell, is not spelled: no budget could hold it (rules that double,
``a2 ::= a1 a1``, reach 2^40 bytes in 40 rules), so the state has no known completion.
"""

from __future__ import annotations

import heapq
import weakref
from collections import deque

import numpy as np

from constrain.engine.automaton import MAX_COMPLETION_BYTES
from constrain.engine.grammar.earley import ChartNode
from constrain.engine.regex import ByteDFA
from constrain.engine.regex.bytedfa import BYTE_PREFERENCE
from constrain.fuel import burn

__all__ = ["MAX_SPELL_STEPS", "Completions", "search_completion"]

MAX_SPELL_STEPS = 2**20  # symbols visited spelling one completion, empty ones included
_INF = float("inf")
_SEARCH_STATES = 4_000  # states the fallback search visits at most
_ENDING_STATES = 4_096  # lexer states a search for a lexeme's endings visits at most
_OWED_KEPT = 2**12  # parser nodes whose answers are remembered
_ENDINGS_KEPT = 2**14  # lexer states whose lexeme endings are remembered
_OWED_NODE_BYTES, _OWED_ENTRY_BYTES = 280, 192  # a node's answers (a dict) and each answer
_ENDINGS_BYTES = 256  # one lexer state's endings (a list of (tag, bytes))


def _shortest(dfa: ByteDFA) -> bytes | None:
    """A shortest text of `dfa`; None when it has none or none within `MAX_COMPLETION_BYTES`
    (a completion through it could not be spelled anyway)."""
    return None if dfa.is_empty() else dfa.shortest_from(dfa.start, MAX_COMPLETION_BYTES)


class Completions:
    """Shortest completions of a `CFGAutomaton`'s states (see the module docstring)."""

    def __init__(self, automaton):
        self._automaton = weakref.ref(automaton)  # its owner (a strong one would be a cycle)
        parser = self._parser = automaton.parser
        self.next_sym, self.lhs = parser.next_sym, parser.lhs
        self.start_nt = parser.lhs[0]
        lexemes = [
            None if lx.special is not None else _shortest(lx.dfa) for lx in automaton.lexeme_table
        ]
        self._lexemes = lexemes
        burn(4 * len(self.next_sym))  # the passes over every dotted rule below
        self._nts, self._rule_of = self._nonterminals()
        self.rest = self._rests()
        ignored = [lexemes[i] for i in automaton.ignore if lexemes[i]]
        self._separator = min(ignored, key=lambda t: (len(t), t != b" ")) if ignored else None
        # per node serial (never reused; holding no node), emptied when full before a solve,
        # never during one (it reads its origins' answers)
        self._owed: dict[int, dict[int, tuple[float, int, int | None]]] = {}
        self._endings: dict[int, list[tuple[int, bytes]]] = {}  # per lexer state, emptied when full

    @property
    def automaton(self):
        return self._automaton()

    @property
    def nbytes(self) -> int:
        """The memory held (an estimate): the tables per dotted rule and the memos."""
        owed = list(self._owed.values())  # a snapshot: another thread may be solving
        rules = (len(self.rest) + len(self._lexemes)) * 32
        memo = len(owed) * _OWED_NODE_BYTES + sum(map(len, owed)) * _OWED_ENTRY_BYTES
        return rules + memo + len(self._endings) * _ENDINGS_BYTES

    # -- symbols ----------------------------------------------------------------------------

    def _cost(self, sym: int, nts: list[float]) -> float:
        if sym >= 0:
            return nts[sym]
        text = self._lexemes[~sym]
        return _INF if text is None else len(text)

    def _rests(self, nts: list[float] | None = None) -> list[float]:
        nts = self._nts if nts is None else nts
        rest = [0.0] * len(self.next_sym)
        for d in range(len(self.next_sym) - 1, -1, -1):
            sym = self.next_sym[d]
            rest[d] = 0.0 if sym is None else self._cost(sym, nts) + rest[d + 1]
        return rest

    def _nonterminals(self) -> tuple[list[float], dict[int, int]]:
        """Shortest yield length of every nonterminal and the rule (first dotted index) giving
        it, by Knuth's generalisation of Dijkstra's algorithm: a rule fires once every
        nonterminal in it is solved, and a nonterminal is solved by the cheapest rule fired
        for it. A rule is chosen only after all its nonterminals were solved, so the chosen
        rules never form a cycle; each rule and occurrence is visited once."""
        next_sym, lhs = self.next_sym, self.lhs
        nts = [_INF] * (max(lhs) + 1)
        rule_of: dict[int, int] = {}
        unsolved: dict[int, int] = {}  # rule -> its nonterminal occurrences not yet solved
        known: dict[int, float] = {}  # rule -> its lexemes' and solved nonterminals' bytes
        uses: dict[int, list[int]] = {}  # nonterminal -> the rules it occurs in, per occurrence
        heap: list[tuple[float, int]] = []
        d0, count, cost = 0, 0, 0.0
        for d, sym in enumerate(next_sym):
            if sym is None:  # the end of rule d0
                burn(1)
                if cost < _INF:
                    unsolved[d0], known[d0] = count, cost
                    if not count:
                        heap.append((cost, d0))
                d0, count, cost = d + 1, 0, 0.0
            elif sym >= 0:
                count += 1
                uses.setdefault(sym, []).append(d0)
            else:
                cost += self._cost(sym, nts)
        heapq.heapify(heap)
        while heap:
            cost, d0 = heapq.heappop(heap)
            a = lhs[d0]
            if a in rule_of:
                continue
            nts[a], rule_of[a] = cost, d0
            found = uses.get(a, ())
            burn(1 + len(found))
            for r in found:
                left = unsolved.get(r)
                if left is None:  # a rule with an impossible lexeme
                    continue
                known[r] += cost
                unsolved[r] = left - 1
                if left == 1 and lhs[r] not in rule_of:
                    heapq.heappush(heap, (known[r], r))
        return nts, rule_of

    def rest_pieces(self, d: int, steps: list[int] | None = None) -> tuple[bytes, ...]:
        """The shortest yield of the symbols after the dot of dotted rule `d`, one piece per
        lexeme (spelled anew each time: as long as the text, so not worth keeping); `steps`
        holds the symbols the completion may still visit (`_TooLong` when none are left;
        default `MAX_SPELL_STEPS`)."""
        steps = [MAX_SPELL_STEPS] if steps is None else steps
        out = []
        stack = [d]  # dotted positions still to spell, innermost last
        left = steps[0]
        while stack:
            left -= 1
            if not left & 1023:
                burn(256)
                if left <= 0:
                    raise _TooLong
            e = stack.pop()
            sym = self.next_sym[e]
            if sym is None:
                continue
            stack.append(e + 1)
            if sym < 0:
                out.append(self._lexemes[~sym])
            else:
                stack.append(self._rule_of[sym])
        burn(1 + len(out) // 4)
        steps[0] = left
        return tuple(out)

    # -- parser nodes -----------------------------------------------------------------------

    def _solve(self, node: ChartNode) -> dict[int, tuple[float, int, int | None]]:
        """``owed(node, A)`` for every A waiting in `node`, origins first: per A, the cost,
        the item's dotted rule and its origin's serial (None: the node itself)."""
        owed = self._owed
        found = owed.get(node.serial)
        if found is not None:
            return found
        if len(owed) >= _OWED_KEPT:
            owed.clear()
        stack, opened = [node], set()
        while stack:  # depth first: a node is solved once all its origins are (a DAG)
            n = stack.pop()
            if n.serial in owed:
                continue
            if n in opened:  # its origins are solved
                owed[n.serial] = self._solve_one(n)
                continue
            opened.add(n)
            stack.append(n)
            burn(1 + len(n.items) // 4)
            stack.extend({o for _, o in n.items if o is not None and o.serial not in owed})
        return owed[node.serial]

    def _solve_one(self, node: ChartNode) -> dict[int, tuple[float, int, int | None]]:
        lhs, rest, owed = self.lhs, self.rest, self._owed
        best: dict[int, tuple[float, int, int | None]] = {}
        inner: dict[int, list[tuple[int, int]]] = {}  # lhs B -> (A waiting, d) predicted here
        heap: list[tuple[float, int]] = []
        for a, waiting in self._parser.waiting(node).items():
            for d, o in waiting:
                b = lhs[d]
                if o is None and b != self.start_nt:
                    inner.setdefault(b, []).append((a, d))
                    continue
                cost = rest[d + 1] + (0.0 if b == self.start_nt else owed[o.serial][b][0])
                if cost < best.get(a, (_INF,))[0]:
                    best[a] = (cost, d, None if o is None else o.serial)
                    heapq.heappush(heap, (cost, a))
        done = set()
        while heap:
            cost, b = heapq.heappop(heap)
            if b in done:
                continue
            done.add(b)
            for a, d in inner.get(b, ()):
                total = rest[d + 1] + cost
                if total < best.get(a, (_INF,))[0]:
                    best[a] = (total, d, None)
                    heapq.heappush(heap, (total, a))
        return best

    def _owed_pieces(self, node: ChartNode, a: int, steps: list[int]) -> list[bytes]:
        out = []
        while True:
            _, d, serial = self._solve(node)[a]
            out += self.rest_pieces(d + 1, steps)
            if self.lhs[d] == self.start_nt:
                return out
            if serial is not None:  # the origin of one of the node's items
                node = next(o for _, o in node.items if o is not None and o.serial == serial)
            a = self.lhs[d]

    def node_completion(self, node: ChartNode) -> tuple[float, list[bytes] | None]:
        """The shortest text that finishes the sentence from `node` (no lexeme in progress),
        as its length and one piece per lexeme (None: there is none, or it is longer than
        `MAX_COMPLETION_BYTES` or takes more than `MAX_SPELL_STEPS` to spell)."""
        self._solve(node)
        best, pick = _INF, None
        for d, o in node.items:
            b = self.lhs[d]
            if b == self.start_nt:
                cost = self.rest[d]
            else:
                entry = self._owed[(node if o is None else o).serial].get(b)
                cost = self.rest[d] + (entry[0] if entry else _INF)
            if cost < best:
                best, pick = cost, (d, o)
        if pick is None or best > MAX_COMPLETION_BYTES:
            return best, None
        d, o = pick
        steps = [MAX_SPELL_STEPS]
        try:
            pieces = list(self.rest_pieces(d, steps))
            if self.lhs[d] != self.start_nt:
                pieces += self._owed_pieces(node if o is None else o, self.lhs[d], steps)
        except _TooLong:
            return best, None
        return best, pieces

    # -- states -----------------------------------------------------------------------------

    def _lexeme_endings(self, s: int) -> list[tuple[int, bytes]]:
        """For the lexeme in progress at lexer state `s`: one shortest way to end it per tag
        (set of lexemes it then matches), found breadth first over the lexer's DFA."""
        lexer = self.automaton.lexer
        found = self._endings.get(s)
        if found is not None:
            return found
        found, tags_seen = [], set()
        parents = {s: None}
        queue = deque([s])
        while queue and len(parents) <= _ENDING_STATES:  # a long literal is not walked whole
            q = queue.popleft()
            burn(4)  # a row of the lexer and its distinct successors
            tag = lexer.tag_of(q)
            if tag and tag not in tags_seen:
                tags_seen.add(tag)
                found.append((tag, _path(parents, q)))
            successors, at = np.unique(
                lexer.rows(np.array([q]))[0, BYTE_PREFERENCE], return_index=True
            )
            for i in np.argsort(at).tolist():  # in the order of their first byte
                t = int(successors[i])
                if t and t not in parents:
                    parents[t] = (q, int(BYTE_PREFERENCE[at[i]]))
                    queue.append(t)
        if len(self._endings) >= _ENDINGS_KEPT:
            self._endings.clear()
        self._endings[s] = found
        return found

    def of(self, state: tuple) -> bytes | None:
        """A shortest completion of `state`, checked against the automaton (glued lexemes that
        longest match would merge are separated by the shortest ignored text, e.g. a space);
        None if none is found."""
        automaton = self.automaton
        node, s = state
        if s == 0:  # no lexeme in progress
            options = [(b"", node)]
        else:
            options = []
            for tag, suffix in self._lexeme_endings(s):
                after = automaton._end(node, automaton.lexer.tag_set(tag))
                if after is not None:
                    options.append((suffix, after))
        best, parts = _INF, None
        for suffix, after in options:
            cost, pieces = self.node_completion(after)
            if len(suffix) + cost < best:
                best, parts = len(suffix) + cost, None
                if pieces is not None:
                    parts = [suffix, *pieces] if s else pieces
        if best > MAX_COMPLETION_BYTES:
            return None  # too long for any budget: not spelled, nor searched
        if parts is not None:
            for glue in (b"", self._separator):
                if glue is None:
                    continue
                text = glue.join(parts)
                burn(1 + len(text))
                end = automaton.step(state, text)
                if end is not None and automaton.accepting(end):
                    return text
        return search_completion(automaton, state)


class _TooLong(Exception):
    """A completion takes more than `MAX_SPELL_STEPS` steps to spell."""


def _path(parents: dict, end) -> bytes:
    out = bytearray()
    link = parents[end]
    while link is not None:
        here, byte = link
        out.append(byte)
        link = parents[here]
    return bytes(reversed(out))


def search_completion(automaton, state, max_states: int = _SEARCH_STATES) -> bytes | None:
    """The shortest bytes taking `state` to acceptance, by breadth-first search through the
    `Automaton` interface; None when none is found within `max_states` states."""
    if automaton.accepting(state):
        return b""
    parents = {state: None}
    queue = deque([state])
    while queue:
        here = queue.popleft()
        burn(8)  # the bytes it expects, each stepped
        for byte in automaton.expected_bytes(here):
            nxt = automaton.step(here, bytes((byte,)))
            if nxt is None or nxt in parents:
                continue
            parents[nxt] = (here, byte)
            if automaton.accepting(nxt):
                return _path(parents, nxt)
            if len(parents) > max_states:
                return None
            queue.append(nxt)
    return None
