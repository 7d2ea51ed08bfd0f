"""The token budget: a constraint that the text be complete within a number of tokens.

`Budgeted` wraps a matcher so its language shrinks to the texts that fit the budget: near the
end of it (once fewer than ``64 +`` the shortest completion's tokens are left) a token is
allowed only if a shortest completion after it still fits in the tokens left, so a generation
cut by the budget ends with a complete text. When no completion fits any more (a deadline
lowered the budget, or the text nested deeper than it left room for), the text is *closed*:
the tokens of one shortest completion, fixed at that point, are the only ones allowed, then
EOS (so closing always ends, in as few tokens as the automaton knows; a rollback before that
point, or a larger budget, lifts it). The filter is off when a token lengthens the shortest
completion by more than 64 tokens at once, in a state whose completion the automaton cannot
find, and where the inner matcher refuses the completion's next token (a text check's
repeated key): there the text may be cut by the budget, finishing "length".

What a budget allows depends on the sequence's own tokens only: never on which states other
sequences, or earlier queries, visited (the shared plans are a function of the state), so a
sampler, speculation or a second request decode the same text under it.

The budget is the one home of what may change it while generating: a deadline lowers it
(`set_limit`), a dead end it alone causes makes it give way (`give_way`), never past its
ceiling (`max_tokens`). `CompletionPlans` holds the shortest completions it plans with,
shared by every sequence of a constraint.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import NamedTuple

import numpy as np

from constrain.constraints.wrapper import MatcherWrapper
from constrain.engine import bitmask
from constrain.engine.automaton import MAX_COMPLETION_BYTES
from constrain.engine.cache import BoundedCache
from constrain.engine.matcher import TokenAutomaton, TokenMatcher
from constrain.errors import InvalidTokenError
from constrain.fuel import burn

__all__ = ["Budgeted", "CompletionPlans"]

# a budget filters tokens once fewer are left than this + the shortest completion: wide enough
# for any one token's jump in what is owed (an opening bracket with required members), small
# enough that most generations never pay for a filtered mask
_WINDOW = 64
_SLACK = 8  # tokens a budget grows by when it alone leaves no token (`give_way`)
_PLANS_KEPT = 2**18  # states whose shortest completion is remembered
_PLANS_BYTES = 32 * 2**20  # and the bytes of their tokens
_OWED_KEPT = 64  # states whose per-token completion lengths are kept (200 KB each at 49k)
_OWED_BYTES = 16 * 2**20  # and their bytes (a 262k vocabulary's are 1 MB each)
_UNKNOWN = np.iinfo(np.int32).max
_EOS_NEXT = -1  # while closing: the completion is spelled, EOS comes next


class CompletionPlans:
    """Shortest completions of automaton states as tokens, cached for one token automaton."""

    def __init__(self, automaton: TokenAutomaton):
        self.automaton = automaton
        self._tokens: BoundedCache[Hashable, tuple[int, ...] | None] = BoundedCache(
            _PLANS_KEPT, max_bytes=_PLANS_BYTES, size=_plan_bytes
        )
        self._owed: BoundedCache[Hashable, np.ndarray] = BoundedCache(
            _OWED_KEPT, max_bytes=_OWED_BYTES, size=lambda owed: owed.nbytes
        )

    def nbytes(self) -> int:
        """The bytes the plans hold."""
        return self._tokens.bytes + self._owed.bytes

    def completion(self, state: Hashable) -> tuple[int, int | None] | None:
        """A shortest completion of `state`: ``(tokens, first token)`` (``(0, None)`` when the
        state accepts); None when the automaton finds none or its tokens do not spell it."""
        ids = self.completion_tokens(state)
        if ids is None:
            return None
        return len(ids), ids[0] if ids else None

    def completion_tokens(self, state: Hashable) -> tuple[int, ...] | None:
        """The tokens of a shortest completion of `state` (see `completion`): the shortest
        text the automaton finds, tokenized. A function of the state alone, whatever was
        asked before.

        The shortest text in bytes need not tokenize into the fewest tokens, and a
        tokenization that starts inside a character can fall out of step with the one before
        it: the state after a completion's first token may plan a longer one. `Budgeted`
        carries on with the rest of the completion it followed then."""
        return self._tokens.get_or_build(state, lambda: self._tokenized(state))

    def _tokenized(self, state: Hashable) -> tuple[int, ...] | None:
        text = self.automaton.automaton.completion(state)
        if text is None or len(text) > MAX_COMPLETION_BYTES:  # no budget holds a longer one
            return None
        burn(1 + 2 * len(text))  # tokenized, then spelled again to check
        tokens = self.automaton.vocab.encode_bytes(text) if text else []
        if self.automaton.vocab.decode_bytes(tokens) != text:
            return None
        return tuple(tokens)

    def shortest_tokens(self) -> int | None:
        """Tokens of the shortest whole text the automaton finds (None: none found). Another
        spelling could need fewer tokens: this is what a budget plans with, not a bound."""
        plan = self.completion(self.automaton.automaton.start)
        return None if plan is None else plan[0]

    def owed_after(self, state: Hashable) -> np.ndarray:
        """Per token allowed at `state`: the tokens of a shortest completion after it (int32,
        shape (vocab.size,); a huge value where the token is not allowed or no completion is
        known). Kept for the most recent states, so a budget filters a mask in one comparison."""
        found = self._owed.get(state)
        if found is not None:
            return found
        automaton = self.automaton
        owed = np.full(automaton.vocab.size, _UNKNOWN, dtype=np.int32)
        for after, tokens in automaton.successors(state):  # few states: plans looked up once
            plan = self.completion(after)
            if plan is not None:
                owed[tokens] = plan[0]
        if automaton.automaton.accepting(state):
            owed[automaton.eos_array] = 0
        self._owed[state] = owed
        return owed


def _plan_bytes(tokens: tuple[int, ...] | None) -> int:
    """A plan's bytes: its tuple and its ints (token ids past 256 are objects of their own)."""
    return 64 + 36 * len(tokens or ())


# a completion as (tokens, offset): its tokens are tokens[offset:] (a followed one shares them)
_Plan = tuple[tuple[int, ...], int]


class _Followed(NamedTuple):
    """A completion a sequence follows: at `position` tokens its plan is `tokens[offset:]`
    (when shorter than its state's own); `previous` is the one it followed before (rollback)."""

    position: int
    tokens: tuple[int, ...]
    offset: int
    previous: _Followed | None


class Budgeted(MatcherWrapper):
    """`inner` held to a token budget of `limit` tokens (EOS not counted; see the module
    docstring), which may move between `floor` and `ceiling` while generating."""

    __slots__ = ("plans", "limit", "ceiling", "floor", "slack_at", "_closing", "_followed")

    def __init__(
        self,
        inner: TokenMatcher,
        plans: CompletionPlans,
        limit: int,
        ceiling: int | None = None,
    ):
        super().__init__(inner)
        self.plans = plans
        self.limit = limit
        self.ceiling = limit if ceiling is None else ceiling
        self.floor = 0  # the budget keeps at least this (raised when it gives way)
        self.slack_at = -1  # the position where the budget last gave way
        # (tokens consumed when closing began, the completion it follows, the limit then)
        self._closing: tuple[int, tuple[int, ...], int] | None = None
        self._followed: _Followed | None = None  # immutable: forks share it

    # -- queries ----------------------------------------------------------------------------------

    def check(self, token: int) -> bool:
        inner = self.inner
        if token in self.plans.automaton.eos or inner.finished():
            return inner.check(token)
        plan = self._plan()
        closing = self._closing_token(plan)
        if closing is not None:
            return token == closing and inner.check(token)
        window = self._window(plan)
        return inner.check(token) and (window is None or self._fits(window, token))

    def bitmask(self) -> np.ndarray:
        inner = self.inner
        if inner.finished():
            return inner.bitmask()
        size = self.plans.automaton.vocab.size
        plan = self._plan()
        closing = self._closing_token(plan)
        if closing is not None:  # the one token of the completion being followed, or EOS
            if closing == _EOS_NEXT:
                allowed = self.plans.automaton.eos_array if inner.accepting() else []
            else:
                allowed = [closing] if inner.check(closing) else []
            return bitmask.from_ids(allowed, size)
        packed = inner.bitmask()
        window = self._window(plan)
        if window is None:
            return packed
        room, first = window
        fits = self.plans.owed_after(inner.state) <= room
        if first is not None:
            fits[first] = True
        fits[self.plans.automaton.eos_array] = True  # EOS is not counted (as in `check`)
        return packed & bitmask.pack(fits)

    def mask(self) -> np.ndarray:
        return bitmask.unpack(self.bitmask(), self.plans.automaton.vocab.size)

    def mask_key(self) -> Hashable | None:
        return None if self.binds() else self.inner.mask_key()

    def binds(self) -> bool:
        """The budget narrows the next token (its filter, or the text is closing)."""
        if self.inner.finished():
            return False
        plan = self._plan()
        return self._closing_token(plan) is not None or self._window(plan) is not None

    def planned_completion(self) -> tuple[int, ...] | None:
        """The tokens of the shortest completion the budget plans with here (None: none
        known). Following its first token leaves one at least a token shorter."""
        plan = self._plan()
        return None if plan is None else plan[0][plan[1] :]

    def forced(self) -> list[int]:
        """The inner matcher's forced tokens; while closing, the rest of the completion."""
        if self._closing_token(self._plan()) is not None:
            start, ids, _ = self._closing
            return list(ids[self.n_tokens - start :])
        return self.inner.forced()

    # -- state changes ----------------------------------------------------------------------------

    def advance(self, token: int) -> None:
        inner = self.inner
        if token not in self.plans.automaton.eos and not inner.finished():
            where = f"token {token} after {self.n_tokens} tokens"
            plan = self._plan()
            closing = self._closing_token(plan)
            if closing is not None and token != closing:
                raise InvalidTokenError(
                    f"{where}: no completion fits in max_tokens={self.limit}, so the text is "
                    f"closing along a shortest completion; its next token is {closing}"
                )
            window = None if closing is not None else self._window(plan)
            if window is not None and inner.check(token) and not self._fits(window, token):
                raise InvalidTokenError(
                    f"{where}: no completion after it fits in max_tokens={self.limit}"
                )
            inner.advance(token)
            self._follow(plan, token)
        else:
            inner.advance(token)

    def rollback(self, n: int = 1) -> None:
        self.inner.rollback(n)
        if self._closing is not None and self.n_tokens < self._closing[0]:
            self._closing = None
        while self._followed is not None and self._followed.position > self.n_tokens:
            self._followed = self._followed.previous

    def fork(self) -> Budgeted:
        twin = Budgeted(self.inner.fork(), self.plans, self.limit, self.ceiling)
        twin.floor, twin.slack_at, twin._closing = self.floor, self.slack_at, self._closing
        twin._followed = self._followed
        return twin

    def set_limit(self, tokens: int) -> None:
        """Move the budget to `tokens`, kept within ``[floor, ceiling]`` (a deadline's plan)."""
        self.limit = max(self.floor, min(self.ceiling, tokens))

    def give_way(self, banned: set[int]) -> bool:
        """At a dead end: when the budget alone blocks every token not `banned` here (the text
        could go on without it), grow it by a few tokens, once per position and never past
        the ceiling, and say so. The growth is a floor, not a surplus carried on, so later
        steps still close the text in time (validity is a hard constraint, a deadline's budget
        is not)."""
        position = self.n_tokens
        if self.slack_at == position or self.limit >= self.ceiling or not self.binds():
            return False
        free = set(np.flatnonzero(self.inner.mask()).tolist())
        if not free - banned:
            return False
        self.floor = self.limit = min(self.limit + _SLACK, self.ceiling)
        self.slack_at = position
        return True

    # -- the plan -----------------------------------------------------------------------------------

    def _plan(self) -> _Plan | None:
        """The completion planned with here, as ``(tokens, offset)`` (its tokens are
        ``tokens[offset:]``): the state's own, or the rest of the one followed to it when
        that is shorter."""
        own = self.plans.completion_tokens(self.inner.state)
        plan = None if own is None else (own, 0)
        followed = self._followed
        if followed is not None and followed.position == self.n_tokens:
            if own is None or len(followed.tokens) - followed.offset < len(own):
                plan = followed.tokens, followed.offset
        return plan if plan is None or self._allowed_next(*plan) else None

    def _allowed_next(self, tokens: tuple[int, ...], offset: int) -> bool:
        """The inner matcher allows the next token of a completion (EOS once it is spelled).
        Completions are the automaton's: a text check may refuse one (a repeated key), and
        a budget must not plan with it, or the budget alone would leave no token. Asked only
        where the budget binds, so most steps never pay for it."""
        if self.limit - self.n_tokens >= len(tokens) - offset + _WINDOW:
            return True
        if offset == len(tokens):
            return self.inner.accepting()
        return self.inner.check(tokens[offset])

    def _follow(self, plan: _Plan | None, token: int) -> None:
        """After `token`: when it was the first of `plan` and the new state's own completion
        is longer than the rest of it, carry the rest on, so following a completion never
        lengthens it (a budget that fits one always leaves a way to finish)."""
        if plan is None or self.inner.finished():
            return
        tokens, offset = plan
        if offset == len(tokens) or tokens[offset] != token:
            return
        own = self.plans.completion_tokens(self.inner.state)
        if own is None or len(own) > len(tokens) - offset - 1:
            self._followed = _Followed(self.n_tokens, tokens, offset + 1, self._followed)

    def _closing_token(self, plan: _Plan | None) -> int | None:
        """While the text is closing, the one token allowed next (`_EOS_NEXT` once the
        completion is spelled out); None when it is not closing. `plan` is `_plan()`'s."""
        if self._closing is not None:
            start, ids, limit = self._closing
            # the budget was raised again, or the inner matcher refuses the completion here
            if self.limit > limit or not self._allowed_next(ids, self.n_tokens - start):
                self._closing = None
        if self._closing is None:
            if self.inner.finished():
                return None
            if plan is None or self.limit - self.n_tokens >= len(plan[0]) - plan[1]:
                return None
            self._closing = (self.n_tokens, plan[0][plan[1] :], self.limit)
        start, ids, _ = self._closing
        done = self.n_tokens - start
        return ids[done] if done < len(ids) else _EOS_NEXT

    def _window(self, plan: _Plan | None) -> tuple[int, int | None] | None:
        """``(tokens left after the next one, the token starting a shortest completion)`` when
        the budget filters the next token; None when it does not (more than the window away
        from it, no known completion, or closing, which `_closing_token` handles)."""
        if plan is None:
            return None
        tokens, offset = plan
        needed = len(tokens) - offset
        left = self.limit - self.n_tokens
        if left >= needed + _WINDOW:
            return None
        return left - 1, tokens[offset] if needed else None

    def _fits(self, window: tuple[int, int | None], token: int) -> bool:
        """`token` leaves a completion within the budget. The token that starts this state's
        shortest completion always does, so the filter never leaves a feasible text without a
        way to finish."""
        room, first = window
        if token == first:
            return True
        plan = self.plans.completion(self.plans.automaton.step(self.inner.state, token))
        return plan is not None and plan[0] <= room

    def __repr__(self) -> str:
        return f"Budgeted({self.inner!r}, limit={self.limit})"
