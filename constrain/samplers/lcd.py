"""Locally constrained decoding (LCD): mask the disallowed tokens, renormalise, sample.

For next-token log-probabilities ``log p`` and the constraint's allowed set ``A`` (the full mask
of the matcher), LCD samples ``t ~ p(t) 1{t in A} / Z`` with ``Z = sum_{t in A} p(t)`` and
returns ``log Z``: the draw is exact and the weight has zero variance. The price is a mask over
the whole vocabulary at every new automaton state (cached by state, and on the device, by the
constraint).
"""

from __future__ import annotations

import math
import time

import torch

from constrain.constraints.logits import apply_bitmask_, device_bitmask
from constrain.engine.matcher import TokenMatcher
from constrain.samplers.base import Draw, categorical

__all__ = ["LCD"]


class LCD:
    """The masking token sampler (exact local draw, weight log Z from the mask)."""

    name = "lcd"
    full_masks = True

    def sample(
        self,
        logprobs: torch.Tensor,
        matcher: TokenMatcher,
        generator: torch.Generator | None = None,
        *,
        greedy: bool = False,
    ) -> Draw:
        t0 = time.perf_counter()
        packed = device_bitmask(matcher, logprobs.device)
        spent = time.perf_counter() - t0
        masked = apply_bitmask_(logprobs.clone(), packed)
        if greedy:
            if not bool(torch.isfinite(masked).any()):
                return Draw(0, -math.inf, masks=1, reason=_NOTHING_LIKELY, constraint_s=spent)
            return Draw(int(torch.argmax(masked)), 0.0, masks=1, constraint_s=spent)
        token, log_z = categorical(masked, generator)
        if token < 0:
            return Draw(0, -math.inf, masks=1, reason=_NOTHING_LIKELY, constraint_s=spent)
        return Draw(token, log_z, masks=1, constraint_s=spent)


_NOTHING_LIKELY = "every token the constraint allows has probability 0 under the model"
