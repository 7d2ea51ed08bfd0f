"""One step of constrained decoding for a batch of sequences: the loop every sampler shares.

A `Particle` is one sequence in flight: the model stream (and the streams of its processors'
terms), the Matcher, the generated tokens and the running log-weight. `advance` runs one
batched forward per model for the live particles, applies the processor stack in its stage
order (control -> constraint -> temperature -> truncation) and lets a token sampler pick each
next token, so single-sequence generation, batches, SMC and their statistics all come from the
same code.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from constrain.engine.matcher import Matcher
from constrain.processors.bound import BoundStack
from constrain.samplers.base import Draw, TokenSampler, categorical
from constrain.samplers.lcd import LCD

__all__ = [
    "Particle",
    "StepStats",
    "advance",
    "decode",
    "draw_next",
    "finish_at_length",
    "forced_eos",
    "steps",
]


@dataclass
class StepStats:
    """Counters across steps: forwards, draws, constraint checks and time."""

    forwards: int = 0
    draws: int = 0
    checks: int = 0
    masks: int = 0
    forward_s: float = 0.0
    sample_s: float = 0.0  # token samplers, all included
    constraint_s: float = 0.0  # Matcher.check / mask / advance, within and after sampling
    draw_s: list[float] = field(default_factory=list)  # constraint time per draw
    step_s: list[float] = field(default_factory=list)  # wall time of each batched step


_DEADLINE_MARGIN = 0.85  # the share of the time left that a deadline budget plans to use
_SLACK = 8  # tokens a budget grows by when it and a text check leave no token (`backtrack`)
_NEARBY = 4  # a dead end this close after the last one counts as the same (`backtrack`)
_MAX_JUMP = 64  # tokens a backtrack undoes at most
_STEP_WINDOW = 8  # recent steps whose mean time predicts the next ones


@dataclass
class Particle:
    """One sequence: its stream, matcher, generated tokens, log-weight and own counters.

    `finish_reason` is None while it runs, then "stop" (EOS, or max_tokens reached where only
    EOS could follow), "length" (max_tokens reached; EOS forced with its weight when the text
    is complete, else weight -inf) or "dead" (no
    allowed token had non-zero probability; weight -inf).

    `backtracks_left` > 0 lets a dead end undo the last token and forbid it at that position
    (`backtrack`) instead of dying: single sequences use it, SMC does not (a dead particle's
    weight is what corrects the proposal there). After a backtrack the text is still in the
    language, but `log_weight` is no longer a proper importance weight.
    """

    stream: object
    matcher: Matcher
    terms: list = field(default_factory=list)  # the processors' term streams (None: main)
    tokens: list[int] = field(default_factory=list)
    log_weight: float = 0.0
    finish_reason: str | None = None
    reason: str = ""
    step_s: list[float] = field(default_factory=list)  # wall time of each step it took part in
    first_token_at: float | None = None  # perf_counter() when its first token was drawn
    constraint_s: float = 0.0
    checks: int = 0
    masks: int = 0
    backtracks_left: int = 0
    banned: dict[int, set[int]] = field(default_factory=dict)  # position -> tokens forbidden
    max_tokens: int | None = None  # the hard token limit: a budget never grows past it
    budget_floor: int = 0  # the budget keeps at least this (raised to leave a dead end)
    slack_at: int = -1  # the position where the budget last gave way
    last_dead_end: int | None = None  # position of the last dead end (`backtrack`)
    jump: int = 1  # tokens the last backtrack undid

    @property
    def running(self) -> bool:
        return self.finish_reason is None

    def finish(self, reason: str, why: str = "") -> None:
        self.finish_reason = reason
        self.reason = why
        self.stream = None  # release the KV caches
        self.terms = [None] * len(self.terms)

    def rollback(self, n: int, model, stack: BoundStack) -> None:
        """Undo the last `n` generated tokens: matcher, stream and term streams together."""
        if n == 0:
            return
        self.matcher.rollback(n)
        del self.tokens[-n:]
        model.rollback(self.stream, n)
        for term_model, term_stream in zip(stack.term_models, self.terms):
            if term_stream is not None:
                term_model.rollback(term_stream, n)

    def fork(self, model, stack: BoundStack | None = None) -> Particle:
        """An independent copy: streams (the terms' too, with `stack`) and matcher forked."""
        twin = copy.copy(self)
        twin.stream = model.fork(self.stream) if self.stream is not None else None
        models = stack.term_models if stack is not None else [model] * len(self.terms)
        twin.terms = [m.fork(s) if s is not None else None for m, s in zip(models, self.terms)]
        twin.matcher, twin.tokens = self.matcher.fork(), list(self.tokens)
        twin.step_s = list(self.step_s)
        twin.banned = {position: set(ids) for position, ids in self.banned.items()}
        return twin

    def fit_deadline(self, elapsed: float, timeout: float, cap: int) -> None:
        """Lower the token budget (`matcher.max_tokens`, at most `cap`) to the steps that fit in
        the time left at the recent step time, keeping a margin and a reserve for one slow step
        (a cold mask: 1 s, less for short timeouts). Every step emits at least one token, so
        the text can always close within the budget, speculative steps or not. Recomputed every
        step, so slow first steps do not fix a budget later steps would not need; the text
        closes in time instead of being cut by the timeout."""
        recent = self.step_s[-_STEP_WINDOW:]
        if not self.running or not recent:
            return
        reserve = min(1.0, 0.05 * timeout)
        planned = max(0.0, _DEADLINE_MARGIN * (timeout - elapsed) - reserve)
        fits = min(cap, self.matcher.n_tokens + int(planned * len(recent) / sum(recent)))
        self.matcher.max_tokens = max(self.budget_floor, fits)

    def without_banned(self, row: torch.Tensor, position: int) -> torch.Tensor:
        """`row` with the tokens banned at `position` (by `backtrack`) at -inf."""
        ids = self.banned.get(position)
        if not ids:
            return row
        return row.index_fill(-1, torch.tensor(sorted(ids), device=row.device), -math.inf)

    def backtrack(self, model, stack: BoundStack) -> bool:
        """A dead end (nothing allowed has probability > 0): undo the last token and forbid it
        at its position, so the next draw there takes another way. False when no backtrack is
        left or nothing can be undone.

        Dead ends come from constraints checked on the text (uniqueItems over items whose
        language is not finite, duplicate keys, check sites): the grammar allows a prefix that
        the check then closes off, e.g. an array item that can only end as a copy of an earlier
        one. A dead end that recurs near the last one doubles how far the next backtrack jumps
        (up to 64 tokens): the way into it may have many spellings (``inde|x``, ``ind|ex``, ...)
        and the choice to undo lies before all of them. When the token budget alone leaves
        nothing (the text could go on without it), the budget gives way first, once per
        position and never past `max_tokens`: it grows by a few tokens and the draw is retried
        in place (validity is a hard constraint, a deadline's budget is not). The growth is a
        floor, not a surplus carried on, so later steps still close the text in time."""
        if self.backtracks_left <= 0:
            return False
        self.backtracks_left -= 1
        position = len(self.tokens)
        budget = self.matcher.max_tokens
        limit = math.inf if self.max_tokens is None else self.max_tokens
        if (
            self.slack_at != position
            and budget is not None
            and budget < limit
            and self._budget_alone_blocks()
        ):
            self.budget_floor = self.matcher.max_tokens = min(budget + _SLACK, limit)
            self.slack_at = position
            return True
        if not self.tokens:
            return False
        recurs = self.last_dead_end is not None and position <= self.last_dead_end + _NEARBY
        self.jump = min(2 * self.jump, _MAX_JUMP) if recurs else 1
        self.last_dead_end = position
        n = min(self.jump, len(self.tokens))
        position, token = len(self.tokens) - n, self.tokens[-n]
        self.rollback(n, model, stack)
        self.banned = {p: ids for p, ids in self.banned.items() if p <= position}
        self.banned.setdefault(position, set()).add(token)
        return True

    def _budget_alone_blocks(self) -> bool:
        """The token budget narrows the next token, and without it some token not forbidden
        here would be allowed (a mask: dead ends are rare)."""
        if not self.matcher.budget_binds():
            return False
        unbudgeted = self.matcher.fork()  # asking must not lift this matcher's closing path
        unbudgeted.max_tokens = None
        free = np.flatnonzero(unbudgeted.mask()).tolist()
        return bool(set(free) - self.banned.get(len(self.tokens), set()))


def forced_eos(logprobs: torch.Tensor, eos_ids: Sequence[int], generator, greedy: bool) -> Draw:
    """The draw when only EOS is allowed: an EOS id by its probability, weight log P(EOS)."""
    rows = logprobs[list(eos_ids)]
    pick, log_z = categorical(rows, generator)
    if pick < 0:
        return Draw(eos_ids[0], -math.inf, reason="only EOS is allowed and it has probability 0")
    if greedy:
        return Draw(eos_ids[int(torch.argmax(rows))], 0.0)
    return Draw(eos_ids[pick], log_z)


def advance(
    model,
    particles: Sequence[Particle],
    sampler: TokenSampler,
    *,
    stack: BoundStack,
    generator: torch.Generator | None,
    greedy: bool,
    stats: StepStats,
) -> None:
    """One token for every particle: one batched forward per model, then a draw per particle
    (`draw_next`)."""
    t_start = time.perf_counter()
    rows = stack.rows([p.stream for p in particles], [p.terms for p in particles])
    stats.forwards += 1
    stats.forward_s += time.perf_counter() - t_start
    for particle, (main, term_rows) in zip(particles, rows):
        row = stack.before_constraint(main, term_rows, particle.tokens)
        row = particle.without_banned(row, len(particle.tokens))
        t0 = time.perf_counter()
        matcher = particle.matcher
        draw = draw_next(row, matcher, particle.tokens, sampler, stack, generator, greedy)
        t1 = time.perf_counter()
        if particle.first_token_at is None:
            particle.first_token_at = t1
        stats.sample_s += t1 - t0
        stats.draws += 1
        stats.checks += draw.checks
        stats.masks += draw.masks
        particle.checks += draw.checks
        particle.masks += draw.masks
        if draw.log_weight == -math.inf:
            _spent(stats, particle, draw.constraint_s)
            if particle.backtrack(model, stack):
                continue
            particle.log_weight = -math.inf
            particle.finish("dead", draw.reason)
            continue
        particle.log_weight += draw.log_weight
        matcher.advance(draw.token)
        _spent(stats, particle, draw.constraint_s + time.perf_counter() - t1)
        if matcher.finished():
            particle.finish("stop")
        else:
            particle.tokens.append(draw.token)
            model.append(particle.stream, draw.token)
            for term_model, term_stream in zip(stack.term_models, particle.terms):
                if term_stream is not None:
                    term_model.append(term_stream, draw.token)
    elapsed = time.perf_counter() - t_start
    stats.step_s.append(elapsed)
    for particle in particles:
        particle.step_s.append(elapsed)


def draw_next(
    row: torch.Tensor,
    matcher: Matcher,
    prefix: Sequence[int],
    sampler: TokenSampler,
    stack: BoundStack,
    generator,
    greedy: bool,
) -> Draw:
    """The next token after the control stage (`row`): the constraint, temperature and
    truncation in their order, then the token sampler. Only EOS allowed: its mass (before
    any truncation) is the weight. With truncation warpers, the row is masked first so they
    keep only allowed tokens; the weight is then the allowed mass before truncation."""
    if matcher.done():
        row = stack.after_constraint(row, prefix, truncate=False)
        return forced_eos(row, matcher.constraint.vocab.eos_ids, generator, greedy)
    if stack.truncates:
        return _truncated_draw(row, matcher, prefix, sampler, stack, generator, greedy)
    return sampler.sample(stack.after_constraint(row, prefix), matcher, generator, greedy=greedy)


_MASKER = LCD()


def _truncated_draw(row, matcher, prefix, sampler, stack: BoundStack, generator, greedy) -> Draw:
    """Mask, then temperature and truncation over the allowed tokens, then draw."""
    t0 = time.perf_counter()
    mask = _MASKER.device_mask(matcher, row.device)
    spent = time.perf_counter() - t0
    masked = row.masked_fill(~mask[: row.shape[-1]], -math.inf)
    log_z = float(torch.logsumexp(masked.double(), dim=-1))
    if log_z == -math.inf:
        return Draw(0, -math.inf, masks=1, reason=_NOTHING_ALLOWED, constraint_s=spent)
    kept = stack.after_constraint(masked - log_z, prefix)
    draw = sampler.sample(kept, matcher, generator, greedy=greedy)
    weight = draw.log_weight + (0.0 if greedy else log_z)
    return Draw(
        draw.token, weight, draw.checks, draw.masks + 1, draw.reason, draw.constraint_s + spent
    )


_NOTHING_ALLOWED = "every token the constraint allows has probability 0 under the model"


def _spent(stats: StepStats, particle: Particle, seconds: float) -> None:
    stats.constraint_s += seconds
    stats.draw_s.append(seconds)
    particle.constraint_s += seconds


def finish_at_length(
    model,
    particles: Sequence[Particle],
    *,
    stack: BoundStack,
    score_eos: bool,
    stats: StepStats,
) -> None:
    """`max_tokens` reached: EOS is forced where the text is complete (weighted by its
    probability when `score_eos`, which costs one forward); elsewhere the weight is -inf.
    The finish reason is "stop" where nothing but EOS could follow, else "length"."""
    complete = [p for p in particles if p.matcher.accepting()]
    if score_eos and complete:
        t0 = time.perf_counter()
        rows = stack.rows([p.stream for p in complete], [p.terms for p in complete])
        stats.forwards += 1
        stats.forward_s += time.perf_counter() - t0
        eos = list(model.vocab.eos_ids)
        for particle, (main, term_rows) in zip(complete, rows):
            row = stack.before_constraint(main, term_rows, particle.tokens)
            row = stack.after_constraint(row, particle.tokens, truncate=False)
            particle.log_weight += float(torch.logsumexp(row[eos].double(), dim=-1))
    for particle in particles:
        if particle.matcher.accepting():
            ended = particle.matcher.done()  # only EOS could follow: the text ended in time
            particle.matcher.advance(model.vocab.eos_ids[0])
            particle.finish("stop" if ended else "length")
        else:
            particle.log_weight = -math.inf
            particle.finish("length", "max_tokens reached before the text was complete")


def steps(
    model,
    particles: list[Particle],
    sampler: TokenSampler,
    *,
    max_tokens: int,
    stack: BoundStack,
    generator: torch.Generator | None,
    greedy: bool,
    stats: StepStats,
    score_eos: bool,
    between_steps: Callable[[list[Particle]], list[Particle]] | None = None,
) -> Iterator[list[Particle]]:
    """Run `particles` until each stops, dies or reaches `max_tokens`, yielding the particles
    after every step (streaming reads them there) and once more at the end.

    Args:
        score_eos: weight the final EOS by its probability even when the grammar forces it
            (one more forward). Without it, a particle whose matcher allows only EOS ends at
            once: the text is the same, only the weight misses that last factor.
        between_steps: called after every step with the particles (SMC resamples there);
            returns the particles to continue with.
    """
    eos = model.vocab.eos_ids[0]
    for _ in range(max_tokens):
        running = [p for p in particles if p.running]
        if not score_eos:
            for p in running:
                if p.matcher.done():
                    p.matcher.advance(eos)
                    p.finish("stop")
            running = [p for p in running if p.running]
        if not running:
            yield particles
            return
        advance(
            model, running, sampler, stack=stack, generator=generator, greedy=greedy, stats=stats
        )
        if between_steps is not None:
            particles = between_steps(particles)
        yield particles
    running = [p for p in particles if p.running]
    finish_at_length(model, running, stack=stack, score_eos=score_eos, stats=stats)
    yield particles


def decode(model, particles: list[Particle], sampler: TokenSampler, **options) -> list[Particle]:
    """`steps` run to the end: the final particles."""
    for current in steps(model, particles, sampler, **options):
        particles = current
    return particles
