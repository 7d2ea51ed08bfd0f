"""Adaptive weighted rejection sampling (AWRS; Lipkin et al., COLM 2025).

Rejection sampling *without replacement*: the tokens run a Gumbel race over their
log-probabilities (sorting ``log p(t) - log E_t``, ``E_t ~ Exp(1)``, is sampling without
replacement), and candidates are checked in race order with `Matcher.check` until one keeps the
output completable. The first acceptable token is an exact draw from ``p(t) c(t) / Z``, and the
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
from collections.abc import Iterator

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

    def __init__(self, estimator: str = "recursive", *, mask_after: int | None = 64):
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
        checked: dict[int, bool] = {}

        def ok(token: int) -> bool:
            known = checked.get(token)
            if known is None:
                known = checked[token] = matcher.check(token)
            return known

        log_m = float(torch.logsumexp(logprobs.double(), dim=-1))
        if log_m == -math.inf:
            return Draw(0, -math.inf, reason="the model gives every token probability 0")
        if greedy:
            for n_rejected, (token, _) in enumerate(_race(logprobs, None)):
                if n_rejected == self.mask_after:
                    return self._masked(logprobs, matcher, generator, checked, greedy=True)
                if ok(token):
                    return Draw(token, 0.0, checks=len(checked))
            return self._dead(checked)
        if self.estimator == "recursive":
            return self._recursive(logprobs, log_m, matcher, ok, checked, generator)
        return self._two_pass(logprobs, matcher, ok, checked, generator)

    def _masked(self, logprobs, matcher, generator, checked, *, greedy: bool = False) -> Draw:
        """Finish the step as LCD: exact draw, exact weight (the fallback)."""
        draw = self._lcd.sample(logprobs, matcher, generator, greedy=greedy)
        return Draw(draw.token, draw.log_weight, len(checked), 1, draw.reason)

    def _recursive(self, logprobs, log_m, matcher, ok, checked, generator) -> Draw:
        rejected: list[int] = []
        rest = 1.0  # normalised mass of the tokens not rejected yet
        race = _race(logprobs, generator)
        for token, logprob in race:
            if len(rejected) == self.mask_after:
                return self._masked(logprobs, matcher, generator, checked)
            if ok(token):
                if rest < _PRECISE_BELOW:
                    rest = math.exp(_log_mass_without(logprobs, rejected) - log_m)
                log_q = logprob - log_m - math.log(rest)  # token's share of the survivors
                nxt = next(race, None)
                log_tail = 0.0 if nxt is None or ok(nxt[0]) else min(log_q, 0.0)
                log_w = log_m + math.log(rest) + log_tail
                return Draw(token, log_w, checks=len(checked))
            rejected.append(token)
            rest -= math.exp(logprob - log_m)
            if rest < _PRECISE_BELOW:
                rest = math.exp(_log_mass_without(logprobs, rejected) - log_m)
        return self._dead(checked)

    def _two_pass(self, logprobs, matcher, ok, checked, generator) -> Draw:
        rejected: list[int] = []
        accepted = None
        for token, _ in _race(logprobs, generator):
            if len(rejected) == self.mask_after:
                return self._masked(logprobs, matcher, generator, checked)
            if ok(token):
                accepted = token
                break
            rejected.append(token)
        if accepted is None:
            return self._dead(checked)
        survivors = logprobs
        if rejected:
            survivors = logprobs.clone()
            survivors[rejected] = -math.inf
        log_alive = float(torch.logsumexp(survivors.double(), dim=-1))
        n_rejected = len(rejected)
        for token, _ in _race(survivors, generator):  # the accepted token is still in this race
            if ok(token):
                break
            n_rejected += 1
        return Draw(accepted, log_alive - math.log(n_rejected + 1), checks=len(checked))

    @staticmethod
    def _dead(checked: dict[int, bool]) -> Draw:
        first = next(iter(checked), 0)
        reason = (
            f"none of the {len(checked)} tokens with non-zero probability keeps the output "
            f"completable"
        )
        return Draw(first, -math.inf, checks=len(checked), reason=reason)


def _race(logprobs: torch.Tensor, generator: torch.Generator | None) -> Iterator[tuple[int, float]]:
    """(token, log-probability) in the order of a Gumbel race (sampling without replacement);
    by decreasing probability when `generator` is None. Tokens of probability 0 never run.

    The order is produced lazily with growing top-k calls, so the usual few candidates cost one
    small top-k instead of a sort of the vocabulary.
    """
    if generator is None:
        keys = logprobs
    else:
        noise = torch.empty_like(logprobs).exponential_(generator=generator)
        keys = logprobs - torch.log(noise.clamp_min_(torch.finfo(noise.dtype).tiny))
    size = keys.shape[-1]
    seen: set[int] = set()
    k = _FIRST_CANDIDATES
    while True:
        k = min(k, size)
        values, index = torch.topk(keys, k)
        for value, token, logprob in zip(values.tolist(), index.tolist(), logprobs[index].tolist()):
            if value == -math.inf:
                return
            if token not in seen:  # ties may reorder between calls: never yield twice
                seen.add(token)
                yield token, logprob
        if k == size:
            return
        k *= 16


def _log_mass_without(logprobs: torch.Tensor, removed: list[int]) -> float:
    rest = logprobs.double().clone()
    rest[removed] = -math.inf
    return float(torch.logsumexp(rest, dim=-1))
