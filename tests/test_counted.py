"""Strings with a length bound beside a large pattern: `CountedDFA`, built as it is read.

Oracles: the eager product of the pattern's DFA with the length chain (`combine`), for the
automaton; `jsonschema` for schemas; random walks over the masks for dead ends.
"""

from __future__ import annotations

import itertools
import json

import jsonschema
import numpy as np
import pytest

import constrain as cn
from constrain.engine.regex import compile_regex, quoted
from constrain.engine.regex.counted import CountedDFA
from constrain.engine.regex.escapes import EscapedDFA
from constrain.engine.regex.products import combine
from constrain.jsonschema.shapes import ANY_CHAR, length_dfa
from tests.contract import accepts_text

_CHAR = compile_regex(ANY_CHAR, encoding="json")


def _texts(alphabet: str, longest: int):
    """Every string over `alphabet` up to `longest` characters, as JSON writes it with and
    without ``ensure_ascii`` (raw UTF-8, or escapes and surrogate pairs)."""
    for n in range(longest + 1):
        for chars in itertools.product(alphabet, repeat=n):
            text = "".join(chars)
            yield json.dumps(text).encode()
            yield json.dumps(text, ensure_ascii=False).encode()


@pytest.mark.parametrize(
    "pattern, low, high",
    [
        (r"(aa)*", 1, 5),  # lengths of one parity: the bound's other end is never reached
        (r"[a-z]+", 2, 4),
        (r"(?:\S+\s+){0,3}\S+", 0, 6),
        (r"a*é?🎉?\n?", 3, 3),  # multi-byte characters, an escape, a surrogate pair
        (r"(ab|c)*", 3, None),  # only a minimum
    ],
)
@pytest.mark.parametrize("escaped", [False, True])
def test_counted_dfa_is_the_eager_product(pattern, low, high, escaped):
    """Every prefix of every short string is alive in the lazy product exactly when it is in
    the eager one, and a whole string is accepted exactly when the eager product accepts it
    (so every state the lazy product builds is live)."""
    within = quoted(compile_regex(pattern, dialect="ecma", encoding="json"))
    eager = combine(within, length_dfa(low, high), "and", "eager")
    if escaped:
        lazy = CountedDFA(EscapedDFA(within), EscapedDFA(_CHAR, in_string=True), low, high)
        eager = EscapedDFA(eager)
    else:
        lazy = CountedDFA(within, _CHAR, low, high)
    for text in _texts("ab é🎉\n", 4):
        at, oracle = lazy.start, eager.start
        for i, byte in enumerate(text):
            at, oracle = lazy.step(at, byte), eager.step(oracle, byte)
            assert (at == 0) == (oracle == 0), text[: i + 1]
            if at == 0:
                break
        else:
            assert lazy.accepts(at) == eager.accepts(oracle), text
            completion = lazy.shortest_from(at)
            assert eager.matches(text + completion), (text, completion)


def test_completion_lengths_repeat_with_the_pattern():
    """A pattern of even lengths and a minimum far beyond any table: the lengths are known
    from their period, so an odd bound is refused and an even one admitted."""
    within = quoted(compile_regex(r"(ab)*", encoding="json"))
    odd = CountedDFA(within, _CHAR, 10_001, 10_001)
    even = CountedDFA(within, _CHAR, 10_000, None)
    assert odd.is_empty() and not even.is_empty()
    assert even.matches(json.dumps("ab" * 5000)) and not even.matches(json.dumps("ab" * 4999))


_WORDS = {"type": "string", "pattern": r"^(?:\S+\s+){0,99}\S+$", "maxLength": 60}


def test_a_long_pattern_under_a_bound_compiles_as_a_counted_lexeme():
    """100 words in at most 60 characters: the eager product would pass the automaton limit,
    so the lexeme is counted as it is read; acceptance agrees with the validator."""
    grammar = cn.Grammar.from_json_schema(_WORDS, spellings="all")
    assert any(isinstance(lx.dfa, CountedDFA) for lx in grammar.ir.lexemes.values())
    validator = jsonschema.Draft202012Validator(_WORDS)
    rng = np.random.default_rng(7)
    for _ in range(200):
        words = ["".join(rng.choice(list("ab"), rng.integers(1, 6))) for _ in range(20)]
        text = " ".join(words)[: int(rng.integers(0, 70))]
        for spelled in (json.dumps(text), json.dumps(text).replace("a", "\\u0061")):
            assert grammar.matches(spelled) == validator.is_valid(text), spelled


def test_masks_of_a_counted_lexeme_never_lead_into_a_dead_end(smollm_vocab):
    """Random walks over the masks (fixed seed) always reach a text the validator accepts:
    no token the mask allows leaves the string unable to close within the bound."""
    schema = {"type": "object", "properties": {"t": _WORDS}, "required": ["t"]}
    constraint = cn.Constraint(cn.Grammar.from_json_schema(schema), smollm_vocab)
    validator = jsonschema.Draft202012Validator(schema)
    rng = np.random.default_rng(0)
    quote = set(smollm_vocab.encode('"}'))
    for _ in range(3):
        m = constraint.start()
        tokens = []
        while not m.accepting():
            allowed = np.flatnonzero(m.mask())
            assert len(allowed), smollm_vocab.decode(tokens)
            closing = [t for t in allowed.tolist() if t in quote]
            ending = closing and (len(tokens) > 20 or rng.random() < 0.05)
            token = int(rng.choice(closing if ending else allowed))
            m.advance(token)
            tokens.append(token)
        text = smollm_vocab.decode(tokens)
        assert validator.is_valid(json.loads(text)), text
        assert accepts_text(constraint, text)
