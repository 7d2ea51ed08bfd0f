"""`TextChecked`: a matcher and a condition on its text, checked together (their product).

Some conditions are not expressible by an automaton: no duplicate JSON keys, unique array items
over open item languages, the check sites of a JSON Schema. The grammar carries them as a
`TextCheck` (`constrain.engine.automaton`), and `TextChecked` keeps the check's state beside
each automaton state: a token the check refuses is refused by `check`, `advance` and the masks
alike, exactly as if the two were one constraint. Only the tokens the check names as risky in
its current state are scanned by the masks, all of a mask's at once (`TextCheck.refused`; a
JSON Schema's duplicate-key check is native whole); `advance` feeds every token. Where both the
check and the automaton's token steps are native, `check` asks both in one native call. Where
the check's state has a key (`TextCheck.state_key`), a mask's refusals are kept under it, so
the positions and sequences that share it (inside a long value, the same key being written)
scan nothing again, and a mask is narrowed only when a refused token is one the grammar allows.

A sequence keeps the check's state every `CHECKPOINT_EVERY` tokens and the token ids, not a
state per token (a state is a few hundred bytes, most of a sequence's memory): `rollback`
feeds the few tokens since the checkpoint before it again.
"""

from __future__ import annotations

from array import array
from collections.abc import Hashable

import numpy as np

from constrain.constraints.wrapper import MatcherWrapper
from constrain.engine import bitmask
from constrain.engine.automaton import TextCheck
from constrain.engine.cache import BoundedCache
from constrain.engine.matcher import FINISHED, TokenMatcher
from constrain.engine.vocab import Vocabulary
from constrain.errors import InvalidTokenError
from constrain.fuel import units_left

__all__ = ["CHECKPOINT_EVERY", "TextChecked"]

CHECKPOINT_EVERY = 16  # tokens between the check states a sequence keeps


class TextChecked(MatcherWrapper):
    """`inner` with `text_check` applied to its text (see the module docstring)."""

    __slots__ = (
        "text_check", "vocab", "masks", "refusals", "_here", "_checkpoints", "_tokens",
        "_cursor",
    )  # fmt: skip

    def __init__(
        self,
        inner: TokenMatcher,
        text_check: TextCheck,
        vocab: Vocabulary,
        masks: BoundedCache[Hashable, np.ndarray],
        refusals: BoundedCache[bytes, np.ndarray],
    ):
        super().__init__(inner)
        self.text_check = text_check
        self.vocab = vocab
        self.masks = masks  # narrowed bitmasks by `mask_key`: the constraint's, shared
        self.refusals = refusals  # refused tokens by the check's state key: shared too
        self._here = text_check.start  # the check's state after every token so far
        self._checkpoints = [text_check.start]  # after 0, CHECKPOINT_EVERY, 2 x ... tokens
        self._tokens = array("q")  # every token so far
        # with native token steps and a native check, both held natively: `check` passes only
        # the token (see `_moved`)
        native_check = text_check.native_check(vocab)
        steps = None if native_check is None else inner.mask_source()[0].native_steps
        self._cursor = None if steps is None else steps.cursor(native_check)
        self._moved()

    # -- queries ----------------------------------------------------------------------------------

    def check(self, token: int) -> bool:
        cursor = self._cursor
        if cursor is not None and units_left() is None:
            return cursor.allows(token)
        return self.inner.check(token) and self.text_check.allows(self._here, token, self.vocab)

    def bitmask(self) -> np.ndarray:
        packed = self.inner.bitmask()
        if self.inner.finished():
            return packed
        here = self._here
        shared = self.text_check.state_key(here)
        if shared is None:  # the refusals depend on this sequence alone: scan what is allowed
            risky = self.text_check.risky_tokens(here, self.vocab)
            allowed = bitmask.allowed_among(packed, risky)
            refused = self.text_check.refused(here, allowed, self.vocab)
            return bitmask.without(packed, refused) if len(refused) else packed
        refused = self._refusals(here, shared)
        if not len(refused) or not len(bitmask.allowed_among(packed, refused)):
            return packed
        key = ("text check", self.inner.mask_key(), shared)
        found = self.masks.get(key)
        if found is None:
            found = self.masks[key] = bitmask.without(packed, refused)
        return found

    def mask(self) -> np.ndarray:
        return bitmask.unpack(self.bitmask(), self.vocab.size)

    def mask_key(self) -> Hashable | None:
        """The inner key while the check refuses nothing here; otherwise the inner key and
        what the check's refusals depend on (None when that is this sequence alone)."""
        here = self._here
        shared = self.text_check.state_key(here)
        if shared is None:
            if not len(self.text_check.risky_tokens(here, self.vocab)):
                return self.inner.mask_key()
            return None
        if not len(self._refusals(here, shared)):
            return self.inner.mask_key()
        inner = self.inner.mask_key()
        return None if inner is None else ("text check", inner, shared)

    def _refusals(self, here, shared: bytes) -> np.ndarray:
        """Every token the check refuses at `here`, allowed by the grammar or not (int64 ids),
        kept by the check's state key: sequences and positions that share it share them."""
        refused = self.refusals.get(shared)
        if refused is None:
            refused = self.refusals[shared] = self.text_check.refusals(here, self.vocab)
        return refused

    # -- state changes ----------------------------------------------------------------------------

    def advance(self, token: int) -> None:
        self.inner.advance(token)
        text = self._fed(self._here, token)
        if text is None:
            self.inner.rollback(1)
            raise InvalidTokenError(
                f"token {token} after {self.n_tokens} tokens: it completes a duplicate key or a "
                f"repeated unique item"
            )
        self._here = text
        self._tokens.append(token)
        if len(self._tokens) % CHECKPOINT_EVERY == 0:
            self._checkpoints.append(text)
        self._moved()

    def rollback(self, n: int = 1) -> None:
        self.inner.rollback(n)
        if not n:
            return
        del self._tokens[-n:]
        kept = len(self._tokens) // CHECKPOINT_EVERY
        del self._checkpoints[kept + 1 :]
        here = self._checkpoints[kept]
        for token in self._tokens[kept * CHECKPOINT_EVERY :]:  # fed before: never refused
            here = self._fed(here, token)
        self._here = here
        self._moved()

    def fork(self) -> TextChecked:
        twin = TextChecked(
            self.inner.fork(), self.text_check, self.vocab, self.masks, self.refusals
        )
        twin._here, twin._checkpoints = self._here, list(self._checkpoints)
        twin._tokens = array("q", self._tokens)
        twin._moved()
        return twin

    def _moved(self) -> None:
        """Move the native cursor (if any) to the grammar's state and the check's."""
        cursor = self._cursor
        if cursor is not None:
            state = self.inner.state
            if state is FINISHED:
                cursor.finish()
            else:
                cursor.move_to(state, self._here)

    def _fed(self, state, token: int):
        """The check's state after `token` (None: refused)."""
        data = self.vocab.token_bytes(token)
        return self.text_check.feed(state, data) if data else state
