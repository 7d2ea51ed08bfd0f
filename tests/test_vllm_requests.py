"""`constrain.vllm.requests`: what a vLLM structured request asks for, and its checked compile
(vLLM itself is not needed; `make test-vllm` runs the backend inside vLLM)."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from constrain.fuel import Fuel
from constrain.vllm.requests import COMPILE_FUEL, Refused, StructuredRequest, compile_fuel


def _matches(wanted: StructuredRequest, text: str) -> bool:
    return wanted.compile(Fuel(10**7)).matches(text)


def test_each_kind_compiles_to_its_language():
    assert _matches(StructuredRequest("regex", "[a-c]{2}-[0-9]"), "ab-7")
    assert not _matches(StructuredRequest("regex", "[a-c]{2}-[0-9]"), "ab-77")
    choice = StructuredRequest("choice", json.dumps(["yes", "no"]))
    assert _matches(choice, "no") and not _matches(choice, "n")
    assert _matches(StructuredRequest("grammar", 'start: "x"+'), "xxx")
    assert _matches(StructuredRequest("grammar", 'root ::= "y" [0-9]'), "y4")  # GBNF
    assert _matches(StructuredRequest("json_object", ""), '{"a": [1]}')
    assert not _matches(StructuredRequest("json_object", ""), "[1]")


def test_json_options_reach_the_grammar():
    schema = json.dumps({"type": "object", "properties": {"a": {"type": "integer"}}})
    assert _matches(StructuredRequest("json", schema), '{"a": 1}')  # natural whitespace
    compact = StructuredRequest("json", schema, compact=True)
    assert _matches(compact, '{"a":1}') and not _matches(compact, '{"a": 1}')
    spaced = StructuredRequest("json", schema, whitespace_pattern="[ ]?")
    assert _matches(spaced, '{ "a": 1 }')
    assert _matches(StructuredRequest("json", schema), '{"a": 1, "b": 2}')
    closed = StructuredRequest("json", schema, closed_objects=True)
    assert not _matches(closed, '{"a": 1, "b": 2}')
    # the texts the grammar accepts validate (an oracle that is not the compiler)
    jsonschema.validate({"a": 1}, json.loads(schema))


@pytest.mark.parametrize(
    ("wanted", "parameter", "says"),
    [
        (StructuredRequest("json", '{"properties": {"a": {"minLength": "x"}}}'),
         "structured_outputs.json/properties/a/minLength", "minLength"),
        (StructuredRequest("json", "{not json"), "structured_outputs.json", "not JSON"),
        (StructuredRequest("regex", "a(b"), "structured_outputs.regex", "regex"),
        (StructuredRequest("choice", '["a", 1]'), "structured_outputs.choice", "strings"),
        (StructuredRequest("grammar", "start: undefined_rule"), "structured_outputs.grammar",
         "undefined_rule"),
        (StructuredRequest("structural_tag", "{}"), "structured_outputs.structural_tag",
         '"type": "structural_tag"'),
        (StructuredRequest("structural_tag", json.dumps({"type": "structural_tag", "format": {
            "type": "dispatch", "rules": []}})), "structured_outputs.structural_tag",
         "'dispatch' format is not supported (at format)"),
        (StructuredRequest("xml", ""), "structured_outputs.xml", "not xml"),
        (StructuredRequest("json", "{}", compact=True, whitespace_pattern=" "),
         "structured_outputs.whitespace_pattern", "at most one"),
    ],
)  # fmt: skip
def test_bad_requests_are_refused_naming_the_field(wanted, parameter, says):
    with pytest.raises(Refused) as caught:
        wanted.compile(Fuel(10**7))
    assert caught.value.parameter == parameter
    assert re.search(re.escape(says), str(caught.value), re.IGNORECASE)


def test_work_past_the_fuel_is_refused_naming_the_budget():
    """The same schema compiles with enough fuel and is refused, naming the budget, with too
    little (work is counted, so the answer does not depend on the machine's load)."""
    schema = json.dumps({"type": "string", "pattern": "^(a|b)*a(a|b){12}$"})
    StructuredRequest("json", schema).compile(Fuel(10**7))
    with pytest.raises(Refused) as caught:
        StructuredRequest("json", schema).compile(Fuel(1000, limit=COMPILE_FUEL))
    assert caught.value.parameter == "structured_outputs.json"
    assert COMPILE_FUEL in str(caught.value)


def test_the_budget_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv(COMPILE_FUEL, raising=False)
    assert compile_fuel() == 10_000_000
    monkeypatch.setenv(COMPILE_FUEL, "1234")
    assert compile_fuel() == 1234
    for bad in ("lots", "0", "-5"):
        monkeypatch.setenv(COMPILE_FUEL, bad)
        with pytest.raises(Refused, match=COMPILE_FUEL):
            compile_fuel()
