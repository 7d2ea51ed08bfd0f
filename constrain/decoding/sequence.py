"""`Sequence`: one generation in flight, and the counters of decoding.

A Sequence owns everything that must move together when a token is emitted, undone or copied:
the model stream (KV cache), the streams of its processors' auxiliary terms, the constraint's
matcher, the generated tokens, the log-weight and the finish reason. `emit`, `rollback` and
`fork` are the only places where they move, for every strategy of the decoding loop.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence as Tokens
from dataclasses import dataclass, field

from constrain.constraints.budget import Budgeted
from constrain.decoding.policies import Backtracker
from constrain.engine.matcher import TokenMatcher
from constrain.models.base import LanguageModel, Stream
from constrain.processors.bound import BoundStack

__all__ = ["DecodeStats", "Sequence"]


@dataclass
class DecodeStats:
    """Counters of decoding (of one sequence, or of a whole run): forwards, draws, constraint
    work and where the time went."""

    forwards: int = 0  # target forwards taken part in
    draws: int = 0
    checks: int = 0  # Matcher.check calls by the token sampler
    masks: int = 0  # full masks used (LCD: one per draw; AWRS: only its fallbacks)
    forward_s: float = 0.0
    sample_s: float = 0.0  # token samplers, all included
    constraint_s: float = 0.0  # checks, masks and matcher updates
    draw_s: list[float] = field(default_factory=list)  # constraint time per draw
    step_s: list[float] = field(default_factory=list)  # wall time of each step
    first_token_at: float | None = None  # perf_counter() when the first token was drawn
    emitted: int = 0  # tokens emitted by speculative steps (EOS included)
    drafted: dict[str, int] = field(default_factory=dict)  # speculative drafts by source
    kept: dict[str, int] = field(default_factory=dict)


class Sequence:
    """One generation: model stream, term streams, matcher, tokens, log-weight, finish reason.

    `finish_reason` is None while it runs, then "stop" (EOS, or only EOS could follow),
    "length" (`max_tokens` reached), "timeout", or "dead" (no allowed token had non-zero
    probability; weight -inf). `group` is the index of its prompt in a batch.
    """

    def __init__(
        self,
        model: LanguageModel,
        stack: BoundStack,
        matcher: TokenMatcher,
        stream: Stream | None,
        terms: list,
        *,
        backtracker: Backtracker | None = None,
        group: int = 0,
    ):
        self.model = model
        self.stack = stack
        self.matcher = matcher
        self.stream = stream
        self.terms = terms  # the processors' term streams (None: the term reads the main row)
        self.tokens: list[int] = []
        self.log_weight = 0.0
        self.finish_reason: str | None = None
        self.reason = ""  # why it ended, in words
        self.backtracker = backtracker
        self.group = group
        self.stats = DecodeStats()

    @classmethod
    def start(
        cls,
        model: LanguageModel,
        stack: BoundStack,
        matcher: TokenMatcher,
        *,
        backtracks: int = 0,
        group: int = 0,
    ) -> Sequence:
        """A sequence after the prompt of `stack`, prefilled."""
        backtracker = Backtracker(backtracks) if backtracks > 0 else None
        stream = model.start(stack.prompt_ids)
        return cls(
            model, stack, matcher, stream, stack.start_terms(), backtracker=backtracker, group=group
        )

    @property
    def running(self) -> bool:
        return self.finish_reason is None

    @property
    def budget(self) -> Budgeted | None:
        """The token budget over the matcher, when it has one."""
        return self.matcher if isinstance(self.matcher, Budgeted) else None

    def streams(self) -> list[tuple[LanguageModel, Stream]]:
        """(model, stream) of the main stream and of every term stream of its own."""
        pairs = [(self.model, self.stream)]
        pairs += [(m, s) for m, s in zip(self.stack.term_models, self.terms) if s is not None]
        return pairs

    def emit(self, tokens: Tokens[int], *, in_streams: int = 0) -> None:
        """Append `tokens` to the text: the matcher, the tokens and every stream (the first
        `in_streams` of them are in the streams already: a verified draft). EOS ends the
        sequence with finish reason "stop" and is not kept."""
        if self.stats.first_token_at is None and tokens:
            self.stats.first_token_at = time.perf_counter()
        for i, token in enumerate(tokens):
            self.matcher.advance(token)
            if self.matcher.finished():
                self.finish("stop")
                return
            self.tokens.append(token)
            if i >= in_streams:
                for model, stream in self.streams():
                    model.append(stream, token)

    def rollback(self, n: int) -> None:
        """Undo the last `n` tokens: matcher, tokens and streams together."""
        if n == 0:
            return
        self.matcher.rollback(n)
        del self.tokens[-n:]
        for model, stream in self.streams():
            model.rollback(stream, n)

    def fork(self) -> Sequence:
        """An independent copy: streams and matcher forked, counters copied."""
        twin = copy.copy(self)
        twin.stream = self.model.fork(self.stream) if self.stream is not None else None
        twin.terms = [
            m.fork(s) if s is not None else None for m, s in zip(self.stack.term_models, self.terms)
        ]
        twin.matcher, twin.tokens = self.matcher.fork(), list(self.tokens)
        twin.stats = copy.deepcopy(self.stats)
        twin.backtracker = self.backtracker.fork() if self.backtracker is not None else None
        return twin

    def finish(self, reason: str, why: str = "") -> None:
        """End the sequence and release its KV caches."""
        self.finish_reason = reason
        self.reason = why
        self.stream = None
        self.terms = [None] * len(self.terms)

    def dead_end(self, why: str) -> None:
        """No allowed token has probability > 0: back off (`Backtracker`), else die."""
        if self.backtracker is not None and self.backtracker.recover(self):
            return
        self.log_weight = float("-inf")
        self.finish("dead", why)

    def __repr__(self) -> str:
        return f"Sequence(tokens={len(self.tokens)}, finish_reason={self.finish_reason!r})"
