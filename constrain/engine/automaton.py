"""Byte-level automata: the one interface between grammars and token-level matching.

A `Matcher` never looks inside a grammar. It needs, for an opaque hashable *state*:

* ``step(state, data)``: the state after reading `data`, or None once no continuation of the
  text can be in the language (so every non-None state is *live*);
* ``accepting(state)``: the text read so far is in the language;
* ``can_continue(state)``: some byte can still be read;
* ``token_ids(state, trie)``: ids of every token whose bytes keep the state live (a walk of the
  vocabulary trie that skips the subtree of each rejected prefix);
* ``admits(state, language)``: every string of a regular `language` keeps the state live, so a
  whole vocabulary slice is allowed without a walk (see `constrain.engine.slices`);
* ``forced_bytes(state)`` / ``expected_bytes(state)``: what the grammar forces or allows next;
* ``completion(state)``: a shortest text that finishes a sentence (token budgets);
* ``special_texts``, ``allowed_specials(state)``, ``step_special(state, text)``: special tokens
  (``<|im_end|>``) the grammar uses as terminals, those allowed next, and reading one;
* ``native_masks(slices, special_ids, eos_ids)``: whole masks in one native call each, when
  the automaton has them (None: the `TokenAutomaton` assembles masks from the above);
* ``native_steps(vocab, special_ids, eos_ids)``: a token's step and check in one native call
  each, when the automaton has them (None: the `TokenAutomaton` steps its bytes).

`DFAAutomaton` implements it for regexes and choices; the grammar engine implements it for
context-free grammars.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Protocol

import numpy as np

from constrain.engine.engines import resolve_engine
from constrain.engine.regex import ByteDFA
from constrain.engine.slices import VocabularySlices, admits
from constrain.engine.vocab import TokenTrie, Vocabulary
from constrain.fuel import burn

MAX_COMPLETION_BYTES = 2**16  # completions longer than this are not spelled


class Automaton(Protocol):
    """What a Matcher needs from a grammar: a live-state byte recognizer."""

    start: Hashable
    special_texts: frozenset[str]

    def step(self, state: Hashable, data: bytes) -> Hashable | None: ...

    def accepting(self, state: Hashable) -> bool: ...

    def can_continue(self, state: Hashable) -> bool: ...

    def token_ids(self, state: Hashable, trie: TokenTrie) -> np.ndarray: ...

    def admits(self, state: Hashable, language: ByteDFA) -> bool: ...

    def walk_admitted(
        self, state: Hashable, data: np.ndarray, lengths: np.ndarray
    ) -> tuple[list, np.ndarray]:
        """The states after the rows of `data` (each its first `lengths[i]` bytes), strings of
        a language `admits(state, ...)` holds, in one vectorised walk: ``(states, index)``,
        row i reaching ``states[index[i]]``."""
        ...

    def forced_bytes(self, state: Hashable) -> bytes: ...

    def expected_bytes(self, state: Hashable) -> list[int]: ...

    def completion(self, state: Hashable) -> bytes | None:
        """A shortest text taking `state` to acceptance; None when none is found or it is
        longer than `MAX_COMPLETION_BYTES` (no token budget could hold it)."""

    def allowed_specials(self, state: Hashable) -> frozenset[str]: ...

    def step_special(self, state: Hashable, text: str) -> Hashable | None: ...

    def nbytes(self) -> int:
        """The memory the automaton holds now (its tables, and the states and memos it has
        built as it was read), in bytes: an estimate for byte-bounded caches."""
        ...

    def native_masks(
        self, slices: VocabularySlices, special_ids: dict[str, int], eos_ids: list[int]
    ) -> NativeMaskSource | None:
        """Whole masks over the vocabulary of `slices` computed natively, when the automaton
        can (None: `TokenAutomaton` computes them from `token_ids`, `admits`, ...)."""
        ...

    def native_steps(
        self, vocab: Vocabulary, special_ids: dict[str, int], eos_ids: list[int]
    ) -> NativeTokenSteps | None:
        """Tokens of `vocab` read natively, one call per token, when the automaton can
        (None: `TokenAutomaton` steps the token's bytes with `step`)."""
        ...


class NativeMaskSource(Protocol):
    """A grammar's whole masks over one vocabulary, each in one native call (many at once:
    `constrain.engine.grammar.native_chart.fill_batch`)."""

    n_words: int  # of a bitmask over the vocabulary
    nbytes: int  # the memory its memos and pieces hold

    def bitmask(self, state: Hashable) -> tuple[np.ndarray, bool]:
        """The packed mask of `state` (int32, writable) and whether it allows any token."""
        ...


class NativeTokenSteps(Protocol):
    """A grammar read token by token over one vocabulary, one native call per token."""

    nbytes: int  # the memory it holds

    def step(self, state: Hashable, token: int) -> Hashable | None:
        """The state after text or special `token` (not EOS); None when it is not allowed."""
        ...

    def allows(self, state: Hashable, token: int) -> bool:
        """`token` is allowed at `state`: EOS where the text is complete, else as `step`."""
        ...

    def cursor(self, check: object | None = None) -> TokenCursor:
        """A cursor for one sequence's checks, with the native text check `check` (a
        `TextCheck.native_check`) applied in the same call when given."""
        ...


class TokenCursor(Protocol):
    """One sequence's position held natively, so that a check passes only the token; its
    owner moves it after every change of the sequence. Checks are unmetered: with fuel
    active, ask `NativeTokenSteps` instead."""

    def move_to(self, state: Hashable, here: object | None = None) -> None:
        """Move to automaton state `state` (and the text check's state `here`)."""
        ...

    def finish(self) -> None:
        """The sequence ended with EOS: nothing more is allowed."""
        ...

    def allows(self, token: int) -> bool:
        """`NativeTokenSteps.allows` here, and the text check lets `token` through; raises
        the `GrammarError` that `NativeTokenSteps` would when the lexer reaches its limit."""
        ...


class TextCheck(Protocol):
    """A condition on the text that an automaton cannot express (no duplicate JSON keys,
    unique items), checked beside it by the `Matcher` on immutable states of its own.

    ``feed(state, data)`` is the state after `data`, or None when `data` breaks the condition.
    Checks and masks scan only the tokens that could break it next (`risky_tokens`); `advance`
    feeds every token.
    """

    start: Hashable

    def feed(self, state: Hashable, data: bytes) -> Hashable | None: ...

    def allows(self, state: Hashable, token: int, vocab: Vocabulary) -> bool:
        """`feed` would not refuse the bytes of `token` (a token without bytes passes)."""

    def risky_tokens(self, state: Hashable, vocab: Vocabulary) -> np.ndarray:
        """Ids of the tokens of `vocab` that `feed` may refuse next (a superset of those it
        refuses; empty: it refuses none)."""

    def refused(self, state: Hashable, tokens: np.ndarray, vocab: Vocabulary) -> np.ndarray:
        """The ids of `tokens` whose bytes `feed` refuses from `state`, all at once. They may
        include tokens the grammar refuses, which must not raise."""

    def refusals(self, state: Hashable, vocab: Vocabulary) -> np.ndarray:
        """`refused` of the `risky_tokens`: among them, every token the grammar may allow
        here and `feed` refuses (what a mask must clear, whatever the grammar state)."""

    def state_key(self, state: Hashable) -> bytes | None:
        """What `refusals` depends on at `state`, to share them between states and
        sequences (None: nothing to share)."""

    def with_engine(self, engine: str) -> TextCheck:
        """The same check with its token scans in `engine`."""

    def prepare(self, vocab: Vocabulary) -> None:
        """Build what the scans read for `vocab` (once per vocabulary) now, not in a mask."""

    def native_check(self, vocab: Vocabulary) -> object | None:
        """This check over `vocab` as a native object that a native cursor applies in the
        same call (`NativeTokenSteps.cursor`); None when it is not native."""


class DFAAutomaton:
    """A minimal byte DFA (dead state 0, every other state live) as an `Automaton`; its trie
    walks run in `engine` ("native" or "python"; None: `default_engine()`)."""

    def __init__(self, dfa: ByteDFA, engine: str | None = None):
        self.dfa = dfa
        self.engine = resolve_engine(engine)
        self.start: int = dfa.start
        self._accepting = dfa.accepting
        self._can_continue = (dfa.table != 0).any(axis=1)
        self._admits: dict[tuple[int, ByteDFA], bool] = {}
        self._dense: np.ndarray | None = None  # (n, 256) for the Python engine's walks

    def nbytes(self) -> int:
        dense = 0 if self._dense is None else self._dense.nbytes
        return self.dfa.nbytes + self._can_continue.nbytes + dense + 96 * len(self._admits)

    def _dense_table(self) -> np.ndarray:
        """The (n, 256) table the Python engine's walks read (the native ones read the byte
        classes: a million-state literal would be a gigabyte dense)."""
        if self._dense is None:
            self._dense = self.dfa.transitions
        return self._dense

    def step(self, state: int, data: bytes) -> int | None:
        nxt = self.dfa.walk(state, data)
        return nxt if nxt else None

    def accepting(self, state: int) -> bool:
        return bool(self._accepting[state])

    def can_continue(self, state: int) -> bool:
        return bool(self._can_continue[state])

    def forced_bytes(self, state: int) -> bytes:
        return self.dfa.forced_bytes(state)

    def expected_bytes(self, state: int) -> list[int]:
        return [int(b) for b in np.flatnonzero(self.dfa.row(state))]

    def completion(self, state: int) -> bytes | None:
        return self.dfa.shortest_from(state, MAX_COMPLETION_BYTES)

    special_texts: frozenset[str] = frozenset()  # a regex never names special tokens

    def allowed_specials(self, state: int) -> frozenset[str]:
        return frozenset()

    def step_special(self, state: int, text: str) -> None:
        return None

    def native_masks(self, slices, special_ids, eos_ids) -> None:
        return None  # a DFA's walk is one native call already

    def native_steps(self, vocab, special_ids, eos_ids) -> None:
        return None  # a DFA step is a table lookup per byte

    def walk_admitted(
        self, state: int, data: np.ndarray, lengths: np.ndarray
    ) -> tuple[list[int], np.ndarray]:
        table, classes = self.dfa.table, self.dfa.classes
        after = walk_bytes(lambda states, column: table[states, classes[column]], state, data,
                           lengths)  # fmt: skip
        distinct, index = np.unique(after, return_inverse=True)
        return distinct.tolist(), index.ravel()

    def admits(self, state: int, language: ByteDFA) -> bool:
        key = (state, language)
        found = self._admits.get(key)
        if found is None:
            if self.engine == "python":
                found = admits(self._dense_table(), state, language)
            else:
                found = self.dfa.native_table().admits(
                    state, language.native_table(), language.start
                )
            self._admits[key] = found
        return found

    def token_ids(self, state: int, trie: TokenTrie) -> np.ndarray:
        if self.engine == "python":
            found = trie.tokens_read_by(self._dense_table(), state)
        else:
            found = self.dfa.native_table().tokens(trie.native, state)
        burn(1 + len(found) // 16)  # the active fuel: the walk, after the fact
        return found


def walk_bytes(step, state: int, data: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """From `state`, the DFA state after each row of `data` (its first `lengths[i]` bytes):
    one byte position at a time over all rows still going, `step(states, bytes)` giving the
    next states elementwise."""
    states = np.full(len(lengths), state, dtype=np.int64)
    for k in range(data.shape[1] if len(lengths) else 0):
        going = np.flatnonzero(lengths > k)
        if not len(going):
            break
        states[going] = step(states[going], data[going, k])
    return states
