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
        priority = [table[i].priority for i in ids]
        start = tuple(d.start for d in dfas)
        sizes = [d.n_states for d in dfas]
        radix = None
        if float(np.prod(sizes, dtype=float)) < 2**62:
            radix = np.cumprod([1, *sizes[:-1]]).astype(np.int64)
        index = {start: 1}
        order = [start]
        rows: list[np.ndarray] = [np.zeros(256, dtype=np.int32)]
        tag_index: dict[frozenset[int], int] = {frozenset(): 0}
        self.tag_sets: list[frozenset[int]] = [frozenset()]
        tags = [0]
        done = 0
        while done < len(order):
            current = order[done]
            done += 1
            ends = [k for k, (d, s) in enumerate(zip(dfas, current)) if d.accepting[s]]
            if ends:
                best = max(priority[k] for k in ends)
                ended = frozenset(ids[k] for k in ends if priority[k] == best)
                tags.append(tag_index.setdefault(ended, len(tag_index)))
                if tags[-1] == len(self.tag_sets):
                    self.tag_sets.append(ended)
            else:
                tags.append(0)
            if not dfas:  # nothing can follow: the start state is dead-ended
                rows.append(np.zeros(256, dtype=np.int32))
                continue
            nexts = np.stack([d.transitions[s] for d, s in zip(dfas, current)], axis=1)  # (256, k)
            if len(dfas) == 1:
                distinct, inverse = np.unique(nexts[:, 0], return_inverse=True)
                distinct = distinct[:, None]
            else:  # one int64 key per byte: the components' states in mixed radix
                keys = (nexts * radix).sum(axis=1) if radix is not None else None
                if keys is not None:
                    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
                    distinct = nexts[first]
                else:
                    distinct, inverse = np.unique(nexts, axis=0, return_inverse=True)
            targets = np.zeros(len(distinct), dtype=np.int32)
            for j, combo in enumerate(map(tuple, distinct.tolist())):
                if not any(combo):
                    continue
                state = index.get(combo)
                if state is None:
                    if len(order) >= MAX_LEXER_STATES:
                        names = ", ".join(table[i].name for i in ids)
                        raise GrammarError(
                            f"the lexer for terminals {names} exceeds {MAX_LEXER_STATES} states"
                        )
                    state = index[combo] = len(order) + 1
                    order.append(combo)
                targets[j] = state
            rows.append(targets[inverse.ravel()])
        self.transitions = np.stack(rows).astype(np.int32)
        # states where a single lexeme is still possible behave exactly like that lexeme's DFA
        self.single: list[tuple[int, int] | None] = [None]
        for combo in order:
            alive = [(ids[k], c) for k, c in enumerate(combo) if c]
            self.single.append(alive[0] if len(alive) == 1 else None)
        self.index = index
        self.tag = np.array(tags, dtype=np.int32)
        self.start = 1
        self._rows: list[list[int] | None] = [None] * len(self.transitions)

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
