"""The typed-function decorator and the transformers logits processor."""

from __future__ import annotations

import dataclasses
import json
from typing import Literal

import jsonschema
import pytest
import torch

import constrain as cn


@dataclasses.dataclass
class Pet:
    name: str
    kind: Literal["cat", "dog"]
    age: int


def test_function_returns_an_instance_of_its_annotation(tiny_model):
    @cn.function(tiny_model, max_tokens=60)
    def describe(animal: str, detail: str = "short") -> Pet:
        """Describe the {animal} ({detail})."""

    assert describe.prompt("cat").startswith("Describe the cat (short).")
    assert '"kind"' in describe.prompt("cat")  # the schema is in the prompt
    try:
        pet = describe("cat")
    except cn.GenerationCutError as exc:  # a random model may ramble past max_tokens
        assert not exc.result.complete and exc.result.finish_reason == "length"
    else:
        assert isinstance(pet, Pet) and pet.kind in ("cat", "dog")


def test_function_definition_errors(tiny_model):
    with pytest.raises(TypeError, match="return annotation"):

        @cn.function(tiny_model)
        def no_return(x: str):
            """{x}"""

    with pytest.raises(TypeError, match="docstring"):

        @cn.function(tiny_model)
        def no_doc(x: str) -> int: ...

    with pytest.raises(TypeError, match="not parameters"):

        @cn.function(tiny_model)
        def bad_field(x: str) -> int:
            """{y}"""

    with pytest.raises(TypeError, match="unsupported return annotation"):

        @cn.function(tiny_model)
        def bad_type(x: str) -> complex:
            """{x}"""


def test_function_cut_by_max_tokens_raises(tiny_model):
    @cn.function(tiny_model, max_tokens=3)
    def long(x: str) -> Pet:  # '{"name": ' alone takes more than 3 tokens
        """{x}"""

    with pytest.raises(cn.GenerationCutError, match="max_tokens=3"):
        with pytest.warns(UserWarning, match="more than max_tokens=3"):  # said up front
            long("anything")


def test_logits_processor_in_hf_generate(tiny_model):
    """transformers' own generate (greedy, sampling, a batch) under a JSON Schema."""
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99}},
        "required": ["n"],
        "additionalProperties": False,
    }
    vocab = tiny_model.vocab
    constraint = cn.Constraint(cn.Grammar.from_json_schema(schema), vocab)
    tok = tiny_model.tokenizer
    inputs = tok(["hello", "a longer prompt here"], return_tensors="pt", padding=True)
    for do_sample in (False, True):
        torch.manual_seed(0)
        out = tiny_model.hf_model.generate(
            **inputs,
            logits_processor=[cn.hf.LogitsProcessor(constraint)],
            max_new_tokens=20,
            do_sample=do_sample,
            top_k=0,
            pad_token_id=vocab.eos_ids[0],
            eos_token_id=list(vocab.eos_ids),
        )
        for row in out[:, inputs["input_ids"].shape[1] :].tolist():
            ids = [t for t in row if t not in vocab.eos_ids]
            text = vocab.decode(ids)
            ended = len(ids) < len(row)
            if ended:
                jsonschema.validate(json.loads(text), schema)
            else:  # cut by max_new_tokens: still a valid prefix
                m = constraint.start()
                m.advance_many(ids)


def test_logits_processor_exports_our_stack(tiny_model):
    """In transformers' generate: the repetition penalty, then the mask, then top-k = 1 over
    the allowed tokens: the same tokens as our greedy decoding with the same penalty."""
    vocab = tiny_model.vocab
    constraint = cn.Constraint(cn.Grammar.from_regex(r"[a-z]{3,6}"), vocab)
    ids = tiny_model.encode_prompt("hello", chat=False)
    processor = cn.hf.LogitsProcessor(constraint, [cn.RepetitionPenalty(1.5), cn.TopK(1)])
    out = tiny_model.hf_model.generate(
        torch.tensor([ids]),
        logits_processor=[processor],
        max_new_tokens=10,
        do_sample=True,
        top_k=0,
        pad_token_id=vocab.eos_ids[0],
        eos_token_id=list(vocab.eos_ids),
    )
    hf_tokens = [t for t in out[0, len(ids) :].tolist() if t not in vocab.eos_ids]
    ours = cn.generate(
        tiny_model,
        "hello",
        regex=r"[a-z]{3,6}",
        chat=False,
        greedy=True,
        processors=[cn.RepetitionPenalty(1.5)],
    )
    assert hf_tokens == ours.tokens
    with pytest.raises(ValueError, match="auxiliary"):
        cn.hf.LogitsProcessor(constraint, [cn.CFG(2.0)])
