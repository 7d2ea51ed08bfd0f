"""`DecodingConfig`: every decoding option in one place, and the strategy it selects.

`generate()`, `Generator`, the command line (`constrain generate`) and the server read the same
object: each field documents itself once (its `help`), and fields a command line cannot spell
as a plain value name a `parse` function from text (``--sampler smc:8``,
``--speculative forced+lookup``, ``--processor top_p=0.9``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from constrain.decoding.asap import ASAp, ASApSampling
from constrain.decoding.loop import Sampling, Strategy
from constrain.decoding.sequence import DecodeStats
from constrain.decoding.smc import SMC, SMCSampling
from constrain.decoding.speculative import Speculative, SpeculativeSampling
from constrain.processors import CFG, MinP, Processor, RepetitionPenalty, TopH, TopK, TopP, Typical
from constrain.samplers import TokenSampler, token_sampler

__all__ = ["DecodingConfig", "processor_named", "sampler_named"]

_PROCESSORS = {  # the processors a command line can name, with their one number
    "top_k": lambda v: TopK(int(v)),
    "top_p": lambda v: TopP(float(v)),
    "min_p": lambda v: MinP(float(v)),
    "typical": lambda v: Typical(float(v)),
    "top_h": lambda v: TopH(float(v)),
    "repetition_penalty": lambda v: RepetitionPenalty(float(v)),
    "cfg": lambda v: CFG(float(v)),
}


def sampler_named(text: str) -> str | SMC | ASAp:
    """A sampler from its name: "awrs", "lcd", "awrs-two-pass", "smc" or "smc:N" (N
    particles), "asap"."""
    name, _, particles = text.partition(":")
    if name == "smc":
        return SMC(particles=int(particles)) if particles else SMC()
    if name == "asap":
        return ASAp()
    token_sampler(text)  # an unknown name fails here
    return text


def processor_named(text: str) -> Processor:
    """A processor from ``name=value``, one of top_k, top_p, min_p, typical, top_h,
    repetition_penalty, cfg."""
    name, _, value = text.partition("=")
    if name not in _PROCESSORS or not value:
        raise ValueError(
            f"expected NAME=VALUE with NAME one of {sorted(_PROCESSORS)}, got {text!r}"
        )
    return _PROCESSORS[name](value)


@dataclass(frozen=True)
class DecodingConfig:
    """How to decode (see each field's help; the defaults are `generate`'s)."""

    sampler: str | TokenSampler | SMC | ASAp = field(
        default="awrs",
        metadata={
            "help": "awrs (default: a few checks per token), lcd (a full mask per state), "
            "awrs-two-pass, smc[:N] (N weighted particles per prompt), asap (grammar-aligned)",
            "parse": sampler_named,
        },
    )
    processors: Sequence[Processor] = field(
        default=(),
        metadata={
            "help": "logits processors in stage order: control -> constraint -> temperature -> "
            "truncation (command line: NAME=VALUE, repeatable)",
            "parse": processor_named,
        },
    )
    max_tokens: int = field(
        default=256,
        metadata={"help": "generated tokens at most (EOS not counted); then finish 'length'"},
    )
    fit_max_tokens: bool = field(
        default=True,
        metadata={
            "help": "near the end of max_tokens (or of the timeout), allow only tokens after "
            "which the text can still be completed in time: close JSON instead of cutting it"
        },
    )
    temperature: float = field(default=1.0, metadata={"help": "softmax temperature"})
    greedy: bool = field(default=False, metadata={"help": "the most likely allowed token"})
    timeout: float | None = field(
        default=None,
        metadata={"help": "seconds of decoding; then finish 'timeout' (the text closes in time)"},
    )
    speculative: Speculative | None = field(
        default=None,
        metadata={
            "help": "lossless speculative decoding with drafts: forced, lookup or forced+lookup",
            "parse": Speculative.named,
        },
    )
    backtracks: int = field(
        default=32,
        metadata={"help": "tokens a generation may undo at dead ends (0: a dead end fails)"},
    )
    chat: bool | None = field(
        default=None,
        metadata={"help": "apply the chat template (default: when the tokenizer has one)"},
    )
    system: str | None = field(default=None, metadata={"help": "a system message"})

    def __post_init__(self):
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}; use greedy=True")
        if self.backtracks < 0:
            raise ValueError(f"backtracks must be >= 0, got {self.backtracks}")
        if self.timeout is not None and self.timeout < 0:
            raise ValueError(f"timeout must be >= 0 seconds, got {self.timeout}")
        sequence_sampler = isinstance(self.sampler, (SMC, ASAp))
        if not sequence_sampler:
            token_sampler(self.sampler)  # an unknown name fails here
        if sequence_sampler and self.speculative is not None:
            raise ValueError("speculative decoding works with token samplers, not SMC or ASAp")
        name = type(self.sampler).__name__
        if sequence_sampler and self.greedy:
            raise ValueError(f"{name} samples; greedy=True needs a token sampler ('awrs')")
        if sequence_sampler and any(p.stage == "truncation" for p in self.processors):
            raise ValueError(
                f"{name} needs the full constrained distribution: truncation warpers (top-k, "
                f"top-p, ...) act after the constraint and leave none; use control processors "
                f"and temperature"
            )

    @classmethod
    def of(cls, config: DecodingConfig | None = None, **options: Any) -> DecodingConfig:
        """`config` (default: the defaults) with `options` replacing its fields."""
        base = config if config is not None else cls()
        unknown = set(options) - set(cls.__dataclass_fields__)
        if unknown:
            raise TypeError(f"unknown decoding options {sorted(unknown)}")
        return cls(**{**{k: getattr(base, k) for k in cls.__dataclass_fields__}, **options})

    @property
    def token_samples(self) -> bool:
        """One sequence per prompt, drawn by a token sampler (not SMC or ASAp)."""
        return not isinstance(self.sampler, (SMC, ASAp))

    def strategy(
        self, generator: torch.Generator, stats: DecodeStats, rng: np.random.Generator
    ) -> Strategy:
        """The decoding loop's strategy for these options."""
        if isinstance(self.sampler, SMC):
            return SMCSampling(self.sampler, generator, stats, rng)
        if isinstance(self.sampler, ASAp):
            return ASApSampling(self.sampler, generator, stats)
        sampler = token_sampler(self.sampler)
        scores_eos = not self.greedy  # greedy has no weight to complete: save the forward
        if self.speculative is None:
            return Sampling(sampler, generator, stats, greedy=self.greedy, scores_eos=scores_eos)
        return SpeculativeSampling(
            self.speculative,
            sampler,
            generator,
            stats,
            greedy=self.greedy,
            scores_eos=scores_eos,
            max_tokens=self.max_tokens,
            temperature=self.temperature,
        )
