"""Sequential Monte Carlo (SMC) over constrained generations: a strategy of the decoding loop.

Locally constrained decoding samples each token from the allowed part of the model's
distribution, which over-samples texts whose prefixes left the model little allowed mass. SMC
targets the model *conditioned on the constraint*, ``p(x | x in L)``: N particles per prompt
advance together (one batched forward per step for every particle of every prompt), each
token sampler returns a properly weighted log-weight (LCD's exact ``log Z``, AWRS's unbiased
estimate), and when a prompt's effective sample size falls below a threshold its particles are
resampled in proportion to their weights (KV caches and matchers forked), after which every
weight is reset to the average. Then

* ``log_ml``, the log of the mean final weight, is an unbiased estimate (in exp) of
  ``Z = sum over texts x in L of p(x EOS)``, the probability the model gives the constraint;
* the particles with their normalised weights approximate ``p(x | x in L)`` (consistently as
  N grows).

At `max_tokens`, a particle whose text is complete takes EOS with weight ``log p(EOS)``; the
others get weight -inf.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import torch

from constrain.decoding.loop import Sampling
from constrain.decoding.sequence import Sequence
from constrain.errors import ConfigError
from constrain.options import RESAMPLING, SMC
from constrain.results import DecodeStats, SMCResult, WeightedText
from constrain.samplers import token_sampler

__all__ = ["SMCSampling", "resample"]


class SMCSampling(Sampling):
    """Token sampling for every particle, then each prompt's particles resampled when their
    effective sample size is low (see the module docstring)."""

    def __init__(self, settings: SMC, generator: torch.Generator, stats: DecodeStats, rng):
        super().__init__(token_sampler(settings.token_sampler), generator, stats, scores_eos=True)
        self.settings = settings
        self.rng = rng
        self.ess: dict[int, list[float]] = defaultdict(list)  # by prompt (`Sequence.group`)
        self.resamples: dict[int, int] = defaultdict(int)

    def between_steps(self, sequences: list[Sequence]) -> list[Sequence]:
        if self.settings.ess_threshold <= 0:
            return sequences
        groups: dict[int, list[Sequence]] = defaultdict(list)
        for s in sequences:
            groups[s.group].append(s)
        return [s for group, particles in groups.items() for s in self._resample(group, particles)]

    def _resample(self, group: int, particles: list[Sequence]) -> list[Sequence]:
        weights = normalised([p.log_weight for p in particles])
        ess = 1.0 / float(np.sum(weights**2)) if weights.sum() > 0 else 0.0
        self.ess[group].append(ess)
        if ess == 0.0 or ess >= self.settings.ess_threshold * len(particles):
            return particles
        average = log_mean_exp([p.log_weight for p in particles])
        self.resamples[group] += 1
        used: set[int] = set()
        out = []
        for a in resample(weights, self.settings.resampling, self.rng).tolist():
            child = particles[a] if a not in used else particles[a].fork()
            used.add(a)
            child.log_weight = average
            out.append(child)
        return out

    def result(self, group: int, particles: list[Sequence]) -> SMCResult:
        """The outcome of one prompt's particles."""
        log_weights = [p.log_weight for p in particles]
        texts = [
            WeightedText(
                p.model.vocab.decode(p.tokens),
                list(p.tokens),
                p.log_weight,
                float(w),
                p.finish_reason or "length",
                p.matcher.finished(),
            )
            for p, w in zip(particles, normalised(log_weights))
        ]
        log_ml = log_mean_exp(log_weights)
        return SMCResult(texts, log_ml, self.ess[group], self.resamples[group], self.stats)


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
        raise ConfigError(f"resampling must be one of {RESAMPLING}, got {method!r}")
    return np.minimum(np.searchsorted(np.cumsum(weights), points, side="right"), n - 1)


def log_mean_exp(values: list[float]) -> float:
    """log(mean(exp(values))), -inf when every value is."""
    return float(np.logaddexp.reduce(np.array(values, dtype=np.float64))) - math.log(len(values))


def normalised(log_weights: list[float]) -> np.ndarray:
    """The weights, summing to 1 (all 0 when every log-weight is -inf)."""
    lw = np.array(log_weights, dtype=np.float64)
    if np.all(lw == -np.inf):
        return np.zeros(len(lw))
    w = np.exp(lw - lw.max())
    return w / w.sum()
