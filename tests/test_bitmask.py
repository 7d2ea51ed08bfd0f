"""Packed masks: the layout, every matcher's `bitmask()` against per-token checks, and the
in-place apply to logits."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import constrain as cn
from constrain.constraints.logits import apply_bitmask_, unpack_bitmask
from constrain.engine import bitmask


def _oracle_pack(mask: np.ndarray) -> list[int]:
    """Bit i of word i // 32 set for each allowed token, written out one token at a time."""
    words = [0] * ((len(mask) + 31) // 32)
    for i in np.flatnonzero(mask).tolist():
        words[i // 32] |= 1 << (i % 32)
    return [w - (1 << 32) if w >= 1 << 31 else w for w in words]  # as int32


@pytest.mark.parametrize("size", [1, 31, 32, 33, 1000, 49152])
def test_pack_unpack_and_queries_match_a_token_by_token_oracle(size):
    rng = np.random.default_rng(size)
    mask = rng.random(size) < 0.3
    mask[-1] = True  # the top bit of the last word
    packed = bitmask.pack(mask)
    assert packed.dtype == np.int32 and packed.shape == (bitmask.n_words(size),)
    assert packed.tolist() == _oracle_pack(mask)
    assert (bitmask.unpack(packed, size) == mask).all()
    ids = rng.integers(0, size, 50)
    assert [bitmask.allows(packed, t) for t in ids.tolist()] == mask[ids].tolist()
    assert not bitmask.allows(packed, -1) and not bitmask.allows(packed, 32 * len(packed))
    assert sorted(bitmask.allowed_among(packed, ids).tolist()) == sorted(ids[mask[ids]].tolist())
    refused = ids[:10]
    expected = mask.copy()
    expected[refused] = False
    assert (bitmask.unpack(bitmask.without(packed, refused), size) == expected).all()
    assert (bitmask.unpack(bitmask.from_ids(np.flatnonzero(mask), size), size) == mask).all()


def _checks(matcher, size: int) -> np.ndarray:
    return np.array([matcher.check(t) for t in range(size)])


def _fresh(grammar, vocab, text: str, **start):
    """A matcher of a new Constraint (nothing cached) after `text`."""
    matcher = cn.Constraint(grammar, vocab).start(**start)
    matcher.advance_many(vocab.encode_bytes(text.encode()))
    return matcher


@pytest.mark.parametrize(
    "grammar, prefixes",
    [
        (cn.Grammar.from_regex(r"[a-z]{2,5}@[0-9]+\.com"), ["", "ab", "abc@1"]),
        (  # extra keys: the text check refuses a repeated key
            cn.Grammar.from_json_schema({"type": "object", "additionalProperties": True}),
            ['{"a":1,"', '{"ab":1,"a', '{"a":["x","'],
        ),
        (  # unique items: the text check refuses a repeated item
            cn.Grammar.from_json_schema({"type": "array", "uniqueItems": True}),
            ["[1,", '["a","', "[true,fal"],
        ),
    ],
)
def test_matcher_bitmask_is_its_checks(grammar, prefixes, smollm_vocab):
    """At every prefix, the bitmask allows exactly the tokens a fresh matcher's `check`
    (stepping each token's bytes, no mask involved) accepts."""
    size = smollm_vocab.size
    for text in prefixes:
        packed = _fresh(grammar, smollm_vocab, text).bitmask()
        expected = _checks(_fresh(grammar, smollm_vocab, text), size)
        assert (bitmask.unpack(packed, size) == expected).all(), text
        assert expected.any()


def test_budgeted_bitmask_is_its_checks(smollm_vocab):
    """A token budget narrows the bitmask exactly as it narrows `check`."""
    grammar = cn.Grammar.from_json_schema(
        {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    )
    size = smollm_vocab.size
    narrowed = []
    for text, spare in [('{"name":"', 2), ('{"name":"ab', 2), ('{"name":"ab', 4)]:
        budget = len(smollm_vocab.encode_bytes(text.encode())) + spare
        packed = _fresh(grammar, smollm_vocab, text, max_tokens=budget).bitmask()
        expected = _checks(_fresh(grammar, smollm_vocab, text, max_tokens=budget), size)
        assert (bitmask.unpack(packed, size) == expected).all(), text
        unbounded = _checks(_fresh(grammar, smollm_vocab, text), size)
        assert 0 < expected.sum() <= unbounded.sum()
        narrowed.append(expected.sum() < unbounded.sum())
    assert narrowed[0] and narrowed[1]  # the budget binds there


def test_finished_matcher_allows_nothing(smollm_vocab):
    matcher = cn.Constraint(cn.Grammar.from_choices(["yes"]), smollm_vocab).start()
    matcher.advance_many(smollm_vocab.encode_bytes(b"yes"))
    matcher.advance(smollm_vocab.eos_ids[0])
    assert not matcher.bitmask().any()


@pytest.mark.parametrize("size", [33, 100, 4096])
def test_apply_bitmask_in_place(size):
    rng = np.random.default_rng(size)
    mask = rng.random((2, size)) < 0.5
    packed = torch.from_numpy(np.stack([bitmask.pack(row) for row in mask]))
    logits = torch.randn(2, size)
    expected = logits.masked_fill(~torch.from_numpy(mask), -math.inf)
    out = apply_bitmask_(logits, packed)
    assert out is logits and torch.equal(logits, expected)
    assert torch.equal(unpack_bitmask(packed, size), torch.from_numpy(mask))


def test_columns_past_the_bitmask_are_refused():
    """Logits wider than the vocabulary (padded embedding rows) get -inf past it."""
    packed = torch.from_numpy(bitmask.pack(np.ones(40, dtype=bool)))
    logits = torch.zeros(70)
    apply_bitmask_(logits, packed)
    assert torch.isfinite(logits[:40]).all() and torch.isinf(logits[40:]).all()


def test_masks_shared_between_sequences_follow_each_ones_keys(smollm_vocab):
    """Sequences of one constraint in the same automaton state but with different keys seen
    get their own refusals (narrowed masks are shared only where the keys agree)."""
    grammar = cn.Grammar.from_json_schema({"type": "object"}, spellings="all")
    shared = cn.Constraint(grammar, smollm_vocab)
    size = smollm_vocab.size
    texts = ['{"name":1,"name', '{"type":1,"name', '{"name":1,"name', '{"type":1,"name":2,"type']
    masks, inner_keys = [], []
    for text in texts:
        matcher = shared.start()
        matcher.advance_many(smollm_vocab.encode_bytes(text.encode()))
        masks.append(matcher.bitmask())
        inner_keys.append(matcher.inner.mask_key())
        expected = _checks(_fresh(grammar, smollm_vocab, text), size)
        assert (bitmask.unpack(masks[-1], size) == expected).all(), text
    assert inner_keys[0] == inner_keys[1]  # the same automaton state...
    assert not np.array_equal(masks[0], masks[1])  # ...but different keys to refuse
