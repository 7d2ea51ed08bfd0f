"""The lexer: one byte DFA for a set of lexemes that may come next, with longest-match semantics.

For the set of lexemes the parser allows at a point (plus the ignored ones), `LexerDFA` is the
product of their byte DFAs, one per distinct set, cached by the grammar. A product state is the
tuple of the component states; it is dead when every component is dead, so every non-dead state
can still complete some lexeme (the components are live DFAs).

Longest match: while some lexeme can consume the next byte, the lexer consumes it; a lexeme ends
only when no allowed lexeme can go on. Each state therefore carries the *tag*: the lexemes that
end there if the next byte cannot be consumed, filtered to the highest priority among them.

Lazy construction. A JSON Schema grammar has a distinct lexeme set at nearly every object
position (the keys still allowed), and a full product costs tens of milliseconds while a mask
walk reads a few dozen of its states. So a state's row of transitions is computed the first
time it is read (`rows`, `next_states`, `row`), for all states asked at once: one vectorised
step over the byte classes of the components still alive, new states numbered as they appear.
"""

from __future__ import annotations

import numpy as np

from constrain.errors import GrammarError
from constrain.grammar.ir import Lexeme
from constrain.regex.dfa import joint_byte_classes

__all__ = ["LexerDFA"]

MAX_LEXER_STATES = 50_000


class LexerDFA:
    """Product byte DFA of several lexemes (state 0 dead, start 1) with end-of-lexeme tags.

    A product state is kept *sparse*: the pairs ``(component, its DFA state)`` of the lexemes
    still alive, so after a byte or two (when most lexemes are dead) a row costs a few lookups.

    Attributes:
        lexemes: the lexeme ids (indices in the grammar's lexeme table) it recognizes.
        tag: int32 per state discovered so far: index into `tag_sets` of the lexemes ending
            there (0: none). Read it afresh after stepping: it grows with the states.
        tag_sets: frozensets of lexeme ids; ``tag_sets[0]`` is empty.
        single: per state, ``(lexeme id, its DFA state)`` when only one lexeme is still possible
            there (the state then behaves exactly like that lexeme's DFA), else None.
    """

    def __init__(self, uid: int, lexeme_ids: frozenset[int], table: list[Lexeme]):
        self.uid = uid
        self.lexemes = lexeme_ids
        self._ids = sorted(lexeme_ids)
        self._dfas = [table[i].dfa for i in self._ids]
        self._names = [table[i].name for i in self._ids]
        self._priority = [table[i].priority for i in self._ids]
        if self._dfas:
            self.classes, representatives = joint_byte_classes(self._dfas)
        else:
            self.classes, representatives = np.zeros(256, np.int64), np.zeros(1, np.int64)
        self._representatives = representatives.tolist()
        self._table = np.zeros((16, len(self._representatives)), dtype=np.int32)  # per class
        self._done = [True]  # row computed (the dead state's is)
        self.tag = np.zeros(16, dtype=np.int32)
        self.tag_sets: list[frozenset[int]] = [frozenset()]
        self._tag_of: dict[frozenset[int], int] = {frozenset(): 0}
        self.single: list[tuple[int, int] | None] = [None]
        self._combos: list[tuple] = [()]  # per state: ((component, DFA state), ...) alive
        self._index: dict[tuple, int] = {(): 0}
        self._rows: list[list[int] | None] = [None]
        self._keys: list[tuple | None] = [()]
        start = tuple((j, d.start) for j, d in enumerate(self._dfas))
        # no lexeme at all: a start state of its own that reads nothing
        self.start = self._state(start or ((-1, 0),))

    @property
    def n_states(self) -> int:
        return len(self._combos)

    # -- reading transitions ------------------------------------------------------------------

    def rows(self, states: np.ndarray) -> np.ndarray:
        """The transitions of `states`, (len, 256)."""
        self._ensure(states)
        return self._table[states][:, self.classes]

    def next_states(self, states: np.ndarray, data: np.ndarray) -> np.ndarray:
        """The state after byte `data[i]` from `states[i]` (0: dead), elementwise."""
        self._ensure(states)
        return self._table[states, self.classes[data]]

    def row(self, state: int) -> list[int]:
        """The transitions of `state` as a Python list (cached: the byte walk's hot path)."""
        row = self._rows[state]
        if row is None:
            if not self._done[state]:
                self._compute(state)
            row = self._rows[state] = self._table[state][self.classes].tolist()
        return row

    def live_bytes(self, state: int) -> list[int]:
        return [b for b, t in enumerate(self.row(state)) if t]

    def key(self, state: int) -> tuple:
        """What `state` is, independent of this lexer: the (lexeme id, DFA state) pairs still
        alive. Lexers for different sets that reach the same pairs behave alike from there, so
        results keyed by it (masks pieces, slice checks) are shared between them."""
        found = self._keys[state]
        if found is None:
            found = self._keys[state] = tuple(
                (self._ids[j], s) for j, s in self._combos[state] if j >= 0
            )
        return found

    def state_of(self, combo: tuple[int, ...]) -> int:
        """The product state whose components are `combo` (e.g. a single lexeme's DFA state)."""
        return self._state(tuple((j, s) for j, s in enumerate(combo) if s))

    # -- construction -------------------------------------------------------------------------

    def _ensure(self, states: np.ndarray) -> None:
        done = self._done
        for state in set(states.tolist()):
            if not done[state]:
                self._compute(state)

    def _compute(self, state: int) -> None:
        """The row of `state`: for each byte class, the components that can read it."""
        combo = self._combos[state]
        rows = [(j, self._dfas[j]._row(s)) for j, s in combo if j >= 0]
        out = [0] * len(self._representatives)
        for c, byte in enumerate(self._representatives):
            nxt = tuple((j, t) for j, row in rows if (t := row[byte]))
            if nxt:
                found = self._index.get(nxt)
                out[c] = found if found is not None else self._state(nxt)
        self._table[state] = out
        self._done[state] = True

    def _state(self, combo: tuple) -> int:
        """The number of product state `combo`, added (with its tag) if new."""
        found = self._index.get(combo)
        if found is not None:
            return found
        state = len(self._combos)
        if state >= MAX_LEXER_STATES:
            raise GrammarError(
                f"the lexer for terminals {', '.join(self._names)} exceeds {MAX_LEXER_STATES} "
                "states"
            )
        if state >= len(self.tag):
            self._grow(2 * len(self.tag))
        self._index[combo] = state
        self._combos.append(combo)
        self._done.append(False)
        self._rows.append(None)
        self._keys.append(None)
        # the lexemes that end here, filtered to the highest priority among them
        ending = [j for j, s in combo if s and self._dfas[j].accepting[s]]
        if ending:
            best = max(self._priority[j] for j in ending)
            tags = frozenset(self._ids[j] for j in ending if self._priority[j] == best)
            tag = self._tag_of.get(tags)
            if tag is None:
                tag = self._tag_of[tags] = len(self.tag_sets)
                self.tag_sets.append(tags)
            self.tag[state] = tag
        lone = len(combo) == 1 and combo[0][0] >= 0
        self.single.append((self._ids[combo[0][0]], combo[0][1]) if lone else None)
        return state

    def _grow(self, size: int) -> None:
        for name in ("_table", "tag"):
            old = getattr(self, name)
            new = np.zeros((size, *old.shape[1:]), dtype=old.dtype)
            new[: len(old)] = old
            setattr(self, name, new)

    def __repr__(self) -> str:
        return f"LexerDFA(lexemes={sorted(self.lexemes)}, states={self.n_states})"
