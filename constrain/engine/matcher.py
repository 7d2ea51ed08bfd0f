"""The token-level automaton and the Matcher: which tokens keep a text in the language.

A `TokenAutomaton` is a grammar's byte automaton read through a vocabulary. It owns what
every sequence can share: the token masks (packed bitmasks), computed lazily (one native call
per automaton state where the grammar has native masks, else a trie walk, on first visit) and
cached by state, and the state after a token: one native call where the grammar has native
steps, else cached by (state, token). `prefill_masks`
computes the missing masks of a whole batch at once, on threads without the GIL.

A `Matcher` is one sequence's position in it: a stack of states, one per consumed token, so
`rollback(n)` is a pop and `fork()` a list copy. It holds automaton state only. What else a
constraint asks of a text (a JSON text check, a token budget) wraps a Matcher in an object
with the same interface, `TokenMatcher` (see `constrain.constraints`). Its invariants:

* **soundness**: a token is allowed only if some continuation of the text after it is in the
  language (the automaton only yields live states);
* **completeness**: every token whose bytes keep the text completable is allowed;
* EOS ids are allowed exactly when the text so far is in the language; special and padding ids
  never are. After EOS nothing is allowed.

Errors on the hot path raise: `advance` with a forbidden token raises `InvalidTokenError`;
`check` never raises (it answers False).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Protocol

import numpy as np

from constrain.engine import bitmask
from constrain.engine.automaton import NativeMaskSource, NativeTokenSteps
from constrain.engine.cache import BoundedCache
from constrain.engine.grammar import Grammar
from constrain.engine.grammar.ir import token_id_reference
from constrain.engine.grammar.native_chart import fill_batch
from constrain.engine.slices import VocabularySlices, slices_of
from constrain.engine.vocab import Vocabulary
from constrain.errors import GrammarError, InvalidTokenError, VocabularyError
from constrain.fuel import burn, units_left

__all__ = [
    "FINISHED", "Matcher", "TokenAutomaton", "TokenMatcher", "advance_many", "prefill_masks"
]  # fmt: skip

FINISHED: Hashable = object()  # the state after EOS
_UNKNOWN = object()  # not in a cache
_MAX_FORCED_BACKOFF = 3  # forced tokens dropped at most from the end (token healing)
_MAX_CACHED_STEPS = 2**18  # token transitions remembered per automaton
_STEP_BYTES = 200  # one remembered transition: its key, state and the map's entry
_IDS_PER_UNIT = 64  # ids of a mask (allocated, packed, ORed, slices tested) per unit burnt


class TokenMatcher(Protocol):
    """What samplers, speculation and decoding ask of a sequence's constraint: the Matcher's
    interface, implemented by `Matcher` and by the wrappers composed over it."""

    @property
    def state(self) -> Hashable:
        """The current automaton state (`FINISHED` after EOS)."""

    def mask_source(self) -> tuple[TokenAutomaton, Hashable]:
        """The token automaton and state whose mask `bitmask` starts from (what a batch
        computes ahead: `prefill_masks`)."""
        ...

    @property
    def n_tokens(self) -> int:
        """Tokens consumed so far (EOS included)."""

    def check(self, token: int) -> bool:
        """Would `token` keep the text completable? No state change; never raises."""

    def bitmask(self) -> np.ndarray:
        """Allowed next tokens packed 32 per int32 word (`constrain.engine.bitmask`), read-only."""

    def mask(self) -> np.ndarray:
        """`bitmask()` unpacked: a bool array of shape (vocab.size,)."""

    def mask_key(self) -> Hashable | None:
        """A key under which `mask()` may be cached across sequences, or None while the mask
        depends on this sequence alone."""

    def accepting(self) -> bool:
        """EOS is allowed now: the text so far is in the language."""

    def done(self) -> bool:
        """Nothing but EOS can follow (or EOS was consumed)."""

    def finished(self) -> bool:
        """EOS has been consumed."""

    def forced_bytes(self) -> bytes:
        """The bytes the constraint allows unambiguously next."""

    def forced(self) -> list[int]:
        """Canonical tokens for what the constraint forces next (may be empty)."""

    def count_forced(self, tokens: Sequence[int]) -> int:
        """How many of the consumed `tokens` the constraint forced (a statistic)."""

    def advance(self, token: int) -> None:
        """Consume `token` (EOS included); raises `InvalidTokenError` if it is not allowed."""

    def advance_many(self, tokens: Sequence[int]) -> None:
        """Consume several tokens; on an invalid one nothing is consumed."""

    def rollback(self, n: int = 1) -> None:
        """Undo the last `n` tokens."""

    def fork(self) -> TokenMatcher:
        """An independent copy sharing the caches."""


class TokenAutomaton:
    """A grammar's automaton over the tokens of a vocabulary: masks and steps cached by state.

    Args:
        grammar: what the text must be (its byte automaton is read here).
        vocab: the model's vocabulary (token bytes, EOS ids, logits size).
        max_cache_bytes: bound on the mask cache; the least recently used masks are evicted
            (context-free grammars have unboundedly many parser states).
    """

    def __init__(self, grammar: Grammar, vocab: Vocabulary, *, max_cache_bytes: int = 256 * 2**20):
        self.grammar = grammar
        self.vocab = vocab
        self.automaton = grammar.automaton
        self.masks: BoundedCache[Hashable, np.ndarray] = BoundedCache(
            2**20, max_bytes=max_cache_bytes, size=lambda mask: mask.nbytes
        )
        self.steps: BoundedCache[tuple[Hashable, int], Hashable | None] = BoundedCache(
            _MAX_CACHED_STEPS
        )
        self.eos = frozenset(vocab.eos_ids)
        self.eos_array = np.array(vocab.eos_ids, dtype=np.int64)
        self.special_ids = {text: _special_id(vocab, text) for text in self.automaton.special_texts}
        self.special_texts = _by_id(self.special_ids)
        self._native_masks: NativeMaskSource | None = None  # built on first use
        self._native_masks_asked = False
        # a token's step in one native call (then uncached: it costs less than a lookup)
        self.native_steps: NativeTokenSteps | None = self.automaton.native_steps(
            vocab, self.special_ids, list(vocab.eos_ids)
        )

    def bitmask_for(self, state: Hashable) -> np.ndarray:
        """Allowed next tokens at automaton `state`, packed (`constrain.engine.bitmask`; int32,
        read-only, cached): the admitted slices' bitmasks ORed, then the walked tokens.

        Raises:
            VocabularyError: the state is not accepting and no token of the vocabulary fits.
        """
        packed = self.masks.get(state)
        if packed is not None:
            return packed
        native = self.native_masks()
        if native is not None:
            packed, nonempty = native.bitmask(state)
        else:
            packed = self._python_bitmask(state, slices_of(self.vocab))
            nonempty = packed.any()
        return self.keep_mask(state, packed, nonempty)

    def native_masks(self) -> NativeMaskSource | None:
        """The automaton's native masks over this vocabulary (None: it has none)."""
        if not self._native_masks_asked:
            slices = slices_of(self.vocab)
            eos = list(self.vocab.eos_ids)
            self._native_masks = self.automaton.native_masks(slices, self.special_ids, eos)
            self._native_masks_asked = True
        return self._native_masks

    def keep_mask(self, state: Hashable, packed: np.ndarray, nonempty: bool) -> np.ndarray:
        """Cache `packed`, the mask just computed for `state` (made read-only), and return it.

        Raises:
            VocabularyError: it allows nothing and the state is not accepting.
        """
        if not nonempty and not self.automaton.accepting(state):
            expected = bytes(self.automaton.expected_bytes(state)[:16])
            raise VocabularyError(
                f"no token of the vocabulary can continue here: the grammar expects one of the "
                f"bytes {expected!r} but no text token starts with them"
            )
        packed.flags.writeable = False
        burn(1 + self.vocab.size // _IDS_PER_UNIT)  # the active fuel, before the mask is kept
        self.masks[state] = packed
        return packed

    def _python_bitmask(self, state: Hashable, slices: VocabularySlices) -> np.ndarray:
        """`bitmask_for` assembled in Python: the admitted slices' bitmasks ORed with the
        walked tokens, the allowed special tokens and EOS."""
        size = self.vocab.size
        admitted = slices.admitted(lambda language: self.automaton.admits(state, language))
        walked = np.zeros(size, dtype=bool)
        walked[self.automaton.token_ids(state, slices.trie_without(admitted))] = True
        for text in self.automaton.allowed_specials(state):
            walked[self.special_ids[text]] = True
        if self.automaton.accepting(state):
            walked[self.eos_array] = True
        packed = bitmask.pack(walked)
        for part, whole in zip(slices.slices, admitted):
            if whole:
                packed |= part.bitmask
        return packed

    def mask_for(self, state: Hashable) -> np.ndarray:
        """`bitmask_for(state)` as a bool array of shape (vocab.size,)."""
        return bitmask.unpack(self.bitmask_for(state), self.vocab.size)

    def step(self, state: Hashable, token: int) -> Hashable | None:
        """The state after a text or special token (not EOS), or None if it is not allowed.
        Cached where the automaton steps in Python: a sampler checks a token and then
        advances with it, and states recur."""
        if self.native_steps is not None:
            return self.native_steps.step(state, token)
        key = (state, token)
        nxt = self.steps.get(key, _UNKNOWN)
        if nxt is _UNKNOWN:
            nxt = self.steps[key] = self.step_once(state, token)
        return nxt

    def successors(self, state: Hashable) -> list[tuple[Hashable, np.ndarray]]:
        """The allowed tokens at `state` but EOS, grouped by the state after them:
        ``[(next state, token ids)]``. Tokens of the vocabulary slices the state admits whole
        are walked together (`Automaton.walk_admitted`), the rest stepped one by one; a
        sweep over every allowed token (a budget's filter) costs a few vectorised walks."""
        rest = self.mask_for(state).copy()
        rest[self.eos_array] = False
        found: list[tuple[Hashable, np.ndarray]] = []
        slices = slices_of(self.vocab)
        admitted = slices.admitted(lambda language: self.automaton.admits(state, language))
        for part, whole in zip(slices.slices, admitted):
            if not whole or not len(part.tokens):
                continue
            burn(len(part.tokens) // 64)
            after, index = self.automaton.walk_admitted(state, part.token_bytes, part.lengths)
            order = np.argsort(index, kind="stable")
            bounds = np.concatenate(([0], np.cumsum(np.bincount(index, minlength=len(after)))))
            for k, nxt in enumerate(after):
                found.append((nxt, part.tokens[order[bounds[k] : bounds[k + 1]]]))
            rest[part.tokens] = False
        stepped: dict[Hashable, list[int]] = {}
        for i, token in enumerate(np.flatnonzero(rest).tolist()):
            if not i % 256:
                burn(1024)  # 256 tokens stepped one by one
            stepped.setdefault(self.step_once(state, token), []).append(token)
        found.extend((nxt, np.array(ids, dtype=np.int64)) for nxt, ids in stepped.items())
        return found

    def step_once(self, state: Hashable, token: int) -> Hashable | None:
        """`step` without its cache: for sweeps over every allowed token of a state, whose
        steps would only push the recurring ones out of the cache."""
        if self.native_steps is not None:
            return self.native_steps.step(state, token)
        special = self.special_texts.get(token)
        if special is not None:
            return self.automaton.step_special(state, special)
        data = self.vocab.token_bytes(token)
        return self.automaton.step(state, data) if data else None

    def start(self) -> Matcher:
        """A Matcher at the start of the text."""
        return Matcher(self, [self.automaton.start])

    def nbytes(self) -> int:
        """The memory this automaton over the vocabulary holds: its masks and steps, the
        grammar's automaton, and the native masks and steps it built."""
        held = self.masks.bytes + _STEP_BYTES * len(self.steps) + self.automaton.nbytes()
        for native in (self._native_masks, self.native_steps):
            held += native.nbytes if native is not None else 0
        return held

    @property
    def cached_states(self) -> int:
        """Number of automaton states whose mask is cached."""
        return len(self.masks)

    @property
    def cache_bytes(self) -> int:
        """Memory held by the mask cache, in bytes."""
        return self.masks.bytes


class Matcher:
    """One sequence's position in a `TokenAutomaton`: check, advance, mask, roll back, fork."""

    __slots__ = ("automaton", "_states", "_cursor")

    def __init__(self, automaton: TokenAutomaton, states: list):
        self.automaton = automaton
        self._states = states
        # with native steps, the position held natively too: `check` passes only the token
        steps = automaton.native_steps
        self._cursor = None if steps is None else steps.cursor()
        self._moved()

    # -- queries (no state change) --------------------------------------------------------------

    @property
    def state(self) -> Hashable:
        return self._states[-1]

    @property
    def n_tokens(self) -> int:
        return len(self._states) - 1

    def mask_source(self) -> tuple[TokenAutomaton, Hashable]:
        return self.automaton, self._states[-1]

    def finished(self) -> bool:
        return self._states[-1] is FINISHED

    def check(self, token: int) -> bool:
        cursor = self._cursor
        if cursor is not None and units_left() is None:
            return cursor.allows(token)
        a = self.automaton
        state = self._states[-1]
        if state is FINISHED:
            return False
        if a.native_steps is not None:  # metered: fuel is active
            return a.native_steps.allows(state, token)
        if token in a.eos:
            return a.automaton.accepting(state)
        packed = a.masks.get(state)
        if packed is not None:
            return bitmask.allows(packed, token)
        return a.step(state, token) is not None

    def accepting(self) -> bool:
        state = self._states[-1]
        return state is not FINISHED and self.automaton.automaton.accepting(state)

    def done(self) -> bool:
        state = self._states[-1]
        return state is FINISHED or not self.automaton.automaton.can_continue(state)

    def bitmask(self) -> np.ndarray:
        state = self._states[-1]
        if state is FINISHED:
            return np.zeros(bitmask.n_words(self.automaton.vocab.size), dtype=np.int32)
        return self.automaton.bitmask_for(state)

    def mask(self) -> np.ndarray:
        return bitmask.unpack(self.bitmask(), self.automaton.vocab.size)

    def mask_key(self) -> Hashable:
        return self._states[-1]

    def forced_bytes(self) -> bytes:
        state = self._states[-1]
        if state is FINISHED:
            return b""
        return self.automaton.automaton.forced_bytes(state)

    def forced(self) -> list[int]:
        """A canonical tokenization of the forced bytes, backed off at the end.

        The last tokens (up to three) are dropped from the first one where a single vocabulary
        token could spell the rest of the forced text and continue past its end (token
        healing), so forcing never rules out the tokenization the model would prefer.
        """
        data = self.forced_bytes()
        if not data:
            return []
        vocab = self.automaton.vocab
        ids = vocab.encode_bytes(data)
        starts = np.cumsum([0] + [len(vocab.token_bytes(t)) for t in ids[:-1]]).tolist()
        for k in range(max(0, len(ids) - _MAX_FORCED_BACKOFF), len(ids)):
            # one token could spell the forced text from here on and continue past its end
            if vocab.trie.has_extension(data[starts[k] :]):
                return ids[:k]
        return ids

    def count_forced(self, tokens: Sequence[int]) -> int:
        """How many of `tokens`, the text tokens consumed so far in order, the grammar forced:
        at their position it allowed no text but their bytes (computed at the end from the
        states kept for rollback rather than at every step)."""
        automaton = self.automaton.automaton
        vocab = self.automaton.vocab
        count = 0
        for here, token in zip(self._states, tokens):
            data = vocab.token_bytes(token)
            for i in range(len(data) if data else 0):
                if automaton.accepting(here) or automaton.expected_bytes(here) != [data[i]]:
                    break
                here = automaton.step(here, data[i : i + 1])
            else:
                count += bool(data)
        return count

    # -- state changes --------------------------------------------------------------------------

    def advance(self, token: int) -> None:
        state = self._states[-1]
        a = self.automaton
        if state is not FINISHED:
            if token in a.eos:
                if a.automaton.accepting(state):
                    self._states.append(FINISHED)
                    self._moved()
                    return
            else:
                nxt = a.step(state, token)
                if nxt is not None:
                    self._states.append(nxt)
                    self._moved()
                    return
        raise InvalidTokenError(self.why_invalid(token))

    def advance_many(self, tokens: Sequence[int]) -> None:
        advance_many(self, tokens)

    def rollback(self, n: int = 1) -> None:
        if not 0 <= n <= len(self._states) - 1:
            raise ValueError(f"cannot roll back {n} tokens: only {len(self._states) - 1} consumed")
        if n:
            del self._states[-n:]
            self._moved()

    def _moved(self) -> None:
        """Move the native cursor (if any) to the last state."""
        cursor = self._cursor
        if cursor is not None:
            state = self._states[-1]
            if state is FINISHED:
                cursor.finish()
            else:
                cursor.move_to(state)

    def fork(self) -> Matcher:
        return Matcher(self.automaton, list(self._states))

    def why_invalid(self, token: int) -> str:
        """Why the automaton refuses `token` here, in words."""
        a = self.automaton
        where = f"after {self.n_tokens} tokens"
        if self._states[-1] is FINISHED:
            return f"token {token} {where}: the sequence already ended with EOS"
        if token in a.eos:
            return f"EOS {where}: the text so far is not complete in the grammar"
        if token in a.special_texts:
            return f"special token {a.special_texts[token]} {where}: the grammar does not expect it here"
        special = next((text for text, i in a.vocab.special_ids.items() if i == token), None)
        if special is not None:
            return f"special token {special} {where}: the grammar does not use it"
        data = a.vocab.token_bytes(token)
        if data is None:
            return f"token {token} {where}: a special or padding token carries no text"
        expected = bytes(a.automaton.expected_bytes(self._states[-1])[:16])
        return f"token {token} {data!r} {where}: the grammar expects one of the bytes {expected!r} next"

    def __repr__(self) -> str:
        return f"Matcher(n_tokens={self.n_tokens}, accepting={self.accepting()})"


def advance_many(matcher: TokenMatcher, tokens: Sequence[int]) -> None:
    """Consume `tokens` with `matcher`; on an invalid one, undo what was consumed and raise."""
    done = 0
    try:
        for t in tokens:
            matcher.advance(t)
            done += 1
    except InvalidTokenError:
        matcher.rollback(done)
        raise


def _special_id(vocab: Vocabulary, text: str) -> int:
    """The id of the special token a grammar names by its text, or as ``<[id]>`` by its id."""
    token = token_id_reference(text)
    if token is not None:
        _check_special_id(vocab, text, token)
    else:
        token = vocab.special_ids.get(text)
    if token is None:
        raise GrammarError(
            f"the grammar uses the special token {text!r}, which this vocabulary does not have"
        )
    if token in vocab.eos_ids:
        raise GrammarError(
            f"the grammar uses the special token {text!r}, which is an EOS id of this vocabulary; "
            f"drop it from the grammar: EOS is allowed wherever the grammar's text is complete"
        )
    return token


def _by_id(special_ids: dict[str, int]) -> dict[int, str]:
    """Special token id -> the text the grammar names it by; one id named two ways (as
    ``<think>`` and ``<[1000]>``) is an error, since a token is scanned by one name."""
    texts: dict[int, str] = {}
    for text, token in sorted(special_ids.items()):
        if token in texts:
            raise GrammarError(
                f"the grammar names the special token {token} twice, as {texts[token]} and "
                f"{text}; use one spelling"
            )
        texts[token] = text
    return texts


def _check_special_id(vocab: Vocabulary, text: str, token: int) -> None:
    """`token` (named as `text`, ``<[id]>``) is a special token of `vocab` (or an EOS id)."""
    if token >= vocab.size:
        raise GrammarError(
            f"the grammar uses the token {text}, but this vocabulary has {vocab.size} tokens"
        )
    data = vocab.token_bytes(token)
    if data is not None:
        raise GrammarError(
            f"the grammar uses the token {text}, a text token of this vocabulary ({data!r}): "
            f"a grammar constrains the text, not how it is split into tokens, so only special "
            f"tokens can be named; write its text as a string instead"
        )
    if token not in vocab.eos_ids and token not in vocab.special_ids.values():
        raise GrammarError(
            f"the grammar uses the token {text}, which is neither a special token nor EOS in "
            f"this vocabulary (a padding or unused id)"
        )


def prefill_masks(states: Sequence[tuple[TokenAutomaton, Hashable]], threads: int = 2) -> int:
    """Compute and cache the masks of many states at once (a batch's next step): those of
    native automata in one call on `threads` threads without the GIL (states of different
    grammars side by side), the others one by one. Returns how many were computed; a cached
    state costs a lookup.

    Raises:
        VocabularyError: as `TokenAutomaton.bitmask_for`.
    """
    batches: dict[int, list[tuple[TokenAutomaton, Hashable, NativeMaskSource]]] = {}
    wanted: set[tuple[int, Hashable]] = set()
    computed = 0
    for automaton, state in states:
        key = (id(automaton), state)
        if state is FINISHED or key in wanted or automaton.masks.get(state) is not None:
            continue
        wanted.add(key)
        native = automaton.native_masks()
        if native is None:
            automaton.bitmask_for(state)
            computed += 1
        else:
            batches.setdefault(native.n_words, []).append((automaton, state, native))
    for n_words, jobs in batches.items():
        out = np.zeros((len(jobs), n_words), dtype=np.int32)
        found = fill_batch([(native, state) for _, state, native in jobs], out, threads)
        for (automaton, state, _), row, nonempty in zip(jobs, out, found):
            automaton.keep_mask(state, row.copy(), nonempty)
        computed += len(jobs)
    return computed
