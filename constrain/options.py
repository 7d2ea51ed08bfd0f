"""What a caller may ask of decoding, as plain data: `DecodingConfig`, `Speculative`, `SMC`.

`generate()`, `Generator`, the command line and the server read the same objects; each
decoding option is documented once, in `HELP` (the class docstring and the command line's help
read it). Nothing here imports torch or a model: options can be built and checked anywhere.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from constrain.errors import ConfigError

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
        for name in ("k", "branches", "lookup"):
            _require_int(f"Speculative.{name}", getattr(self, name), 0 if name == "lookup" else 1)
        for name in ("draft_confidence", "min_draft_acceptance"):
            _require_number(f"Speculative.{name}", getattr(self, name), 0, 1)


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
        _require_int("SMC.particles", self.particles, 1)
        _require_number("SMC.ess_threshold", self.ess_threshold, 0, 1)
        _require(
            self.resampling in RESAMPLING,
            f"SMC.resampling must be one of {RESAMPLING}, got {self.resampling!r}",
        )
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
    "prompt_special_tokens": "read special-token text in the prompt (<|im_end|>, <bos>, ...) as "
    "those tokens, for prompts written in the model's own format (default: prompt and message "
    "text is plain text; only the chat template adds special tokens)",
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
    prompt_special_tokens: bool = False

    def __post_init__(self):
        name = type(self.sampler).__name__
        _require(
            not isinstance(self.sampler, str) or self.sampler in TOKEN_SAMPLERS,
            f"unknown sampler {self.sampler!r}; expected one of {TOKEN_SAMPLERS}",
        )
        _require(  # an ASAp (decoding layer, not importable here) is known by its `bind`
            isinstance(self.sampler, (str, SMC))
            or self.token_samples
            or callable(getattr(self.sampler, "bind", None)),
            f"sampler must be one of {TOKEN_SAMPLERS}, a token sampler object (with .sample), "
            f"cn.SMC(...) or cn.ASAp(), got {self.sampler!r}",
        )
        _require_int("max_tokens", self.max_tokens, 1)
        _require_number("temperature", self.temperature, 0, math.inf, open_low=True)
        _require_int("backtracks", self.backtracks, 0)
        if self.timeout is not None:
            _require_number("timeout", self.timeout, 0, math.inf)
        for flag in ("fit_max_tokens", "greedy", "prompt_special_tokens"):
            _require(
                isinstance(getattr(self, flag), bool),
                f"{flag} must be True or False, got {getattr(self, flag)!r}",
            )
        _require(
            self.chat is None or isinstance(self.chat, bool),
            f"chat must be True, False or None, got {self.chat!r}",
        )
        _require(
            self.system is None or isinstance(self.system, str),
            f"system must be a string, got {type(self.system).__name__}",
        )
        _require(
            isinstance(self.processors, Sequence) and not isinstance(self.processors, str),
            f"processors must be a list of processors, got {type(self.processors).__name__}",
        )
        for p in self.processors:
            _require(
                hasattr(p, "stage"),
                f"processors: {p!r} is not a processor (cn.TopK(20), cn.CFG(1.5), ...); wrap "
                f"a transformers LogitsProcessor in cn.HFProcessor(...)",
            )
        _require(
            self.speculative is None or isinstance(self.speculative, Speculative),
            f"speculative must be a cn.Speculative(...) or None, got {self.speculative!r}",
        )
        tokens = self.token_samples
        truncates = any(p.stage == "truncation" for p in self.processors)
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
        raise ConfigError(message)


def _require_int(name: str, value: Any, least: int) -> None:
    """`value` is an int (not a bool) >= `least`."""
    _require(
        isinstance(value, int) and not isinstance(value, bool) and value >= least,
        f"{name} must be an integer >= {least}, got {value!r}",
    )


def _require_number(
    name: str, value: Any, low: float, high: float, *, open_low: bool = False
) -> None:
    """`value` is a finite real number (not a bool) in [low, high], or (low, high] with
    `open_low`."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    inside = number and math.isfinite(value) and low <= value <= high
    if open_low:
        inside = inside and value > low
    if math.isfinite(high):
        bounds = f"in {'(' if open_low else '['}{low}, {high}]"
    else:
        bounds = f"{'>' if open_low else '>='} {low}"
    hint = "; use greedy=True for the most likely token" if name == "temperature" else ""
    _require(inside, f"{name} must be a finite number {bounds}, got {value!r}{hint}")
