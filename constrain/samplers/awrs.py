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

from constrain.engine.matcher import TokenMatcher
from constrain.errors import ConfigError
from constrain.samplers.base import Draw
from constrain.samplers.lcd import LCD

__all__ = ["AWRS"]

_ESTIMATORS = ("two-pass", "recursive")
_FIRST_CANDIDATES = 8  # race entries taken per top-k call, growing 16x when exhausted
_PRECISE_BELOW = 1e-6  # recompute the surviving mass exactly when cancellation threatens
_HEAD = 32  # the most likely tokens a race holds one by one (the rest is one block)


class AWRS:
    """The adaptive weighted rejection token sampler.

    Args:
        estimator: "recursive" (default: one check beyond plain rejection sampling) or
            "two-pass" (the paper's estimator: a second rejection pass).
        mask_after: rejections (in the first pass) after which the step falls back to a full
            mask; None never falls back. The default, 128, lets a step where the model mostly
            disagrees run a hundred cheap checks before it pays for a first mask of a new
            state (milliseconds; 32 fell back on 2% of the tokens of the sampler benchmark and
            doubled AWRS's mean constraint time per token).
    """

    name = "awrs"
    full_masks = False  # it checks the tokens it proposes; a mask only as a last resort

    def __init__(self, estimator: str = "recursive", *, mask_after: int | None = 128):
        if estimator not in _ESTIMATORS:
            raise ConfigError(f"estimator must be one of {_ESTIMATORS}, got {estimator!r}")
        if mask_after is not None and mask_after < 1:
            raise ConfigError(f"mask_after must be >= 1 or None, got {mask_after}")
        self.estimator = estimator
        self.mask_after = mask_after
        self._lcd = LCD()

    def __repr__(self) -> str:
        return f"AWRS(estimator={self.estimator!r}, mask_after={self.mask_after})"

    def sample(
        self,
        logprobs: torch.Tensor,
        matcher: TokenMatcher,
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

    def __init__(self, matcher: TokenMatcher):
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
    rest, so the sequence has the law of a Gumbel race. The race holds the `_HEAD` most likely
    tokens in a small array and the rest of the vocabulary as one block of known mass (the
    *tail*): a draw picks a head token or the tail by mass, and only a draw that lands in the
    tail (rare when the model agrees with the constraint) builds a cumulative sum over the
    vocabulary, rebuilt over the survivors once half of its mass is gone. So a step reads the
    vocabulary twice on the model's device (top-k and the total mass) and moves a few numbers
    to the CPU.

    Iterating yields ``(token, share)``: the token and its probability normalised over the
    whole distribution (``p(t) / M``).
    """

    def __init__(self, logprobs: torch.Tensor, generator, exclude: list[int] = ()):
        lp = logprobs.detach()
        if exclude:
            lp = lp.index_fill(-1, torch.tensor(list(exclude), device=lp.device), -math.inf)
        self.generator = generator
        self.drawn: set[int] = set()
        self._uniforms: list[float] = []
        values, index = torch.topk(lp, min(_HEAD, lp.shape[-1]))
        top = float(values[0])
        if top == -math.inf:
            self.log_mass, self.mass, self._head = -math.inf, 0.0, None
            return
        # exp in the input's precision (float32 for real models), sums in float64; the head
        # holds exactly the values the total sums, so the tail's mass is their difference
        self._p = torch.exp(lp - top)
        self.mass = float(self._p.sum(dtype=torch.float64))  # M / exp(top)
        self.log_mass = top + math.log(self.mass) if self.mass > 0 else -math.inf
        self._tokens = index.tolist()
        self._head_set = set(self._tokens)
        self._head0 = self._p[index].double().cpu().numpy()
        self._head = self._head0.copy()  # drawn tokens at 0
        self._tail0 = (
            0.0 if len(self._tokens) == len(lp) else max(0.0, self.mass - self._head0.sum())
        )
        self._tail = self._tail0  # mass of the tail not drawn yet
        self._tail_p: np.ndarray | None = None  # built on the first draw in the tail

    def _uniform(self) -> float:
        if not self._uniforms:
            device = self.generator.device if self.generator is not None else "cpu"
            self._uniforms = torch.rand(16, generator=self.generator, device=device).tolist()
        return self._uniforms.pop()

    def __iter__(self) -> _Race:
        return self

    def __next__(self) -> tuple[int, float]:
        if self._head is None:
            raise StopIteration
        while True:
            cdf = np.cumsum(self._head)
            head = float(cdf[-1])
            if head + self._tail <= 0.0:
                raise StopIteration
            u = self._uniform() * (head + self._tail)
            if u >= head:
                found = self._from_tail()
                if found is None:
                    continue
                token, weight = found
            else:
                i = min(int(np.searchsorted(cdf, u, side="right")), len(cdf) - 1)
                weight = float(self._head[i])
                if weight <= 0.0:  # only on float rounding at the end of the sum
                    continue
                self._head[i] = 0.0
                token = self._tokens[i]
            self.drawn.add(token)
            return token, weight / self.mass

    def _from_tail(self) -> tuple[int, float] | None:
        """A draw from the tail's survivors (None: the tail turned out empty)."""
        if self._tail_p is None:
            self._tail_p = self._p.double().cpu().numpy()
            self._tail_p[self._tokens] = 0.0
            self._rebuild()
            self._tail = self._total
        while self._tail > 0.0:
            if self._gone > 0.5 * self._total:
                self._rebuild()
                if self._total <= 0.0:
                    break
            u = self._uniform() * self._total
            token = min(int(np.searchsorted(self._cdf, u, side="right")), len(self._cdf) - 1)
            weight = float(self._tail_p[token])
            if token in self.drawn or weight <= 0.0:
                continue  # a drawn token still in the sum (or float rounding): draw again
            self._gone += weight
            self._tail = max(0.0, self._tail - weight)
            return token, weight
        self._tail = 0.0
        return None

    def _rebuild(self) -> None:
        """The tail's cumulative sum over the tokens not drawn yet."""
        p = self._tail_p.copy()
        p[[t for t in self.drawn if t not in self._head_set]] = 0.0
        self._cdf = torch.cumsum(torch.from_numpy(p), 0).numpy()  # numpy's is 3x slower
        self._total = float(self._cdf[-1])
        self._gone = 0.0  # mass of drawn tokens still inside the cumulative sum

    def share_without(self, removed: list[int]) -> float:
        """The normalised mass of every token but `removed`, summed afresh (no cancellation)."""
        gone = set(removed)
        head = sum(w for t, w in zip(self._tokens, self._head0.tolist()) if t not in gone)
        tail = self._tail0
        if self._tail_p is not None:
            rest = self._tail_p.copy()
            rest[[t for t in gone if t not in self._head_set]] = 0.0
            tail = float(rest.sum())
        return (head + tail) / self.mass


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
