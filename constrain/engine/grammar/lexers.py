"""The two lexer engines behind one interface (`ByteLexer`): compiled, or the Python reference.

`NativeLexer` runs the lexer of `constrain.engine.grammar.lexer` in C++ (the extension
`constrain.engine.native`, built by ``pip install -e .``): the same product DFA, tags and
longest-match ends, built lazily in the same way, and the vocabulary trie walk that computes a
mask piece in one depth-first pass. The Python `Lexer` stays the executable specification;
tests hold the two to the same masks.

The engine is chosen per automaton (see `constrain.engine.engines`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import numpy as np

from constrain.engine.cache import BoundedCache
from constrain.engine.engines import resolve_engine
from constrain.engine.grammar.ir import Lexeme
from constrain.engine.grammar.keywords import word_continuations
from constrain.engine.grammar.lexer import (
    COUNTED_ADMITS_PAIRS,
    MAX_LEXER_STATES,
    ByteLexer,
    Lexer,
    Piece,
    outgrows,
)
from constrain.engine.regex import ByteDFA
from constrain.engine.regex.counted import CountedDFA, walk_spec
from constrain.engine.regex.products import joint_byte_classes
from constrain.engine.vocab import TokenTrie
from constrain.errors import GrammarError
from constrain.fuel import burn

__all__ = ["ROW_CACHE_BYTES", "NativeLexer", "make_lexer"]

_FOUND_PER_UNIT = 16  # tokens and lexeme ends a C++ trie walk finds per unit of fuel burnt
# Python copies of the native lexer's rows kept per lexer (each 1 KB of int32, read again from
# C++ once dropped); their live bytes and the tags' sets and ends get a quarter as much each
ROW_CACHE_BYTES = 8 * 2**20
_ROWS_KEPT = 2**16  # entries of each of those caches
# a row held: its 256 int32, the array object, and the capsule and vector owning the data
_ROW_BYTES = 1024 + 112 + 160


def make_lexer(table: Sequence[Lexeme], engine: str | None = None) -> ByteLexer:
    """The lexer of `table` in `engine` ("native", "python"; None: the default)."""
    if resolve_engine(engine) == "python":
        return Lexer(list(table))
    return NativeLexer(table)


class NativeLexer:
    """`Lexer`'s product DFA in C++ (see the module docstring); a `ByteLexer`."""

    def __init__(self, table: Sequence[Lexeme]):
        import constrain.engine.native as native

        self._native_module = native
        self._table = list(table)
        with_bytes = [i for i, lx in enumerate(self._table) if lx.special is None]
        classes, representatives = joint_byte_classes([self._table[i].dfa for i in with_bytes])
        ids = {lx.name: i for i, lx in enumerate(self._table)}
        specs = []
        for lx in self._table:
            if lx.special is not None:  # never started: a dead one-state stand-in
                none = np.zeros((1, 1), dtype=np.int32)
                joint = np.zeros(len(representatives), np.int32)
                specs.append((none, np.zeros(1, np.uint8), joint, 0, 0, [], None, None))
                continue
            dfa = lx.dfa
            burn(16)  # the active fuel: the lexeme's tables copied for C++
            joint = dfa.byte_classes()[representatives].astype(np.int32)
            owners = sorted(ids[n] for n in lx.keyword_of if n in ids)
            if isinstance(dfa, CountedDFA):  # C++ builds the same product from its parts
                spec = (None, None, joint, 0, int(lx.priority), owners, None, None)
                specs.append((*spec, dfa.native_spec()))
                continue
            blocked = None
            if owners:
                words = [self._table[i].dfa for i in owners]
                blocked = word_continuations(dfa, words).astype(np.uint8)
            table, accepting, own, start, in_string = walk_spec(dfa)
            escapes = None if in_string is None else (in_string, own)
            specs.append(
                (table, accepting, joint, start, int(lx.priority), owners, blocked, escapes)
            )
        self._lexer = native.Lexer(classes, len(representatives), specs, MAX_LEXER_STATES)
        counted = any(isinstance(lx.dfa, CountedDFA) for lx in self._table if lx.special is None)
        # pairs a slice check may visit (0: no limit), as `Lexer` cuts them
        self.admits_cap = COUNTED_ADMITS_PAIRS if counted else 0
        # copies of what C++ answers, per state or tag, bounded in bytes (states are up to
        # MAX_LEXER_STATES: unbounded copies would be hundreds of megabytes)
        rows, other = ROW_CACHE_BYTES, ROW_CACHE_BYTES // 4
        self._rows = BoundedCache(_ROWS_KEPT, max_bytes=rows, size=_row_bytes)
        self._live = BoundedCache(_ROWS_KEPT, max_bytes=other, size=sys.getsizeof)
        self._tag_sets = BoundedCache(_ROWS_KEPT, max_bytes=other, size=sys.getsizeof)
        self._ends = BoundedCache(_ROWS_KEPT, max_bytes=other, size=sys.getsizeof)

    def call(self, fn, *args):
        """`fn(*args)`, with the lexer's state budget reported as Python's lexer reports it."""
        try:
            return fn(*args)
        except self._native_module.LexerLimit as exc:
            raise self.limit_error(exc.lexemes) from None

    def limit_error(self, lexemes: list[int]) -> GrammarError:
        """The error to raise when the lexer reaches its state limit with `lexemes` (the
        native `LexerLimit`'s), naming their terminals."""
        names = sorted({self._table[j].name for j in lexemes})
        return GrammarError(
            f"the lexer exceeds {MAX_LEXER_STATES} states (reached with terminals "
            f"{', '.join(names[:8])}{', ...' if len(names) > 8 else ''})"
        )

    @property
    def n_states(self) -> int:
        return self._lexer.n_states

    @property
    def nbytes(self) -> int:
        """Bytes it holds: the C++ lexer's heap and the Python copies of its rows and tags."""
        caches = (self._rows, self._live, self._tag_sets, self._ends)
        return self._lexer.nbytes + sum(cache.bytes for cache in caches)

    @property
    def native(self):
        """The C++ lexer (`constrain.engine.native.Lexer`), for native code that drives it."""
        return self._lexer

    def start_of(self, lexemes: frozenset[int]) -> int:
        return self.call(self._lexer.start_of, sorted(lexemes))

    def _row(self, state: int) -> np.ndarray:
        """The next state at each byte (int32, read-only: kept as 1 KB, a list takes 2-10 KB)."""
        found = self._rows.get(state)
        if found is None:
            burn(4)  # the active fuel: a row read (and computed on first use) in C++
            found = self.call(self._lexer.row, state)
            found.flags.writeable = False
            self._rows[state] = found
        return found

    def row(self, state: int) -> list[int]:
        return self._row(state).tolist()

    def rows(self, states: np.ndarray) -> np.ndarray:
        if not len(states):
            return np.zeros((0, 256), dtype=np.int32)
        return np.stack([self._row(int(s)) for s in states])

    def live_bytes(self, state: int) -> tuple[int, ...]:
        found = self._live.get(state)
        if found is None:
            found = tuple(np.flatnonzero(self._row(state)).tolist())
            self._live[state] = found
        return found

    def key(self, state: int) -> tuple:
        return tuple(self._lexer.key(state))

    def tag_of(self, state: int) -> int:
        return self._lexer.tag_of(state)

    def tag_set(self, tag: int) -> frozenset[int]:
        found = self._tag_sets.get(tag)
        if found is None:
            found = frozenset(self._lexer.tag_set(tag))
            self._tag_sets[tag] = found
        return found

    def ends_before(self, tag: int) -> np.ndarray:
        found = self._ends.get(tag)
        if found is None:
            found = self._lexer.ends_before(tag).astype(bool)
            self._ends[tag] = found
        return found

    def walk(self, trie: TokenTrie, state: int, starts: np.ndarray, end_at_start: bool) -> Piece:
        tokens, ends = self.call(
            self._lexer.walk, trie.native, state, np.asarray(starts, dtype=np.int64), end_at_start
        )
        burn(1 + (len(tokens) + sum(len(nodes) for _, nodes in ends)) // _FOUND_PER_UNIT)
        return Piece(tokens, [(self.tag_set(tag), nodes) for tag, nodes in ends])

    def admits(self, state: int, language: ByteDFA) -> bool:
        table, start = language.native_table(), language.start
        return self.call(self._lexer.admits, state, table, start, self.admits_cap)

    def lexeme_admits(self, lexeme: int, at: int, language: ByteDFA) -> bool:
        if outgrows(self._table[lexeme].dfa, language):
            return False
        table, start = language.native_table(), language.start
        return self.call(self._lexer.lexeme_admits, lexeme, at, table, start, self.admits_cap)

    def __repr__(self) -> str:
        return f"NativeLexer(lexemes={len(self._table)}, states={self.n_states})"


def _row_bytes(row: np.ndarray) -> int:
    """What a row `NativeLexer` keeps holds (its data is owned by the native vector)."""
    return _ROW_BYTES
