"""Constraint and Matcher: the token-level view of a grammar that every sampler uses.

``Constraint = Grammar + Vocabulary``. It owns what all sequences can share: the token masks,
computed lazily (one trie walk per automaton state, on first visit) and cached by state.

A `Matcher` is one sequence's position in the automaton: a stack of states, one per consumed
token, so `rollback(n)` is a pop and `fork()` a list copy. Its invariants:

* **soundness**: a token is allowed only if some continuation of the text after it is in the
  language (the automaton only yields live states);
* **completeness**: every token whose bytes keep the text completable is allowed;
* EOS ids are allowed exactly when the text so far is in the language; special and padding ids
  never are. After EOS nothing is allowed.

Errors on the hot path raise: `advance` with a forbidden token raises `InvalidTokenError`;
`check` never raises (it answers False).
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Hashable, Sequence

import numpy as np

from constrain.engine.grammar import Grammar
from constrain.engine.slices import slices_of
from constrain.engine.vocab import Vocabulary
from constrain.errors import GrammarError, InvalidTokenError, VocabularyError

__all__ = ["Constraint", "Matcher"]

_FINISHED = object()  # the state after EOS
_MAX_FORCED_BACKOFF = 3  # forced tokens dropped at most from the end (token healing)
_MAX_CACHED_STEPS = 2**18  # token transitions remembered per Constraint (cleared when full)
# a budget filters tokens once fewer are left than this + the shortest completion: wide enough
# for any one token's jump in what is owed (an opening bracket with required members), small
# enough that most generations never pay for a filtered mask
_BUDGET_WINDOW = 64
_OWED_AFTER_STATES = 64  # states whose per-token completion lengths are kept (200 KB each at 49k)
_UNKNOWN = np.iinfo(np.int32).max
_EOS_NEXT = -1  # while closing: the completion is spelled, EOS comes next
# token ids per (kind of text check, selector), per vocabulary
_SELECTED: weakref.WeakKeyDictionary[Vocabulary, dict] = weakref.WeakKeyDictionary()


class Constraint:
    """A grammar bound to a vocabulary: masks cached by automaton state, shared by sequences.

    Args:
        grammar: what the text must be.
        vocab: the model's vocabulary (token bytes, EOS ids, logits size).
        max_cache_bytes: bound on the mask cache; the least recently used masks are evicted
            (context-free grammars have unboundedly many parser states).
    """

    def __init__(self, grammar: Grammar, vocab: Vocabulary, *, max_cache_bytes: int = 256 * 2**20):
        self.grammar = grammar
        self.vocab = vocab
        self.automaton = grammar.automaton
        self.max_cache_bytes = max_cache_bytes
        self._masks: OrderedDict[Hashable, np.ndarray] = OrderedDict()  # least recently used first
        self._eos = frozenset(vocab.eos_ids)
        self._eos_array = np.array(vocab.eos_ids, dtype=np.int64)
        self._special_ids = {
            text: _special_id(vocab, text) for text in self.automaton.special_texts
        }
        self._special_texts = {i: text for text, i in self._special_ids.items()}
        self._steps: dict[tuple[Hashable, int], Hashable | None] = {}
        self._completions: dict[Hashable, tuple[int, ...] | None] = {}
        self._passed_on: set[Hashable] = set()  # states whose completion `after` knows
        self._owed_after: OrderedDict[Hashable, np.ndarray] = OrderedDict()

    def start(self, max_tokens: int | None = None) -> Matcher:
        """A fresh Matcher at the start of the text.

        Args:
            max_tokens: a token budget (EOS not counted): the Matcher then allows only tokens
                after which the text can still be completed within it (see `Matcher`).
        """
        check = self.grammar.check
        return Matcher(
            self, [self.automaton.start], max_tokens, None if check is None else [check.start]
        )

    def completion(self, state: Hashable) -> tuple[int, int | None] | None:
        """A shortest completion of `state`: ``(tokens, first token)`` of its bytes tokenized
        (``(0, None)`` when the state accepts); None when the automaton finds none or its
        tokenization does not spell it. Cached by state."""
        ids = self.completion_tokens(state)
        if ids is None:
            return None
        return len(ids), ids[0] if ids else None

    def shortest_tokens(self) -> int | None:
        """Tokens of the shortest whole text the automaton finds (None: none found). Another
        spelling could need fewer tokens: this is what a budget plans with, not a bound."""
        plan = self.completion(self.automaton.start)
        return None if plan is None else plan[0]

    def completion_tokens(self, state: Hashable) -> tuple[int, ...] | None:
        """The tokens of a shortest completion of `state` (see `completion`).

        Following a completion never lengthens it: the rest of it is passed on to the state
        after its first token whenever that state knows no shorter one. (The shortest text in
        bytes need not tokenize into the fewest tokens, and a tokenization that starts inside
        a character can fall out of step with the one before it.) A budget relies on this: the
        first token of a completion that fits always leaves one that fits."""
        try:
            ids = self._completions[state]
        except KeyError:
            ids = self._completions[state] = self._tokenized_completion(state)
        if ids and state not in self._passed_on:
            self._passed_on.add(state)
            after = self._step(state, ids[0])
            known = self._completions.get(after)
            if after is not None and (known is None or len(known) > len(ids) - 1):
                self._completions[after] = ids[1:]
                self._passed_on.discard(after)
        return ids

    def _tokenized_completion(self, state: Hashable) -> tuple[int, ...] | None:
        text = self.automaton.completion(state)
        if text is None:
            return None
        tokens = _tokenize(self.vocab, text) if text else []
        if b"".join(self.vocab.token_bytes(t) for t in tokens) != text:
            return None
        return tuple(tokens)

    def owed_after(self, state: Hashable) -> np.ndarray:
        """Per token allowed at `state`: the tokens of a shortest completion after it (int32,
        shape (vocab.size,); a huge value where the token is not allowed or no completion is
        known). Cached for the most recent states, so a budget filters a mask in one
        comparison."""
        found = self._owed_after.get(state)
        if found is not None:
            self._owed_after.move_to_end(state)
            return found
        owed = np.full(self.vocab.size, _UNKNOWN, dtype=np.int32)
        for token in np.flatnonzero(self.mask_for(state)).tolist():
            if token in self._eos:
                owed[token] = 0
                continue
            plan = self.completion(self._step(state, token))
            if plan is not None:
                owed[token] = plan[0]
        self._owed_after[state] = owed
        if len(self._owed_after) > _OWED_AFTER_STATES:
            self._owed_after.popitem(last=False)
        return owed

    def mask_for(self, state: Hashable) -> np.ndarray:
        """Allowed next tokens at automaton `state` (bool, shape (vocab.size,), read-only, cached).

        Raises:
            VocabularyError: the state is not accepting and no token of the vocabulary fits.
        """
        mask = self._masks.get(state)
        if mask is not None:
            self._masks.move_to_end(state)
            return mask
        mask = np.zeros(self.vocab.size, dtype=bool)
        slices = slices_of(self.vocab)
        admitted = slices.admitted(lambda language: self.automaton.admits(state, language))
        for part, whole in zip(slices.slices, admitted):
            if whole:
                mask[part.tokens] = True
        mask[self.automaton.token_ids(state, slices.trie_without(admitted))] = True
        for text in self.automaton.allowed_specials(state):
            mask[self._special_ids[text]] = True
        accepting = self.automaton.accepting(state)
        if accepting:
            mask[self._eos_array] = True
        elif not mask.any():
            expected = bytes(self.automaton.expected_bytes(state)[:16])
            raise VocabularyError(
                f"no token of the vocabulary can continue here: the grammar expects one of the "
                f"bytes {expected!r} but no text token starts with them"
            )
        mask.flags.writeable = False
        self._masks[state] = mask
        while len(self._masks) * mask.nbytes > self.max_cache_bytes and len(self._masks) > 1:
            self._masks.popitem(last=False)
        return mask

    def _step(self, state: Hashable, token: int) -> Hashable | None:
        """The state after a text or special token (not EOS), or None if it is not allowed.

        Cached by ``(state, token)``: a sampler checks a token and then advances with it, and
        states recur within and across sequences.
        """
        key = (state, token)
        try:
            return self._steps[key]
        except KeyError:
            pass
        special = self._special_texts.get(token)
        if special is not None:
            nxt = self.automaton.step_special(state, special)
        else:
            data = self.vocab.token_bytes(token)
            nxt = self.automaton.step(state, data) if data else None
        if len(self._steps) >= _MAX_CACHED_STEPS:
            self._steps.clear()
        self._steps[key] = nxt
        return nxt

    def tokens_selected(self, selector: Hashable) -> np.ndarray:
        """Ids of the text tokens the grammar's text check selects (see `TextCheck`). A
        ``("prefixes", rests, inner)`` selector is read off the token trie (the tokens starting
        with one of `rests`, plus those `inner` selects); any other is cached per vocabulary
        and kind of check, so every constraint of a vocabulary shares it."""
        if selector[0] == "prefixes":
            _, rests, inner = selector
            trie = self.vocab.trie
            found = [trie.tokens_with_prefix(rest) for rest in rests]
            return np.unique(np.concatenate([self.tokens_selected(inner), *found]))
        check = self.grammar.check
        cache = _SELECTED.setdefault(self.vocab, {})
        key = (type(check), selector)
        found = cache.get(key)
        if found is None:
            vocab = self.vocab
            found = cache[key] = np.array(
                [
                    t
                    for t in range(vocab.size)
                    if (text := vocab.token_bytes(t)) and check.selects(selector, text)
                ],
                dtype=np.int64,
            )
        return found

    @property
    def cached_states(self) -> int:
        """Number of automaton states whose mask is cached."""
        return len(self._masks)

    @property
    def cache_bytes(self) -> int:
        """Memory held by the mask cache, in bytes."""
        return sum(m.nbytes for m in self._masks.values())

    def __repr__(self) -> str:
        return f"Constraint({self.grammar!r}, {self.vocab!r})"


class Matcher:
    """One sequence's state in a `Constraint`: check, advance, mask, roll back, fork.

    With a token budget (``max_tokens``, which a caller may lower while generating) the language
    shrinks to the texts that fit it: near the end of the budget (once fewer than ``64 +`` the
    shortest completion's tokens are left) a token is allowed only if a shortest completion
    after it still fits in the tokens left, so a generation cut by the budget ends with a
    complete text. When no completion fits any more (a deadline lowered the budget, or the
    text nested deeper than it left room for), the text is *closed*: the tokens of one
    shortest completion, fixed at that point, are the only ones allowed, then EOS (so closing
    always ends, in as few tokens as the automaton knows; a rollback before that point, or a
    larger budget, lifts it). The filter is off when a token lengthens the shortest
    completion by more than 64 tokens at once, and in a state whose completion the automaton
    cannot find.

    A grammar with a text check (`Grammar.check`: no duplicate JSON keys, unique items) keeps
    the check's state beside each automaton state; a token the check refuses is refused by
    `check`, `advance` and `mask` alike.
    """

    __slots__ = ("constraint", "_states", "max_tokens", "_texts", "_fed", "_closing")

    def __init__(
        self,
        constraint: Constraint,
        states: list,
        max_tokens: int | None = None,
        texts: list | None = None,
    ):
        self.constraint = constraint
        self._states = states
        self.max_tokens = max_tokens
        self._texts = texts  # the grammar's text-check states, beside `_states` (None: no check)
        # (text-check state, {token: its successor}): what `check` found there, for `advance`
        self._fed: tuple = (None, {})
        # (tokens consumed when closing began, the completion it follows, max_tokens then)
        self._closing: tuple[int, tuple[int, ...], int] | None = None

    # -- queries (no state change) --------------------------------------------------------------

    @property
    def state(self) -> Hashable:
        """The current automaton state (hashable; `_FINISHED` after EOS)."""
        return self._states[-1]

    @property
    def n_tokens(self) -> int:
        """Tokens consumed so far (EOS included)."""
        return len(self._states) - 1

    def finished(self) -> bool:
        """EOS has been consumed."""
        return self._states[-1] is _FINISHED

    def check(self, token: int) -> bool:
        """Would `token` keep the output completable? Costs a walk of the token's bytes."""
        state = self._states[-1]
        if state is _FINISHED:
            return False
        c = self.constraint
        if token in c._eos:
            return c.automaton.accepting(state)
        closing = self._closing_token()
        if closing is not None:
            return (
                token == closing
                and self.constraint._step(state, token) is not None
                and (self._texts is None or self._text_allows(token))
            )
        budget = self._budget()
        if budget is None:
            mask = c._masks.get(state)
            if mask is not None:
                if not (0 <= token < len(mask) and mask[token]):
                    return False
                return self._texts is None or self._text_allows(token)
        nxt = self.constraint._step(state, token)
        if nxt is None or (budget is not None and not self._fits(budget, token, nxt)):
            return False
        return self._texts is None or self._text_allows(token)

    def _text_allows(self, token: int) -> bool:
        """The grammar's text check lets `token` through (only tokens it selects as risky are
        fed here; `advance` feeds every token)."""
        c = self.constraint
        check = c.grammar.check
        risky = check.risky(self._texts[-1])
        data = c.vocab.token_bytes(token)
        if risky is None or not data or not check.selects(risky, data):
            return True
        return self._text_after(token) is not None

    def accepting(self) -> bool:
        """EOS is allowed now: the text so far is in the language."""
        state = self._states[-1]
        return state is not _FINISHED and self.constraint.automaton.accepting(state)

    def done(self) -> bool:
        """Nothing but EOS can follow (or EOS was consumed)."""
        state = self._states[-1]
        return state is _FINISHED or not self.constraint.automaton.can_continue(state)

    def mask(self) -> np.ndarray:
        """Allowed next tokens (bool array of shape (vocab.size,); cached by state, read-only)."""
        state = self._states[-1]
        if state is _FINISHED:
            return np.zeros(self.constraint.vocab.size, dtype=bool)
        c = self.constraint
        closing = self._closing_token()
        if closing is not None:  # the one token of the completion being followed, or EOS
            mask = np.zeros(c.vocab.size, dtype=bool)
            if closing == _EOS_NEXT:
                mask[c._eos_array] = c.automaton.accepting(state)
            elif self.check(closing):
                mask[closing] = True
            return mask
        mask = c.mask_for(state)
        budget = self._budget()
        if budget is None and self._texts is None:
            return mask
        if budget is not None:
            room, first = budget
            mask = mask & (c.owed_after(state) <= room)
            if first is not None:
                mask[first] = True
        risky = None if self._texts is None else c.grammar.check.risky(self._texts[-1])
        if risky is not None:
            sensitive = c.tokens_selected(risky)
            refused = [
                t for t in sensitive[mask[sensitive]].tolist() if self._text_after(t) is None
            ]
            if refused:
                mask = mask.copy() if budget is None else mask
                mask[refused] = False
        return mask

    def budget_binds(self) -> bool:
        """The token budget narrows the next token (its filter, or the text is closing)."""
        if self._states[-1] is _FINISHED:
            return False
        return self._closing_token() is not None or self._budget() is not None

    def mask_key(self) -> Hashable | None:
        """A key under which `mask()` may be cached across sequences (the automaton state), or
        None while the mask also depends on this sequence (a budget or text check filters it)."""
        state = self._states[-1]
        if state is _FINISHED:
            return state
        if self._closing_token() is not None or self._budget() is not None:
            return None
        if self._texts is not None:
            risky = self.constraint.grammar.check.risky(self._texts[-1])
            if risky is not None and len(self.constraint.tokens_selected(risky)):
                return None
        return state

    def forced_bytes(self) -> bytes:
        """The bytes the grammar allows unambiguously next (empty when there is a choice)."""
        state = self._states[-1]
        if state is _FINISHED:
            return b""
        return self.constraint.automaton.forced_bytes(state)

    def count_forced(self, tokens: Sequence[int]) -> int:
        """How many of `tokens`, the text tokens consumed so far in order, the grammar forced:
        at their position it allowed no text but their bytes (a statistic, computed at the end
        from the states kept for rollback rather than at every step)."""
        automaton = self.constraint.automaton
        vocab = self.constraint.vocab
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

    def forced(self) -> list[int]:
        """A canonical tokenization of the forced bytes, backed off at the end.

        The last tokens (up to three) are dropped from the first one where a single vocabulary
        token could spell the rest of the forced text and continue past its end (token
        healing), so forcing never rules out the tokenization the model would prefer. While
        the text is closing, the rest of the completion it follows.
        """
        if self._closing_token() is not None:
            start, ids, _ = self._closing
            return list(ids[self.n_tokens - start :])
        data = self.forced_bytes()
        if not data:
            return []
        vocab = self.constraint.vocab
        ids = _tokenize(vocab, data)
        starts = np.cumsum([0] + [len(vocab.token_bytes(t)) for t in ids[:-1]]).tolist()
        for k in range(max(0, len(ids) - _MAX_FORCED_BACKOFF), len(ids)):
            # one token could spell the forced text from here on and continue past its end
            if vocab.trie.has_extension(data[starts[k] :]):
                return ids[:k]
        return ids

    # -- state changes --------------------------------------------------------------------------

    def advance(self, token: int) -> None:
        """Consume `token` (EOS included).

        Raises:
            InvalidTokenError: the token does not keep the output completable.
        """
        state = self._states[-1]
        c = self.constraint
        if state is not _FINISHED:
            if token in c._eos:
                if c.automaton.accepting(state):
                    self._push(_FINISHED, None if self._texts is None else self._texts[-1])
                    return
            elif (closing := self._closing_token()) is None or token == closing:
                nxt = self.constraint._step(state, token)
                budget = None if closing is not None else self._budget()
                if nxt is not None and (budget is None or self._fits(budget, token, nxt)):
                    if self._texts is None:
                        self._states.append(nxt)
                        return
                    text = self._text_after(token)
                    if text is not None:
                        self._push(nxt, text)
                        return
        raise InvalidTokenError(self._why_invalid(token))

    def _push(self, state: Hashable, text) -> None:
        self._states.append(state)
        if self._texts is not None:
            self._texts.append(text)

    def advance_many(self, tokens: list[int]) -> None:
        """Consume several tokens; on an invalid one nothing is consumed."""
        start = len(self._states)
        try:
            for t in tokens:
                self.advance(t)
        except InvalidTokenError:
            self.rollback(len(self._states) - start)
            raise

    def rollback(self, n: int = 1) -> None:
        """Undo the last `n` tokens."""
        if not 0 <= n <= len(self._states) - 1:
            raise ValueError(f"cannot roll back {n} tokens: only {len(self._states) - 1} consumed")
        if n:
            del self._states[-n:]
            if self._texts is not None:
                del self._texts[-n:]
            if self._closing is not None and self.n_tokens < self._closing[0]:
                self._closing = None

    def fork(self) -> Matcher:
        """An independent copy (shares the Constraint and its caches)."""
        texts = None if self._texts is None else list(self._texts)
        twin = Matcher(self.constraint, list(self._states), self.max_tokens, texts)
        twin._closing = self._closing
        return twin

    def _closing_token(self) -> int | None:
        """While the text is closing (see the class docstring), the one token allowed next
        (`_EOS_NEXT` once the completion is spelled out); None when it is not closing."""
        if self._closing is not None and (
            self.max_tokens is None or self.max_tokens > self._closing[2]
        ):
            self._closing = None  # the budget was raised again
        if self._closing is None:
            if self.max_tokens is None or self._states[-1] is _FINISHED:
                return None
            state = self._states[-1]
            plan = self.constraint.completion(state)
            if plan is None or self.max_tokens - self.n_tokens >= plan[0]:
                return None
            ids = self.constraint.completion_tokens(state)
            self._closing = (self.n_tokens, ids, self.max_tokens)
        start, ids, _ = self._closing
        done = self.n_tokens - start
        return ids[done] if done < len(ids) else _EOS_NEXT

    def _budget(self) -> tuple[int, int | None] | None:
        """``(tokens left after the next one, the token starting a shortest completion)`` when
        the budget filters the next token; None when it does not: no budget, or more than the
        window away from it (or closing, which `_closing_token` handles)."""
        if self.max_tokens is None:
            return None
        plan = self.constraint.completion(self._states[-1])
        if plan is None:
            return None
        needed, first = plan
        left = self.max_tokens - self.n_tokens
        if left >= needed + _BUDGET_WINDOW:
            return None
        return left - 1, first

    def _fits(self, budget: tuple[int, int | None], token: int, nxt: Hashable) -> bool:
        """`token` (leading to state `nxt`) leaves a completion within the budget. The token
        that starts this state's shortest completion always does, so the filter never leaves
        a feasible text without a way to finish."""
        room, first = budget
        if token == first:
            return True
        plan = self.constraint.completion(nxt)
        return plan is not None and plan[0] <= room

    def _text_after(self, token: int):
        """The text-check state after `token` (None: it breaks the check); remembered for the
        tokens asked in the current state, so `advance` after `check` feeds it once."""
        here = self._texts[-1]
        fed_here, fed = self._fed
        if fed_here is not here:
            fed = {}
            self._fed = (here, fed)
        elif token in fed:
            return fed[token]
        data = self.constraint.vocab.token_bytes(token)
        after = fed[token] = self.constraint.grammar.check.feed(here, data) if data else here
        return after

    def _why_invalid(self, token: int) -> str:
        c = self.constraint
        where = f"after {self.n_tokens} tokens"
        if self._states[-1] is _FINISHED:
            return f"token {token} {where}: the sequence already ended with EOS"
        if token in c._eos:
            return f"EOS {where}: the text so far is not complete in the grammar"
        closing = self._closing_token()
        if closing is not None:
            return (
                f"token {token} {where}: no completion fits in max_tokens={self.max_tokens}, so "
                f"the text is closing along a shortest completion; its next token is {closing}"
            )
        nxt = c._step(self._states[-1], token)
        budget = self._budget()
        if nxt is not None and budget is not None and not self._fits(budget, token, nxt):
            return (
                f"token {token} {where}: no completion after it fits in max_tokens="
                f"{self.max_tokens}"
            )
        if nxt is not None and self._texts is not None:
            return f"token {token} {where}: it completes a duplicate key or a repeated unique item"
        if token in c._special_texts:
            return f"special token {c._special_texts[token]} {where}: the grammar does not expect it here"
        special = next((text for text, i in c.vocab.special_ids.items() if i == token), None)
        if special is not None:
            return f"special token {special} {where}: the grammar does not use it"
        data = c.vocab.token_bytes(token)
        if data is None:
            return f"token {token} {where}: a special or padding token carries no text"
        expected = bytes(c.automaton.expected_bytes(self._states[-1])[:16])
        return f"token {token} {data!r} {where}: the grammar expects one of the bytes {expected!r} next"

    def __repr__(self) -> str:
        return f"Matcher(n_tokens={self.n_tokens}, accepting={self.accepting()})"


def _special_id(vocab: Vocabulary, text: str) -> int:
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


def _tokenize(vocab: Vocabulary, data: bytes) -> list[int]:
    """Tokenize `data` with the model's tokenizer when it round-trips, else greedy longest match."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and vocab.tokenizer is not None:
        ids = vocab.encode(text)
        if vocab.decode_bytes(ids) == data:
            return ids
    trie = vocab.trie
    ids: list[int] = []
    pos = 0
    while pos < len(data):
        node, best, best_len = 0, -1, 0
        for k in range(pos, len(data)):
            lo, hi = trie.child_start[node], trie.child_start[node + 1]
            kids = trie.children[lo:hi]
            j = int(np.searchsorted(trie.byte[kids], data[k]))
            if j >= len(kids) or trie.byte[kids[j]] != data[k]:
                break
            node = int(kids[j])
            if trie.token_start[node + 1] > trie.token_start[node]:
                best, best_len = int(trie.tokens[trie.token_start[node]]), k + 1 - pos
        if best < 0:
            return ids  # no token spells the next byte: force only what we could
        ids.append(best)
        pos += best_len
    return ids
