"""Properties of served answers over random requests (fixed seeds): random schemas from the
shared JSONSchemaBench data (the repository's example schemas when it is absent), random
`stop` strings and `max_tokens` from 1 to 64, with and without tool calls. Whatever the
request, an answer that says it finished ("stop", "tool_calls") validates under its schema
(`jsonschema`, formats checked), every cut answer says "length", and a request that cannot
be served is a 400 naming its field; never invalid output reported as complete.
"""

from __future__ import annotations

import collections
import concurrent.futures
import json
import random
import time
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from served import NAME, client

openai = pytest.importorskip("openai")
pytest.importorskip("uvicorn")

from constrain import schemas as example_schemas  # noqa: E402
from constrain import serve  # noqa: E402
from constrain.bench.jsonschemabench import DATA  # noqa: E402

CASES = 16
STOP_CHARS = [",", '"', "}", "]", ":", " ", "\n", "a", "e", "1", "0", "na", '",', "}\n"]


def schema_pool(rng: random.Random, size: int) -> list[dict]:
    """Small schemas (under 1.5 KB of JSON) from the shared data, else the examples."""
    files = sorted(Path(DATA).glob("*/*.json")) if Path(DATA).is_dir() else []
    files = [f for f in files if f.stat().st_size < 1500]
    if not files:
        files = [example_schemas.path(n) for n in example_schemas.names()]
    return [json.loads(f.read_text()) for f in rng.sample(files, min(size, len(files)))]


def validator(schema):
    return Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)


@pytest.fixture(scope="module")
def url(smollm):
    with serve.serving(smollm, name=NAME, max_tokens=64, timeout=60, max_running=8) as base:
        yield base


def ask(url: str, case: int, schemas: list[dict]) -> tuple[dict, dict, object]:
    """One random request (its body, its schema) and its response or BadRequestError."""
    rng = random.Random(case)
    schema = rng.choice(schemas)
    body: dict = {
        "model": NAME,
        "messages": [{"role": "user", "content": "Answer in JSON."}],
        "max_tokens": rng.randint(1, 64),
        "temperature": 1.0,
        "seed": case,
    }
    if rng.random() < 0.7:
        body["stop"] = rng.sample(STOP_CHARS, rng.randint(1, 3))
    if case % 3 == 2 and isinstance(schema, dict) and schema.get("type") == "object":
        body["tools"] = [{"type": "function", "function": {"name": "f", "parameters": schema}}]
        body["tool_choice"] = rng.choice(["required", "auto"])
    else:
        body["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": "x", "schema": schema}}  # fmt: skip
    try:
        return body, schema, client(url, retries=8).chat.completions.create(**body)
    except openai.BadRequestError as exc:
        return body, schema, exc


def test_finished_answers_validate_and_cut_ones_say_length(url):
    schemas = schema_pool(random.Random(0), 40)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda case: ask(url, case, schemas), range(CASES)))
    finished = 0
    for body, schema, response in results:
        if isinstance(response, openai.BadRequestError):
            error = response.body
            assert error["param"], error  # names what could not be served
            continue
        choice = response.choices[0]
        assert choice.finish_reason in ("stop", "length", "tool_calls"), body
        tokens = response.usage.completion_tokens
        assert tokens <= body["max_tokens"], (body, tokens)
        if choice.finish_reason == "length":
            continue
        finished += 1
        if "tools" in body and choice.message.tool_calls:
            assert choice.finish_reason == "tool_calls"
            for call in choice.message.tool_calls:
                validator(schema).validate(json.loads(call.function.arguments))
        elif "tools" not in body:
            assert choice.finish_reason == "stop"
            validator(schema).validate(json.loads(choice.message.content))
    assert finished >= CASES // 4  # the property is not vacuous


# -- mutated requests -------------------------------------------------------------------------

MUTATED = 24
PERSON_TOOL = {"type": "function", "function": {"name": "person", "parameters": {
    "type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                     "age": {"type": "integer"}},
    "required": ["name", "age"]}}}  # fmt: skip
BASES = [
    ("chat", {"messages": [{"role": "user", "content": "A person as JSON."}], "max_tokens": 24,
              "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema":
                                  PERSON_TOOL["function"]["parameters"]}}}),  # fmt: skip
    ("chat", {"messages": [{"role": "user", "content": "Call it."}], "max_tokens": 32,
              "tools": [PERSON_TOOL], "tool_choice": "required"}),  # fmt: skip
    ("chat", {"messages": [{"role": "user", "content": "Go."}], "max_tokens": 8,
              "regex": "[a-z]{1,8}", "stop": ["q"], "seed": 1}),  # fmt: skip
    ("completions", {"prompt": "Once", "max_tokens": 6, "choices": ["yes", "no"]}),
]
ODD_VALUES = [None, True, "false", 1.5, -1, 0, 2**64, 10**400, "x" * 2000, [], {}, [1] * 300,
              {"type": "string"}, [{"role": "user"}], "<|im_end|>", float("-0.0")]  # fmt: skip


def _paths(value, path=()):
    """Every path into `value` (keys of objects, indices of lists), the root excluded."""
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in items:
        yield (*path, key)
        if isinstance(item, (dict, list)):
            yield from _paths(item, (*path, key))


def mutated(rng: random.Random) -> tuple[str, dict]:
    """A valid base request with one to three fields dropped, retyped or enlarged."""
    kind, base = rng.choice(BASES)
    body = json.loads(json.dumps(base))
    for _ in range(rng.randint(1, 3)):
        paths = list(_paths(body))
        if not paths:
            break
        *parent_path, key = rng.choice(paths)
        parent = body
        for step in parent_path:
            parent = parent[step]
        way = rng.choice(["drop", "retype", "enlarge"])
        value = parent[key]
        if way == "drop" and isinstance(parent, dict):
            del parent[key]
        elif way == "enlarge" and isinstance(value, (str, list)) and value:
            parent[key] = value * rng.choice([2, 50, 400])
        elif way == "enlarge" and isinstance(value, int) and not isinstance(value, bool):
            parent[key] = value * rng.choice([10, 10**6, 10**30])
        else:
            parent[key] = rng.choice(ODD_VALUES)
    return kind, body


def check_answer(kind: str, body: dict, answer: dict) -> None:
    """A 200 answer that says it finished holds under the request's constraint (oracles:
    `jsonschema`, `re`, the choices)."""
    for choice in answer["choices"]:
        if choice["finish_reason"] == "length":
            continue
        if kind == "completions":
            if isinstance(body.get("choices"), list):
                assert choice["text"] in body["choices"], (body, choice)
            continue
        message = choice["message"]
        fmt = body.get("response_format")
        if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
            schema = fmt["json_schema"]["schema"]
            validator(schema).validate(json.loads(message["content"]))
        for call in message.get("tool_calls") or []:
            arguments = json.loads(call["function"]["arguments"])
            assert isinstance(arguments, dict), call
            tool = next(t for t in body["tools"] if t["function"]["name"] == call["function"]["name"])
            validator(tool["function"].get("parameters", {})).validate(arguments)
        if isinstance(body.get("regex"), str) and choice["finish_reason"] == "stop":
            import re

            assert re.fullmatch(body["regex"], message["content"]), (body, message)


def test_mutated_requests_are_never_a_500_nor_an_invalid_success(url):
    """Random requests mutated from valid ones (fields dropped, retyped, enlarged; fixed
    seeds) get a 4xx in OpenAI's shape or an answer that holds."""
    import httpx

    def send(case: int):
        kind, body = mutated(random.Random(1000 + case))
        path = "/v1/chat/completions" if kind == "chat" else "/v1/completions"
        raw = json.dumps(body, allow_nan=True)
        for _ in range(20):  # busy compiling others' schemas: retry as clients do
            response = httpx.post(url + path, content=raw, timeout=120,
                                  headers={"content-type": "application/json"})  # fmt: skip
            if response.status_code != 429:
                break
            time.sleep(float(response.headers["retry-after"]))
        return kind, body, response

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(send, range(MUTATED)))
    statuses = collections.Counter(r.status_code for _, _, r in results)
    for kind, body, response in results:
        assert response.status_code < 500, (body, response.text)
        if response.status_code == 200:
            check_answer(kind, body, response.json())
        else:
            error = response.json()["error"]
            assert error["message"] and error["type"] == "invalid_request_error", error
    assert statuses[200] >= MUTATED // 8 and len(statuses) > 1, statuses  # not vacuous
