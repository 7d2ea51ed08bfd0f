"""`DecodingConfig`: every decoding option in one place, and the strategy it selects.

`generate()`, `Generator`, the command line (`constrain generate`) and the server read the same
object. Each option is documented once, in `HELP`: the class docstring and the command line's
help read it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np
import torch

from constrain.decoding.asap import ASAp, ASApSampling
from constrain.decoding.loop import Sampling, Strategy
from constrain.decoding.smc import SMC, SMCSampling
from constrain.decoding.speculative import Speculative, SpeculativeSampling
from constrain.processors import Processor
from constrain.results import DecodeStats
from constrain.samplers import TokenSampler, token_sampler

__all__ = ["HELP", "DecodingConfig"]

# every option's help, written once: the class docstring, `help()` and the command line read it
HELP = {
    "sampler": "awrs (default: a few checks per token), lcd (a full mask per state), "
    "awrs-two-pass, smc[:N] (N weighted particles per prompt, `SMC`), asap (`ASAp`)",
    "processors": "logits processors, applied in stage order: control -> constraint -> "
    "temperature -> truncation (command line: NAME=VALUE, repeatable)",
    "max_tokens": "generated tokens at most (EOS not counted); then finish reason 'length'",
    "fit_max_tokens": "near the end of max_tokens (or of the timeout) allow only tokens after "
    "which the text can still be completed in time: JSON is closed, not cut",
    "temperature": "softmax temperature",
    "greedy": "take the most likely allowed token",
    "timeout": "seconds of decoding; then finish reason 'timeout' (the text closes in time)",
    "speculative": "lossless speculative decoding (`Speculative`; command line: forced, lookup "
    "or forced+lookup drafts)",
    "backtracks": "tokens a generation may undo at dead ends (0: a dead end is an error)",
    "chat": "apply the chat template (default: when the tokenizer has one)",
    "system": "a system message",
}


@dataclass(frozen=True)
class DecodingConfig:
    """How to decode; the defaults are `generate`'s."""

    sampler: str | TokenSampler | SMC | ASAp = "awrs"
    processors: Sequence[Processor] = ()
    max_tokens: int = 256
    fit_max_tokens: bool = True
    temperature: float = 1.0
    greedy: bool = False
    timeout: float | None = None
    speculative: Speculative | None = None
    backtracks: int = 32
    chat: bool | None = None
    system: str | None = None

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


DecodingConfig.__doc__ += "\n\n    Attributes:\n" + "".join(
    f"        {f.name}: {HELP[f.name]}\n" for f in fields(DecodingConfig)
)
