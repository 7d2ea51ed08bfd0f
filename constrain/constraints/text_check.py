"""`TextChecked`: a matcher and a condition on its text, checked together (their product).

Some conditions are not expressible by an automaton: no duplicate JSON keys, unique array
items over open item languages, the check sites of a JSON Schema. The grammar carries them as
a `TextCheck` (`constrain.engine.automaton`), and `TextChecked` keeps the check's state beside
each automaton state: a token the check refuses is refused by `check`, `advance` and the masks
alike, exactly as if the two were one constraint. Only the tokens the check names as risky in
its current state are scanned by `check` and the masks, all of a mask's at once
(`TextCheck.refused`, native for JSON key checks); `advance` feeds every token.
"""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from constrain.constraints.wrapper import MatcherWrapper
from constrain.engine import bitmask
from constrain.engine.automaton import TextCheck
from constrain.engine.cache import BoundedCache
from constrain.engine.matcher import TokenMatcher
from constrain.engine.vocab import Vocabulary
from constrain.errors import InvalidTokenError

__all__ = ["TextChecked"]


class TextChecked(MatcherWrapper):
    """`inner` with `text_check` applied to its text (see the module docstring)."""

    __slots__ = ("text_check", "vocab", "masks", "_texts")

    def __init__(
        self,
        inner: TokenMatcher,
        text_check: TextCheck,
        vocab: Vocabulary,
        masks: BoundedCache,
        texts: list | None = None,
    ):
        super().__init__(inner)
        self.text_check = text_check
        self.vocab = vocab
        self.masks = masks  # narrowed bitmasks by `mask_key`: the constraint's, shared
        self._texts = texts if texts is not None else [text_check.start]

    # -- queries ----------------------------------------------------------------------------------

    def check(self, token: int) -> bool:
        return self.inner.check(token) and self._allows(token)

    def bitmask(self) -> np.ndarray:
        packed = self.inner.bitmask()
        here = self._texts[-1]
        risky = self.text_check.risky(here)
        if risky is None or self.inner.finished():
            return packed
        key = self.mask_key()
        found = None if key is None else self.masks.get(key)
        if found is None:
            sensitive = self.text_check.select(risky, self.vocab)
            allowed = bitmask.allowed_among(packed, sensitive)
            refused = self.text_check.refused(here, allowed, self.vocab)
            found = bitmask.without(packed, refused) if refused else packed
            if key is not None:
                self.masks[key] = found
        return found

    def mask(self) -> np.ndarray:
        return bitmask.unpack(self.bitmask(), self.vocab.size)

    def mask_key(self) -> Hashable | None:
        """The inner key while the check cannot refuse anything; with risky tokens, the inner
        key and what the check's refusals depend on (None when that is this sequence alone)."""
        here = self._texts[-1]
        risky = self.text_check.risky(here)
        inner = self.inner.mask_key()
        if risky is None or not len(self.text_check.select(risky, self.vocab)):
            return inner
        shared = self.text_check.state_key(here)
        return None if shared is None or inner is None else ("text check", inner, shared)

    # -- state changes ----------------------------------------------------------------------------

    def advance(self, token: int) -> None:
        self.inner.advance(token)
        data = self.vocab.token_bytes(token)
        text = self.text_check.feed(self._texts[-1], data) if data else self._texts[-1]
        if text is None:
            self.inner.rollback(1)
            raise InvalidTokenError(
                f"token {token} after {self.n_tokens} tokens: it completes a duplicate key or a "
                f"repeated unique item"
            )
        self._texts.append(text)

    def rollback(self, n: int = 1) -> None:
        self.inner.rollback(n)
        if n:
            del self._texts[-n:]

    def fork(self) -> TextChecked:
        inner = self.inner.fork()
        return TextChecked(inner, self.text_check, self.vocab, self.masks, list(self._texts))

    # -- the check ---------------------------------------------------------------------------------

    def _allows(self, token: int) -> bool:
        """The check lets `token` through (only tokens it names as risky are scanned)."""
        here = self._texts[-1]
        risky = self.text_check.risky(here)
        data = self.vocab.token_bytes(token)
        if risky is None or not data or not self.text_check.selects(risky, data):
            return True
        return not self.text_check.refused(here, np.array([token]), self.vocab)
