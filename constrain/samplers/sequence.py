"""One step of constrained decoding for a batch of sequences: the loop every sampler shares.

A `Particle` is one sequence in flight: the model stream, the Matcher, the generated tokens and
the running log-weight. `advance` runs one batched forward for the live particles and lets a
token sampler pick each next token, so single-sequence generation, SMC and their statistics
all come from the same code.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import torch

from constrain.matcher import Matcher
from constrain.samplers.base import Draw, TokenSampler, categorical

__all__ = [
    "Particle",
    "StepStats",
    "advance",
    "decode",
    "finish_at_length",
    "forced_eos",
    "steps",
    "tempered",
]

LogprobsHook = Callable[[torch.Tensor], torch.Tensor]


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


@dataclass
class Particle:
    """One sequence: its stream, matcher, generated tokens, log-weight and own counters.

    `finish_reason` is None while it runs, then "stop" (EOS), "length" (max_tokens reached;
    EOS forced with its weight when the text is complete, else weight -inf) or "dead" (no
    allowed token had non-zero probability; weight -inf).
    """

    stream: object
    matcher: Matcher
    tokens: list[int] = field(default_factory=list)
    log_weight: float = 0.0
    finish_reason: str | None = None
    reason: str = ""
    step_s: list[float] = field(default_factory=list)  # wall time of each step it took part in
    first_token_at: float | None = None  # perf_counter() when its first token was drawn
    constraint_s: float = 0.0
    checks: int = 0
    masks: int = 0
    forced: int = 0  # tokens whose bytes the grammar forced (no other text could follow)

    @property
    def running(self) -> bool:
        return self.finish_reason is None

    def finish(self, reason: str, why: str = "") -> None:
        self.finish_reason = reason
        self.reason = why
        self.stream = None  # release the KV cache

    def fork(self, model) -> Particle:
        stream = model.fork(self.stream) if self.stream is not None else None
        twin = copy.copy(self)
        twin.stream, twin.matcher, twin.tokens = stream, self.matcher.fork(), list(self.tokens)
        twin.step_s = list(self.step_s)
        return twin


def tempered(temperature: float) -> LogprobsHook:
    """The log-probabilities at `temperature` (renormalised)."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}; use greedy=True instead")
    if temperature == 1.0:
        return lambda lp: lp
    return lambda lp: torch.log_softmax(lp / temperature, dim=-1)


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
    hook: LogprobsHook,
    generator: torch.Generator | None,
    greedy: bool,
    stats: StepStats,
) -> None:
    """One token for every particle: one batched forward, then a draw per particle.

    A particle whose matcher allows only EOS takes it with weight log P(EOS) without running
    the token sampler (a rejection sampler would wade through the vocabulary to find it).
    """
    t_start = time.perf_counter()
    rows = model.logprobs([p.stream for p in particles])
    stats.forwards += 1
    stats.forward_s += time.perf_counter() - t_start
    eos_ids = model.vocab.eos_ids
    for particle, row in zip(particles, rows):
        row = hook(row)
        t0 = time.perf_counter()
        matcher = particle.matcher
        if matcher.done():
            draw = forced_eos(row, eos_ids, generator, greedy)
        else:
            draw = sampler.sample(row, matcher, generator, greedy=greedy)
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
            particle.log_weight = -math.inf
            particle.finish("dead", draw.reason)
            continue
        particle.log_weight += draw.log_weight
        data = model.vocab.token_bytes(draw.token)
        if data and matcher.forced_bytes().startswith(data):
            particle.forced += 1
        matcher.advance(draw.token)
        _spent(stats, particle, draw.constraint_s + time.perf_counter() - t1)
        if matcher.finished():
            particle.finish("stop")
        else:
            particle.tokens.append(draw.token)
            model.append(particle.stream, draw.token)
    elapsed = time.perf_counter() - t_start
    stats.step_s.append(elapsed)
    for particle in particles:
        particle.step_s.append(elapsed)


def _spent(stats: StepStats, particle: Particle, seconds: float) -> None:
    stats.constraint_s += seconds
    stats.draw_s.append(seconds)
    particle.constraint_s += seconds


def finish_at_length(
    model,
    particles: Sequence[Particle],
    *,
    hook: LogprobsHook,
    score_eos: bool,
    stats: StepStats,
) -> None:
    """`max_tokens` reached: EOS is forced where the text is complete (weighted by its
    probability when `score_eos`, which costs one forward); elsewhere the weight is -inf."""
    complete = [p for p in particles if p.matcher.accepting()]
    if score_eos and complete:
        t0 = time.perf_counter()
        rows = model.logprobs([p.stream for p in complete])
        stats.forwards += 1
        stats.forward_s += time.perf_counter() - t0
        eos = list(model.vocab.eos_ids)
        for particle, row in zip(complete, rows):
            particle.log_weight += float(torch.logsumexp(hook(row)[eos].double(), dim=-1))
    for particle in particles:
        if particle.matcher.accepting():
            particle.matcher.advance(model.vocab.eos_ids[0])
            particle.finish("length")
        else:
            particle.log_weight = -math.inf
            particle.finish("length", "max_tokens reached before the text was complete")


def steps(
    model,
    particles: list[Particle],
    sampler: TokenSampler,
    *,
    max_tokens: int,
    hook: LogprobsHook,
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
        advance(model, running, sampler, hook=hook, generator=generator, greedy=greedy, stats=stats)
        if between_steps is not None:
            particles = between_steps(particles)
        yield particles
    running = [p for p in particles if p.running]
    finish_at_length(model, running, hook=hook, score_eos=score_eos, stats=stats)
    yield particles


def decode(model, particles: list[Particle], sampler: TokenSampler, **options) -> list[Particle]:
    """`steps` run to the end: the final particles."""
    for current in steps(model, particles, sampler, **options):
        particles = current
    return particles
