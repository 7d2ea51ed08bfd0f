"""UTF-8 lowering: a minimal character DFA over code-point atoms to a byte DFA (`to_bytes`).

Each code-point range becomes byte-range sequences (the UTF-8 text itself, or the text as it
stands between the quotes of a JSON string), and intermediate states are interned by the
structure that remains, so "any continuation byte, then state t" exists once and the expansion
of a minimal character DFA is minimal over bytes.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from constrain.engine.regex._limits import CompileLimits
from constrain.engine.regex._utf8 import json_sequences, utf8_sequences
from constrain.engine.regex.bytedfa import DEAD, ByteDFA

_BYTE_STATE_BYTES = 256 * 4 + 256  # a row of the byte DFA and its edges while expanding


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


def to_bytes(
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
