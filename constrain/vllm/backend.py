"""`ConstrainBackend`: constrain as one of vLLM's structured-output backends.

vLLM's `StructuredOutputManager` owns one backend per engine: it compiles each structured
request's grammar in a thread pool (`compile_grammar`), then every step asks each request's
grammar for its row of the batch's token bitmask (`fill_bitmask`), feeds it the tokens sampled
(`accept_tokens`), checks speculative drafts (`validate_tokens`) and undoes them (`rollback`).
The bitmask layout is ours (32 tokens per int32 word, token i at bit i % 32 of word i // 32),
so a row is a copy of the matcher's packed mask.

What the other backends do not: the request's token budget reaches the grammar
(`compile_request`), so JSON is closed within ``max_tokens``; and compiles are metered by a
`Fuel`, giving way to the engine's loop every few thousand units.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from vllm.v1.structured_output.backend_types import (
    StructuredOutputBackend,
    StructuredOutputGrammar,
    StructuredOutputOptions,
)

from constrain.constraints.constraint import Constraint
from constrain.constraints.grammar_sequence import GrammarSequence
from constrain.constraints.warmup import warm_up
from constrain.engine import bitmask
from constrain.engine.vocab import Vocabulary
from constrain.fuel import Fuel
from constrain.vllm.requests import StructuredRequest, compile_fuel

__all__ = ["ConstrainBackend", "ConstrainGrammar", "structured_request"]

_KIND_OF = {
    StructuredOutputOptions.JSON: "json",
    StructuredOutputOptions.JSON_OBJECT: "json_object",
    StructuredOutputOptions.REGEX: "regex",
    StructuredOutputOptions.CHOICE: "choice",
    StructuredOutputOptions.GRAMMAR: "grammar",
    StructuredOutputOptions.STRUCTURAL_TAG: "structural_tag",
}


def structured_request(kind: StructuredOutputOptions, text: str, params: Any = None):
    """A vLLM request's constraint (its key and its `StructuredOutputsParams`, if at hand)."""
    name = _KIND_OF.get(kind, kind.name.lower())
    if params is None:
        return StructuredRequest(name, text)
    return StructuredRequest(
        name,
        text,
        compact=bool(params.disable_any_whitespace),
        whitespace_pattern=params.whitespace_pattern,
        closed_objects=bool(params.disable_additional_properties),
    )


def _give_way() -> None:
    """A compile's pause: release the GIL so the engine's loop runs between fuel checks."""
    time.sleep(0)


@dataclass
class ConstrainBackend(StructuredOutputBackend):
    """The engine's backend: the model's vocabulary, built once, and the compiles."""

    def __post_init__(self):
        size = max(self.vocab_size, len(self.tokenizer))
        self.vocab = Vocabulary.from_tokenizer(self.tokenizer, size=size,
                                               eos_ids=_eos_ids(self.tokenizer, self.vllm_config))  # fmt: skip
        self.max_model_len = self.vllm_config.model_config.max_model_len
        warm_up(self.vocab)  # the vocabulary's shared structures, before the first compile

    def compile_grammar(
        self,
        request_type: StructuredOutputOptions,
        grammar_spec: str,
        stop_token_ids: set[int] | None = None,
    ) -> ConstrainGrammar:
        """The grammar of a constraint with default options and no token budget."""
        return self._grammar(structured_request(request_type, grammar_spec), stop_token_ids)

    def compile_request(self, request: Any) -> ConstrainGrammar:
        """The grammar of a vLLM `Request`: its whitespace options, its stop tokens, and its
        token budget (``max_tokens``, within the model's context) reaching the grammar."""
        params = request.sampling_params
        kind, text = request.structured_output_request.structured_output_key
        grammar = self._grammar(structured_request(kind, text, params.structured_outputs),
                                params.all_stop_token_ids)  # fmt: skip
        grammar.budget = _Budget(request, self.max_model_len)
        return grammar

    def _grammar(self, wanted: StructuredRequest, stop_token_ids) -> ConstrainGrammar:
        fuel = Fuel(compile_fuel(), limit="CONSTRAIN_VLLM_COMPILE_FUEL", pause=_give_way)
        with fuel.active():
            constraint = wanted.constraint(self.vocab)
            constraint.start().bitmask()  # the first mask, built here rather than in a step
        stops = set(stop_token_ids or ()) - set(self.vocab.eos_ids)
        return ConstrainGrammar(constraint, stops)

    def allocate_token_bitmask(self, max_num_seqs: int) -> torch.Tensor:
        return torch.full((max_num_seqs, bitmask.n_words(self.vocab.size)), -1, dtype=torch.int32)

    def destroy(self):
        pass


class _Budget:
    """The tokens a request may still generate, read when its constraint starts (after any
    reasoning): ``max_tokens`` less what it has generated, within the model's context."""

    def __init__(self, request: Any, max_model_len: int):
        self.request = request
        self.max_model_len = max_model_len

    def text_tokens(self) -> int:
        """Text tokens the constrained output may have: one is kept for EOS, which vLLM counts
        as an output token, so a closed output finishes with ``stop``, not ``length``."""
        r = self.request
        left = min(r.max_tokens - r.num_output_tokens, self.max_model_len - r.num_tokens)
        return max(left - 1, 0)


@dataclass
class ConstrainGrammar(StructuredOutputGrammar):
    """One request's position in its constraint: vLLM's grammar interface over a
    `GrammarSequence`, started on first use (so a budget counts from where the constraint
    starts, after any reasoning).

    Attributes:
        constraint: the compiled constraint (shared by the requests that ask for it).
        stops: the request's stop tokens besides the vocabulary's EOS: allowed, like EOS,
            exactly where the output is complete.
        budget: the request's token budget, if known (set by `ConstrainBackend.compile_request`).
    """

    constraint: Constraint
    stops: set[int] = field(default_factory=set)
    budget: _Budget | None = None
    _sequence: GrammarSequence | None = None

    @property
    def sequence(self) -> GrammarSequence:
        if self._sequence is None:
            limit = None if self.budget is None else self.budget.text_tokens()
            self._sequence = GrammarSequence(self.constraint, max_tokens=limit,
                                             stop_ids=self.stops)  # fmt: skip
        return self._sequence

    def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
        return self.sequence.accept(tokens)

    def validate_tokens(self, tokens: list[int]) -> list[int]:
        """The longest prefix of `tokens` the constraint allows (nothing changes)."""
        return tokens[: self.sequence.validate(tokens)]

    def rollback(self, num_tokens: int) -> None:
        sequence = self.sequence
        sequence.rollback(min(num_tokens, sequence.n_consumed))  # vLLM may count refused ones

    def fill_bitmask(self, bitmask_tensor: torch.Tensor, batch_index: int) -> None:
        """Row `batch_index` of the batch's bitmask: the tokens allowed next."""
        if bitmask_tensor.device.type == "cpu":
            self.sequence.fill_row(bitmask_tensor.numpy(), batch_index)
        else:
            row = torch.from_numpy(np.array(self.sequence.allowed()))
            bitmask_tensor[batch_index].zero_()
            bitmask_tensor[batch_index, : row.shape[0]].copy_(row)

    def is_terminated(self) -> bool:
        return self._sequence is not None and self._sequence.terminated

    def reset(self):
        self._sequence = None


def _eos_ids(tokenizer: Any, vllm_config: Any) -> Iterable[int]:
    """The ids that end generation: the tokenizer's EOS and the model's (its config may name
    several, as Llama 3's does)."""
    ids = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    config_eos = getattr(vllm_config.model_config.hf_config, "eos_token_id", None)
    if isinstance(config_eos, int):
        ids.add(config_eos)
    elif isinstance(config_eos, (list, tuple)):
        ids.update(int(i) for i in config_eos)
    return ids
