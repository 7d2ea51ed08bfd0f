"""Properties of served answers over random requests (fixed seeds): random schemas from the
shared JSONSchemaBench data (the repository's example schemas when it is absent), random
`stop` strings and `max_tokens` from 1 to 64, with and without tool calls. Whatever the
request, an answer that says it finished ("stop", "tool_calls") validates under its schema
(`jsonschema`, formats checked), every cut answer says "length", and a request that cannot
be served is a 400 naming its field; never invalid output reported as complete.
"""

from __future__ import annotations

import concurrent.futures
import json
import random
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
        return body, schema, client(url).chat.completions.create(**body)
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
