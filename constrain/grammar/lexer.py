"""The lexer: one byte DFA for a set of lexemes that may come next, with longest-match semantics.

For the set of lexemes the parser allows at a point (plus the ignored ones), `LexerDFA` is the
product of their byte DFAs, built once per distinct set and cached by the grammar. A product
state is the tuple of the component states; it is dead when every component is dead, so every
non-dead state can still complete some lexeme (the components are live DFAs).

Longest match: while some lexeme can consume the next byte, the lexer consumes it; a lexeme ends
only when no allowed lexeme can go on. Each state therefore carries the *tag*: the lexemes that
end there if the next byte cannot be consumed, filtered to the highest priority among them.
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
        transitions: int32 (n_states, 256).
        tag: int32 (n_states,): index into `tag_sets` of the lexemes ending here (0: none).
        tag_sets: frozensets of lexeme ids; ``tag_sets[0]`` is empty.
    """

    def __init__(self, uid: int, lexeme_ids: frozenset[int], table: list[Lexeme]):
        self.uid = uid
        self.lexemes = lexeme_ids
        ids = sorted(lexeme_ids)
        dfas = [table[i].dfa for i in ids]
        names = [table[i].name for i in ids]
        for attempt in range(_HASH_ATTEMPTS):  # (n_states, k), row 0 dead
            try:
                combos = self._explore(dfas, names)
                break
            except _HashCollision:
                if attempt == _HASH_ATTEMPTS - 1:
                    raise GrammarError(
                        f"the lexer for terminals {', '.join(names)}: "
                        "hash collisions in every attempt"
                    ) from None
        k = len(dfas)
        # tags: the lexemes accepting in each state, filtered to the highest priority among them
        accepting = np.zeros(combos.shape, dtype=bool)
        for j, dfa in enumerate(dfas):
            accepting[:, j] = dfa.accepting[combos[:, j]]
        priority = np.array([table[i].priority for i in ids], dtype=np.int64).reshape(1, k)
        lowest = np.iinfo(np.int64).min
        best = np.where(accepting, priority, lowest).max(axis=1, initial=lowest)
        ending = accepting & (priority == best[:, None])
        # the dead row 0 ends nothing, so the all-False pattern exists and sorts first: tag 0
        patterns, tag = np.unique(ending, axis=0, return_inverse=True)
        self.tag = tag.ravel().astype(np.int32)
        self.tag_sets = [frozenset(ids[j] for j in np.flatnonzero(row)) for row in patterns]
        # states where a single lexeme is still possible behave exactly like that lexeme's DFA
        alive = combos != 0
        self.single: list[tuple[int, int] | None] = [None] * len(combos)
        for state in np.flatnonzero(alive.sum(axis=1) == 1).tolist():
            j = int(np.argmax(alive[state]))
            self.single[state] = (ids[j], int(combos[state, j]))
        self._combos = combos
        self._index: dict[tuple[int, ...], int] | None = None
        self.start = 1
        self._rows: list[list[int] | None] = [None] * len(self.transitions)

    def _explore(self, dfas: list, names: list[str]) -> np.ndarray:
        """Build `transitions` breadth first, one vectorised step per level; return the states.

        The step reads one representative byte per class of bytes that every component
        treats alike, and identifies product states by one integer each (exact mixed-radix
        numbers when they fit in 63 bits, else 64-bit hashes checked for collisions)."""
        k = len(dfas)
        if k == 0:  # nothing can follow: a start state with no way out
            self.transitions = np.zeros((2, 256), dtype=np.int32)
            return np.zeros((2, 0), dtype=np.int32)
        classes, representatives = joint_byte_classes(dfas)
        sizes = [d.n_states for d in dfas]
        if float(np.prod(sizes, dtype=float)) < 2**62:
            weights, exact = np.cumprod([1, *sizes[:-1]]).astype(np.int64), True
        else:
            weights, exact = _HASH_WEIGHTS.integers(1, 2**63, size=k, dtype=np.int64) | 1, False
        start = np.array([[d.start for d in dfas]], dtype=np.int32)
        index: dict[int, int] = {int(_numbers(start, weights)[0]): 1}
        combos = [np.zeros((1, k), dtype=np.int32), start]
        rows = [np.zeros((1, len(representatives)), dtype=np.int32)]
        frontier, n_states = start, 2
        while len(frontier):
            # only the components still alive somewhere in the frontier are stepped (after a
            # byte or two most lexemes are dead: a key literal among many)
            alive = np.flatnonzero(frontier.any(axis=0)).tolist()
            nexts = np.zeros((len(frontier), len(representatives), k), dtype=np.int32)
            for j in alive:
                nexts[:, :, j] = dfas[j].transitions[frontier[:, j]][:, representatives]
            flat = nexts.reshape(-1, k)
            numbers, first, inverse = np.unique(
                _numbers(flat[:, alive], weights[alive]), return_index=True, return_inverse=True
            )
            inverse = inverse.ravel()
            if not exact and not np.array_equal(flat[first][inverse], flat):
                raise _HashCollision
            targets = np.zeros(len(numbers), dtype=np.int32)
            fresh = []
            for j, number in enumerate(numbers.tolist()):
                combo = flat[first[j]]
                if not combo.any():
                    continue
                state = index.get(number)
                if state is None:
                    if n_states >= MAX_LEXER_STATES:
                        raise GrammarError(
                            f"the lexer for terminals {', '.join(names)} exceeds {MAX_LEXER_STATES} states"
                        )
                    state = index[number] = n_states
                    n_states += 1
                    fresh.append(combo)
                elif not exact and not np.array_equal(_combo_of(combos, state), combo):
                    raise _HashCollision
                targets[j] = state
            rows.append(targets[inverse].reshape(-1, len(representatives)))
            frontier = np.array(fresh, dtype=np.int32).reshape(-1, k)
            combos.append(frontier)
        self.transitions = np.ascontiguousarray(np.concatenate(rows)[:, classes], dtype=np.int32)
        return np.concatenate(combos)

    def state_of(self, combo: tuple[int, ...]) -> int:
        """The product state whose components are `combo` (e.g. a single lexeme's DFA state)."""
        if self._index is None:
            self._index = {tuple(c): i for i, c in enumerate(self._combos.tolist()) if i}
        return self._index[combo]

    def row(self, state: int) -> list[int]:
        """The transitions of `state` as a Python list (cached: the byte walk's hot path)."""
        row = self._rows[state]
        if row is None:
            row = self._rows[state] = self.transitions[state].tolist()
        return row

    def live_bytes(self, state: int) -> list[int]:
        return np.flatnonzero(self.transitions[state]).tolist()

    def __repr__(self) -> str:
        return f"LexerDFA(lexemes={sorted(self.lexemes)}, states={len(self.transitions)})"


_HASH_WEIGHTS = np.random.default_rng(20240601)  # each draw: new weights for a new attempt
_HASH_ATTEMPTS = 3


class _HashCollision(Exception):
    """Two product states got the same 64-bit number (never seen; handled exactly anyway)."""


def _numbers(combos: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """One integer per product state: a mixed-radix number, or a hash (wrapping arithmetic)."""
    return combos.astype(np.int64) @ weights


def _combo_of(levels: list[np.ndarray], state: int) -> np.ndarray:
    for level in levels:
        if state < len(level):
            return level[state]
        state -= len(level)
    raise IndexError(state)
