"""XGrammar structural tags read into one grammar (`constrain.vllm.structural_tag`), checked
against `re` on random texts built from the tags' own pieces, and `jsonschema` on the JSON."""

from __future__ import annotations

import json
import random
import re

import pytest

from constrain.errors import UnsupportedSchemaError
from constrain.vllm.structural_tag import StructuralTagError, grammar_from_structural_tag

INT = r"-?(?:0|[1-9][0-9]*)"


def _tag(fmt) -> str:
    return json.dumps({"type": "structural_tag", "format": fmt})


def _int_tag(begin: str, end: str) -> dict:
    return {"type": "tag", "begin": begin, "end": end,
            "content": {"type": "json_schema", "json_schema": {"type": "integer"}}}  # fmt: skip


def _agrees(grammar, oracle: str, pieces: list[str], seed: int, n: int = 1500) -> None:
    rng = random.Random(seed)
    texts = {"".join(rng.choice(pieces) for _ in range(rng.randrange(7))) for _ in range(n)}
    for text in sorted(texts):
        assert grammar.matches(text) == bool(re.fullmatch(oracle, text)), repr(text)


def test_triggered_tags_agree_with_re():
    """Free text in which tags start at the trigger (tool_choice auto): a trigger never
    appears in the text but as the start of a whole tag."""
    grammar = grammar_from_structural_tag(_tag({
        "type": "triggered_tags", "triggers": ["<t"],
        "tags": [_int_tag("<t>", "</t>"), _int_tag("<tx>", "</tx>")]}))  # fmt: skip
    text = r"(?:(?!<t)[\s\S])*"
    oracle = f"{text}(?:<t(?:>{INT}</t>|x>{INT}</tx>){text})*"
    _agrees(grammar, oracle, ["a", "<t>", "</t>", "<tx>", "</tx>", "<", "t", ">", "1", "0", "-"], 1)


def test_triggered_tags_at_least_one_and_only_the_first():
    fmt = {"type": "triggered_tags", "triggers": ["<t>"], "tags": [_int_tag("<t>", "</t>")],
           "at_least_one": True, "stop_after_first": True}  # fmt: skip
    grammar = grammar_from_structural_tag(_tag(fmt))
    text = r"(?:(?!<t>)[\s\S])*"
    _agrees(grammar, f"{text}<t>{INT}</t>{text}", ["a", "<t>", "</t>", "<", "1", "-"], 2)


def test_tags_with_separator_agree_with_re():
    """tool_choice required in the hermes format: one or more calls, nothing else."""
    grammar = grammar_from_structural_tag(_tag({
        "type": "tags_with_separator", "separator": ",", "at_least_one": True,
        "tags": [_int_tag("<a>", "</a>"), _int_tag("<b>", "</b>")]}))  # fmt: skip
    call = f"(?:<a>{INT}</a>|<b>{INT}</b>)"
    _agrees(grammar, f"{call}(?:,{call})*", ["<a>", "</a>", "<b>", "</b>", ",", "1", "0"], 3)


def test_any_text_in_a_tag_ends_at_the_first_end():
    grammar = grammar_from_structural_tag(_tag({"type": "sequence", "elements": [
        {"type": "tag", "begin": "<think>", "content": {"type": "any_text"}, "end": "</think>"},
        {"type": "const_string", "value": "ok"}]}))  # fmt: skip
    oracle = r"<think>(?:(?!</think>)[\s\S])*</think>ok"
    _agrees(grammar, oracle, ["<think>", "</think>", "</thin", "k>", "ok", "a", "<"], 4)


def test_sequence_or_repeat_regex():
    grammar = grammar_from_structural_tag(_tag({"type": "sequence", "elements": [
        {"type": "or", "elements": [{"type": "const_string", "value": "x"},
                                    {"type": "regex", "pattern": "[0-9]{2}"}]},
        {"type": "repeat", "min": 1, "max": 2, "content": {"type": "const_string", "value": "-"}},
        {"type": "optional", "content": {"type": "regex", "pattern": "y*"}}]}))  # fmt: skip
    _agrees(grammar, r"(?:x|[0-9]{2})-{1,2}y*", ["x", "1", "2", "-", "y", "z"], 5)


def test_json_arguments_are_enforced_and_objects_closed():
    """A tool's parameters inside a tag: every keyword enforced; objects that say nothing
    about other properties admit none (narrower, every output valid)."""
    parameters = {"type": "object", "required": ["city"],
                  "properties": {"city": {"type": "string", "maxLength": 5}}}  # fmt: skip
    grammar = grammar_from_structural_tag(_tag({"type": "tag", "begin": "<c>", "end": "</c>",
        "content": {"type": "json_schema", "json_schema": parameters}}))  # fmt: skip
    assert grammar.matches('<c>{"city": "Paris"}</c>')
    assert not grammar.matches('<c>{"city": "London"}</c>')  # maxLength
    assert not grammar.matches('<c>{}</c>')  # required
    assert not grammar.matches('<c>{"city": "Paris", "x": 1}</c>')  # closed


@pytest.mark.parametrize(
    ("fmt", "error", "says"),
    [
        ({"type": "token", "token": 5}, StructuralTagError, "'token' format is not supported (at format)"),
        ({"type": "sequence", "elements": [{"type": "any_text"}, {"type": "const_string", "value": "x"}]},
         StructuralTagError, "at format.elements[0]"),
        ({"type": "tag", "begin": "<a>", "end": 3, "content": {"type": "const_string", "value": "x"}},
         StructuralTagError, "end must be"),
        ({"type": "json_schema", "json_schema": {"type": "array", "uniqueItems": True}},
         StructuralTagError, "uniqueItems"),
        ({"type": "json_schema", "json_schema": {"minLength": "x"}}, UnsupportedSchemaError, "minLength"),
        ({"type": "triggered_tags", "triggers": ["<x>"], "tags": [_int_tag("<a>", "</a>")]},
         StructuralTagError, "start with a trigger (at format.tags[0])"),
    ],
)  # fmt: skip
def test_what_is_not_read_is_refused_naming_where(fmt, error, says):
    with pytest.raises(error) as caught:
        grammar_from_structural_tag(_tag(fmt))
    assert says in str(caught.value)


def test_not_a_structural_tag():
    for text in ("{", "[]", '{"type": "other"}'):
        with pytest.raises(StructuralTagError):
            grammar_from_structural_tag(text)
