"""Fuzzing the native core against the Python engine: random regexes, grammars, schemas and
token sequences give the same masks, and what one engine rejects the other rejects alike.

Runs in the fast suite with few examples, and under AddressSanitizer and
UndefinedBehaviorSanitizer with ``make test-sanitize``.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import constrain as cn
from constrain.engine.engines import native_available

pytestmark = pytest.mark.skipif(not native_available(), reason="the native core is not built")

_FUZZ = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))

# regexes built from a few atoms (sure to compile quickly), grammars from those
_ATOMS = ["a", "b", "[a-c]", "[0-9]", " ", "é", "\\.", "[^ab]", "(ab|ba)", "x?"]
regexes = st.recursive(
    st.sampled_from(_ATOMS),
    lambda inner: st.one_of(
        st.tuples(inner, inner).map("".join),
        st.tuples(inner, inner).map(lambda p: f"({p[0]}|{p[1]})"),
        inner.map(lambda r: f"({r})*"),
        inner.map(lambda r: f"({r})+"),
        st.tuples(inner, st.integers(0, 3), st.integers(0, 3)).map(
            lambda p: f"({p[0]}){{{min(p[1], p[2])},{max(p[1], p[2])}}}"
        ),
    ),
    max_leaves=6,
)


@st.composite
def grammars(draw) -> str:
    """A small Lark grammar: a few regex terminals, a literal, sequences and alternatives."""
    terminals = draw(st.lists(regexes, min_size=1, max_size=3))
    lines = [f"T{i}: /{r}/" for i, r in enumerate(terminals)]
    names = [f"T{i}" for i in range(len(terminals))] + ['"let"', '","']
    items = draw(st.lists(st.sampled_from(names), min_size=1, max_size=4))
    other = draw(st.lists(st.sampled_from(names), min_size=1, max_size=3))
    lines.insert(0, f"start: {' '.join(items)} | {' '.join(other)} start?")
    if draw(st.booleans()):
        lines.append("%ignore /[ ]+/")
    return "\n".join(lines)


def _walk(grammar: cn.Grammar, vocab, choices: list[int]) -> None:
    """Random walk through allowed tokens, both engines in step: equal masks throughout."""
    python = cn.Constraint(grammar.with_engine("python"), vocab).start()
    native = cn.Constraint(grammar.with_engine("native"), vocab).start()
    for pick in choices:
        a = python.mask()
        assert np.array_equal(a, native.mask())
        allowed = np.flatnonzero(a)
        allowed = allowed[~np.isin(allowed, vocab.eos_ids)]
        if not len(allowed):
            return
        token = int(allowed[pick % len(allowed)])
        python.advance(token)
        native.advance(token)
    assert np.array_equal(python.mask(), native.mask())


def _both(build):
    """`build()` for each engine: both give a grammar, or both raise the same error type."""
    outcomes = []
    for engine in ("python", "native"):
        try:
            outcomes.append(build().with_engine(engine))
        except cn.ConstrainError as exc:
            outcomes.append(type(exc))
    kinds = [o if isinstance(o, type) else cn.Grammar for o in outcomes]
    assert kinds[0] == kinds[1], outcomes
    return outcomes[0] if kinds[0] is cn.Grammar else None


@_FUZZ
@given(pattern=regexes, choices=st.lists(st.integers(0, 10**6), max_size=10))
def test_random_regexes(pattern, choices, smollm_vocab):
    grammar = _both(lambda: cn.Grammar.from_regex(pattern))
    if grammar is not None:
        _walk(grammar, smollm_vocab, choices)


@_FUZZ
@given(text=grammars(), choices=st.lists(st.integers(0, 10**6), max_size=10))
def test_random_grammars(text, choices, smollm_vocab):
    grammar = _both(lambda: cn.Grammar.from_lark(text))
    if grammar is not None:
        _walk(grammar, smollm_vocab, choices)


_SCALARS = [
    {"type": "string", "maxLength": 3},
    {"type": "integer", "minimum": -5, "maximum": 120},
    {"enum": ["a", "b", 1, None]},
    {"type": "string", "pattern": "^[a-c]+$"},
    {"type": "boolean"},
]


@st.composite
def schemas(draw) -> dict:
    """Objects and arrays of a few scalar schemas, nested once."""
    leaf = st.sampled_from(_SCALARS)
    array = leaf.map(lambda s: {"type": "array", "items": s, "maxItems": 3})
    value = st.one_of(leaf, array)
    keys = draw(
        st.lists(st.sampled_from(["a", "b", "ké", "d"]), min_size=1, max_size=3, unique=True)
    )
    properties = {k: draw(value) for k in keys}
    schema = {"type": "object", "properties": properties}
    if draw(st.booleans()):
        schema["required"] = keys[:1]
    if draw(st.booleans()):
        schema["additionalProperties"] = False
    return schema


@_FUZZ
@given(
    schema=schemas(),
    spellings=st.sampled_from(["canonical", "all"]),
    choices=st.lists(st.integers(0, 10**6), max_size=14),
)
def test_random_schemas(schema, spellings, choices, smollm_vocab):
    grammar = _both(lambda: cn.Grammar.from_json_schema(schema, spellings=spellings))
    if grammar is not None:
        _walk(grammar, smollm_vocab, choices)
