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
        self._priority = np.array([table[i].priority for i in self._ids], dtype=np.int64)
        k = len(self._dfas)
        if k:
            self.classes, self._representatives = joint_byte_classes(self._dfas)
        else:
            self.classes, self._representatives = np.zeros(256, np.int64), np.zeros(1, np.int64)
        sizes = [d.n_states for d in self._dfas]
        self._exact = float(np.prod(sizes, dtype=float)) < 2**62
        if self._exact:  # mixed-radix numbers identify product states exactly
            self._weights = np.cumprod([1, *sizes]).astype(np.int64)[:k]
        else:  # 64-bit hashes group a batch; states are still keyed by their exact components
            self._weights = np.random.default_rng(20240601).integers(1, 2**63, k, dtype=np.int64)
        n_classes = len(self._representatives)
        self._combos = np.zeros((16, k), dtype=np.int32)
        self._table = np.zeros((16, n_classes), dtype=np.int32)  # per byte class
        self._done = np.zeros(16, dtype=bool)
        self._done[0] = True  # the dead state stays dead
        self.tag = np.zeros(16, dtype=np.int32)
        self.tag_sets: list[frozenset[int]] = [frozenset()]
        self._tag_of: dict[bytes, int] = {bytes(-(-k // 8)): 0}  # packed ending pattern -> tag
        self.single: list[tuple[int, int] | None] = [None]
        # the numbers of the states found so far, sorted, and their states (vectorised lookup)
        self._known = np.zeros(1, dtype=np.int64)  # the dead state's number is 0
        self._known_states = np.zeros(1, dtype=np.int32)
        self._rows: list[list[int] | None] = [None]
        self.n_states = 1
        self.start = 1
        self._add(np.array([[d.start for d in self._dfas]], dtype=np.int32))

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
            self._ensure(np.array([state]))
            row = self._rows[state] = self._table[state][self.classes].tolist()
        return row

    def live_bytes(self, state: int) -> list[int]:
        return [b for b, t in enumerate(self.row(state)) if t]

    def state_of(self, combo: tuple[int, ...]) -> int:
        """The product state whose components are `combo` (e.g. a single lexeme's DFA state)."""
        return int(self._states_of(np.array([combo], dtype=np.int32))[0])

    # -- construction -------------------------------------------------------------------------

    def _ensure(self, states: np.ndarray) -> None:
        """Compute the rows of those `states` not computed yet, in one vectorised step."""
        todo = states[~self._done[states]]
        if not len(todo):
            return
        todo = np.unique(todo)
        self._done[todo] = True
        if not self._dfas:  # no lexeme: nothing can follow
            return
        combos = self._combos[todo]
        alive = np.flatnonzero(combos.any(axis=0))  # components alive somewhere in the batch
        reps = self._representatives
        flat = np.empty((len(todo), len(reps), len(alive)), dtype=np.int32)
        for i, j in enumerate(alive.tolist()):
            flat[:, :, i] = self._dfas[j].transitions[combos[:, j]][:, reps]
        flat = flat.reshape(-1, len(alive))
        numbers = flat.astype(np.int64) @ self._weights[alive]
        _, first, inverse = np.unique(numbers, return_index=True, return_inverse=True)
        inverse = inverse.ravel()
        if not self._exact and not np.array_equal(flat[first][inverse], flat):
            _, first, inverse = np.unique(flat, axis=0, return_index=True, return_inverse=True)
            inverse = inverse.ravel()
        distinct = np.zeros((len(first), combos.shape[1]), dtype=np.int32)
        distinct[:, alive] = flat[first]
        targets = self._states_of(distinct)
        self._table[todo] = targets[inverse].reshape(len(todo), len(reps))

    def _states_of(self, combos: np.ndarray) -> np.ndarray:
        """The states of distinct `combos` (0 for the dead one), numbering the new ones."""
        numbers = combos.astype(np.int64) @ self._weights
        at = np.searchsorted(self._known, numbers)
        at = np.minimum(at, len(self._known) - 1)
        states = np.where(self._known[at] == numbers, self._known_states[at], -1)
        found = states > 0
        if not self._exact and not np.array_equal(self._combos[states[found]], combos[found]):
            raise GrammarError(f"the lexer for terminals {', '.join(self._names)}: a hash collision")
        states[~combos.any(axis=1)] = 0
        fresh = states < 0
        if fresh.any():
            states[fresh] = self._add(combos[fresh])
        return states.astype(np.int32)

    def _add(self, combos: np.ndarray) -> np.ndarray:
        """Number new product states; their tags and single-lexeme views with them."""
        n = len(combos)
        first = self.n_states
        if first + n > MAX_LEXER_STATES:
            raise GrammarError(
                f"the lexer for terminals {', '.join(self._names)} exceeds {MAX_LEXER_STATES} "
                "states"
            )
        self._grow(first + n)
        ids = np.arange(first, first + n, dtype=np.int32)
        self._combos[ids] = combos
        numbers = np.concatenate([self._known, combos.astype(np.int64) @ self._weights])
        order = np.argsort(numbers, kind="stable")
        self._known = numbers[order]
        self._known_states = np.concatenate([self._known_states, ids])[order]
        # tags: the lexemes accepting there, filtered to the highest priority among them
        accepting = np.zeros(combos.shape, dtype=bool)
        for j in np.flatnonzero(combos.any(axis=0)).tolist():
            accepting[:, j] = self._dfas[j].accepting[combos[:, j]]
        lowest = np.iinfo(np.int64).min
        ranked = np.where(accepting, self._priority[None, :], lowest)
        best = ranked.max(axis=1, initial=lowest)
        ending = accepting & (ranked == best[:, None])
        for i, pattern in enumerate(np.packbits(ending, axis=1)):
            key = pattern.tobytes()
            tag = self._tag_of.get(key)
            if tag is None:
                tags = frozenset(self._ids[j] for j in np.flatnonzero(ending[i]).tolist())
                tag = self._tag_of[key] = len(self.tag_sets)
                self.tag_sets.append(tags)
            self.tag[first + i] = tag
        alive = combos != 0
        lone = alive.sum(axis=1) == 1
        which = alive.argmax(axis=1) if alive.shape[1] else np.zeros(n, dtype=np.int64)
        self.single.extend(
            (self._ids[j], int(combos[i, j])) if one else None
            for i, (one, j) in enumerate(zip(lone.tolist(), which.tolist()))
        )
        self._rows.extend([None] * n)
        self.n_states += n
        return ids

    def _grow(self, needed: int) -> None:
        size = len(self._done)
        if needed <= size:
            return
        while size < needed:
            size *= 2
        for name in ("_combos", "_table", "_done", "tag"):
            old = getattr(self, name)
            new = np.zeros((size, *old.shape[1:]), dtype=old.dtype)
            new[: len(old)] = old
            setattr(self, name, new)

    def __repr__(self) -> str:
        return f"LexerDFA(lexemes={sorted(self.lexemes)}, states={self.n_states})"
