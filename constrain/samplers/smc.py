"""Sequential Monte Carlo (SMC) over constrained generations.

Locally constrained decoding samples each token from the allowed part of the model's
distribution, which over-samples texts whose prefixes left the model little allowed mass. SMC
targets the model *conditioned on the constraint*, ``p(x | x in L)``: N particles advance
together (one batched forward per step), each token sampler returns a properly weighted
log-weight (LCD's exact ``log Z``, AWRS's unbiased estimate), and when the effective sample size
falls below a threshold the particles are resampled in proportion to their weights (KV caches
and matchers forked), after which every weight is reset to the average. Then

* ``log_ml``, the log of the mean final weight, is an unbiased estimate (in exp) of
  ``Z = sum over texts x in L of p(x EOS)``, the probability the model gives the constraint;
* the particles with their normalised weights approximate ``p(x | x in L)`` (consistently as
  N grows).

At `max_tokens`, a particle whose text is complete takes EOS with weight ``log p(EOS)``; the
others get weight -inf (finish reason "length" either way).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
import torch

from constrain.engine.matcher import Constraint
from constrain.processors.bound import BoundStack
from constrain.samplers import token_sampler
from constrain.samplers.base import TokenSampler
from constrain.samplers.sequence import Particle, StepStats, decode

__all__ = ["SMC", "SMCResult", "WeightedText", "resample"]

_RESAMPLING = ("multinomial", "stratified", "systematic")


def resample(weights: np.ndarray, method: str, rng: np.random.Generator) -> np.ndarray:
    """Indices of N ancestors drawn in proportion to the normalised `weights`."""
    n = len(weights)
    if method == "multinomial":
        return rng.choice(n, size=n, p=weights)
    if method == "stratified":
        points = (np.arange(n) + rng.random(n)) / n
    elif method == "systematic":
        points = (np.arange(n) + rng.random()) / n
    else:
        raise ValueError(f"resampling must be one of {_RESAMPLING}, got {method!r}")
    return np.minimum(np.searchsorted(np.cumsum(weights), points, side="right"), n - 1)


def _log_mean_exp(values: list[float]) -> float:
    finite = [v for v in values if v != -math.inf]
    if not finite:
        return -math.inf
    top = max(finite)
    return top + math.log(sum(math.exp(v - top) for v in finite) / len(values))


def _normalised(log_weights: list[float]) -> np.ndarray:
    lw = np.array(log_weights, dtype=np.float64)
    if np.all(lw == -np.inf):
        return np.zeros(len(lw))
    w = np.exp(lw - lw.max())
    return w / w.sum()


@dataclass(frozen=True)
class WeightedText:
    """One SMC particle's outcome."""

    text: str
    tokens: list[int]
    log_weight: float  # unnormalised: the product of its incremental weights
    weight: float  # normalised over the particles (sums to 1 unless every particle died)
    finish_reason: str  # "stop", "length" or "dead"
    complete: bool


@dataclass
class SMCResult:
    """Every particle with its normalised weight, the log marginal likelihood and statistics.

    Attributes:
        particles: the final particles.
        log_ml: unbiased (in exp) estimate of log Z, the log probability of the constraint.
        ess: the effective sample size before each step's resampling decision.
        resamples: how many times the particles were resampled.
        stats: forwards, checks and times across steps.
    """

    particles: list[WeightedText]
    log_ml: float
    ess: list[float] = field(default_factory=list)
    resamples: int = 0
    stats: StepStats = field(default_factory=StepStats)

    @property
    def posterior(self) -> dict[str, float]:
        """Texts with their total normalised weight (identical texts merged), best first."""
        merged: dict[str, float] = defaultdict(float)
        for p in self.particles:
            if p.weight > 0:
                merged[p.text] += p.weight
        return dict(sorted(merged.items(), key=lambda kv: -kv[1]))

    @property
    def best(self) -> WeightedText | None:
        """The particle whose text has the largest posterior weight (None if all died)."""
        posterior = self.posterior
        if not posterior:
            return None
        text = next(iter(posterior))
        return max((p for p in self.particles if p.text == text), key=lambda p: p.weight)

    def choice(self, generator: np.random.Generator | None = None) -> WeightedText | None:
        """A particle drawn in proportion to its weight (None if all died)."""
        weights = np.array([p.weight for p in self.particles])
        if weights.sum() <= 0:
            return None
        rng = generator or np.random.default_rng()
        return self.particles[int(rng.choice(len(weights), p=weights / weights.sum()))]

    @property
    def mean_ess(self) -> float:
        return float(np.mean(self.ess)) if self.ess else float("nan")


@dataclass
class SMC:
    """Sequential Monte Carlo settings; pass as ``cn.generate(..., sampler=cn.SMC(...))`` or use
    ``cn.smc(...)``.

    Args:
        particles: number of particles N.
        ess_threshold: resample when the effective sample size falls below this fraction of N
            (0 never resamples: importance sampling; 1 resamples at every step).
        resampling: "stratified" (default), "systematic" or "multinomial".
        token_sampler: "awrs" (default), "lcd", "awrs-two-pass" or a token sampler object.
    """

    particles: int = 8
    ess_threshold: float = 0.5
    resampling: str = "stratified"
    token_sampler: str | TokenSampler = "awrs"

    def __post_init__(self):
        if self.particles < 1:
            raise ValueError(f"particles must be >= 1, got {self.particles}")
        if not 0 <= self.ess_threshold <= 1:
            raise ValueError(f"ess_threshold must be in [0, 1], got {self.ess_threshold}")
        if self.resampling not in _RESAMPLING:
            raise ValueError(f"resampling must be one of {_RESAMPLING}, got {self.resampling!r}")
        self._sampler = token_sampler(self.token_sampler)

    def run(
        self,
        model,
        prompt_ids: list[int],
        constraint: Constraint,
        *,
        max_tokens: int = 256,
        temperature: float = 1.0,
        seed: int | None = None,
        stack: BoundStack | None = None,
    ) -> SMCResult:
        """Run the particles to completion (EOS, death or `max_tokens`).

        Args:
            stack: the processors bound to this generation (default: only `temperature`);
                truncation warpers are refused, they leave SMC no target distribution.
        """
        stack = stack if stack is not None else BoundStack.plain(model, prompt_ids, temperature)
        if stack.truncates:
            raise ValueError(
                "SMC needs a target distribution: truncation warpers (top-k, top-p, ...) act "
                "after the constraint and leave none; use control processors and temperature"
            )
        generator = torch.Generator(device=model.device)
        rng = np.random.default_rng(seed)
        generator.manual_seed(int(rng.integers(2**63 - 1)))
        first = Particle(model.start(prompt_ids), constraint.start(), stack.start_terms())
        particles = [first] + [first.fork(model, stack) for _ in range(self.particles - 1)]
        stats = StepStats()
        result = SMCResult([], 0.0, stats=stats)

        def maybe_resample(current: list[Particle]) -> list[Particle]:
            weights = _normalised([p.log_weight for p in current])
            ess = 1.0 / float(np.sum(weights**2)) if weights.sum() > 0 else 0.0
            result.ess.append(ess)
            if ess == 0.0 or ess >= self.ess_threshold * len(current):
                return current
            average = _log_mean_exp([p.log_weight for p in current])
            ancestors = resample(weights, self.resampling, rng)
            result.resamples += 1
            used: set[int] = set()
            out = []
            for a in ancestors.tolist():
                child = current[a] if a not in used else current[a].fork(model, stack)
                used.add(a)
                child.log_weight = average
                out.append(child)
            return out

        particles = decode(
            model,
            particles,
            self._sampler,
            max_tokens=max_tokens,
            stack=stack,
            generator=generator,
            greedy=False,
            stats=stats,
            score_eos=True,
            between_steps=maybe_resample if self.ess_threshold > 0 else None,
        )
        weights = _normalised([p.log_weight for p in particles])
        vocab = model.vocab
        result.particles = [
            WeightedText(
                text=vocab.decode(p.tokens),
                tokens=list(p.tokens),
                log_weight=p.log_weight,
                weight=float(w),
                finish_reason=p.finish_reason or "length",
                complete=p.matcher.finished(),
            )
            for p, w in zip(particles, weights)
        ]
        result.log_ml = _log_mean_exp([p.log_weight for p in particles])
        return result
