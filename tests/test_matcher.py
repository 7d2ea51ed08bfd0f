"""Matcher for regexes and choices: soundness and completeness of masks, the Matcher contract."""

from __future__ import annotations

import numpy as np
import pytest
import regex as regex_oracle
from contract import assert_mask_matches_checks, assert_mask_matches_regex

import constrain as cn
from constrain.engine.vocab import Vocabulary

REGEXES = [
    r"\d{4}-\d{2}-\d{2}",
    r"[a-z]{1,12}@[a-z]{2,8}\.(com|org|net)",
    r'\{"name": "[A-Z][a-z]{0,10}", "age": [1-9]\d?\}',
    r"(yes|no|maybe)",
    r"[^\n]{0,20}\n",
    r"(café|naïve|日本|🎉)+",
    r"\(\d{3}\) \d{3}-\d{4}",
    r"-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?",
    # near-full masks, answered partly from vocabulary slices (constrain.engine.slices)
    r'"[^"\\]*"',
    r".{0,40}",
    r"[ \t\n\r]*x",
]


def _random_path(matcher: cn.Matcher, rng: np.random.Generator, steps: int) -> list[int]:
    """Advance by `steps` random allowed text tokens; returns the tokens consumed."""
    eos = set(matcher.mask_source()[0].vocab.eos_ids)
    consumed = []
    for _ in range(steps):
        allowed = [t for t in np.flatnonzero(matcher.mask()).tolist() if t not in eos]
        if not allowed:
            break
        token = int(rng.choice(allowed))
        matcher.advance(token)
        consumed.append(token)
    return consumed


@pytest.mark.parametrize("pattern", REGEXES)
def test_masks_are_sound_and_complete(any_vocab: Vocabulary, pattern):
    """At sampled states the mask equals a per-token brute-force check and the regex oracle."""
    grammar = cn.Grammar.from_regex(pattern)
    constraint = cn.Constraint(grammar, any_vocab)
    rng = np.random.default_rng(0)
    for steps in (0, 1, 3, 6):
        m = constraint.start()
        path = _random_path(m, rng, steps)
        mask = m.mask()  # `constraint` has cached masks; each oracle is built from scratch
        assert_mask_matches_checks(grammar, any_vocab, path, mask)
        assert_mask_matches_regex(pattern, any_vocab, path, mask, sample=300, seed=steps)
        try:
            text = any_vocab.decode_bytes(path).decode()
            in_language = regex_oracle.fullmatch(pattern, text, flags=regex_oracle.ASCII)
        except UnicodeDecodeError:  # the path ends inside a character
            in_language = False
        assert m.accepting() == bool(in_language)


def test_special_and_padding_tokens_never_allowed(smollm_vocab: Vocabulary):
    vocab = Vocabulary(
        [smollm_vocab.token_bytes(i) for i in range(len(smollm_vocab.tokenizer))],
        smollm_vocab.eos_ids,
        size=smollm_vocab.size + 64,
        tokenizer=smollm_vocab.tokenizer,
    )
    m = cn.Constraint(cn.Grammar.from_regex(r"[^\n]*"), vocab).start()
    mask = m.mask()
    assert not mask[len(vocab.tokenizer) :].any()
    for i in vocab.tokenizer.all_special_ids:
        assert mask[i] == (i in vocab.eos_ids)


def _tiny_vocab() -> Vocabulary:
    pieces = [b"a", b"b", b"ab", b"ba", b"abc", b"c", b"-", b"\xc3", b"\xa9", b"\xc3\xa9", None]
    return Vocabulary(pieces, eos_ids=[10], size=12)


def test_matcher_contract_on_a_tiny_vocabulary():
    vocab = _tiny_vocab()
    c = cn.Constraint(cn.Grammar.from_regex(r"(ab|é)+c?"), vocab)
    m = c.start()
    assert not m.accepting() and not m.done()
    assert np.flatnonzero(m.mask()).tolist() == [0, 2, 4, 7, 9]  # a ab abc \xc3 é
    assert m.check(2) and not m.check(1) and not m.check(10) and not m.check(11)
    m.advance(7)  # half of é
    assert np.flatnonzero(m.mask()).tolist() == [8]
    m.advance(8)
    assert m.accepting() and m.check(10)
    with pytest.raises(cn.InvalidTokenError, match="expects one of the bytes"):
        m.advance(1)
    f = m.fork()
    f.advance(4)  # abc
    assert f.done() and f.accepting()
    assert np.flatnonzero(f.mask()).tolist() == [10]
    f.advance(10)
    assert f.finished() and not f.check(10) and not f.mask().any()
    with pytest.raises(cn.InvalidTokenError, match="already ended"):
        f.advance(0)
    assert m.n_tokens == 2 and not m.done()  # the fork did not touch m
    f.rollback(2)
    assert f.n_tokens == 2 and f.state == m.state
    with pytest.raises(ValueError):
        f.rollback(5)
    # advance_many is atomic: a failing batch leaves the matcher untouched
    before = m.n_tokens
    with pytest.raises(cn.InvalidTokenError):
        m.advance_many([0, 0])
    assert m.n_tokens == before


def test_forced_tokens_are_allowed_and_healed(smollm_vocab: Vocabulary):
    c = cn.Constraint(cn.Grammar.from_regex(r'\{"name": "[a-z]+", "id": \d+\}'), smollm_vocab)
    m = c.start()
    assert m.forced_bytes() == b'{"name": "'
    forced = m.forced()
    assert forced, "a long forced prefix yields forced tokens"
    text = smollm_vocab.decode_bytes(forced)
    data = b'{"name": "'
    assert data.startswith(text) and len(text) < len(data)
    # healing: no single token spells the rest of the forced text from the last kept token on
    # and continues beyond it (e.g. ' "' could become ' "x' in one token, so it is not forced)
    last_start = len(text) - len(smollm_vocab.token_bytes(forced[-1]))
    assert not smollm_vocab.trie.has_extension(data[last_start:])
    for t in forced:
        assert m.check(t)
        m.advance(t)
    assert m.forced() == [] or m.forced_bytes()


def test_choices(smollm_vocab: Vocabulary):
    choices = ["Paris", "London", "Berlin", "Bern", "日本"]
    c = cn.Constraint(cn.Grammar.from_choices(choices), smollm_vocab)
    for choice in choices:
        m = c.start()
        for t in smollm_vocab.encode(choice):
            m.advance(t)
        assert m.accepting()
    m = c.start()
    m.advance_many(smollm_vocab.encode("Bern"))
    assert m.accepting() and m.done()  # nothing extends "Bern"
    m = c.start()
    m.advance_many(smollm_vocab.encode("Ber"))
    assert not m.accepting() and not m.done()
    with pytest.raises(cn.GrammarError):
        cn.Grammar.from_choices([])


def test_empty_language_is_an_error_at_compile_time():
    with pytest.raises(cn.GrammarError, match="empty"):
        cn.Grammar.from_regex(r"a[^\s\S]")


def test_vocabulary_that_cannot_spell_the_grammar_is_reported():
    vocab = Vocabulary([b"a", b"b"], eos_ids=[2], size=3)
    m = cn.Constraint(cn.Grammar.from_regex(r"az"), vocab).start()
    m.advance(0)
    with pytest.raises(cn.VocabularyError, match="b'z'"):
        m.mask()


BUDGETED = [
    (cn.Grammar.from_regex, r'\[("[a-z]{1,8}"(, "[a-z]{1,8}")*)?\]'),
    (cn.Grammar.from_json_schema, {"type": "array", "items": {"type": "string"}}),
    (
        cn.Grammar.from_json_schema,
        {
            "type": "object",
            "properties": {"tags": {"type": "array", "items": {"type": "string"}}},
            "required": ["tags"],
        },
    ),
]


@pytest.mark.parametrize("build, spec", BUDGETED)
@pytest.mark.parametrize("budget", [6, 12, 30])
def test_budget_closes_the_text_in_time(smollm_vocab: Vocabulary, build, spec, budget):
    """With a token budget, every random walk through the allowed tokens ends complete within
    it: the filter closes the text in time and never leaves it without a way to finish."""
    constraint = cn.Constraint(build(spec), smollm_vocab)
    needed, _ = constraint.plans.completion(constraint.start().state)
    assert needed <= budget  # the shortest text fits
    eos = set(smollm_vocab.eos_ids)
    rng = np.random.default_rng(budget)
    for _ in range(12):
        m, walk = constraint.start(max_tokens=budget), []
        for _ in range(budget):
            allowed = np.flatnonzero(m.mask()).tolist()
            assert allowed, f"no way to finish after {smollm_vocab.decode_bytes(walk)!r}"
            # prefer text over EOS so walks run into the budget
            text = [t for t in allowed if t not in eos]
            token = int(rng.choice(text or allowed))
            assert m.check(token)
            m.advance(token)
            if m.finished():
                break
            walk.append(token)
        assert m.accepting() or m.finished(), smollm_vocab.decode_bytes(walk)


def _events_schema() -> dict:
    """20 required objects after a free string: the tokenizations of nearby shortest texts
    fall out of step there (see `test_following_a_completion_never_lengthens_it`)."""
    event = {
        "type": "object",
        "properties": {"seq": {"type": "integer"}, "type": {"type": "string"}},
        "required": ["seq", "type"],
    }
    properties = {"note": {"type": "string"}, **{f"Event{i}": event for i in range(20)}}
    return {"type": "object", "properties": properties, "required": list(properties)}


def test_following_a_completion_never_lengthens_it(smollm_vocab: Vocabulary):
    """The first token of the completion a budget plans with leads to one at least a token
    shorter, so a budget that fits one always leaves a way to finish. The shortest text in
    bytes, tokenized greedily, need not do that by itself: inside a string, mid-character,
    the tokenizations of two nearby texts fall out of step by many tokens over a long
    required structure (JSONSchemaBench o10335 ended "length" that way)."""
    constraint = cn.Constraint(cn.Grammar.from_json_schema(_events_schema()), smollm_vocab)
    eos = set(smollm_vocab.eos_ids)
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(20):
        m, walk = constraint.start(max_tokens=10**9), []
        for _ in range(40):
            planned = m.planned_completion()
            following = m.fork()
            following.advance(planned[0])
            assert len(following.planned_completion()) <= len(planned) - 1, walk
            checked += 1
            walk.append(int(rng.choice([t for t in np.flatnonzero(m.mask()) if t not in eos])))
            m.advance(walk[-1])
    assert checked == 800


def test_budget_answers_depend_on_the_tokens_alone(smollm_vocab: Vocabulary):
    """Under a budget, whether a token is allowed depends on the sequence's tokens only: a
    matcher whose masks were asked at every step, on a constraint other walks used, agrees
    with a fresh Constraint's matcher asked only `check`. (The plans were once shared and
    rewritten by whichever states were visited: a second identical greedy request, or
    speculation against plain decoding, could decode differently.)"""
    schema = _events_schema()
    shared = cn.Constraint(cn.Grammar.from_json_schema(schema), smollm_vocab)
    eos = set(smollm_vocab.eos_ids)
    compared = 0
    for seed in range(4):
        rng = np.random.default_rng(seed)
        budget = shared.shortest_tokens() + 20 + 10 * seed
        asked_masks = shared.start(budget)
        fresh = cn.Constraint(cn.Grammar.from_json_schema(schema), smollm_vocab).start(budget)
        for _ in range(budget):
            mask = asked_masks.mask()
            allowed = [t for t in np.flatnonzero(mask) if t not in eos]
            if not allowed:
                break
            free = np.flatnonzero(asked_masks.inner.mask())
            for token in rng.choice(free, size=min(30, len(free)), replace=False).tolist():
                assert bool(mask[token]) == fresh.check(token), (seed, fresh.n_tokens, token)
                compared += 1
            token = int(rng.choice(allowed))
            asked_masks.advance(token)
            fresh.advance(token)
    assert compared > 1000


def test_budget_filter_matches_check_and_explains(smollm_vocab: Vocabulary):
    """mask() and check() agree under a budget; advance() names the budget when it refuses."""
    constraint = cn.Constraint(cn.Grammar.from_regex(r"[a-z]{0,40}\."), smollm_vocab)
    m = constraint.start(max_tokens=1)
    mask = m.mask()
    free = constraint.start().mask()
    assert 0 < mask.sum() < free.sum()  # only tokens that end with the final "." fit
    # a fresh Constraint's check under the same budget, on every token the free mask allows
    grammar = constraint.grammar
    assert_mask_matches_checks(
        grammar, smollm_vocab, [], mask, tokens=np.flatnonzero(free), max_tokens=1
    )
    refused = int(np.flatnonzero(free & ~mask)[0])
    with pytest.raises(cn.InvalidTokenError, match="max_tokens=1"):
        m.advance(refused)


@pytest.mark.parametrize(
    "build, spec, prefix",
    [
        (cn.Grammar.from_regex, r"[a-z]{50}", ""),
        # inside a string of multi-byte characters, where the token budget's plans mix the
        # model's tokenization with greedy longest match (mid-character states): a walk once
        # cycled "\xe2\x96" "\x80" forever there
        (
            cn.Grammar.from_json_schema,
            {
                "type": "object",
                "properties": {"s": {"type": "string"}, "n": {"type": "integer"}},
                "required": ["s", "n"],
            },
            '{"s":"▀▀▀',
        ),
    ],
)
def test_budget_closes_fastest_when_nothing_fits(smollm_vocab: Vocabulary, build, spec, prefix):
    """A budget too small for any completion closes the text: only the next token of one
    shortest completion is allowed, then EOS, so every walk ends complete within the planned
    completion's length, whatever it picks."""
    constraint = cn.Constraint(build(spec), smollm_vocab)
    start = constraint.start()
    start.advance_many(smollm_vocab.encode(prefix))
    needed, _ = constraint.plans.completion(start.state)
    assert needed > 3
    rng = np.random.default_rng(0)
    for _ in range(20):
        m = constraint.start(max_tokens=10**9)
        m.advance_many(smollm_vocab.encode(prefix))
        m.set_limit(m.n_tokens + 1)
        assert m.mask().sum() == 1  # the closing path's next token
        steps = 0
        while not m.finished():
            m.advance(int(rng.choice(np.flatnonzero(m.mask()))))
            steps += 1
        assert steps <= needed + 1  # the completion the budget planned, then EOS
        m.rollback(steps)  # back where the closing began: still closing
        assert m.mask().sum() == 1
        m.set_limit(10**9)  # a larger budget lifts it
        assert m.mask().sum() > 1


def test_filtered_masks_are_not_shared_through_the_device_cache(smollm_vocab: Vocabulary):
    """A budget narrows one sequence's mask only: the constraint's device-mask cache never
    hands it to another sequence in the same automaton state, nor the other way round."""
    import torch

    constraint = cn.Constraint(cn.Grammar.from_regex(r"[a-z]{0,40}\."), smollm_vocab)
    free, tight = constraint.start(), constraint.start(max_tokens=1)
    assert free.mask_key() == free.state and tight.mask_key() is None
    cpu = torch.device("cpu")
    first = constraint.device_mask(free, cpu).numpy()
    np.testing.assert_array_equal(constraint.device_mask(tight, cpu).numpy(), tight.mask())
    np.testing.assert_array_equal(constraint.device_mask(free, cpu).numpy(), first)
    assert tight.mask().sum() < first.sum()
