"""Adaptive weighted rejection sampling (AWRS; Lipkin et al., COLM 2025).

Rejection sampling *without replacement*: candidates are drawn from ``p`` one after the other,
each from what the previous ones left (the order of a Gumbel race), and checked with
`Matcher.check` until one keeps the output completable. The first acceptable token is an exact draw from ``p(t) c(t) / Z``, and the
expected number of checks is ``1 + sum over rejected r of p_r / (p_r + Z)``: a handful when the
model mostly agrees with the constraint, instead of a mask over the whole vocabulary.

The weight is an unbiased estimate of ``Z`` that makes the draw properly weighted (see
`constrain.samplers.base`), from one of two estimators:

* ``"two-pass"`` (the paper's): a second race continues from the survivors of the first (its
  rejected tokens removed, the accepted one kept) until it accepts again;
  ``Z_hat = (mass not rejected by the first pass) / (rejections of both passes + 1)``.
* ``"recursive"`` (cheaper: one extra check): ``Z_S = pi(y) c(y) + (1 - pi(y)) Z_{S minus y}``
  for the race leader y, unrolled over the rejections; after the first acceptance the tail
  ``Z_{S minus y}`` is estimated by checking the next token of the race.
  ``Z_hat = (mass not rejected) * (1 if the next token is acceptable else pi_S(y))``.

No full mask is computed, except as a fallback: after `mask_after` rejections (a constraint the
model strongly disagrees with) the step finishes as an LCD step over the survivors, which keeps
the draw exact and the weight proper (the race so far only removed tokens the mask removes too).
When nothing with non-zero probability is acceptable the weight is -inf with a reason.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator

import numpy as np
import torch

from constrain.matcher import Matcher
from constrain.samplers.base import Draw
from constrain.samplers.lcd import LCD

__all__ = ["AWRS"]

_ESTIMATORS = ("two-pass", "recursive")
_FIRST_CANDIDATES = 8  # race entries taken per top-k call, growing 16x when exhausted
_PRECISE_BELOW = 1e-6  # recompute the surviving mass exactly when cancellation threatens


class AWRS:
    """The adaptive weighted rejection token sampler.

    Args:
        estimator: "recursive" (default: one check beyond plain rejection sampling) or
            "two-pass" (the paper's estimator: a second rejection pass).
        mask_after: rejections (in the first pass) after which the step falls back to a full
            mask; None never falls back.
    """

    name = "awrs"

    def __init__(self, estimator: str = "recursive", *, mask_after: int | None = 32):
        if estimator not in _ESTIMATORS:
            raise ValueError(f"estimator must be one of {_ESTIMATORS}, got {estimator!r}")
        if mask_after is not None and mask_after < 1:
            raise ValueError(f"mask_after must be >= 1 or None, got {mask_after}")
        self.estimator = estimator
        self.mask_after = mask_after
        self._lcd = LCD()

    def __repr__(self) -> str:
        return f"AWRS(estimator={self.estimator!r}, mask_after={self.mask_after})"

    def sample(
        self,
        logprobs: torch.Tensor,
        matcher: Matcher,
        generator: torch.Generator | None = None,
        *,
        greedy: bool = False,
    ) -> Draw:
        ok = _Checks(matcher)
        if greedy:
            for n_rejected, token in enumerate(_by_probability(logprobs)):
                if n_rejected == self.mask_after:
                    return self._masked(logprobs, ok, generator, greedy=True)
                if ok(token):
                    return ok.draw(token, 0.0)
            return ok.dead()
        race = _Race(logprobs, generator)
        if race.log_mass == -math.inf:
            return Draw(0, -math.inf, reason="the model gives every token probability 0")
        if self.estimator == "recursive":
            return self._recursive(race, logprobs, ok, generator)
        return self._two_pass(race, logprobs, ok, generator)

    def _masked(self, logprobs, ok: _Checks, generator, *, greedy: bool = False) -> Draw:
        """Finish the step as LCD: exact draw, exact weight (the fallback)."""
        lcd = self._lcd.sample(logprobs, ok.matcher, generator, greedy=greedy)
        return ok.draw(lcd.token, lcd.log_weight, masks=1, reason=lcd.reason, also=lcd)

    def _recursive(self, race: _Race, logprobs, ok: _Checks, generator) -> Draw:
        rejected: list[int] = []
        rest = 1.0  # normalised mass of the tokens not rejected yet
        for token, share in race:
            if len(rejected) == self.mask_after:
                return self._masked(logprobs, ok, generator)
            if ok(token):
                q = min(share / rest, 1.0)  # the token's share of the survivors
                nxt = next(race, None)
                tail = 1.0 if nxt is None or ok(nxt[0]) else q
                return ok.draw(token, race.log_mass + math.log(rest * tail))
            rejected.append(token)
            rest -= share
            if rest < _PRECISE_BELOW:  # cancellation: sum the survivors instead
                rest = race.share_without(rejected)
        return ok.dead()

    def _two_pass(self, race: _Race, logprobs, ok: _Checks, generator) -> Draw:
        rejected: list[int] = []
        accepted = None
        for token, _ in race:
            if len(rejected) == self.mask_after:
                return self._masked(logprobs, ok, generator)
            if ok(token):
                accepted = token
                break
            rejected.append(token)
        if accepted is None:
            return ok.dead()
        alive = race.share_without(rejected)
        n_rejected = len(rejected)
        # a fresh race over the survivors: the accepted token is still in it
        for token, _ in _Race(logprobs, generator, exclude=rejected):
            if ok(token):
                break
            n_rejected += 1
        return ok.draw(accepted, race.log_mass + math.log(alive) - math.log(n_rejected + 1))


class _Checks:
    """`Matcher.check`, memoised for one draw, counted and timed."""

    __slots__ = ("matcher", "results", "seconds")

    def __init__(self, matcher: Matcher):
        self.matcher = matcher
        self.results: dict[int, bool] = {}
        self.seconds = 0.0

    def __call__(self, token: int) -> bool:
        known = self.results.get(token)
        if known is None:
            t0 = time.perf_counter()
            known = self.results[token] = self.matcher.check(token)
            self.seconds += time.perf_counter() - t0
        return known

    def draw(
        self, token: int, log_weight: float, masks: int = 0, reason: str = "", also=None
    ) -> Draw:
        extra = also.constraint_s if also is not None else 0.0
        return Draw(token, log_weight, len(self.results), masks, reason, self.seconds + extra)

    def dead(self) -> Draw:
        reason = (
            f"none of the {len(self.results)} tokens with non-zero probability keeps the output "
            f"completable"
        )
        return self.draw(next(iter(self.results), 0), -math.inf, reason=reason)


class _Race:
    """Tokens in the order of sampling without replacement from ``p ~ exp(logprobs)``.

    Draws from p that skip the tokens already drawn are draws from p renormalised over the
    rest, so the sequence has the law of a Gumbel race. Each draw is a binary search in one
    cumulative sum (float64, on the CPU), rebuilt over the survivors once half of the mass is
    gone, so a new candidate costs two searches on average and the step one pass over the
    vocabulary.

    Iterating yields ``(token, share)``: the token and its probability normalised over the
    whole distribution (``p(t) / M``).
    """

    def __init__(self, logprobs: torch.Tensor, generator, exclude: list[int] = ()):
        lp = logprobs.detach().cpu()
        top = float(lp.max())
        self.generator = generator
        self.drawn: set[int] = set()
        self._uniforms: list[float] = []
        if top == -math.inf:
            self.log_mass, self.p, self.mass = -math.inf, None, 0.0
            return
        # exp in the input's precision (float32 for real models), sums in float64
        self.p = torch.exp(lp - top).double().numpy()
        if exclude:
            self.p[list(exclude)] = 0.0
        self._rebuild()
        self.mass = self.total  # M / exp(top)
        self.log_mass = top + math.log(self.mass) if self.mass > 0 else -math.inf

    def _rebuild(self) -> None:
        self.cdf = torch.cumsum(torch.from_numpy(self.p), 0).numpy()  # numpy's is 3x slower
        self.total = float(self.cdf[-1])
        self.gone = 0.0  # mass of drawn tokens still inside the cumulative sum

    def _uniform(self) -> float:
        if not self._uniforms:
            device = self.generator.device if self.generator is not None else "cpu"
            self._uniforms = torch.rand(16, generator=self.generator, device=device).tolist()
        return self._uniforms.pop()

    def __iter__(self) -> _Race:
        return self

    def __next__(self) -> tuple[int, float]:
        if self.p is None:
            raise StopIteration
        while True:
            if self.gone > 0.5 * self.total:
                self.p[list(self.drawn)] = 0.0
                self._rebuild()
            if self.total <= 0.0:
                raise StopIteration
            u = self._uniform() * self.total
            token = min(int(np.searchsorted(self.cdf, u, side="right")), len(self.p) - 1)
            if token in self.drawn:
                continue
            weight = float(self.p[token])
            if weight <= 0.0:  # only on float rounding at the very end of the sum
                continue
            self.drawn.add(token)
            self.gone += weight
            return token, weight / self.mass

    def share_without(self, removed: list[int]) -> float:
        """The normalised mass of every token but `removed`, summed afresh (no cancellation)."""
        rest = self.p.copy()
        rest[list(removed)] = 0.0
        return float(rest.sum()) / self.mass


def _by_probability(logprobs: torch.Tensor) -> Iterator[int]:
    """Tokens by decreasing probability (zero-probability tokens excluded), produced lazily
    with growing top-k calls: the usual few candidates cost one small top-k."""
    size = logprobs.shape[-1]
    seen: set[int] = set()
    k = _FIRST_CANDIDATES
    while True:
        k = min(k, size)
        values, index = torch.topk(logprobs, k)
        for value, token in zip(values.tolist(), index.tolist()):
            if value == -math.inf:
                return
            if token not in seen:  # ties may reorder between calls: never yield twice
                seen.add(token)
                yield token
        if k == size:
            return
        k *= 16
