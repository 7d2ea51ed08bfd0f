"""The usual warpers: temperature, truncation (top-k, top-p, min-p, typical, top-H) and the
repetition penalty, each a `Processor` over one row of log-probabilities.

Truncation warpers run after the constraint (they keep only allowed tokens) and renormalise;
the repetition penalty is a control processor (it reads the prefix, like transformers'
`RepetitionPenaltyLogitsProcessor`, which applies before the warpers).
"""

from __future__ import annotations

import math

import torch

from constrain.errors import ConfigError
from constrain.processors.base import Processor, Step, Temperature

__all__ = ["MinP", "RepetitionPenalty", "Temperature", "TopH", "TopK", "TopP", "Typical"]

_NEG = -math.inf


def _renormalised(logprobs: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(logprobs.masked_fill(~keep, _NEG), dim=-1)


class TopK(Processor):
    """The k most likely tokens (ties at the k-th value kept)."""

    stage = "truncation"

    def __init__(self, k: int):
        if not (isinstance(k, int) and not isinstance(k, bool) and k >= 1):
            raise ConfigError(f"top-k needs an integer k >= 1, got {k!r}")
        self.k = k

    def __call__(self, logprobs, term_rows=(), step=None):
        k = min(self.k, logprobs.shape[-1])
        kth = torch.topk(logprobs, k).values[-1]
        return _renormalised(logprobs, logprobs >= kth)

    def __repr__(self) -> str:
        return f"TopK({self.k})"


class TopP(Processor):
    """Nucleus: the smallest set of most likely tokens whose mass reaches p."""

    stage = "truncation"

    def __init__(self, p: float):
        if not (_real(p) and 0 < p <= 1):
            raise ConfigError(f"top-p needs 0 < p <= 1, got {p}")
        self.p = float(p)

    def __call__(self, logprobs, term_rows=(), step=None):
        probs, order = torch.sort(torch.softmax(logprobs, dim=-1), descending=True)
        before = torch.cumsum(probs, dim=-1) - probs  # mass of the more likely tokens
        keep = torch.zeros_like(logprobs, dtype=torch.bool)
        keep[order] = before < self.p
        return _renormalised(logprobs, keep)

    def __repr__(self) -> str:
        return f"TopP({self.p})"


class MinP(Processor):
    """Tokens at least `min_p` times as likely as the most likely one."""

    stage = "truncation"

    def __init__(self, min_p: float):
        if not (_real(min_p) and 0 <= min_p <= 1):
            raise ConfigError(f"min-p needs 0 <= min_p <= 1, got {min_p}")
        self.min_p = float(min_p)

    def __call__(self, logprobs, term_rows=(), step=None):
        threshold = logprobs.max() + (math.log(self.min_p) if self.min_p > 0 else _NEG)
        return _renormalised(logprobs, logprobs >= threshold)

    def __repr__(self) -> str:
        return f"MinP({self.min_p})"


class Typical(Processor):
    """Locally typical sampling: tokens whose surprisal is closest to the entropy, until
    their mass reaches `mass` (the token crossing it included)."""

    stage = "truncation"

    def __init__(self, mass: float = 0.9):
        if not (_real(mass) and 0 < mass < 1):
            raise ConfigError(f"typical sampling needs 0 < mass < 1, got {mass}")
        self.mass = float(mass)

    def __call__(self, logprobs, term_rows=(), step=None):
        probs = torch.softmax(logprobs, dim=-1)
        finite = torch.isfinite(logprobs)
        entropy = -(probs[finite] * logprobs[finite]).sum()
        distance = (-logprobs - entropy).abs().masked_fill(~finite, math.inf)
        order = torch.argsort(distance)
        before = torch.cumsum(probs[order], dim=-1) - probs[order]
        keep = torch.zeros_like(logprobs, dtype=torch.bool)
        keep[order] = (before < self.mass) & finite[order]
        return _renormalised(logprobs, keep)

    def __repr__(self) -> str:
        return f"Typical({self.mass})"


class TopH(Processor):
    """Top-H (entropy-bounded): among the 100 most likely tokens, renormalised, keep the most
    likely while their entropy contribution ``-sum p log p`` stays within ``top_h * H``."""

    stage = "truncation"
    _CANDIDATES = 100

    def __init__(self, top_h: float = 0.4):
        if not (_real(top_h) and 0 < top_h <= 1):
            raise ConfigError(f"top-H needs 0 < top_h <= 1, got {top_h}")
        self.top_h = float(top_h)

    def __call__(self, logprobs, term_rows=(), step=None):
        n = min(self._CANDIDATES, int(torch.isfinite(logprobs).sum()))
        values, index = torch.topk(logprobs, max(n, 1))
        top = torch.log_softmax(values, dim=-1)
        p = torch.exp(top)
        contribution = torch.cumsum(-(p * top), dim=-1)
        budget = self.top_h * float(contribution[-1])
        kept = (contribution <= budget + 1e-12).clone()
        kept[0] = True  # the most likely token always stays
        keep = torch.zeros_like(logprobs, dtype=torch.bool)
        keep[index[kept]] = True
        return _renormalised(logprobs, keep)

    def __repr__(self) -> str:
        return f"TopH({self.top_h})"


class RepetitionPenalty(Processor):
    """Tokens already in the text (prompt included, unless `include_prompt=False`) become
    less likely: their log-probability is multiplied by `penalty` (> 1 penalises; on
    log-probabilities, which are negative, this is transformers' rule for negative logits)."""

    stage = "control"

    def __init__(self, penalty: float = 1.2, *, include_prompt: bool = True):
        if not (_real(penalty) and 0 < penalty < math.inf):
            raise ConfigError(f"the repetition penalty must be > 0, got {penalty}")
        self.penalty = float(penalty)
        self.include_prompt = include_prompt

    def __call__(self, logprobs, term_rows, step: Step):
        seen = list(step.prefix) + (list(step.prompt_ids) if self.include_prompt else [])
        seen = [t for t in set(seen) if 0 <= t < logprobs.shape[-1]]
        if not seen:
            return logprobs
        out = logprobs.clone()
        index = torch.tensor(seen, device=logprobs.device)
        rows = out[index]
        out[index] = torch.where(rows < 0, rows * self.penalty, rows / self.penalty)
        return out

    def __repr__(self) -> str:
        return f"RepetitionPenalty({self.penalty})"


def _real(value) -> bool:
    """A real number (not a bool; NaN fails every comparison after this)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)
