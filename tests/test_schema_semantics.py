"""JSON Schema semantics that used to be wrong while reported as success (issue 34): sets as
unique items, one canonical spelling per number with bounded digits, `multipleOf` checked with
exact decimals, and hostile schema values as clear errors.

Oracles: `jsonschema` (validity, where it reads numbers as the compiler does), `decimal`
(number values and their shortest text), `json`, `re`, enumeration.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
from decimal import Context, Decimal, localcontext
from typing import TypedDict

import jsonschema
import numpy as np
import pydantic
import pytest

import constrain as cn
from constrain.constraints.spec import ConstraintSpec
from constrain.engine.grammar.sample import random_text
from constrain.errors import ConstrainError
from constrain.jsonschema import schema_from_type

# -- 1. sets are arrays of unique items -----------------------------------------------------------


@dataclasses.dataclass
class _Tags:
    tags: set[int]


class _TagsDict(TypedDict):
    tags: frozenset[int]


class _TagsModel(pydantic.BaseModel):
    tags: set[int]


@pytest.mark.parametrize("annotation", [set[int], frozenset[int]], ids=str)
def test_a_set_type_means_unique_items(annotation):
    """Before: `set[int]` compiled to a plain array and accepted ``[1,1]``."""
    schema = schema_from_type(annotation)
    validator = jsonschema.Draft202012Validator(schema)
    grammar = cn.Grammar.from_type(annotation)
    for text in ["[]", "[1]", "[1,2]", "[1,1]", "[2,1,2]"]:
        assert grammar.matches(text) == validator.is_valid(json.loads(text)), text
    assert not validator.is_valid([1, 1])


@pytest.mark.parametrize("record", [_Tags, _TagsDict, _TagsModel], ids=lambda t: t.__name__)
def test_a_set_field_means_unique_items(record):
    validator = jsonschema.Draft202012Validator(schema_from_type(record))
    grammar = cn.Grammar.from_type(record)
    for text in ['{"tags":[1,2]}', '{"tags":[1,1]}', '{"tags":[3,1,3]}']:
        assert grammar.matches(text) == validator.is_valid(json.loads(text)), text
    assert not validator.is_valid({"tags": [1, 1]})


# -- 2. one spelling per number, digits bounded ---------------------------------------------------

_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?")  # JSON's numbers without exponent


def _shortest(text: str) -> bool:
    """The oracle of the canonical spelling: the text is the shortest of its value (by
    `decimal`), within the documented digit bounds (20 before the point; with a fraction, 17
    significant digits and 20 after the point)."""
    value = Decimal(text)
    if text != ("0" if value == 0 else format(value.normalize(), "f")):
        return False
    whole, _, fraction = text.lstrip("-").partition(".")
    if not fraction:
        return len(whole) <= 20
    significant = (whole + fraction).lstrip("0")
    return len(fraction) <= 20 and len(significant) <= 17


def _texts() -> list[str]:
    short = ["".join(t) for n in range(1, 5) for t in itertools.product("-0123.", repeat=n)]
    long = [
        "0.3000000000", "0.30000000000000004", "0.300000000000000041", "1.2345678901234567",
        "12.345678901234567", "12345678901234567890", "123456789012345678901",
        "0.00000000000000000001", "0.000000000000000000001", "1234567890123456.8",
        "12345678901234567.8", "100", "100.0", "-0.0", "-0.5", "-0.50", "0.05", "1e3",
    ]  # fmt: skip
    return short + long


@pytest.mark.parametrize(
    "schema",
    [{"type": "number"}, {"type": "integer"}, {"type": ["number", "string"]}, {}],
    ids=json.dumps,
)
def test_numbers_are_written_in_one_bounded_spelling(schema):
    """Canonical: a number text is admitted exactly when it is valid and the shortest text of
    its value within the digit bounds (before: ``0.3000000000`` was admitted, so a model could
    pad zeros until max_tokens). ``spellings="all"`` still admits every text JSON allows."""
    canonical = cn.Grammar.from_json_schema(schema)
    every = cn.Grammar.from_json_schema(schema, spellings="all")
    validator = jsonschema.Draft202012Validator(schema)
    for text in _texts():
        number = _NUMBER.fullmatch(text) is not None
        if number and Decimal(float(text)) != Decimal(text):
            continue  # jsonschema would judge the float, not the text's value
        valid = number and validator.is_valid(json.loads(text))
        assert every.matches(text) == valid, text
        assert canonical.matches(text) == (valid and _shortest(text)), text


def test_zeros_after_a_digit_end_within_the_bound():
    """After ``0.3`` a model may write zeros only while a non-zero digit can still end the
    number within 17 significant digits: the run of zeros is bounded."""
    grammar = cn.Grammar.from_json_schema({"type": "number"})
    for zeros in range(20):
        text = "0.3" + "0" * zeros + "1"
        assert grammar.matches(text) == (zeros + 2 <= 17), text


@pytest.mark.parametrize(
    "schema, beyond",
    [
        ({"enum": [10**30, 1]}, str(10**30)),  # finitely many: written in full
        ({"type": "integer", "minimum": 10**25, "maximum": 10**25 + 5}, str(10**25 + 3)),
        ({"type": "integer", "minimum": 10**30}, str(10**30)),  # none within the bound
    ],
)
def test_numbers_the_schema_bounds_itself_stay(schema, beyond):
    grammar = cn.Grammar.from_json_schema(schema)
    assert jsonschema.Draft202012Validator(schema).is_valid(json.loads(beyond))
    assert grammar.matches(beyond)


# -- 3. multipleOf with exact decimals in the library's own check -------------------------------


@pytest.mark.parametrize(
    "step, text",
    [(0.1, "0.3"), (0.1, "0.7"), (0.01, "1.15"), (0.1, "0.35"), (0.5, "2.5"), (1e-300, "1")],
)
def test_the_output_check_divides_exactly(step, text):
    """Before: 0.3 under ``multipleOf: 0.1`` was admitted by the grammar (exact decimals) and
    then refused by the output check (floats) as an "internal error". Oracle: `decimal` on the
    texts; `jsonschema` only where float division agrees with it."""
    schema = {"type": "number", "multipleOf": step}
    with localcontext(Context(prec=1000)):
        multiple = Decimal(text) % Decimal(repr(step)) == 0
    assert cn.Grammar.from_json_schema(schema).matches(text) == multiple
    spec = ConstraintSpec(schema=schema)
    if multiple:
        assert spec.value(text) == json.loads(text)
    else:
        with pytest.raises(ConstrainError, match="multiple"):
            spec.value(text)
    floats = jsonschema.Draft202012Validator(schema).is_valid(json.loads(text))
    if floats == multiple:  # where jsonschema's float division gets it right
        assert cn.Grammar.from_json_schema(schema).matches(text) == floats


def test_a_check_site_divides_exactly():
    """A value validated at a check site (an overlapping `oneOf` inside an array) is read with
    exact numbers too: ``[0.3]`` is a multiple of 0.1 under the first branch only."""
    schema = {
        "type": "array",
        "maxItems": 1,
        "oneOf": [
            {"items": {"multipleOf": 0.1}},
            {"items": {"type": "number"}, "contains": {"minimum": 0.5}},
        ],
    }
    grammar = cn.Grammar.from_json_schema(schema)
    for text, valid in [("[0.3]", True), ("[0.35]", False), ("[0.6]", False), ("[0.75]", True)]:
        assert grammar.matches(text) == valid, text


# -- 4. hostile schema values: a clear error or a correct grammar ----------------------------------


def _deep(levels: int) -> dict:
    schema: dict = {}
    for _ in range(levels):
        schema = {"items": schema}
    return schema


_BIG = "9" * 5000
_HOSTILE = [
    ("minimum", {"type": "integer", "minimum": 1e308}),
    ("maximum", {"maximum": -1e308}),
    ("multipleOf", {"type": "number", "multipleOf": 1e-300}),
    ("const", '{"const": ' + _BIG + "}"),
    ("enum", '{"enum": [1, ' + _BIG + "]}"),
    ("enum", {"enum": [10**5000 - 1]}),
    ("items", _deep(10_000)),
    ("items", '{"items":' * 10_000 + "{}" + "}" * 10_000),
    ("maxLength", {"type": "string", "maxLength": 10**30}),
    ("minItems", {"minItems": 2**64}),
    ("maxProperties", {"type": "object", "maxProperties": 10**30}),
    ("minimum", {"minimum": 10**4000}),
]


@pytest.mark.parametrize(
    "keyword, schema", _HOSTILE, ids=[f"{k}-{i}" for i, (k, _) in enumerate(_HOSTILE)]
)
def test_hostile_values_compile_or_raise_a_constrain_error(keyword, schema):
    """Either a grammar whose random texts `jsonschema` validates, or a `ConstrainError`
    naming the keyword; never a ValueError, OverflowError, RecursionError or TypeError."""
    try:
        grammar = cn.Grammar.from_json_schema(schema)
    except ConstrainError as exc:
        assert keyword in str(exc)
        return
    text = schema if isinstance(schema, str) else json.dumps(schema)
    # numbers as decimals on both sides: jsonschema then divides and compares exactly
    validator = jsonschema.Draft202012Validator(json.loads(text, parse_float=Decimal))
    rng = np.random.default_rng(0)
    for _ in range(20):
        text = random_text(grammar.ir, rng)
        with localcontext(Context(prec=1000)):
            assert validator.is_valid(json.loads(text, parse_float=Decimal)), text


def test_a_long_bound_beside_other_strings_too_large_for_one_automaton_is_refused_by_name():
    """Beside other strings a length bound must be one automaton with them; one of 100,000
    characters would need 1.6M states: refused naming `maxLength`, never a weaker grammar."""
    schema = {"anyOf": [{"type": "string", "maxLength": 100_000}, {"pattern": "^a"}]}
    with pytest.raises(cn.UnsupportedSchemaError, match="maxLength 100000") as caught:
        cn.Grammar.from_json_schema(schema)
    assert caught.value.keyword == "maxLength"


@pytest.mark.parametrize("bound", [300, 5000, 100_000])
def test_if_over_a_long_length_bound_keeps_valid_strings(bound):
    """Found by the property test: a `maxLength` above 256 (kept symbolic as `Lengths`, then
    counted in chunks that open with a `"` lexeme) inside `if` made the grammar refuse
    ``"1"``, which `jsonschema` accepts: beside the longer strings of the other branch, the
    lexer's longest match lost the chunked string. Values around the bound agree with
    `jsonschema`, as a DFA (300, 5000) or checked on the value (100,000)."""
    schema = {"if": {"maxLength": bound}, "then": {"type": "string"}}
    validator = jsonschema.Draft202012Validator(schema)
    grammar = cn.Grammar.from_json_schema(schema)
    for value in ["", "1", "é" * 31, "a" * (bound - 1), "a" * bound, "a" * (bound + 1), 5, None]:
        text = json.dumps(value, ensure_ascii=False)
        assert grammar.matches(text) == validator.is_valid(value), (len(text), value is None)
