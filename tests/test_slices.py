"""Vocabulary slices: a partition of the vocabulary, and the containment check that admits one."""

from __future__ import annotations

import numpy as np
import pytest
from contract import assert_mask_matches_checks

import constrain as cn
from constrain.engine.grammar import Grammar
from constrain.engine.regex import compile_regex
from constrain.engine.slices import SLICE_PATTERNS, VocabularySlices, admits, slices_of
from constrain.engine.vocab import Vocabulary


def test_slices_partition_the_text_tokens(smollm_vocab: Vocabulary):
    slices = slices_of(smollm_vocab)
    parts = [part.tokens for part in slices.slices]
    rest = slices.trie_without((True,) * len(parts)).tokens
    everything = np.concatenate([*parts, rest])
    assert len(everything) == len(np.unique(everything))  # disjoint
    np.testing.assert_array_equal(np.sort(everything), smollm_vocab.text_token_ids)
    for part in slices.slices:  # every token of a slice is, in full, a string of its language
        for t in part.tokens[:: max(1, len(part.tokens) // 200)].tolist():
            language = compile_regex(part.pattern)
            assert language.accepting[language.walk(language.start, smollm_vocab.token_bytes(t))]
    text_short = slices.slices[1]
    assert len(text_short.tokens) > 0.5 * len(smollm_vocab.text_token_ids)


def test_a_token_belongs_to_the_first_slice_it_matches():
    vocab = Vocabulary(
        [b" ", b"  ", b"ab", b"a" * 12, b"a" * 40, b'"', b"x'y", b"\xc3", None], eos_ids=[8]
    )
    slices = VocabularySlices(vocab, SLICE_PATTERNS)
    assert [p.tokens.tolist() for p in slices.slices] == [[0, 1], [2], [3], [4]]
    rest = slices.trie_without((True, True, True, True)).tokens
    assert sorted(rest.tolist()) == [5, 6, 7]
    assert sorted(slices.trie_without((True, False, True, False)).tokens.tolist()) == [
        2,
        4,
        5,
        6,
        7,
    ]


@pytest.mark.parametrize(
    ("pattern", "prefix", "expected"),
    [
        (r'"[^"\\]*"', b'"ab', [True, True, True, True]),  # inside a string: everything admitted
        (r'"[^"\\]*"', b"", [False, False, False, False]),  # before the quote: nothing
        (r".{0,40}", b"", [False, True, True, False]),  # bounded: runs of 10 and 30 fit, not more
        (r".{0,40}", b"a" * 20, [False, True, False, False]),
        (r"[ \t\n\r]*x", b" ", [True, False, False, False]),
        (r"[ \n]*x", b" ", [False, False, False, False]),  # tabs are in the slice, not the language
    ],
)
def test_admits_is_exact_containment(pattern, prefix, expected):
    dfa = compile_regex(pattern)
    state = dfa.walk(dfa.start, prefix)
    assert [admits(dfa.transitions, state, compile_regex(p)) for p in SLICE_PATTERNS] == expected


def test_grammar_string_states_admit_the_text_slices(smollm_vocab: Vocabulary):
    grammar = Grammar.from_lark('start: "[" STRING "]"\nSTRING: /"[^"\\\\]*"/')
    prefix = smollm_vocab.encode('["hello')
    m = cn.Constraint(grammar, smollm_vocab).start()
    m.advance_many(prefix)
    languages = [part.language for part in slices_of(smollm_vocab).slices]
    assert [grammar.automaton.admits(m.state, lang) for lang in languages] == [
        True,
        True,
        True,
        True,
    ]
    # the mask read off the slices equals a per-token walk on a Constraint with no mask cached
    mask = assert_mask_matches_checks(grammar, smollm_vocab, prefix, m.mask())
    assert mask.sum() > 0.9 * len(smollm_vocab.text_token_ids)


@pytest.mark.parametrize("pattern", ["^[0-9]{4}-[0-9]{2}.*$", "^x.+", "(.*)"])
def test_a_pattern_dot_admits_the_text_slices(pattern, smollm_vocab: Vocabulary):
    """A JSON Schema pattern's `.` refuses line terminators, U+2028 and U+2029 among them: the
    text slices leave those out, so a string free after its prefix admits them whole (before,
    every mask there walked the trie); the mask equals a per-token walk."""
    grammar = cn.Grammar.from_json_schema({"type": "string", "pattern": pattern})
    prefix = smollm_vocab.encode('"2024-01x' if pattern[1] == "[" else '"x')
    m = cn.Constraint(grammar, smollm_vocab).start()
    m.advance_many(prefix)
    state = m
    while not hasattr(state, "state"):
        state = state.inner
    languages = [part.language for part in slices_of(smollm_vocab).slices]
    assert [grammar.automaton.admits(state.state, lang) for lang in languages][1:] == [True] * 3
    assert_mask_matches_checks(grammar, smollm_vocab, prefix, m.mask())
    if pattern.startswith("^"):  # anchored: a separator right after the prefix is refused
        separator = smollm_vocab.encode("\u2028")
        assert not all(m.check(t) and m.advance(t) is None for t in separator)
