"""vLLM's OpenAI server with the constrain backend, driven by the official `openai` client.

One server for the module (see `conftest.vllm_server`), as users start it. Every answer is
checked by an independent oracle: `jsonschema` (with formats) for schemas and tool arguments,
`re` for regexes, lark for a Lark grammar, membership for choices.
"""

from __future__ import annotations

import json
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jsonschema
import lark
import openai
import pytest

SCHEMAS = sorted((Path(__file__).parents[1] / "schemas").glob("*.json"))
ASK = [{"role": "user", "content": "Answer in JSON."}]
CHECKER = jsonschema.Draft202012Validator.FORMAT_CHECKER
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 20},
                       "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "add", "parameters": {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"], "additionalProperties": False}}},
]  # fmt: skip


@pytest.fixture(scope="module")
def client(vllm_server):
    return openai.OpenAI(base_url=vllm_server.url, api_key="unused", max_retries=0, timeout=120)


def _schema_answer(client, schema, seed, max_tokens=200, **extra):
    return client.chat.completions.create(
        model="smollm2", messages=ASK, seed=seed, temperature=1.0, max_tokens=max_tokens,
        response_format={"type": "json_schema",
                         "json_schema": {"name": "answer", "schema": schema, "strict": True}},
        **extra,
    )  # fmt: skip


def _valid(schema, text):
    jsonschema.validate(json.loads(text), schema, format_checker=CHECKER)


@pytest.mark.parametrize("path", SCHEMAS, ids=lambda p: p.stem)
def test_schemas_give_valid_json(client, path):
    schema = json.loads(path.read_text())
    for seed in range(2):
        answer = _schema_answer(client, schema, seed, max_tokens=400).choices[0]
        assert answer.finish_reason == "stop"
        _valid(schema, answer.message.content)


@pytest.mark.parametrize("max_tokens", [17, 20, 28])
def test_json_closes_within_max_tokens(client, max_tokens):
    """The request's budget reaches the grammar: a short max_tokens still ends in valid JSON
    with finish "stop" (vLLM's other backends cut it, finish "length"). The shortest answer
    is 16 tokens, then EOS: 17 is the least that fits."""
    schema = json.loads((Path(__file__).parents[1] / "schemas" / "person.json").read_text())
    for seed in range(3):
        answer = _schema_answer(client, schema, seed, max_tokens=max_tokens)
        assert answer.usage.completion_tokens <= max_tokens
        assert answer.choices[0].finish_reason == "stop"
        _valid(schema, answer.choices[0].message.content)


def test_json_object(client):
    answer = client.chat.completions.create(model="smollm2", messages=ASK, max_tokens=60,
                                            response_format={"type": "json_object"}, seed=3)
    assert answer.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(answer.choices[0].message.content), dict)


def test_regex(client):
    pattern = r"(19|20)[0-9]{2}-(0[1-9]|1[0-2])-[0-3][0-9]"
    for seed in range(3):
        answer = client.chat.completions.create(
            model="smollm2", messages=[{"role": "user", "content": "A date?"}], seed=seed,
            max_tokens=20, extra_body={"structured_outputs": {"regex": pattern}})
        assert re.fullmatch(pattern, answer.choices[0].message.content)


def test_choice(client):
    choices = ["positive", "negative", "neutral"]
    answer = client.chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": "Sentiment of 'great'?"}],
        max_tokens=10, extra_body={"structured_outputs": {"choice": choices}})
    assert answer.choices[0].message.content in choices


LARK = r"""
start: expr
expr: term (("+" | "-") term)*
term: NUMBER | "(" expr ")"
NUMBER: /[0-9]{1,3}/
"""


def test_lark_grammar(client):
    parser = lark.Lark(LARK)
    for seed in range(3):
        answer = client.chat.completions.create(
            model="smollm2", messages=[{"role": "user", "content": "Some arithmetic"}], seed=seed,
            max_tokens=40, extra_body={"structured_outputs": {"grammar": LARK}})
        choice = answer.choices[0]
        assert choice.finish_reason == "stop"
        parser.parse(choice.message.content)


def test_gbnf_grammar(client):
    gbnf = 'root ::= "x" [0-9]+ ("," "x" [0-9]+)*'
    answer = client.chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": "List"}], max_tokens=30,
        seed=1, extra_body={"structured_outputs": {"grammar": gbnf}})
    assert re.fullmatch(r"x[0-9]+(,x[0-9]+)*", answer.choices[0].message.content)


def _calls(answer):
    return [(c.function.name, json.loads(c.function.arguments))
            for c in answer.choices[0].message.tool_calls or []]  # fmt: skip


def test_tool_choice_required(client):
    parameters = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    for seed in range(3):
        answer = client.chat.completions.create(
            model="smollm2", messages=[{"role": "user", "content": "Weather in Paris?"}],
            tools=TOOLS, tool_choice="required", max_tokens=120, seed=seed)
        calls = _calls(answer)
        assert calls, answer
        for name, arguments in calls:
            jsonschema.validate(arguments, parameters[name])


def test_tool_choice_named(client):
    for seed in range(3):
        answer = client.chat.completions.create(
            model="smollm2", messages=[{"role": "user", "content": "Weather in Paris?"}],
            tools=TOOLS, tool_choice={"type": "function", "function": {"name": "add"}},
            max_tokens=60, seed=seed)
        [(name, arguments)] = _calls(answer)
        assert name == "add"
        jsonschema.validate(arguments, TOOLS[1]["function"]["parameters"])


def test_streaming_deltas_join_to_valid_json(client):
    schema = json.loads(SCHEMAS[0].read_text())
    stream = client.chat.completions.create(
        model="smollm2", messages=ASK, max_tokens=300, seed=5, stream=True,
        response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": schema}})
    deltas = [c.choices[0].delta.content or "" for c in stream if c.choices]
    assert len([d for d in deltas if d]) > 3
    _valid(schema, "".join(deltas))


def test_sixteen_concurrent_clients(client):
    schema = json.loads((Path(__file__).parents[1] / "schemas" / "person.json").read_text())
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda s: _schema_answer(client, schema, s, 120), range(16)))
    for answer in answers:
        assert answer.choices[0].finish_reason == "stop"
        _valid(schema, answer.choices[0].message.content)


def test_unsupported_schema_is_a_400_naming_the_keyword(client):
    with pytest.raises(openai.BadRequestError) as caught:
        _schema_answer(client, {"type": "object", "properties": {"a": {"minLength": "x"}}}, 0)
    message = str(caught.value)
    assert "minLength" in message and "/properties/a" in message


def test_too_large_schema_fails_alone_while_others_complete(client, vllm_server):
    """A schema needing more work than the compile budget is a 400 naming the budget, in
    bounded time, while requests in flight complete and the engine lives on."""
    schema = json.loads((Path(__file__).parents[1] / "schemas" / "person.json").read_text())
    huge = {"type": "object", "properties": {
        f"p{i}": {"type": "string", "pattern": f"^(a|b)*a(a|b){{{10 + i % 5}}}$"}
        for i in range(40)}, "required": [f"p{i}" for i in range(40)]}  # fmt: skip
    results: list = []

    def others():
        results.extend(_schema_answer(client, schema, s, 120) for s in range(3))

    thread = threading.Thread(target=others)
    thread.start()
    started = time.monotonic()
    with pytest.raises(openai.BadRequestError) as caught:
        _schema_answer(client, huge, 0)
    assert time.monotonic() - started < 60
    assert "CONSTRAIN_VLLM_COMPILE_FUEL" in str(caught.value) or "exceeds" in str(caught.value)
    thread.join(300)
    assert len(results) == 3
    for answer in results:
        _valid(schema, answer.choices[0].message.content)
    assert vllm_server.alive() and vllm_server.answers()


def _doubling(levels: int = 40) -> str:
    return "\n".join([f"root ::= a{levels}", 'a0 ::= "ab"']
                      + [f"a{i} ::= a{i - 1} a{i - 1}" for i in range(1, levels + 1)])


@pytest.mark.parametrize(
    "outputs, words",
    [
        ({"json": {"type": "array", "items": {"enum": [1, 2]}, "uniqueItems": True,
                   "minItems": 3}}, "admits no value"),
        ({"regex": "(" * 1000 + "a" + ")" * 1000}, "MAX_GROUP_DEPTH"),
        ({"json": {"type": "object"}, "whitespace_pattern": "[a-z ]{0,5}"}, "JSON whitespace"),
    ],
)  # fmt: skip
def test_hostile_constraints_are_a_400_naming_why(client, vllm_server, outputs, words):
    """The hostile classes the front-end check decides (an empty language, a regex nested
    too deep, whitespace that is not whitespace): a 400 saying why, and the engine serves on."""
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="smollm2", messages=ASK, max_tokens=8,
                                       extra_body={"structured_outputs": outputs})  # fmt: skip
    assert words in str(caught.value)
    assert not re.search(r"\b(Recursion|Attribute|Type|Key)Error\b", str(caught.value))
    assert vllm_server.alive() and vllm_server.answers()


@pytest.mark.parametrize(
    "grammar",
    [_doubling(), 'root ::= "' + "ab" * 100_000 + '"', 'root ::= "yes" <|im_start|> "no"'],
    ids=["rules doubling 40 times", "literal of 200 kB", "special token mid-text"],
)
def test_hostile_grammars_are_served_in_bounded_time(client, vllm_server, grammar):
    """Grammars whose work once ran away (rules that double, a long literal) or that name a
    special token mid-text: answered in bounded time (cut by max_tokens, or a 400 saying
    why), and the engine serves on."""
    started = time.monotonic()
    try:
        answer = client.chat.completions.create(
            model="smollm2", messages=ASK, max_tokens=8, temperature=0,
            extra_body={"structured_outputs": {"grammar": grammar}},
        )  # fmt: skip
        assert answer.choices[0].finish_reason in ("length", "stop")
    except openai.BadRequestError as refusal:
        assert "grammar" in str(refusal)
    assert time.monotonic() - started < 60
    assert vllm_server.alive() and vllm_server.answers()


def test_tool_choice_auto_calls_validate_or_text_is_free(client):
    """vLLM writes tool calling as a structural tag (triggered tags under "auto"): text, or
    calls whose arguments validate against the tool's parameters."""
    parameters = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    for seed in range(4):
        answer = client.chat.completions.create(
            model="smollm2", messages=[{"role": "user", "content": "Add 2 and 3 with a tool."}],
            tools=TOOLS, tool_choice="auto", max_tokens=80, seed=seed)
        for name, arguments in _calls(answer):
            jsonschema.validate(arguments, parameters[name])


def test_structural_tag_with_a_required_tag(client):
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}},
              "required": ["n"]}  # fmt: skip
    tag = {"type": "structural_tag", "format": {
        "type": "triggered_tags", "triggers": ["<n>"], "at_least_one": True,
        "stop_after_first": True,
        "tags": [{"type": "tag", "begin": "<n>", "end": "</n>",
                  "content": {"type": "json_schema", "json_schema": schema}}]}}  # fmt: skip
    for seed in range(3):
        answer = client.chat.completions.create(
            model="smollm2", messages=[{"role": "user", "content": "A number"}], seed=seed,
            max_tokens=60, extra_body={"structured_outputs": {"structural_tag": json.dumps(tag)}})
        text = answer.choices[0].message.content
        found = re.fullmatch(r"((?:(?!<n>)[\s\S])*)<n>(.*?)</n>((?:(?!<n>)[\s\S])*)", text,
                             re.DOTALL)  # fmt: skip
        assert found, text
        jsonschema.validate(json.loads(found.group(2)), schema)


def test_an_unsupported_structural_tag_is_a_400_naming_the_format(client):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="smollm2", messages=ASK, max_tokens=10,
            extra_body={"structured_outputs": {"structural_tag": json.dumps(
                {"type": "structural_tag", "format": {"type": "token", "token": 5}})}})
    assert "'token' format is not supported" in str(caught.value)
