"""The processor contract, auxiliary prompted models (terms), and the stack's stage order.

A processor maps next-token log-probabilities to new ones for one step, given the step's
context (`Step`: the position, the generated tokens, the prompt) and the rows of the auxiliary
prompted models it reads (`Term`s: CFG's unconditional prompt, a contrastive amateur, each
model-arithmetic term). It keeps no state of its own: what it needs is a function of the step,
so it rolls back with the sequence (speculation, SMC forks) instead of drifting with a call
counter. Term streams are owned by the sequence and advanced, forked and rolled back with it;
the runner batches every term of every sequence that uses the same model into one forward.

The stack applies processors in a fixed order of stages:

    control (model arithmetic, CFG, contrastive, reflection, penalties)
      -> constraint (the sampler draws among allowed tokens)
      -> temperature -> truncation (top-k, top-p, min-p, typical, top-H)

Temperature commutes with the constraint; truncation does not (it must only keep *allowed*
tokens), so a stack with truncation makes the sampler mask first.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from constrain.errors import ArgumentTypeError, ConfigError

__all__ = ["STAGES", "Processor", "ProcessorStack", "Step", "Temperature", "Term"]

STAGES = ("control", "temperature", "truncation")


@dataclass(frozen=True)
class Step:
    """What a processor may depend on: the generated tokens so far (their count is the
    position of the token being drawn), the prompt and the vocabulary."""

    prefix: tuple[int, ...]
    prompt_ids: tuple[int, ...] = ()
    vocab: Any = None

    @property
    def position(self) -> int:
        return len(self.prefix)


@dataclass(frozen=True, eq=False)
class Term:
    """An auxiliary prompted model. Its prompt is derived from the generation's prompt:
    `prompt` replaces it, `prefix` is written before it, `system` is its system message (for
    a model without a chat template, a first paragraph)."""

    model: Any
    system: str | None = None
    prefix: str | None = None
    prompt: str | None = None

    def prompt_ids(
        self,
        model,
        user_prompt,
        *,
        chat: bool | None,
        system: str | None,
        special_tokens: bool = False,
    ) -> list[int]:
        """The token ids of this term's prompt for a generation with `user_prompt` (`model`:
        the term's model, resolved: a term without one uses the generation's), encoded as the
        generation's (`chat`, `system`, `special_tokens`: see `LanguageModel.encode_prompt`)."""
        if self.prompt is not None:
            user = self.prompt
        elif self.prefix is None:
            user = user_prompt
        elif isinstance(user_prompt, str):
            user = self.prefix + user_prompt
        else:  # chat messages: the prefix goes into the last user message
            user = [dict(m) for m in user_prompt]
            last = max(i for i, m in enumerate(user) if m.get("role") == "user")
            user[last]["content"] = self.prefix + user[last]["content"]
        system = self.system if self.system is not None else system
        return model.encode_prompt(user, chat=chat, system=system, special_tokens=special_tokens)


class Processor:
    """Maps next-token log-probabilities (one row) to new ones for one step.

    Subclasses set `stage` and implement `__call__`; those that read auxiliary prompted
    models list them in `terms()` and receive their rows, in that order.
    """

    stage: str = "control"

    def terms(self) -> list[Term]:
        return []

    def __call__(self, logprobs: torch.Tensor, term_rows: list[torch.Tensor], step: Step):
        raise NotImplementedError


class Temperature(Processor):
    """``log p / T``, renormalised (T < 1 sharpens, T > 1 flattens)."""

    stage = "temperature"

    def __init__(self, temperature: float):
        if not (isinstance(temperature, (int, float)) and 0 < temperature < math.inf):
            raise ConfigError(
                f"temperature must be a finite number > 0, got {temperature!r}; use greedy=True"
            )
        self.temperature = float(temperature)

    def __call__(self, logprobs, term_rows=(), step=None):
        return torch.log_softmax(logprobs / self.temperature, dim=-1)

    def __repr__(self) -> str:
        return f"Temperature({self.temperature})"


class ProcessorStack:
    """Processors in stage order (the order given is kept within a stage).

    Args:
        processors: the processors.
        temperature: added as the temperature stage (1.0: none).
    """

    def __init__(self, processors: Sequence[Processor] = (), temperature: float = 1.0):
        for p in processors:
            if not isinstance(p, Processor):
                raise ArgumentTypeError(
                    f"{p!r} is not a processor; wrap a transformers LogitsProcessor in "
                    f"cn.HFProcessor(...)"
                )
            if p.stage not in STAGES:
                raise ConfigError(f"{p!r} has unknown stage {p.stage!r}; expected one of {STAGES}")
        chosen = list(processors)
        if temperature != 1.0:
            chosen.append(Temperature(temperature))
        self.processors = sorted(chosen, key=lambda p: STAGES.index(p.stage))
        self.control = [p for p in self.processors if p.stage == "control"]
        self.after_constraint = [p for p in self.processors if p.stage != "control"]
        self.terms: list[Term] = []
        self._term_slices: list[slice] = []
        for p in self.control:
            own = p.terms()
            self._term_slices.append(slice(len(self.terms), len(self.terms) + len(own)))
            self.terms.extend(own)

    @property
    def truncates(self) -> bool:
        """Some processor must see the constrained distribution (truncation warpers)."""
        return any(p.stage == "truncation" for p in self.processors)

    def before_constraint(
        self, logprobs: torch.Tensor, term_rows: list[torch.Tensor], step: Step
    ) -> torch.Tensor:
        """The control stage: normalised log-probabilities. A token impossible under the
        models combined (-inf minus -inf in a difference of log-probabilities) stays
        impossible."""
        if not self.control:
            return logprobs
        for p, own in zip(self.control, self._term_slices):
            logprobs = p(logprobs, term_rows[own], step)
        return torch.log_softmax(torch.nan_to_num(logprobs, nan=-math.inf), dim=-1)

    def after(self, logprobs: torch.Tensor, step: Step, truncate: bool = True) -> torch.Tensor:
        """Temperature, then truncation unless `truncate` is False (truncation must only ever
        see the constrained row)."""
        for p in self.after_constraint:
            if truncate or p.stage != "truncation":
                logprobs = p(logprobs, [], step)
        return logprobs

    def __bool__(self) -> bool:
        return bool(self.processors)

    def __repr__(self) -> str:
        return f"ProcessorStack({self.processors!r})"
