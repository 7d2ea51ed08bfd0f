"""The example schemas (schemas/): loadable by name, valid JSON Schemas, and compilable."""

from __future__ import annotations

import json

import jsonschema
import pytest

import constrain as cn

# a valid instance of each example
INSTANCES = {
    "city": {"city": "Lima"},
    "location": {"city": "Paris", "country": "France"},
    "moon_landing": {"name": "Neil Armstrong", "year": 1969},
    "person": {"name": "Ada Lovelace", "age": 36, "city": "London"},
    "person_record": {"name": "Ada Lovelace", "age": 36},
}


def test_names_load_and_path():
    assert cn.schemas.names() == sorted(INSTANCES)
    assert cn.schemas.path("person").name == "person.json"
    person = cn.schemas.load("person")
    assert person["required"] == ["name", "age", "city"]
    person["required"].append("x")  # each load is a new dict
    assert cn.schemas.load("person")["required"] == ["name", "age", "city"]
    with pytest.raises(
        cn.ConstrainError,
        match="unknown example schema 'nope'; available: city",
    ):
        cn.schemas.path("nope")


@pytest.mark.parametrize("name", sorted(INSTANCES))
def test_each_example_is_a_schema_that_compiles(name):
    schema = cn.schemas.load(name)
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(INSTANCES[name], schema)
    grammar = cn.Grammar.from_json_schema(schema)
    assert grammar.matches(json.dumps(INSTANCES[name], separators=(",", ":")))
    assert not grammar.matches("{}")
