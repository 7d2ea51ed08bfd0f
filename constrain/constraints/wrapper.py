"""`MatcherWrapper`: a matcher composed over another, delegating what it does not change.

A condition on the text beyond the automaton (a text check, a token budget) is a wrapper with
the `TokenMatcher` interface: it overrides what the condition narrows (`check`, `bitmask`
and `mask`, `mask_key`, `advance`, `rollback`, `fork`) and passes everything else through.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from constrain.engine.matcher import TokenAutomaton, TokenMatcher, advance_many

__all__ = ["MatcherWrapper"]


class MatcherWrapper:
    """`inner` seen through a further condition (subclasses say which)."""

    __slots__ = ("inner",)

    def __init__(self, inner: TokenMatcher):
        self.inner = inner

    @property
    def state(self) -> Hashable:
        return self.inner.state

    @property
    def n_tokens(self) -> int:
        return self.inner.n_tokens

    def check(self, token: int) -> bool:
        return self.inner.check(token)

    def bitmask(self) -> np.ndarray:
        return self.inner.bitmask()

    def mask_source(self) -> tuple[TokenAutomaton, Hashable]:
        return self.inner.mask_source()

    def mask(self) -> np.ndarray:
        return self.inner.mask()

    def mask_key(self) -> Hashable | None:
        return self.inner.mask_key()

    def accepting(self) -> bool:
        return self.inner.accepting()

    def done(self) -> bool:
        return self.inner.done()

    def finished(self) -> bool:
        return self.inner.finished()

    def forced_bytes(self) -> bytes:
        return self.inner.forced_bytes()

    def forced(self) -> list[int]:
        return self.inner.forced()

    def count_forced(self, tokens: Sequence[int]) -> int:
        return self.inner.count_forced(tokens)

    def advance(self, token: int) -> None:
        self.inner.advance(token)

    def advance_many(self, tokens: Sequence[int]) -> None:
        advance_many(self, tokens)

    def rollback(self, n: int = 1) -> None:
        self.inner.rollback(n)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"
