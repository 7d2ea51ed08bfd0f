"""The decoding loop: `decode(sequences, strategy, ...)`, and its plain strategy, `Sampling`.

Every generation runs here, whatever its strategy. Between steps the loop ends what must end
(the deadline, `max_tokens`, a text after which only EOS can follow) in one place; a step is
the strategy's: `Sampling` draws one token per sequence from one batched forward, speculative
decoding proposes and verifies several, SMC resamples between steps, ASAp reweights by its
trie. Strategies see sequences only through `Sequence` and the batched `forward`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from collections.abc import Sequence as Tokens
from typing import Protocol

import torch

from constrain.decoding import target
from constrain.decoding.policies import Deadline
from constrain.decoding.sequence import DecodeStats, Sequence
from constrain.samplers.base import Draw, TokenSampler

__all__ = ["Sampling", "Strategy", "decode", "forward"]


class Strategy(Protocol):
    """How a step advances the running sequences."""

    scores_eos: bool  # draw (and weigh) EOS even where only EOS can follow: one more forward

    def step(self, sequences: list[Sequence]) -> None:
        """Advance every sequence: at least one token each, or an end, or a backtrack."""

    def between_steps(self, sequences: list[Sequence]) -> list[Sequence]:
        """The sequences to continue with (SMC resamples here)."""

    def finished(self, sequence: Sequence) -> None:
        """`sequence` has ended (ASAp learns from it)."""


def decode(
    sequences: list[Sequence],
    strategy: Strategy,
    *,
    max_tokens: int,
    stats: DecodeStats,
    deadline: Deadline | None = None,
) -> Iterator[list[Sequence]]:
    """Run `sequences` until each ends, yielding them after every step (streaming reads
    them there) and once more at the end.

    A sequence ends with EOS, when only EOS can follow (without `scores_eos`: at once, with
    no forward), at `max_tokens` (EOS forced where its text is complete), when the deadline
    passes, or dead."""
    while True:
        running = [s for s in sequences if s.running]
        at_length = [s for s in running if len(s.tokens) >= max_tokens]
        if at_length:
            _finish_at_length(at_length, strategy.scores_eos, stats)
        if not strategy.scores_eos:
            for s in running:
                if s.running and s.matcher.done():
                    s.emit(s.matcher.constraint.vocab.eos_ids[:1])
        for s in running:
            if not s.running:
                strategy.finished(s)
        running = [s for s in sequences if s.running]
        if not running:
            yield sequences
            return
        t0 = time.perf_counter()
        strategy.step(running)
        elapsed = time.perf_counter() - t0
        stats.step_s.append(elapsed)
        for s in running:
            s.stats.step_s.append(elapsed)
            if not s.running:
                strategy.finished(s)
        sequences = strategy.between_steps(sequences)
        if deadline is not None:
            deadline.apply(sequences)
        yield sequences


def forward(
    sequences: Tokens[Sequence], drafts: Tokens[Tokens[int]] | None = None, stats=None
) -> list[tuple[torch.Tensor, list[torch.Tensor]]]:
    """For each sequence, its main rows and its term rows after appending its draft: (k+1, V)
    log-probabilities each (k = 0 without drafts), from one batched forward per model over
    every stream that needs one (targets and, say, CFG's unconditional prompts together)."""
    drafts = drafts if drafts is not None else [()] * len(sequences)
    groups: dict[int, tuple[object, list, list, list]] = {}
    for i, (s, tokens) in enumerate(zip(sequences, drafts)):
        owners = [(s.model, s.stream, None)]
        owners += [(m, t, j) for j, (m, t) in enumerate(zip(s.stack.term_models, s.terms))]
        for model, stream, j in owners:
            if stream is not None:
                group = groups.setdefault(id(model), (model, [], [], []))
                group[1].append(stream)
                group[2].append(list(tokens))
                group[3].append((i, j))
    out = [[None, [None] * len(s.terms)] for s in sequences]
    t0 = time.perf_counter()
    for model, streams, tokens, slots in groups.values():
        for (i, j), rows in zip(slots, model.score_many(streams, tokens)):
            if j is None:
                out[i][0] = rows
            else:
                out[i][1][j] = rows
    for s in sequences:
        s.stats.forwards += 1
    if stats is not None:
        stats.forwards += 1
        stats.forward_s += time.perf_counter() - t0
    return [(main, [r if r is not None else main for r in terms]) for main, terms in out]


def record(draw: Draw, sequence: Sequence, stats: DecodeStats, seconds: float) -> None:
    """Count a draw and its constraint time for the sequence and the run."""
    for counters in (stats, sequence.stats):
        counters.draws += 1
        counters.checks += draw.checks
        counters.masks += draw.masks
        counters.constraint_s += seconds
    stats.draw_s.append(seconds)


class Sampling:
    """One token per sequence per step: one batched forward, then the token sampler draws
    from the target distribution (`constrain.decoding.target`)."""

    def __init__(
        self,
        sampler: TokenSampler,
        generator: torch.Generator | None,
        stats: DecodeStats,
        *,
        greedy: bool = False,
        scores_eos: bool = True,
    ):
        self.sampler = sampler
        self.generator = generator
        self.stats = stats
        self.greedy = greedy
        self.scores_eos = scores_eos

    def step(self, sequences: list[Sequence]) -> None:
        for s, (main, term_rows) in zip(sequences, forward(sequences, stats=self.stats)):
            row = s.stack.before_constraint(main[-1], [r[-1] for r in term_rows], s.tokens)
            if s.backtracker is not None:
                row = s.backtracker.without_banned(row, len(s.tokens))
            t0 = time.perf_counter()
            d = self.draw(row, s)
            t1 = time.perf_counter()
            self.stats.sample_s += t1 - t0
            if d.log_weight == -math.inf:
                record(d, s, self.stats, d.constraint_s)
                s.dead_end(d.reason)
                continue
            s.log_weight += d.log_weight
            s.emit([d.token])
            record(d, s, self.stats, d.constraint_s + time.perf_counter() - t1)

    def draw(self, row: torch.Tensor, sequence: Sequence) -> Draw:
        """The next token of `sequence` from its control-stage `row`."""
        return target.draw(
            row,
            sequence.matcher,
            sequence.tokens,
            sequence.stack,
            self.sampler,
            self.generator,
            self.greedy,
        )

    def between_steps(self, sequences: list[Sequence]) -> list[Sequence]:
        return sequences

    def finished(self, sequence: Sequence) -> None:
        pass


def _finish_at_length(sequences: list[Sequence], scores_eos: bool, stats: DecodeStats) -> None:
    """`max_tokens` reached: EOS is forced where the text is complete (weighted by its
    probability with `scores_eos`, one forward); elsewhere the weight is -inf. The finish
    reason is "stop" where nothing but EOS could follow, else "length"."""
    complete = [s for s in sequences if s.matcher.accepting()]
    if scores_eos and complete:
        for s, (main, term_rows) in zip(complete, forward(complete, stats=stats)):
            row = s.stack.before_constraint(main[-1], [r[-1] for r in term_rows], s.tokens)
            row = s.stack.after_constraint(row, s.tokens, truncate=False)
            eos = list(s.matcher.constraint.vocab.eos_ids)
            s.log_weight += float(torch.logsumexp(row[eos].double(), dim=-1))
    for s in sequences:
        if s.matcher.accepting():
            ended = s.matcher.done()  # only EOS could follow: the text ended in time
            s.matcher.advance(s.matcher.constraint.vocab.eos_ids[0])
            s.finish("stop" if ended else "length")
        else:
            s.log_weight = -math.inf
            s.finish("length", "max_tokens reached before the text was complete")
