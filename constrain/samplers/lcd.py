"""Locally constrained decoding (LCD): mask the disallowed tokens, renormalise, sample.

For next-token log-probabilities ``p`` (after temperature) and the constraint's allowed set
``A``, LCD samples ``t ~ p(t) 1{t in A} / Z`` with ``Z = sum_{t in A} p(t)`` and returns the
log-weight ``log Z``, which makes the sample properly weighted for the unnormalised target
``p(t) 1{t in A}``: ``E[Z 1{y = t}] = p(t) 1{t in A}``.
"""

from __future__ import annotations

import math

import torch


def sample_lcd(
    logprobs: torch.Tensor,
    mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    greedy: bool = False,
    generator: torch.Generator | None = None,
) -> tuple[int, float]:
    """Sample one token from `logprobs` restricted to `mask`.

    Args:
        logprobs: (V,) next-token log-probabilities.
        mask: (V,) bool, True where the constraint allows the token; must allow at least one.
        temperature: divides the logits before normalisation (ignored when `greedy`).
        greedy: take the most likely allowed token.
        generator: torch RNG for reproducible sampling.

    Returns:
        (token, log Z) where Z is the probability mass of the allowed tokens.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}; use greedy=True instead")
    scores = logprobs if temperature == 1.0 else torch.log_softmax(logprobs / temperature, dim=-1)
    masked = scores.masked_fill(~mask, -math.inf)
    log_z = torch.logsumexp(masked, dim=-1)
    if not torch.isfinite(log_z):
        raise ValueError("the mask allows no token with non-zero probability")
    if greedy:
        token = int(torch.argmax(masked))
    else:
        probs = torch.exp(masked - log_z)
        token = int(torch.multinomial(probs, 1, generator=generator))
    return token, float(log_z)
