"""Guidance by a second prompt or model: CFG, contrastive decoding, AdaCAD and USCD.

Each reads the main row (the generation's own prompt and model) and one auxiliary row (a term),
and combines them in log space (USCD in probability space):

* CFG:          ``l_u + g (l_c - l_u)``   (Sanchez et al. 2024; g = 1 is plain decoding)
* Contrastive:  ``(1 + b) l_E - b l_A`` on the expert's plausible tokens
                ``l_E >= log(alpha) + max l_E``  (O'Brien & Lewis 2023's form of Li et al.)
* AdaCAD:       ``(1 + a_t) l_ctx - a_t l_noctx`` with ``a_t = JSD(p_ctx, p_noctx)`` per step
* USCD:         when the standard prompt is uncertain (``std(p_s) <= mean_num``):
                ``log (p_s + w p_lame)_+`` on ``p_s >= filter_num / |V|``; else ``l_s``.

The tokens contrastive decoding and USCD leave out are not given -inf but demoted by
`DEMOTED` nats: where any token they keep is allowed, the demoted ones have probability 0 (the
formulas above); where the constraint allows none of those, the allowed ones are still ranked
(by the score, or by the standard prompt), so a truncation never leaves a constrained step
with nothing to draw.
"""

from __future__ import annotations

import math

import torch

from constrain.errors import ConfigError
from constrain.processors.base import Processor, Step, Term

__all__ = ["DEMOTED", "AdaCAD", "CFG", "Contrastive", "USCD"]

DEMOTED = 1e4  # nats below the tokens a truncation keeps: exp(-1e4) is 0 in floating point


class CFG(Processor):
    """Classifier-free guidance: ``l_u + scale (l_c - l_u)``, where l_c is the generation's
    prompt and l_u an unconditional one: `negative_prompt`, or an empty user message.

    Args:
        scale: the guidance scale (1: no guidance; 1.5 to 3 are usual).
        negative_prompt: the prompt to steer away from.
        model: the unconditional model (default: the generation's model).
    """

    def __init__(self, scale: float = 1.5, negative_prompt: str | None = None, *, model=None):
        self.scale = float(scale)
        self.negative_prompt = negative_prompt
        self.model = model

    def terms(self) -> list[Term]:
        return [Term(self.model, prompt=self.negative_prompt or "")]

    def __call__(self, logprobs, term_rows, step: Step):
        (uncond,) = term_rows
        return uncond + self.scale * (logprobs - uncond)

    def __repr__(self) -> str:
        return f"CFG({self.scale}, negative_prompt={self.negative_prompt!r})"


def _plausible(expert: torch.Tensor, alpha: float) -> torch.Tensor:
    """The expert's tokens at least `alpha` times as likely as its most likely one."""
    return expert >= expert.max() + math.log(alpha)


class Contrastive(Processor):
    """Contrastive decoding: ``(1 + beta) l_E - beta l_A`` on the expert's plausible tokens
    (``p_E >= alpha * max p_E``), demoted by `DEMOTED` elsewhere (see the module docstring).
    The expert is the generation's model; the amateur a smaller model on the same prompt
    (`amateur_temperature` flattens it).
    """

    def __init__(
        self, amateur, alpha: float = 0.1, beta: float = 0.5, *, amateur_temperature: float = 1.0
    ):
        if not 0 < alpha <= 1:
            raise ConfigError(f"alpha must be in (0, 1], got {alpha}")
        self.amateur = amateur
        self.alpha, self.beta = float(alpha), float(beta)
        self.amateur_temperature = float(amateur_temperature)

    def terms(self) -> list[Term]:
        return [Term(self.amateur)]

    def __call__(self, logprobs, term_rows, step: Step):
        (amateur,) = term_rows
        if self.amateur_temperature != 1.0:
            amateur = torch.log_softmax(amateur / self.amateur_temperature, dim=-1)
        score = (1 + self.beta) * logprobs - self.beta * amateur
        return torch.where(_plausible(logprobs, self.alpha), score, score - DEMOTED)

    def __repr__(self) -> str:
        return f"Contrastive(alpha={self.alpha}, beta={self.beta})"


def jensen_shannon(a: torch.Tensor, b: torch.Tensor) -> float:
    """JSD between two distributions given as log-probabilities (natural log, in [0, ln 2])."""
    p, q = torch.exp(a).clamp_min(1e-9), torch.exp(b).clamp_min(1e-9)
    m = 0.5 * (p + q)
    return float(0.5 * (p * (p / m).log()).sum() + 0.5 * (q * (q / m).log()).sum())


class AdaCAD(Processor):
    """Context-aware decoding with an adaptive weight: ``(1 + a) l_ctx - a l_noctx``, with
    ``a = max(JSD(p_ctx, p_noctx), floor)`` at each step, so the context is amplified exactly
    where it changes the prediction. The generation's prompt is the no-context branch; the
    context branch puts `context` before it.
    """

    def __init__(self, context: str, *, floor: float = 0.0, model=None):
        self.context = context
        self.floor = float(floor)
        self.model = model

    def terms(self) -> list[Term]:
        return [Term(self.model, prefix=self.context)]

    def weight(self, with_context: torch.Tensor, without: torch.Tensor) -> float:
        return max(jensen_shannon(with_context, without), self.floor)

    def __call__(self, logprobs, term_rows, step: Step):
        (with_context,) = term_rows
        a = self.weight(with_context, logprobs)
        return (1 + a) * with_context - a * logprobs

    def __repr__(self) -> str:
        return f"AdaCAD(context={self.context[:30]!r}..., floor={self.floor})"


class USCD(Processor):
    """Uncertainty-gated selective contrastive decoding (Wang et al. 2024): contrast the
    standard prompt with a "lame" prompt (the same task without its examples) only where the
    standard prediction is uncertain (``std(p_s) <= mean_num``): then
    ``log (p_s + weight * p_lame)_+`` on the tokens with ``p_s >= filter_num / |V|``; the
    others, and those the contrast takes to 0, keep ``l_s`` demoted by `DEMOTED`.
    """

    def __init__(
        self,
        lame_prompt: str,
        *,
        weight: float = -0.7,
        mean_num: float = 0.005,
        filter_num: float = 2 / 3,
        model=None,
    ):
        self.lame_prompt = lame_prompt
        self.weight, self.mean_num, self.filter_num = float(weight), float(mean_num), filter_num
        self.model = model

    def terms(self) -> list[Term]:
        return [Term(self.model, prompt=self.lame_prompt)]

    def __call__(self, logprobs, term_rows, step: Step):
        (lame,) = term_rows
        p_s = torch.exp(logprobs)
        if float(p_s.std()) > self.mean_num:
            return logprobs  # confident: no contrast
        mixed = p_s + self.weight * torch.exp(lame)
        keep = (p_s >= self.filter_num / p_s.shape[-1]) & (mixed > 0)
        return torch.where(keep, torch.log(mixed.clamp_min(1e-300)), logprobs - DEMOTED)

    def __repr__(self) -> str:
        return f"USCD(weight={self.weight}, mean_num={self.mean_num})"
