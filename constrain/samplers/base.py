"""The token-sampler contract shared by LCD and AWRS.

A token sampler draws the next token under a constraint from next-token log-probabilities
``log p`` (already processed: temperature, guidance, ...) and returns a log-weight such that
the pair is *properly weighted* for the unnormalised target ``p(t) c(t)``, where ``c(t)`` is 1
when the token keeps the output completable (EOS: when the text is complete):

    E[ w * 1{token = t} ] = p(t) c(t)        for every token t.

Summing over t, ``E[w] = Z``, the mass the constraint allows; so the product of the weights along
a sequence corrects the bias of local constraint enforcement, which is what SMC relies on.
A weight of -inf means no token with non-zero probability keeps the output completable: the
sequence is dead, its token must not be consumed, and `reason` says why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from constrain.engine.matcher import TokenMatcher

__all__ = ["Draw", "TokenSampler", "categorical"]


@dataclass(frozen=True)
class Draw:
    """One sampled token: its id, its log-weight, and the constraint checks it cost."""

    token: int
    log_weight: float
    checks: int = 0  # Matcher.check calls (a full mask counts as 0 checks; see `masks`)
    masks: int = 0  # full masks computed or fetched
    reason: str = ""  # why log_weight is -inf
    constraint_s: float = 0.0  # time spent in Matcher.check / Matcher.mask


class TokenSampler(Protocol):
    """Draws one token under a Matcher; see the module docstring for the weight contract."""

    name: str
    full_masks: bool  # its draws read the whole mask (the loop fills them ahead, in a batch)

    def sample(
        self,
        logprobs: torch.Tensor,
        matcher: TokenMatcher,
        generator: torch.Generator | None = None,
        *,
        greedy: bool = False,
    ) -> Draw:
        """Draw from ``p(t) c(t) / Z`` (the most likely allowed token when `greedy`; greedy
        draws carry log-weight 0, they are not properly weighted)."""
        ...


def categorical(
    scores: torch.Tensor, generator: torch.Generator | None = None
) -> tuple[int, float]:
    """One index drawn with probability proportional to ``exp(scores)``, and
    ``logsumexp(scores)``; (-1, -inf) when every score is -inf.

    An inverse-CDF draw in float64 on the CPU: one uniform from `generator` and a binary search
    in the cumulative sum (``torch.multinomial`` costs several times more on a CPU).
    """
    scores = scores.detach().cpu()
    top = float(scores.max())
    if top == float("-inf"):
        return -1, top
    cdf = torch.cumsum(torch.exp(scores - top).double(), 0).numpy()
    total = float(cdf[-1])
    device = generator.device if generator is not None else "cpu"
    u = float(torch.rand(1, generator=generator, device=device)) * total
    index = min(int(np.searchsorted(cdf, u, side="right")), len(cdf) - 1)
    while index > 0 and cdf[index] == cdf[index - 1]:  # rounding landed on a zero weight
        index -= 1
    return index, top + math.log(total)
