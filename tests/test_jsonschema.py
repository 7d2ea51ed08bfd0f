"""JSON Schema compiler: acceptance agrees with `jsonschema` validation on valid and invalid instances."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest

import constrain as cn
from constrain.errors import GrammarError, UnsupportedSchemaError

SCHEMAS = [
    {"type": "integer", "minimum": -15, "maximum": 123},
    {"type": "number", "exclusiveMinimum": 0, "maximum": 10},
    {"type": "number", "minimum": 2, "exclusiveMinimum": True},  # draft 4 style  (x > 2)
    {"type": "string", "minLength": 2, "maxLength": 4},
    {"type": "string", "pattern": "^[a-z]+-[0-9]{2}$", "maxLength": 6},
    {"type": "string", "pattern": "b[0-9]"},
    {"type": "string", "format": "date"},
    {"type": "string", "format": "ipv4"},
    {"enum": ["red", "green", 3, None, [1, 2], "café"]},
    {"const": {"a": 1}},
    {"type": ["string", "null"], "maxLength": 1},
    {"minimum": 5},  # no type: every other type is admitted unconstrained
    {"type": "array", "items": {"type": "boolean"}, "minItems": 1, "maxItems": 3},
    {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "items": False},
    {
        "type": "array",
        "prefixItems": [{"type": "integer"}],
        "minItems": 2,
        "items": {"type": "null"},
    },
    {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
        "required": ["name"],
        "additionalProperties": False,
    },
    {
        "type": "object",
        "properties": {"a": {"type": "integer"}},
        "additionalProperties": {"type": "string"},
    },
    {"type": "object", "required": ["x"], "properties": {"y": {"const": 1}}},
    {"anyOf": [{"type": "integer", "maximum": 3}, {"type": "string", "maxLength": 1}]},
    {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {"next": {"$ref": "#/$defs/node"}},
                "additionalProperties": False,
            }
        },
        "$ref": "#/$defs/node",
    },
    {
        "definitions": {"n": {"type": "integer", "maximum": 9}},
        "type": "array",
        "items": {"$ref": "#/definitions/n"},
    },
    True,
]

INSTANCES = [
    None,
    True,
    False,
    0,
    -0,
    1,
    -1,
    2,
    3,
    5,
    9,
    10,
    11,
    -15,
    -16,
    123,
    124,
    0.5,
    2.5,
    -3.25,
    10.0,
    10.5,
    1.0,
    "",
    "a",
    "ab",
    "abcd",
    "abcde",
    "ab-12",
    "abc-12",
    "b1",
    "xb2y",
    "2024-02-29",
    "2023-02-29",
    "2023-12-31",
    "2023-13-01",
    "1.2.3.4",
    "256.1.1.1",
    "01.1.1.1",
    "red",
    "blue",
    "café",
    "x",
    [],
    [True],
    [True, False, True, False],
    [1, 2],
    [1, "a"],
    [1, "a", None],
    [1, None],
    [1, None, None],
    [1, 2, 3, 10],
    {},
    {"name": "Ada"},
    {"name": "Ada", "age": 3},
    {"age": 3},
    {"name": "Ada", "age": -1},
    {"name": "Ada", "x": 1},
    {"a": 1},
    {"a": 1, "b": "s"},
    {"a": 1, "b": 2},
    {"b": "s"},
    {"x": 1},
    {"x": 1, "y": 1},
    {"x": 1, "y": 2},
    {"y": 1},
    {"next": {}},
    {"next": {"next": {}}},
    {"next": 1},
    {"a": {"b": [1, {"c": None}]}},
]


def _in_schema_order(value, schema) -> bool:
    """Keys in the compiler's default order: declared properties, other required keys, the rest."""
    if not isinstance(value, dict) or not isinstance(schema, dict):
        return True
    order = list(schema.get("properties", {}))
    order += [k for k in schema.get("required", []) if k not in order]
    ranks = [order.index(k) if k in order else len(order) for k in value]
    return ranks == sorted(ranks)


def _accepts(constraint: cn.Constraint, text: str) -> bool:
    m = constraint.start()
    for token in constraint.vocab.encode(text):
        if not m.check(token):
            return False
        m.advance(token)
    return m.accepting()


@pytest.mark.parametrize("schema", SCHEMAS, ids=[json.dumps(s)[:50] for s in SCHEMAS])
@pytest.mark.parametrize("whitespace", ["compact", "default"])
def test_acceptance_agrees_with_jsonschema(schema, whitespace, smollm_vocab):
    grammar = cn.Grammar.from_json_schema(schema, whitespace=whitespace)
    constraint = cn.Constraint(grammar, smollm_vocab)
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
    if isinstance(schema, dict) and schema.get("exclusiveMinimum") is True:
        validator = jsonschema.Draft4Validator(schema)
    accepted_valid = 0
    for value in INSTANCES:
        valid = validator.is_valid(value)
        texts = [json.dumps(value, separators=(",", ":"), ensure_ascii=False)]
        if whitespace == "default":
            texts += [
                json.dumps(value, ensure_ascii=False),
                json.dumps(value, indent=2, ensure_ascii=False),
            ]
        for text in texts:
            accepted = _accepts(constraint, text)
            assert not (accepted and not valid), f"invalid instance accepted: {text}"
            accepted_valid += accepted
            if valid and not accepted:
                # the only narrowing allowed: enum/const spelled non-canonically, keys out of order
                assert (
                    "enum" in schema or "const" in schema or not _in_schema_order(value, schema)
                ), text
    assert accepted_valid > 0


def test_masks_under_a_schema_match_brute_force(smollm_vocab):
    schema = SCHEMAS[15]
    constraint = cn.Constraint(
        cn.Grammar.from_json_schema(schema, whitespace="default"), smollm_vocab
    )
    m = constraint.start()
    m.advance_many(smollm_vocab.encode('{"name": "Ad'))
    brute = np.array([m.check(i) for i in range(smollm_vocab.size)])
    np.testing.assert_array_equal(m.mask(), brute)


@pytest.mark.parametrize(
    ("schema", "keyword", "pointer"),
    [
        (
            {"type": "object", "properties": {"a": {"type": "integer", "multipleOf": 3}}},
            "multipleOf",
            "/properties/a",
        ),
        ({"oneOf": [{"type": "string"}, {"type": "integer"}]}, "oneOf", "#"),
        ({"type": "array", "items": {"uniqueItems": True}}, "uniqueItems", "/items"),
        ({"type": "string", "format": "hostname"}, "format", "#"),
        ({"$ref": "https://example.com/s.json"}, "$ref", "#"),
        ({"$ref": "#/$defs/missing"}, "$ref", "#"),
        ({"type": "number", "minimum": 0.5}, "minimum", "#"),
    ],
)
def test_unsupported_keywords_are_named_with_their_pointer(schema, keyword, pointer):
    with pytest.raises(UnsupportedSchemaError) as info:
        cn.Grammar.from_json_schema(schema)
    assert info.value.keyword == keyword
    assert (info.value.pointer or "#") == pointer


def test_lenient_drops_with_a_warning():
    with pytest.warns(UserWarning, match="multipleOf at /properties/a"):
        cn.Grammar.from_json_schema(
            {"properties": {"a": {"type": "integer", "multipleOf": 3}}}, lenient=True
        )


def test_unsatisfiable_schema_is_an_error_at_compile_time():
    with pytest.raises(GrammarError, match="empty"):
        cn.Grammar.from_json_schema({"type": "integer", "minimum": 5, "maximum": 4})
