"""The Earley parser and the mask walk in C++ (`native.CFGCore`), behind the parser's interface.

`NativeChart` runs the parser of `constrain.engine.grammar.earley` over the grammar's
`NativeLexer`: the same dotted rules, the same interned nodes built item for item in the same
order (so completions agree too), the same bound on the items they hold. Nodes are
`native.ChartNode`s: equal when they are the same node, hashable, holding no Python object,
so the garbage collector never walks a parse. On top of the parser it reads bytes (`step`)
and walks the vocabulary trie for a mask (`tokens`) without returning to Python between
lexemes. `CFGAutomaton` uses it when its lexer is native; the Python parser stays the
reference, and the tests hold the two to the same states and masks.

Native calls cannot burn the active fuel as they go: each is given the units left
(`native.Meter`), stops when they are spent, and the units used are burnt after it.
"""

from __future__ import annotations

import numpy as np

from constrain.engine.grammar.earley import MAX_ITEMS_HELD, DottedRules
from constrain.engine.grammar.lexers import NativeLexer
from constrain.engine.slices import VocabularySlices
from constrain.engine.vocab import TokenTrie
from constrain.fuel import burn, units_left

__all__ = ["NativeChart", "NativeMasks", "NativeSteps", "fill_batch"]

_RULE_END = -(2**31)  # next_sym of a dotted rule at its end, in C++ (None in Python)
_UNMETERED = 2**62


class NativeChart:
    """A grammar's native lexer driving its native Earley parser (see the module docstring)."""

    def __init__(
        self,
        rules: DottedRules,
        lexer: NativeLexer,
        ignore: frozenset[int],
        specials: frozenset[int],
    ):
        import constrain.engine.native as native

        self.native = native  # the extension module
        self.lexer = lexer
        # for calls with no fuel active (what it counts is never read; the grammar's lock
        # guards it, as every call on this grammar)
        self.unmetered = native.Meter(_UNMETERED)
        self.next_sym, self.lhs = rules.next_sym, rules.lhs
        self.accept_item = 1
        next_sym = np.array(
            [_RULE_END if sym is None else sym for sym in rules.next_sym], dtype=np.int32
        )
        self.core = self.metered(
            native.CFGCore,
            lexer.native,
            next_sym,
            np.array(rules.lhs, dtype=np.int32),
            list(rules.nullable),
            [list(first) for first in rules.first_dotted],
            rules.start,
            sorted(ignore),
            sorted(specials),
            MAX_ITEMS_HELD,
        )
        self.root = self.core.root

    def metered(self, fn, *args):
        """`fn(*args, meter)` given the active fuel's units; burns what it used."""
        left = units_left()
        if left is None:
            return self.lexer.call(fn, *args, self.unmetered)
        meter = self.native.Meter(left)
        try:
            return self.lexer.call(fn, *args, meter)
        finally:
            burn(meter.used)  # more than was left when it ran out: raises the fuel's error

    # -- the parser's interface (`EarleyParser`) --------------------------------------------

    @property
    def max_items(self) -> int:
        """Items the interned nodes may hold before the parser forgets them."""
        return self.core.max_items

    @max_items.setter
    def max_items(self, n: int) -> None:
        self.core.max_items = n

    @property
    def items_held(self) -> int:
        return self.core.items_held

    @property
    def forgotten(self) -> int:
        return self.core.forgotten

    @property
    def n_nodes(self) -> int:
        return self.core.n_nodes

    @property
    def nbytes(self) -> int:
        """Bytes the parser holds: its rules, its index and every node of its alive, interned or
        held by states (the lexer's are `NativeLexer.nbytes`)."""
        return self.core.nbytes

    def scan(self, node, lexemes: frozenset[int]):
        return self.metered(self.core.scan, node, list(lexemes))

    def waiting(self, node) -> dict[int, list[tuple]]:
        return self.core.waiting(node)

    # -- the automaton's hot paths ----------------------------------------------------------

    def start_of(self, node) -> int:
        """The lexer state where the lexemes `node` allows (and the ignored ones) start."""
        return self.lexer.call(self.core.start_of, node)

    def step(self, state: tuple, data: bytes) -> tuple | None:
        """`CFGAutomaton.step` in one native call."""
        node, s = state
        return self.metered(self.core.step, node, s, data)

    def masks(
        self,
        slices: VocabularySlices,
        specials: list[tuple[int, int]],
        eos: list[int],
        max_pieces: tuple[int, int],
    ) -> NativeMasks:
        """Whole masks over the vocabulary of `slices` (`specials`: special lexeme and its
        token; `max_pieces`: entries and bytes of the trie walks kept)."""
        return NativeMasks(self, slices, specials, eos, max_pieces)

    def token_steps(self, texts, specials: list[tuple[int, int]], eos: list[int]) -> NativeSteps:
        """Tokens read one native call each (`texts`: the vocabulary's `native.TokenTexts`;
        `specials`: special lexeme and its token)."""
        return NativeSteps(self, texts, specials, eos)

    def piece_cache(self, max_entries: int, max_bytes: int):
        """An empty cache of mask pieces, for one trie."""
        return self.native.PieceCache(max_entries, max_bytes)

    def piece_cache_nbytes(self, pieces) -> int:
        """Bytes `pieces` (from `piece_cache`) holds, read under the grammar's lock."""
        return self.core.pieces_nbytes(pieces)

    def tokens(self, state: tuple, trie: TokenTrie, pieces) -> np.ndarray:
        """`CFGAutomaton.token_ids` in one native call (`pieces` from `piece_cache`)."""
        node, s = state
        return self.metered(self.core.tokens, node, s, trie.native, pieces)


class NativeMasks:
    """A grammar's whole masks over one vocabulary, each in one native call
    (`native.MaskFiller`): the slices a state admits whole, the trie walk of the other tokens,
    the special tokens and EOS; what `TokenAutomaton.bitmask_for` computes in Python."""

    def __init__(
        self,
        chart: NativeChart,
        slices: VocabularySlices,
        specials: list[tuple[int, int]],
        eos: list[int],
        max_pieces: tuple[int, int],
    ):
        self._chart = chart
        self._filler = chart.native.MaskFiller(
            chart.core, slices.native, specials, eos, chart.lexer.admits_cap, *max_pieces
        )
        self.n_words = slices.n_words

    def bitmask(self, state: tuple) -> tuple[np.ndarray, bool]:
        """The packed mask of `state` and whether it allows any token."""
        node, s = state
        row = np.zeros(self.n_words, dtype=np.int32)
        return row, self._chart.metered(self._filler.fill, node, s, row)

    @property
    def piece_bytes(self) -> int:
        """Bytes the trie walks kept hold (bounded by `max_pieces`)."""
        return self._filler.piece_bytes

    @property
    def nbytes(self) -> int:
        """Bytes its memos (slices decided per lexer state, ...) and kept walks hold (not the
        grammar's, which `CFGAutomaton.nbytes` counts, nor the vocabulary's)."""
        return self._filler.nbytes


class NativeSteps:
    """A grammar read token by token over one vocabulary (`native.TokenSteps`): what
    `TokenAutomaton.step_once` does with the token's bytes, in one native call. With no fuel
    active, the calls skip `NativeChart.metered`: this is a sampler's hot path."""

    def __init__(self, chart: NativeChart, texts, specials: list[tuple[int, int]], eos: list[int]):
        self._chart = chart
        self._steps = chart.native.TokenSteps(chart.core, texts, specials, eos)

    @property
    def nbytes(self) -> int:
        """Bytes it holds of its own (it caches nothing per state: the grammar does)."""
        return self._steps.nbytes

    def step(self, state: tuple, token: int) -> tuple | None:
        return self._call(self._steps.step, state, token)

    def allows(self, state: tuple, token: int) -> bool:
        return self._call(self._steps.allows, state, token)

    def cursor(self, check=None):
        """A `native.TokenCursor` over these steps, applying the native key check `check`
        too when given (see `NativeTokenSteps.cursor`)."""
        return self._chart.native.TokenCursor(self._steps, check, self._chart.lexer.limit_error)

    def _call(self, fn, state: tuple, *args):
        """`fn(node, s, *args, meter)`: `NativeChart.metered` with fuel, else inline."""
        if units_left() is not None:
            return self._chart.metered(fn, state[0], state[1], *args)
        try:
            return fn(state[0], state[1], *args, self._chart.unmetered)
        except self._chart.native.LexerLimit as exc:
            raise self._chart.lexer.limit_error(exc.lexemes) from None


def fill_batch(jobs: list[tuple[NativeMasks, tuple]], out: np.ndarray, threads: int) -> list[bool]:
    """Row i of `out` (zeroed, int32) becomes the mask of ``jobs[i] = (masks, state)``, all in
    one native call on `threads` threads without the GIL; returns whether each allows any
    token. Unmetered: a batch is decoding, not the preparation fuel pays for."""
    if not jobs:
        return []
    native = jobs[0][0]._chart.native
    return native.fill_batch(
        [(masks._filler, state[0], state[1], i) for i, (masks, state) in enumerate(jobs)],
        out,
        threads,
    )
