"""`GrammarSequence`, the interface serving engines use, against fresh matchers of the same
grammar (the oracle: a new `Constraint`, walked token by token with the core interface)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import constrain as cn
from constrain.constraints.grammar_sequence import GrammarSequence, fill_rows
from constrain.engine import bitmask
from constrain.errors import ConfigError

_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "tags": {"type": "array", "items": {"enum": [1, 2]}}},
    "required": ["name"],
    "additionalProperties": {"type": "integer"},
}  # fmt: skip
_TEXT = json.dumps({"name": "x y", "tags": [1, 2], "extra": 3}, separators=(",", ":"))


def _oracle_row(grammar: cn.Grammar, vocab, tokens: list[int]) -> np.ndarray:
    """The packed mask after `tokens`, from a matcher of a fresh constraint."""
    matcher = cn.Constraint(grammar, vocab).start()
    for token in tokens:
        matcher.advance(token)
    return matcher.bitmask()


def test_accepted_tokens_fill_the_rows_a_fresh_matcher_gives(smollm_vocab):
    """Row r of a caller-owned bitmask holds exactly what a fresh matcher allows after the
    same tokens; the other rows stay as they were, the words past the vocabulary's are
    cleared."""
    grammar = cn.Grammar.from_json_schema(_SCHEMA)
    sequence = GrammarSequence(cn.Constraint(grammar, smollm_vocab))
    tokens = smollm_vocab.encode(_TEXT)
    words = bitmask.n_words(smollm_vocab.size)
    out = np.full((3, words + 2), -1, dtype=np.int32)
    for i in range(len(tokens) + 1):
        sequence.fill_row(out, 1)
        assert np.array_equal(out[1, :words], _oracle_row(grammar, smollm_vocab, tokens[:i]))
        assert not out[1, words:].any() and (out[[0, 2]] == -1).all()
        if i < len(tokens):
            assert sequence.accept([tokens[i]])
    eos = smollm_vocab.eos_ids[0]
    assert sequence.accept([eos]) and sequence.is_terminated()
    assert not sequence.accept([tokens[0]])
    sequence.fill_row(out, 0)
    assert not out[0].any()  # nothing after the end


def test_validate_counts_the_acceptable_prefix_and_changes_nothing(smollm_vocab):
    """`validate` is the length of the longest prefix of a draft that a fresh matcher takes
    token by token, and the sequence's position and row are unchanged after it."""
    grammar = cn.Grammar.from_json_schema(_SCHEMA)
    sequence = GrammarSequence(cn.Constraint(grammar, smollm_vocab))
    tokens = smollm_vocab.encode(_TEXT)
    assert sequence.accept(tokens[:3])
    refused = smollm_vocab.encode("}")[0]
    drafts = [tokens[3:9], tokens[3:6] + [refused] + tokens[6:9], [refused], []]
    for draft in drafts:
        oracle = cn.Constraint(grammar, smollm_vocab).start()
        oracle.advance_many(tokens[:3])
        expected = 0
        for token in draft:
            if not oracle.check(token):
                break
            oracle.advance(token)
            expected += 1
        assert sequence.validate(draft) == expected
        assert sequence.n_consumed == 3
        assert np.array_equal(sequence.allowed(), _oracle_row(grammar, smollm_vocab, tokens[:3]))
    assert 0 < sequence.validate(drafts[1]) < len(drafts[1])


def test_stop_tokens_end_the_output_exactly_where_eos_may(smollm_vocab):
    """A stop id is allowed exactly where EOS is, ends the output like EOS, and is rolled
    back like any token."""
    grammar = cn.Grammar.from_regex("(ab)+")
    stop = smollm_vocab.encode("!")[0]
    sequence = GrammarSequence(cn.Constraint(grammar, smollm_vocab), stop_ids=[stop])
    a, b = smollm_vocab.encode("a")[0], smollm_vocab.encode("b")[0]
    for tokens, complete in (([a], False), ([b], True), ([a], False), ([b], True)):
        assert sequence.accept(tokens)
        allowed = sequence.allowed()
        assert bitmask.allows(allowed, stop) == complete
        assert bitmask.allows(allowed, smollm_vocab.eos_ids[0]) == complete
    assert sequence.validate([stop, a]) == 1  # nothing after the end
    assert sequence.accept([stop]) and sequence.is_terminated()
    assert not sequence.accept([a])
    sequence.rollback(1)
    assert not sequence.is_terminated() and sequence.accept([a])
    assert not sequence.accept([stop])  # "ababa" is not complete


def test_rollback_fork_and_reset(smollm_vocab):
    """A fork goes its own way; rollback returns to the row of the shorter prefix; reset to
    the start; rolling back more than was consumed is a clear error."""
    grammar = cn.Grammar.from_json_schema(_SCHEMA)
    sequence = GrammarSequence(cn.Constraint(grammar, smollm_vocab), max_tokens=64)
    tokens = smollm_vocab.encode(_TEXT)
    assert sequence.accept(tokens[:5])
    twin = sequence.fork()
    assert twin.accept(tokens[5:8]) and sequence.n_consumed == 5 and twin.n_consumed == 8
    twin.rollback(3)
    assert np.array_equal(twin.allowed(), sequence.allowed())
    with pytest.raises(ConfigError, match="roll back 9 tokens"):
        twin.rollback(9)
    sequence.reset()
    assert sequence.n_consumed == 0
    assert np.array_equal(
        sequence.allowed(), cn.Constraint(grammar, smollm_vocab).start(max_tokens=64).bitmask()
    )


def test_fill_rows_fills_each_sequences_row(smollm_vocab):
    """One batch call for sequences of different grammars (on two threads, masks not yet
    computed) gives each row a fresh matcher's mask."""
    grammars = [
        cn.Grammar.from_json_schema(_SCHEMA),
        cn.Grammar.from_json_schema({"type": "array", "items": {"type": "number"}}),
        cn.Grammar.from_regex("[a-z]+ [0-9]{2,4}"),
    ]
    texts = [_TEXT, "[1,2.5,-3]", "abc 123"]
    sequences = [GrammarSequence(cn.Constraint(g, smollm_vocab)) for g in grammars]
    words = bitmask.n_words(smollm_vocab.size)
    out = np.zeros((4, words), dtype=np.int32)
    for step in range(4):
        prefixes = [smollm_vocab.encode(t)[:step] for t in texts]
        fill_rows(sequences, out, threads=2)
        for row, (grammar, prefix) in enumerate(zip(grammars, prefixes)):
            assert np.array_equal(out[row], _oracle_row(grammar, smollm_vocab, prefix))
        for sequence, text in zip(sequences, texts):
            assert sequence.accept(smollm_vocab.encode(text)[step : step + 1])


def test_a_bitmask_that_cannot_hold_the_rows_is_a_clear_error(smollm_vocab):
    sequence = GrammarSequence(cn.Constraint(cn.Grammar.from_regex("a+"), smollm_vocab))
    words = bitmask.n_words(smollm_vocab.size)
    cases = [
        (np.zeros((2, words), dtype=np.int64), 0, "2-D int32"),
        (np.zeros(words, dtype=np.int32), 0, "2-D int32"),
        (np.zeros((2, words - 1), dtype=np.int32), 0, "words"),
        (np.zeros((2, words), dtype=np.int32), 2, "row 2"),
    ]
    for out, row, message in cases:
        with pytest.raises(ConfigError, match=message):
            sequence.fill_row(out, row)
    with pytest.raises(ConfigError, match="2 sequences"):
        fill_rows([sequence, sequence.fork()], np.zeros((1, words), dtype=np.int32))
