"""`ConstrainGrammar` as vLLM's manager drives it, checked against independent oracles: `re`,
`jsonschema`, and a fresh grammar fed the same tokens (no server; SmolLM2's tokenizer)."""

from __future__ import annotations

import json
import random
import re
import types

import jsonschema
import numpy as np
import pytest
import torch
from vllm.v1.structured_output.backend_types import StructuredOutputOptions as Kind

from constrain.engine import bitmask

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer", "minimum": 0},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}
EOS = 2


def _allowed(backend, grammar) -> np.ndarray:
    rows = backend.allocate_token_bitmask(2)
    grammar.fill_bitmask(rows, 1)
    assert (rows[0] == -1).all(), "only its own row is written"
    return np.flatnonzero(bitmask.unpack(rows[1].numpy(), backend.vocab.size))


def _walk(backend, grammar, rng: random.Random, limit: int = 400) -> list[int]:
    """Tokens drawn uniformly from each mask until the grammar terminates."""
    tokens: list[int] = []
    while not grammar.is_terminated():
        allowed = _allowed(backend, grammar)
        assert len(allowed), f"an empty mask after {tokens}"
        token = int(rng.choice(allowed))
        assert grammar.accept_tokens("r", [token])
        tokens.append(token)
        assert len(tokens) <= limit
    return tokens


def _budgeted(backend, kind, text, max_tokens: int, stops=frozenset({EOS})):
    grammar = backend.compile_grammar(kind, text, stop_token_ids=set(stops))
    from constrain.vllm.backend import _Budget

    request = types.SimpleNamespace(max_tokens=max_tokens, num_output_tokens=0, num_tokens=20)
    grammar.budget = _Budget(request, 2048)
    return grammar


def test_regex_walks_end_in_the_language(backend, tokenizer):
    rng = random.Random(1)
    pattern = r"[a-c]{2,4}-[0-9]{1,3}(\.[a-z]{1,8})?"
    for _ in range(40):
        grammar = backend.compile_grammar(Kind.REGEX, pattern, stop_token_ids={EOS})
        tokens = _walk(backend, grammar, rng)
        assert tokens[-1] == EOS
        assert re.fullmatch(pattern, tokenizer.decode(tokens[:-1]))


@pytest.mark.parametrize("max_tokens", [11, 12, 14, 17, 24])
def test_json_closes_within_max_tokens(backend, tokenizer, max_tokens):
    """The budget reaches the grammar: every walk ends with EOS as its max_tokens-th token at
    the latest (vLLM counts EOS as an output token), and the text validates."""
    rng = random.Random(max_tokens)
    for _ in range(30):
        grammar = _budgeted(backend, Kind.JSON, json.dumps(PERSON), max_tokens)
        tokens = _walk(backend, grammar, rng)
        assert tokens[-1] == EOS and len(tokens) <= max_tokens
        jsonschema.validate(json.loads(tokenizer.decode(tokens[:-1])), PERSON)


def test_validate_and_rollback_agree_with_a_fresh_grammar(backend):
    """Speculative decoding: `validate_tokens` changes nothing, and `rollback(n)` leaves the
    grammar where a fresh one fed the same prefix is (same mask, same termination)."""
    rng = random.Random(7)
    text = json.dumps(PERSON)
    for _ in range(15):
        walked = _walk(backend, backend.compile_grammar(Kind.JSON, text, {EOS}), rng)
        grammar = backend.compile_grammar(Kind.JSON, text, {EOS})
        cut = rng.randrange(len(walked))
        assert grammar.accept_tokens("r", walked[:cut])
        before = _allowed(backend, grammar)
        drafts = walked[cut:] + [EOS, 5]
        valid = grammar.validate_tokens(drafts)
        assert valid == walked[cut:]  # up to and including EOS, never past it
        assert np.array_equal(_allowed(backend, grammar), before)
        assert grammar.accept_tokens("r", valid)
        assert grammar.is_terminated()
        back = rng.randrange(len(valid) + 1)
        grammar.rollback(back)
        fresh = backend.compile_grammar(Kind.JSON, text, {EOS})
        assert fresh.accept_tokens("r", walked[: len(walked) - back])
        assert grammar.is_terminated() == fresh.is_terminated()
        if not grammar.is_terminated():
            assert np.array_equal(_allowed(backend, grammar), _allowed(backend, fresh))


def test_a_refused_token_is_reported_not_taken(backend, tokenizer):
    grammar = backend.compile_grammar(Kind.CHOICE, json.dumps(["yes", "no"]), {EOS})
    assert not grammar.accept_tokens("r", tokenizer.encode("maybe"))
    assert not grammar.accept_tokens("r", [EOS])  # nothing complete yet
    assert grammar.accept_tokens("r", tokenizer.encode("yes"))
    assert grammar.accept_tokens("r", [EOS]) and grammar.is_terminated()
    assert not grammar.accept_tokens("r", [EOS])


def test_request_stop_tokens_end_the_output_only_where_it_is_complete(backend, tokenizer):
    """A stop token of the request (here a text token, "!") is allowed exactly where EOS is."""
    stop = tokenizer.encode("!")[0]
    grammar = backend.compile_grammar(Kind.REGEX, r"[a-z!]{1,3}", {EOS, stop})
    assert stop not in _allowed(backend, grammar)  # nothing complete yet, so not a stop
    assert grammar.accept_tokens("r", tokenizer.encode("ab"))
    allowed = _allowed(backend, grammar)
    assert stop in allowed and EOS in allowed
    assert grammar.accept_tokens("r", [stop]) and grammar.is_terminated()


def test_reset_starts_over(backend, tokenizer):
    grammar = backend.compile_grammar(Kind.REGEX, "ab|cd", {EOS})
    first = _allowed(backend, grammar)
    assert grammar.accept_tokens("r", tokenizer.encode("ab") + [EOS])
    grammar.reset()
    assert not grammar.is_terminated()
    assert np.array_equal(_allowed(backend, grammar), first)


def test_the_bitmask_is_one_row_per_request(backend):
    rows = backend.allocate_token_bitmask(4)
    assert rows.dtype == torch.int32 and rows.shape == (4, (backend.vocab.size + 31) // 32)
    a = backend.compile_grammar(Kind.REGEX, "a+", {EOS})
    b = backend.compile_grammar(Kind.REGEX, "b+", {EOS})
    a.fill_bitmask(rows, 0)
    b.fill_bitmask(rows, 3)
    assert not torch.equal(rows[0], rows[3])
    assert (rows[1] == -1).all() and (rows[2] == -1).all()
