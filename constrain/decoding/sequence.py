"""`Sequence`: one generation in flight.

A Sequence owns everything that must move together when a token is emitted, undone or copied:
the model stream (KV cache), the streams of its processors' auxiliary terms, the constraint's
matcher, the generated tokens and their decoded text, the log-weight and the finish reason.
`emit`, `rollback` and `fork` are the only places where they move, for every strategy of the
decoding loop. Its policy at dead ends, `Backtracker`, moves with it.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Sequence as Tokens
from typing import NamedTuple

import torch

from constrain.constraints.budget import Budgeted
from constrain.constraints.constraint import Constraint
from constrain.decoding.text import DecodedText
from constrain.engine.matcher import TokenMatcher
from constrain.models.base import LanguageModel, Stream
from constrain.processors.bound import BoundStack
from constrain.results import DecodeStats

__all__ = ["Backtracker", "Sequence", "TokenLogprob"]

_NEARBY = 4  # a dead end this close after the last one counts as the same
_MAX_JUMP = 64  # tokens a backtrack undoes at most


class TokenLogprob(NamedTuple):
    """A drawn token's log-probability and the most likely tokens at its position."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...]  # (token, log-probability), most likely first


class Sequence:
    """One generation: model stream, term streams, matcher, tokens, log-weight, finish reason.

    `finish_reason` is None while it runs, then "stop" (EOS, or only EOS could follow),
    "length" (`max_tokens` reached), "timeout", "cancelled", "error" (its job's work raised:
    `Job.fail`) or "dead" (no allowed token had non-zero probability; weight -inf). `group`
    is the index of its prompt in a batch.
    """

    def __init__(
        self,
        model: LanguageModel,
        stack: BoundStack,
        matcher: TokenMatcher,
        constraint: Constraint,
        *,
        backtracks: int = 0,
        group: int = 0,
        prefill: bool = True,
    ):
        """A sequence after the prompt of `stack`, prefilled (unless `prefill` is False:
        then `prefill` feeds it, in chunks), under `matcher`, which `constraint` started
        (what the sequence's draws share with others: masks on a device, the grammar); it may
        undo `backtracks` times at dead ends."""
        self.model, self.stack, self.matcher, self.group = model, stack, matcher, group
        self.constraint = constraint
        self.stream: Stream | None = model.start(stack.prompt_ids, prefill=prefill)
        self.terms = stack.start_terms(prefill)  # processors' streams (None: reads the main row)
        self.tokens: list[int] = []
        self.text = DecodedText(model.vocab)  # the tokens' text, decoded as they come
        self.log_weight = 0.0
        self.finish_reason: str | None = None
        self.reason = ""  # why it ended, in words
        self.backtracker = Backtracker(backtracks) if backtracks > 0 else None
        self.stats = DecodeStats()
        self.top_logprobs: int | None = None  # record log-probs, with this many alternatives
        self.logprobs: dict[int, TokenLogprob] = {}  # position -> the drawn token's

    def prefill(self, max_tokens: int) -> int:
        """Feed at most `max_tokens` of the prompts its streams have not fed yet (the main
        stream's first, then the terms'); returns how many are left."""
        left = 0
        for model, stream in self.streams():
            pending = model.prefill(stream, 0)
            take = min(pending, max_tokens)
            if take:
                model.prefill(stream, take)
                max_tokens -= take
            left += pending - take
        return left

    def record_logprobs(self, row: torch.Tensor, token: int) -> None:
        """Keep the log-probability of `token`, about to be emitted, and the `top_logprobs`
        most likely tokens, under `row` (the control stage's: the model's distribution after
        model arithmetic or guidance, before the constraint and the warpers)."""
        logprobs = torch.log_softmax(row.float(), dim=-1)
        top = torch.topk(logprobs, self.top_logprobs) if self.top_logprobs else None
        alternatives = (
            tuple(zip(top.indices.tolist(), top.values.tolist())) if top is not None else ()
        )
        self.logprobs[len(self.tokens)] = TokenLogprob(token, float(logprobs[token]), alternatives)

    def token_logprobs(self) -> list[TokenLogprob]:
        """The recorded log-probs of the tokens kept (a backtrack's undone ones dropped)."""
        return [self.logprobs[i] for i in range(len(self.tokens)) if i in self.logprobs]

    @property
    def running(self) -> bool:
        return self.finish_reason is None

    @property
    def budget(self) -> Budgeted | None:
        """The token budget over the matcher, when it has one."""
        return self.matcher if isinstance(self.matcher, Budgeted) else None

    def streams(self) -> list[tuple[LanguageModel, Stream]]:
        """(model, stream) of the main stream and of every term stream of its own."""
        terms = [(m, s) for m, s in zip(self.stack.term_models, self.terms) if s is not None]
        return [(self.model, self.stream), *terms]

    def control_row(
        self, main: torch.Tensor, term_rows: list[torch.Tensor], i: int = -1, emitted=()
    ) -> torch.Tensor:
        """Row `i` of scored rows after the control processors (model arithmetic, CFG, ...),
        with the tokens banned at its position at -inf; `emitted`: tokens drawn since."""
        prefix = [*self.tokens, *emitted]
        row = self.stack.before_constraint(main[i], [r[i] for r in term_rows], prefix)
        if self.backtracker is None:
            return row
        return self.backtracker.without_banned(row, len(prefix))

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
            self._append(token, to_streams=i >= in_streams)

    def force(self, tokens: Tokens[int], matcher: TokenMatcher, constraint: Constraint) -> None:
        """Append `tokens`, text a format fixes (a tool call's wrapper, a thinking section's
        end), to the tokens and every stream, then continue under `matcher`, which starts
        after them: the text becomes a new section with a constraint of its own, which
        `constraint` started."""
        for token in tokens:
            self._append(token)
        self.matcher, self.constraint = matcher, constraint
        if self.backtracker is not None:  # no backtrack reaches into an earlier section
            self.backtracker.banned.clear()

    def _append(self, token: int, to_streams: bool = True) -> None:
        self.tokens.append(token)
        self.text.append(token)
        if to_streams:
            for model, stream in self.streams():
                model.append(stream, token)

    def rollback(self, n: int) -> None:
        """Undo the last `n` tokens: matcher, tokens and streams together."""
        if n == 0:
            return
        self.matcher.rollback(n)
        del self.tokens[-n:]
        self.text.truncate(len(self.tokens))
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
        twin.text = self.text.copy()
        twin.stats = copy.deepcopy(self.stats)
        twin.logprobs = dict(self.logprobs)
        twin.backtracker = copy.deepcopy(self.backtracker)
        return twin

    def finish(self, reason: str, why: str = "") -> None:
        """End the sequence and release its KV caches."""
        self.finish_reason, self.reason = reason, why
        self.stream, self.terms = None, [None] * len(self.terms)

    def dead_end(self, why: str) -> None:
        """No allowed token has probability > 0: back off (`Backtracker`), else die."""
        if self.backtracker is not None and self.backtracker.recover(self):
            return
        self.log_weight = -math.inf
        self.finish("dead", why)

    def __repr__(self) -> str:
        return f"Sequence(tokens={len(self.tokens)}, finish_reason={self.finish_reason!r})"


class Backtracker:
    """Dead ends undone: the last token is undone and forbidden at its position, so the next
    draw there takes another way, at most `left` times per sequence.

    Dead ends come from constraints checked on the text (uniqueItems over items whose
    language is not finite, duplicate keys, check sites): the grammar allows a prefix that the
    check then closes off, e.g. an array item that can only end as a copy of an earlier one. A
    dead end that recurs near the last one doubles how far the next backtrack jumps (up to 64
    tokens): the way into it may have many spellings (``inde|x``, ``ind|ex``, ...) and the
    choice to undo lies before all of them. When the token budget alone leaves nothing, the
    budget gives way first (`Budgeted.give_way`) and the draw is retried in place. After a
    backtrack the text is still in the language, but the log-weight is no longer a proper
    importance weight (SMC therefore drops dead particles by their weight instead).
    """

    __slots__ = ("left", "banned", "last_dead_end", "jump")

    def __init__(self, left: int):
        self.left = left
        self.banned: dict[int, set[int]] = {}  # position -> tokens forbidden there
        self.last_dead_end: int | None = None
        self.jump = 1  # tokens the last backtrack undid

    def without_banned(self, row: torch.Tensor, position: int) -> torch.Tensor:
        """`row` with the tokens banned at `position` at -inf."""
        ids = self.banned.get(position)
        if not ids:
            return row
        return row.index_fill(-1, torch.tensor(sorted(ids), device=row.device), -math.inf)

    def recover(self, sequence: Sequence) -> bool:
        """Back `sequence` off its dead end; False when no backtrack is left or nothing can
        be undone."""
        if self.left <= 0:
            return False
        self.left -= 1
        position = len(sequence.tokens)
        budget = sequence.budget
        if budget is not None and budget.give_way(self.banned.get(position, set())):
            return True
        undoable = min(len(sequence.tokens), sequence.matcher.n_tokens)  # this section's
        if not undoable:
            return False
        recurs = self.last_dead_end is not None and position <= self.last_dead_end + _NEARBY
        self.jump = min(2 * self.jump, _MAX_JUMP) if recurs else 1
        self.last_dead_end = position
        n = min(self.jump, undoable)
        position, token = len(sequence.tokens) - n, sequence.tokens[-n]
        sequence.rollback(n)
        self.banned = {p: ids for p, ids in self.banned.items() if p <= position}
        self.banned.setdefault(position, set()).add(token)
        return True
