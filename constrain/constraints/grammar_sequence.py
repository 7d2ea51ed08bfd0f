"""`GrammarSequence`: one sequence under a constraint, in the shape serving engines ask for.

vLLM's structured-output grammars, XGrammar's and llguidance's matchers ask seven things of a
sequence: consume tokens, validate a draft (how many of its tokens are acceptable), roll back
n tokens, fill row r of a packed bitmask the caller owns, whether the output ended, reset, and
fork. `GrammarSequence` is that interface over a `TokenMatcher`; `fill_rows` fills many rows
at once, the missing masks computed in one native call on threads without the GIL.

The output ends with EOS or with one of the sequence's stop tokens (a serving request's stop
ids), which are allowed exactly where EOS is. The end is a token like any other: it can be
rolled back. A token budget (``max_tokens``) closes the text in time; where the budget alone
would leave no token, it gives way by a few tokens (`Budgeted.give_way`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from constrain.constraints.budget import Budgeted
from constrain.constraints.constraint import Constraint
from constrain.engine import bitmask
from constrain.engine.matcher import TokenMatcher, prefill_masks
from constrain.errors import ConfigError

__all__ = ["GrammarSequence", "fill_rows"]


class GrammarSequence:
    """One sequence's position in `constraint` (see the module docstring).

    Args:
        constraint: the compiled constraint (shared by the sequences that use it).
        max_tokens: a token budget for the text (EOS not counted), or None.
        stop_ids: tokens that end the output like EOS (allowed exactly where EOS is).
    """

    def __init__(
        self,
        constraint: Constraint,
        *,
        max_tokens: int | None = None,
        stop_ids: Iterable[int] = (),
    ):
        self.constraint = constraint
        self.max_tokens = max_tokens
        vocab = constraint.vocab
        self.ends = frozenset(vocab.eos_ids) | {int(t) for t in stop_ids}
        stops = np.array(sorted(self.ends - set(vocab.eos_ids)), dtype=np.int64)
        self._stops = stops[(stops >= 0) & (stops < vocab.size)]
        self._stop_mask = bitmask.from_ids(self._stops, vocab.size)
        self.matcher: TokenMatcher = constraint.start(max_tokens=max_tokens)
        self.terminated = False
        self._ended: list[bool] = []  # per token consumed: did it end the output

    def accept(self, tokens: Sequence[int]) -> bool:
        """Consume `tokens` in order; False at the first one refused (those before it stay
        consumed, it and the rest do not)."""
        return all(self._accept(self.matcher, int(t)) for t in tokens)

    def validate(self, tokens: Sequence[int]) -> int:
        """How many of `tokens`, from the first, the constraint accepts in a row (a draft's
        acceptable prefix); nothing changes."""
        matcher, terminated = self.matcher.fork(), self.terminated
        count = 0
        try:
            for token in tokens:
                if not self._accept(matcher, int(token), record=False):
                    break
                count += 1
        finally:
            self.terminated = terminated
        return count

    def rollback(self, n: int) -> None:
        """Undo the last `n` tokens consumed (an end of output included)."""
        if not 0 <= n <= len(self._ended):
            raise ConfigError(f"cannot roll back {n} tokens: {len(self._ended)} were consumed")
        for _ in range(n):
            if self._ended.pop():
                self.terminated = False
            else:
                self.matcher.rollback(1)

    def fill_row(self, out: np.ndarray, row: int) -> None:
        """Write the tokens allowed next into row `row` of `out`, a caller-owned packed bitmask
        (int32, 32 tokens per word; words past the vocabulary's are cleared)."""
        words = _checked_rows(out, self.constraint.vocab.size)
        if not 0 <= row < out.shape[0]:
            raise ConfigError(f"row {row} is outside the bitmask's {out.shape[0]} rows")
        out[row, :words] = self.allowed()
        out[row, words:] = 0

    def allowed(self) -> np.ndarray:
        """The packed mask of the tokens allowed next (read-only when shared)."""
        if self.terminated:
            return np.zeros(bitmask.n_words(self.constraint.vocab.size), dtype=np.int32)
        matcher = self.matcher
        packed = matcher.bitmask()
        if not packed.any() and isinstance(matcher, Budgeted) and matcher.give_way(set()):
            packed = matcher.bitmask()
        if not len(self._stops):
            return packed
        packed = bitmask.without(packed, self._stops)
        if matcher.accepting():
            packed |= self._stop_mask
        return packed

    @property
    def n_consumed(self) -> int:
        """Tokens consumed (an end of output included)."""
        return len(self._ended)

    def is_terminated(self) -> bool:
        """The output has ended (EOS or a stop token consumed)."""
        return self.terminated

    def reset(self) -> None:
        """Back to the start of the text, nothing consumed."""
        self.matcher = self.constraint.start(max_tokens=self.max_tokens)
        self.terminated = False
        self._ended = []

    def fork(self) -> GrammarSequence:
        """An independent copy at the same position (sharing the constraint's caches)."""
        twin = GrammarSequence.__new__(GrammarSequence)
        twin.constraint, twin.max_tokens, twin.ends = self.constraint, self.max_tokens, self.ends
        twin._stops, twin._stop_mask = self._stops, self._stop_mask
        twin.matcher, twin.terminated = self.matcher.fork(), self.terminated
        twin._ended = list(self._ended)
        return twin

    def _accept(self, matcher: TokenMatcher, token: int, record: bool = True) -> bool:
        """Advance `matcher` by `token` (an end of output sets `terminated`); False if refused."""
        if self.terminated:
            return False
        ends = token in self.ends
        if ends:
            if not matcher.accepting():
                return False
            self.terminated = True
        elif matcher.check(token):
            matcher.advance(token)
        else:
            return False
        if record:
            self._ended.append(ends)
        return True


def fill_rows(
    sequences: Sequence[GrammarSequence], out: np.ndarray, threads: int = 2
) -> None:
    """Row i of `out` (a caller-owned packed bitmask) becomes what `sequences[i]` allows next:
    the masks not cached yet are computed first, in one native call on `threads` threads
    without the GIL (`prefill_masks`), then each row is written."""
    if len(sequences) > out.shape[0]:
        raise ConfigError(f"{len(sequences)} sequences for a bitmask of {out.shape[0]} rows")
    live = [s.matcher.mask_source() for s in sequences if not s.terminated]
    prefill_masks(live, threads)
    for i, sequence in enumerate(sequences):
        sequence.fill_row(out, i)


def _checked_rows(out: np.ndarray, vocab_size: int) -> int:
    """The words of a mask over `vocab_size` tokens, once `out` is checked to hold them."""
    words = bitmask.n_words(vocab_size)
    if not isinstance(out, np.ndarray) or out.dtype != np.int32 or out.ndim != 2:
        raise ConfigError("the bitmask must be a 2-D int32 numpy array (rows, words)")
    if out.shape[1] < words:
        raise ConfigError(
            f"the bitmask's rows have {out.shape[1]} words; {vocab_size} tokens need {words}"
        )
    return words
