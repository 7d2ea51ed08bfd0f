"""The distribution a constrained step samples from, computed in one place.

From the control stage's row (model log-probabilities after model arithmetic, CFG, ...), the
target is ``p~``: the constraint, then temperature and truncation, in the stack's stage order.
Temperature commutes with the constraint; truncation does not (it must keep only allowed
tokens), so with truncation the row is masked first. `draw` lets a token sampler draw from
``p~`` (AWRS without a full mask where no truncation forces one); `distribution` writes ``p~``
out with the allowed mass (speculative verification compares it with a draft's). Both agree
exactly: a speculative step emits what a plain step would.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import torch

from constrain.constraints.logits import apply_bitmask_, device_bitmask
from constrain.engine.matcher import TokenMatcher
from constrain.processors.bound import BoundStack
from constrain.samplers.base import Draw, TokenSampler, categorical

__all__ = ["NOTHING_ALLOWED", "distribution", "draw"]

NOTHING_ALLOWED = "every token the constraint allows has probability 0 under the model"


def distribution(
    row: torch.Tensor, matcher: TokenMatcher, prefix: Sequence[int], stack: BoundStack
) -> tuple[torch.Tensor, float]:
    """``(log p~, log Z)``: the normalised target in float64 and the mass the constraint
    allowed (LCD's weight; -inf when nothing allowed has probability > 0)."""
    packed = device_bitmask(matcher, row.device)
    if not stack.truncates:
        row = stack.after_constraint(row, prefix)
    masked = apply_bitmask_(row.to(torch.float64, copy=True), packed)
    log_z = float(torch.logsumexp(masked, dim=-1))
    dist = masked - log_z
    if stack.truncates:
        dist = stack.after_constraint(dist, prefix).double()
    return dist, log_z


def draw(
    row: torch.Tensor,
    matcher: TokenMatcher,
    prefix: Sequence[int],
    stack: BoundStack,
    sampler: TokenSampler,
    generator: torch.Generator | None,
    greedy: bool,
) -> Draw:
    """The next token from ``p~`` and its log-weight (see `constrain.samplers.base`).

    Only EOS allowed: an EOS id by its probability (before any truncation), weight log P(EOS).
    With truncation warpers the row is masked first, and the weight is the allowed mass
    before truncation times the sampler's own."""
    if matcher.done():
        eos_ids = list(stack.model.vocab.eos_ids)
        rows = stack.after_constraint(row, prefix, truncate=False)[eos_ids]
        pick, log_z = categorical(rows, generator)
        if pick < 0:
            return Draw(
                eos_ids[0], -math.inf, reason="only EOS is allowed and it has probability 0"
            )
        if greedy:
            return Draw(eos_ids[int(torch.argmax(rows))], 0.0)
        return Draw(eos_ids[pick], log_z)
    if not stack.truncates:
        return sampler.sample(
            stack.after_constraint(row, prefix), matcher, generator, greedy=greedy
        )
    t0 = time.perf_counter()
    dist, log_z = distribution(row, matcher, prefix, stack)
    spent = time.perf_counter() - t0
    if log_z == -math.inf:
        return Draw(0, -math.inf, masks=1, reason=NOTHING_ALLOWED, constraint_s=spent)
    d = sampler.sample(dist, matcher, generator, greedy=greedy)
    weight = d.log_weight + (0.0 if greedy else log_z)
    return Draw(d.token, weight, d.checks, d.masks + 1, d.reason, d.constraint_s + spent)
