"""What a caller may ask of decoding, as plain data: `DecodingConfig`, `Speculative`, `SMC`.

`generate()`, `Generator`, the command line and the server read the same objects; each
decoding option is documented once, in `HELP` (the class docstring and the command line's help
read it). Nothing here imports torch or a model: options can be built and checked anywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

__all__ = ["HELP", "RESAMPLING", "SMC", "TOKEN_SAMPLERS", "DecodingConfig", "Speculative"]

TOKEN_SAMPLERS = ("awrs", "lcd", "awrs-two-pass")  # the token samplers by name
RESAMPLING = ("multinomial", "stratified", "systematic")


@dataclass
class Speculative:
    """Speculative decoding settings: ``cn.generate(..., speculative=cn.Speculative(...))``.

    Args:
        draft: a draft model sharing the tokenizer (e.g. ``model.with_layers(range(8))`` for
            self-speculation, see `constrain.models.layers`); None: deterministic drafts only.
        k: the longest draft per target forward.
        forced: draft the tokens the grammar forces.
        lookup: prompt lookup: copy what followed the longest n-gram (n <= lookup) of the
            text's end found earlier in the prompt or the text; 0 turns it off.
        branches: prompt-lookup continuations verified together (a tree; 1: chains).
        adaptive: grow k by 2 after a fully kept draft, shrink it by 1 after a rejection.
        mask_drafts: the draft model draws among allowed tokens only (default; it never
            lowers acceptance). Unmasked, a forbidden draft token ends the draft and the
            replacement there comes from ``norm((p~ - q~)+)``.
        draft_confidence: the draft model stops drafting after a token it gave less than
            this probability (its next guesses would rarely survive).
        min_draft_acceptance: after 16 of its tokens were verified, a draft model kept less
            often than this is not asked again in this generation (its forwards cost more
            than they save).
    """

    draft: object = None
    k: int = 6
    forced: bool = True
    lookup: int = 3
    branches: int = 1
    adaptive: bool = True
    mask_drafts: bool = True
    draft_confidence: float = 0.4
    min_draft_acceptance: float = 0.3

    def __post_init__(self):
        if self.k < 1 or self.branches < 1 or self.lookup < 0:
            raise ValueError("k and branches must be >= 1, lookup >= 0")


@dataclass
class SMC:
    """Sequential Monte Carlo settings: ``cn.generate(..., sampler=cn.SMC(...))`` or
    ``cn.smc(...)``.

    Args:
        particles: number of particles N (per prompt).
        ess_threshold: resample when the effective sample size falls below this fraction of N
            (0 never resamples: importance sampling; 1 resamples at every step).
        resampling: "stratified" (default), "systematic" or "multinomial".
        token_sampler: "awrs" (default), "lcd", "awrs-two-pass" or a token sampler object.
    """

    particles: int = 8
    ess_threshold: float = 0.5
    resampling: str = "stratified"
    token_sampler: Any = "awrs"  # a name, or a token sampler object (`.sample`)

    def __post_init__(self):
        if self.particles < 1:
            raise ValueError(f"particles must be >= 1, got {self.particles}")
        if not 0 <= self.ess_threshold <= 1:
            raise ValueError(f"ess_threshold must be in [0, 1], got {self.ess_threshold}")
        if self.resampling not in RESAMPLING:
            raise ValueError(f"resampling must be one of {RESAMPLING}, got {self.resampling!r}")
        _require(
            not isinstance(self.token_sampler, str) or self.token_sampler in TOKEN_SAMPLERS,
            f"unknown sampler {self.token_sampler!r}; expected one of {TOKEN_SAMPLERS}",
        )


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

    sampler: Any = "awrs"  # a token sampler's name or object, an `SMC`, or a `cn.ASAp()`
    processors: Sequence[Any] = ()  # `Processor`s
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
        name, tokens = type(self.sampler).__name__, self.token_samples
        truncates = any(p.stage == "truncation" for p in self.processors)
        _require(
            not isinstance(self.sampler, str) or self.sampler in TOKEN_SAMPLERS,
            f"unknown sampler {self.sampler!r}; expected one of {TOKEN_SAMPLERS}",
        )
        _require(self.max_tokens >= 1, f"max_tokens must be >= 1, got {self.max_tokens}")
        _require(
            self.temperature > 0, f"temperature must be > 0, got {self.temperature}; use greedy"
        )
        _require(self.backtracks >= 0, f"backtracks must be >= 0, got {self.backtracks}")
        _require((self.timeout or 0) >= 0, f"timeout must be >= 0, got {self.timeout}")
        _require(
            tokens or self.speculative is None,
            "speculative decoding works with token samplers, not SMC or ASAp",
        )
        _require(tokens or not self.greedy, f"{name} samples; greedy=True needs a token sampler")
        _require(
            tokens or not truncates,
            f"{name} needs the full constrained distribution: truncation warpers (top-k, "
            f"top-p, ...) act after the constraint and leave none; use temperature",
        )

    @property
    def token_samples(self) -> bool:
        """One sequence per prompt, drawn by a token sampler (not SMC or ASAp): the sampler is
        a name or has `.sample`."""
        return isinstance(self.sampler, str) or callable(getattr(self.sampler, "sample", None))


DecodingConfig.__doc__ += "\n\n    Attributes:\n" + "".join(
    f"        {f.name}: {HELP[f.name]}\n" for f in fields(DecodingConfig)
)


def _require(holds: bool, message: str) -> None:
    if not holds:
        raise ValueError(message)
