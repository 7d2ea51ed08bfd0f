"""What generations return: their texts, values, weights and statistics.

Plain data, shared by the decoding loop (which fills the counters), the API, the command line
and the server: `GenerationResult` with its `GenerationStats`, and for SMC an `SMCResult` of
`WeightedText` particles.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["DecodeStats", "GenerationResult", "GenerationStats", "SMCResult", "WeightedText"]


@dataclass
class DecodeStats:
    """Counters of decoding (of one sequence, or of a whole run): forwards, draws, constraint
    work and where the time went."""

    forwards: int = 0  # target forwards taken part in
    draws: int = 0
    checks: int = 0  # Matcher.check calls by the token sampler
    masks: int = 0  # full masks used (LCD: one per draw; AWRS: only its fallbacks)
    forward_s: float = 0.0
    sample_s: float = 0.0  # token samplers, all included
    constraint_s: float = 0.0  # checks, masks and matcher updates
    draw_s: list[float] = field(default_factory=list)  # constraint time per draw
    step_s: list[float] = field(default_factory=list)  # wall time of each step
    first_token_at: float | None = None  # perf_counter() when the first token was drawn
    emitted: int = 0  # tokens emitted by speculative steps (EOS included)
    drafted: dict[str, int] = field(default_factory=dict)  # speculative drafts by source
    kept: dict[str, int] = field(default_factory=dict)

    @property
    def acceptance(self) -> float:
        """The share of drafted tokens kept (speculative decoding)."""
        drafted = sum(self.drafted.values())
        return sum(self.kept.values()) / drafted if drafted else float("nan")

    @property
    def tokens_per_forward(self) -> float:
        """Tokens emitted per target forward (speculative decoding)."""
        return self.emitted / self.forwards if self.forwards else float("nan")


@dataclass
class GenerationStats(DecodeStats):
    """A generation's decoding counters, and where the rest of its time went (seconds).

    `ttft_s` (time to first token) counts from the call: compilation (0 when the constraint was
    cached), prefill and the first step; `tpot_s` is the mean time per output token after it.
    With speculation, `speculative` holds the draft counters (drafted, kept, emitted,
    acceptance, tokens per forward)."""

    compile_s: float = 0.0  # grammar compilation and binding to the vocabulary
    prefill_s: float = 0.0
    ttft_s: float = 0.0
    total_s: float = 0.0
    decode_s: float = 0.0  # from the first step to the end
    forced: int = 0  # tokens whose bytes the grammar forced

    @property
    def token_s(self) -> list[float]:
        """Wall time of each decoding step."""
        return self.step_s

    @property
    def tpot_s(self) -> float:
        return sum(self.step_s[1:]) / (len(self.step_s) - 1) if len(self.step_s) > 1 else 0.0

    @property
    def tokens_per_s(self) -> float:
        spent = sum(self.step_s)
        return len(self.step_s) / spent if spent else 0.0

    @property
    def speculative(self) -> DecodeStats | None:
        return self if self.emitted else None


@dataclass
class GenerationResult:
    """The outcome of one generation.

    Attributes:
        text: the generated text (EOS excluded).
        value: for `schema=`, the parsed JSON value; for `type=`, an instance of the type
            (dataclass, pydantic model, Enum member, ...); None when the text is incomplete or
            the constraint is not JSON.
        tokens: the generated token ids (EOS excluded).
        finish_reason: "stop" (the text ended: EOS, or only EOS could follow), "length"
            (`max_tokens` ran out while the text could go on, or no allowed token was left to
            go on with: see `reason`) or "timeout" (the `timeout` passed first).
        complete: True when the text is in the constraint's language; a text cut before it
            is complete is marked incomplete, never silently invalid.
        log_weight: the sequence's importance weight for the model conditioned on the
            constraint: the sum of the token sampler's log-weights (LCD: log Z, the mass the
            constraint allowed; AWRS: an unbiased estimate of it); 0 for greedy decoding and
            ASAp; for SMC, the log marginal likelihood estimate.
        particles: for SMC, every particle with its normalised weight.
        reason: why an incomplete text ended where it did, in words ("" when complete).
    """

    text: str
    value: Any
    tokens: list[int]
    finish_reason: str
    complete: bool
    log_weight: float
    stats: GenerationStats
    particles: list[WeightedText] | None = None
    reason: str = ""  # why an incomplete text ended where it did, in words

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class WeightedText:
    """One SMC particle's outcome."""

    text: str
    tokens: list[int]
    log_weight: float  # unnormalised: the product of its incremental weights
    weight: float  # normalised over the particles (sums to 1 unless every particle died)
    finish_reason: str  # "stop", "length" or "dead"
    complete: bool


@dataclass
class SMCResult:
    """Every particle with its normalised weight, the log marginal likelihood and statistics.

    Attributes:
        particles: the final particles.
        log_ml: unbiased (in exp) estimate of log Z, the log probability of the constraint.
        ess: the effective sample size before each step's resampling decision.
        resamples: how many times the particles were resampled.
        stats: forwards, checks and times across steps (of the whole run: every prompt).
    """

    particles: list[WeightedText]
    log_ml: float
    ess: list[float] = field(default_factory=list)
    resamples: int = 0
    stats: DecodeStats = field(default_factory=DecodeStats)

    @property
    def posterior(self) -> dict[str, float]:
        """Texts with their total normalised weight (identical texts merged), best first."""
        merged: dict[str, float] = defaultdict(float)
        for p in self.particles:
            if p.weight > 0:
                merged[p.text] += p.weight
        return dict(sorted(merged.items(), key=lambda kv: -kv[1]))

    @property
    def best(self) -> WeightedText | None:
        """The particle whose text has the largest posterior weight (None if all died)."""
        posterior = self.posterior
        if not posterior:
            return None
        text = next(iter(posterior))
        return max((p for p in self.particles if p.text == text), key=lambda p: p.weight)

    def choice(self, generator: np.random.Generator | None = None) -> WeightedText | None:
        """A particle drawn in proportion to its weight (None if all died)."""
        weights = np.array([p.weight for p in self.particles])
        if weights.sum() <= 0:
            return None
        rng = generator or np.random.default_rng()
        return self.particles[int(rng.choice(len(weights), p=weights / weights.sum()))]

    @property
    def mean_ess(self) -> float:
        return float(np.mean(self.ess)) if self.ess else float("nan")
