"""The typed-function decorator and the transformers logits processor."""

from __future__ import annotations

import dataclasses
import json
import re
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
    """Each is a `cn.AnnotationError`: a `ConstrainError` and a `TypeError` (was a bare
    `TypeError`)."""
    assert issubclass(cn.AnnotationError, cn.ConstrainError)
    assert issubclass(cn.AnnotationError, TypeError)
    with pytest.raises(cn.AnnotationError, match="return annotation"):

        @cn.function(tiny_model)
        def no_return(x: str):
            """{x}"""

    with pytest.raises(cn.AnnotationError, match="docstring"):

        @cn.function(tiny_model)
        def no_doc(x: str) -> int: ...

    with pytest.raises(cn.AnnotationError, match="not parameters"):

        @cn.function(tiny_model)
        def bad_field(x: str) -> int:
            """{y}"""

    with pytest.raises(cn.AnnotationError, match="unsupported return annotation"):

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
    with pytest.raises(cn.ConfigError, match="auxiliary"):
        cn.hf.LogitsProcessor(constraint, [cn.CFG(2.0)])


PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


def _generate_with(model, processor, prompt: str, max_new_tokens: int) -> tuple[str, bool]:
    """transformers' own greedy generate for the chat `prompt`: (text, ended by EOS)."""
    tok, vocab = model.tokenizer, model.vocab
    text = tok.apply_chat_template(
        [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
    )
    ids = tok(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
    out = model.hf_model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        logits_processor=[processor],
        max_new_tokens=max_new_tokens,
        do_sample=False,
        pad_token_id=vocab.eos_ids[0],
        eos_token_id=list(vocab.eos_ids),
    )
    row = out[0, ids.shape[1] :].tolist()
    tokens = [t for t in row if t not in vocab.eos_ids]
    return vocab.decode(tokens), len(tokens) < len(row)


def _valid(text: str, ended: bool, vocab) -> None:
    """Complete JSON valid under PERSON if ended, else a prefix a fresh matcher accepts."""
    if ended:
        jsonschema.validate(json.loads(text), PERSON)
    else:
        cn.Constraint(cn.Grammar.from_json_schema(PERSON), vocab).start().advance_many(
            vocab.encode(text)
        )


def test_one_logits_processor_serves_several_generate_calls(tiny_model):
    """Prompts of different lengths, longer then shorter then longer: each call's output
    is checked on its own (the prompt length is not frozen at the first call)."""
    constraint = cn.Constraint(cn.Grammar.from_json_schema(PERSON), tiny_model.vocab)
    processor = cn.hf.LogitsProcessor(constraint)
    prompts = ["a rather longer prompt that asks for a person", "hi", "one more prompt, long"]
    for prompt in prompts:
        text, ended = _generate_with(tiny_model, processor, prompt, 24)
        assert text.startswith('{"'), (prompt, text)
        _valid(text, ended, tiny_model.vocab)


@pytest.mark.slow
def test_one_logits_processor_twice_on_the_bundled_model(smollm):
    constraint = cn.Constraint(cn.Grammar.from_json_schema(PERSON), smollm.vocab)
    processor = cn.hf.LogitsProcessor(constraint)
    for prompt in (
        "Please write one person, with a name and an age, as a JSON object.",
        "A person as JSON.",
        "Give me a person, as JSON, with the keys name and age: a short name, an adult age.",
    ):
        text, ended = _generate_with(smollm, processor, prompt, 40)
        assert ended, (prompt, text)
        jsonschema.validate(json.loads(text), PERSON)


@dataclasses.dataclass
class _Point:
    x: int


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda m: cn.generate(m, "hi", type=_Point(1), max_tokens=4), "type= expects a Python type"),
        (lambda m: cn.generate(m, "hi", type={"type": "object"}, max_tokens=4), "schema="),
        (lambda m: cn.generate(m, "hi", seed=-1, max_tokens=4), "seed must be an integer"),
        (lambda m: cn.generate(m, "hi", seed="x", max_tokens=4), "seed must be an integer"),
        (lambda m: cn.generate(None, "hi", max_tokens=4), "model must be a loaded model"),
        (lambda m: cn.generate("smollm2-135m-instruct", "hi"), "cn.load_model('smollm2"),
        (lambda m: cn.function(lambda topic: topic), "@cn.function(model)"),
        (lambda m: cn.generate(m, "hi", choices=["a", "\ud800"], max_tokens=4), "choices[1]"),
        (lambda m: cn.generate(m, "hi \udc00", max_tokens=4), "lone surrogate U+DC00"),
        (lambda m: cn.generate(m, "hi", regex="a\ud800", max_tokens=4), "regex holds a lone"),
    ],
)  # fmt: skip
def test_bad_arguments_are_a_constrain_error_naming_them(tiny_model, call, words):
    with pytest.raises(cn.ConstrainError, match=re.escape(words)):
        call(tiny_model)
