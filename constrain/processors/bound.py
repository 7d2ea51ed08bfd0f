"""A processor stack bound to one generation: its terms' models and prompts, and the rows.

`BoundStack` resolves each term (a term without a model uses the generation's; one whose model
and prompt are the generation's own reads the main row instead of a stream of its own), starts
the term streams of a sequence, and applies the stack's stages to its rows. The decoding loop
runs the forwards (`constrain.decoding.forward`: one per model for a whole batch).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from constrain.errors import ConfigError
from constrain.processors.base import ProcessorStack, Step

__all__ = ["BoundStack"]


class BoundStack:
    """`stack` for a generation of `model` on `user_prompt` (encoded as `prompt_ids`)."""

    def __init__(
        self,
        stack: ProcessorStack,
        model,
        prompt_ids: Sequence[int],
        user_prompt=None,
        *,
        chat: bool | None = None,
        system: str | None = None,
        special_tokens: bool = False,
    ):
        self.stack = stack
        self.model = model
        self.prompt_ids = tuple(prompt_ids)
        self.term_models = []
        self.term_prompts: list[list[int] | None] = []  # None: the term is the main stream
        for term in stack.terms:
            term_model = term.model if term.model is not None else model
            if term_model.vocab.size != model.vocab.size:
                raise ConfigError(
                    f"{term_model!r} has {term_model.vocab.size} token ids but the generation's "
                    f"model has {model.vocab.size}: terms must share the tokenizer"
                )
            ids = term.prompt_ids(
                term_model, user_prompt, chat=chat, system=system, special_tokens=special_tokens
            )
            same = term_model is model and tuple(ids) == self.prompt_ids
            self.term_models.append(term_model)
            self.term_prompts.append(None if same else ids)

    @classmethod
    def plain(cls, model, prompt_ids: Sequence[int], temperature: float = 1.0) -> BoundStack:
        """No processor but the temperature."""
        return cls(ProcessorStack(temperature=temperature), model, prompt_ids)

    def start_terms(self, prefill: bool = True) -> list:
        """A new sequence's term streams (None where the term reads the main row), prefilled
        unless `prefill` is False (see `LanguageModel.start`)."""
        return [
            m.start(ids, prefill=prefill) if ids is not None else None
            for m, ids in zip(self.term_models, self.term_prompts)
        ]

    def step(self, prefix: Sequence[int]) -> Step:
        return Step(tuple(prefix), self.prompt_ids, self.model.vocab)

    def before_constraint(self, main: torch.Tensor, term_rows: list, prefix) -> torch.Tensor:
        if not self.stack.control:
            return main
        return self.stack.before_constraint(main, term_rows, self.step(prefix))

    def after_constraint(self, row: torch.Tensor, prefix, truncate: bool = True) -> torch.Tensor:
        """Temperature and (unless `truncate` is False) truncation."""
        if not self.stack.after_constraint:
            return row
        return self.stack.after(row, self.step(prefix), truncate)

    @property
    def truncates(self) -> bool:
        return self.stack.truncates
