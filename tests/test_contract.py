"""The mask contracts of tests/contract.py: they pass on correct masks and fail on wrong ones."""

from __future__ import annotations

import numpy as np
import pytest
from contract import assert_mask_matches_checks, assert_mask_matches_regex, tokens_to_compare

import constrain as cn
from constrain.engine.vocab import Vocabulary

PATTERN = r'\{"id": \d{1,3}\}'


def _flipped(mask: np.ndarray, token: int) -> np.ndarray:
    wrong = mask.copy()
    wrong[token] = not wrong[token]
    return wrong


@pytest.fixture(scope="module")
def correct(smollm_vocab: Vocabulary):
    """A grammar, a prefix and the correct mask after it (computed on a Constraint of its own)."""
    grammar = cn.Grammar.from_regex(PATTERN)
    prefix = smollm_vocab.encode('{"id": 4')
    m = cn.Constraint(grammar, smollm_vocab).start()
    m.advance_many(prefix)
    return grammar, prefix, m.mask()


def test_a_correct_mask_passes_both_contracts(smollm_vocab: Vocabulary, correct):
    grammar, prefix, mask = correct
    assert 1 < mask.sum() < 100  # digits and the closing brace: a narrow, non-trivial mask
    assert_mask_matches_checks(grammar, smollm_vocab, prefix, mask)
    assert_mask_matches_checks(grammar, smollm_vocab, prefix)  # the mask of a new Constraint
    assert assert_mask_matches_regex(PATTERN, smollm_vocab, prefix, mask) > 0.9 * mask.size


@pytest.mark.parametrize("which", ["allowed", "refused", "eos"])
def test_one_wrong_bit_fails_the_check_contract(smollm_vocab: Vocabulary, correct, which):
    """Flipping any single bit of a correct mask fails, and the message names the token, its
    bytes and the prefix."""
    grammar, prefix, mask = correct
    token = {
        "allowed": int(np.flatnonzero(mask)[0]),
        "refused": int(np.flatnonzero(~mask)[-1]),
        "eos": smollm_vocab.eos_ids[0],
    }[which]
    with pytest.raises(AssertionError) as failure:
        assert_mask_matches_checks(grammar, smollm_vocab, prefix, _flipped(mask, token))
    message = str(failure.value)
    assert f"on 1 of {smollm_vocab.size} tokens" in message
    assert f"token {token} {smollm_vocab.token_bytes(token)!r}" in message
    assert repr(smollm_vocab.decode_bytes(prefix)) in message


@pytest.mark.parametrize("which", ["allowed", "refused", "eos"])
def test_one_wrong_bit_fails_the_regex_contract(smollm_vocab: Vocabulary, correct, which):
    grammar, prefix, mask = correct
    token = {
        "allowed": int(np.flatnonzero(mask)[0]),
        "refused": smollm_vocab.encode("x")[0],
        "eos": smollm_vocab.eos_ids[0],
    }[which]
    with pytest.raises(AssertionError, match=f"token {token} "):
        assert_mask_matches_regex(PATTERN, smollm_vocab, prefix, _flipped(mask, token))


def test_a_sampled_comparison_still_covers_every_allowed_token(smollm_vocab: Vocabulary, correct):
    """With a sample of the refused tokens, a token wrongly allowed is still caught (every
    allowed id is compared), as are wrong EOS bits."""
    grammar, prefix, mask = correct
    compared = tokens_to_compare(smollm_vocab, mask, sample=50)
    assert set(np.flatnonzero(mask).tolist()) <= set(compared.tolist())
    assert set(smollm_vocab.eos_ids) <= set(compared.tolist())
    assert len(compared) < 200
    wrongly_allowed = smollm_vocab.encode("x")[0]
    assert not mask[wrongly_allowed]
    with pytest.raises(AssertionError, match=f"token {wrongly_allowed} "):
        assert_mask_matches_checks(
            grammar, smollm_vocab, prefix, _flipped(mask, wrongly_allowed), sample=50
        )


def test_a_mask_of_the_wrong_shape_fails(smollm_vocab: Vocabulary, correct):
    grammar, prefix, mask = correct
    with pytest.raises(AssertionError, match="shape"):
        assert_mask_matches_checks(grammar, smollm_vocab, prefix, mask[:-1])
    with pytest.raises(AssertionError, match="dtype"):
        assert_mask_matches_checks(grammar, smollm_vocab, prefix, mask.astype(np.int8))
