"""Property test: satisfiable schemas under any sampling settings never dead-end or fail.

Random schemas (objects, arrays with unique items, enums, patterns, bounds, anyOf,
propertyNames) are crossed with random sampling settings (temperature, greedy, the token
sampler, top-p, top-k, min-p, typical, repetition penalty, seeds) and budgets, with the real
bundled model, through the library and through ``constrain serve``. Every answer is either
finished ("stop") and valid under `jsonschema`, or cut by its budget ("length") with the
reason; never an exception, a 500, or a "generation cannot continue" dead end. A schema
whose language is empty is not satisfiable: it is refused at compile, and skipped here.
"""

from __future__ import annotations

import json
import random

import httpx
import pytest
from jsonschema import Draft202012Validator

import constrain as cn
from constrain.options import TOKEN_SAMPLERS

CASES = 24  # per surface; each is one short generation with the bundled model
DEAD_END = "cannot continue"
WORDS = ["red", "green", "blue", "a b", "é", "x\"y"]


def random_schema(rng: random.Random, depth: int = 0) -> dict:
    """A random JSON Schema built from the keywords that can make a step a dead end: uniqueness,
    item and property counts, enums, bounds, patterns, alternatives."""
    kinds = ["integer", "number", "string", "enum", "boolean", "pattern"]
    if depth < 2:
        kinds += ["object", "object", "array", "array", "anyOf", "names"]
    kind = rng.choice(kinds)
    if kind == "integer":
        low = rng.randint(-50, 50)
        return {"type": "integer", "minimum": low, "maximum": low + rng.choice([0, 1, 9, 1000])}
    if kind == "number":
        return {"type": "number", "exclusiveMinimum": rng.choice([-1, 0, 0.5]), "maximum": 100}
    if kind == "string":
        low = rng.randint(0, 3)
        return {"type": "string", "minLength": low, "maxLength": low + rng.choice([0, 2, 12])}
    if kind == "enum":
        return {"enum": rng.sample(WORDS + [1, 2.5, None, True], rng.randint(1, 4))}
    if kind == "boolean":
        return {"type": "boolean"}
    if kind == "pattern":
        pattern = rng.choice([r"^[a-z]{2,5}$", r"^\d{3}-\d{2}$", r"^(ab|cd)+$", r"^[A-Z][a-z]*$"])
        return {"type": "string", "pattern": pattern}
    if kind == "array":
        items = random_schema(rng, depth + 1)
        schema = {"type": "array", "items": items, "minItems": rng.randint(0, 3)}
        schema["maxItems"] = schema["minItems"] + rng.randint(0, 3)
        if rng.random() < 0.5:
            schema["uniqueItems"] = True
        return schema
    if kind == "object":
        keys = rng.sample(["id", "name", "tags", "ok", "score"], rng.randint(1, 4))
        properties = {key: random_schema(rng, depth + 1) for key in keys}
        schema = {"type": "object", "properties": properties,
                  "required": rng.sample(keys, rng.randint(0, len(keys))),
                  "additionalProperties": rng.choice([False, True])}  # fmt: skip
        if rng.random() < 0.3:
            schema["minProperties"] = rng.randint(1, len(keys))
        return schema
    if kind == "names":
        return {"type": "object", "propertyNames": {"pattern": "^[a-z]{1,3}$"},
                "additionalProperties": {"type": "integer"}, "minProperties": rng.randint(1, 3),
                "maxProperties": 4}  # fmt: skip
    return {"anyOf": [random_schema(rng, depth + 1) for _ in range(rng.randint(2, 3))]}


def satisfiable_schemas(seed: int, count: int) -> list[dict]:
    """`count` random schemas whose language is not empty (the compiler decides emptiness)."""
    rng, out = random.Random(seed), []
    while len(out) < count:
        schema = random_schema(rng)
        try:
            cn.Grammar.from_json_schema(schema)
        except cn.EmptyLanguageError:
            continue
        out.append(schema)
    return out


def sampling_settings(rng: random.Random) -> dict:
    """Random settings in the server's field names (and a budget)."""
    settings = {"seed": rng.randrange(2**31), "max_tokens": rng.choice([3, 12, 40, 120]),
                "temperature": rng.choice([0.0, 0.3, 1.0, 1.8])}  # fmt: skip
    for field, values, chance in [
        ("top_p", [0.01, 0.3, 0.9], 0.5),
        ("top_k", [1, 2, 40], 0.4),
        ("min_p", [0.05, 0.5, 0.99], 0.3),
        ("repetition_penalty", [1.3, 5.0], 0.2),
    ]:  # fmt: skip
        if rng.random() < chance:
            settings[field] = rng.choice(values)
    return settings


def library_options(settings: dict, rng: random.Random) -> dict:
    """The same settings as `generate` options, with a random token sampler (and typical)."""
    processors = []
    if "top_p" in settings:
        processors.append(cn.TopP(settings["top_p"]))
    if "top_k" in settings:
        processors.append(cn.TopK(settings["top_k"]))
    if "min_p" in settings:
        processors.append(cn.MinP(settings["min_p"]))
    if "repetition_penalty" in settings:
        processors.append(cn.RepetitionPenalty(settings["repetition_penalty"]))
    if rng.random() < 0.2:
        processors.append(cn.Typical(rng.choice([0.2, 0.9])))
    greedy = settings["temperature"] == 0
    return dict(max_tokens=settings["max_tokens"], greedy=greedy, processors=processors,
                temperature=1.0 if greedy else settings["temperature"],
                sampler=rng.choice(TOKEN_SAMPLERS))  # fmt: skip


def check_answer(schema: dict, finish: str, text: str, reason: str, case) -> None:
    """Finished and valid, or cut by the budget: complete and valid (a number that could
    have gone on), or incomplete saying why, never a dead end."""
    assert finish in ("stop", "length"), (case, finish, text)
    if finish == "stop" or not reason:
        assert Draft202012Validator(schema).is_valid(json.loads(text)), (case, text)
    else:
        assert DEAD_END not in reason, (case, text, reason)


def test_library_answers_are_valid_or_cut_by_the_budget(smollm):
    rng = random.Random(57)
    for index, schema in enumerate(satisfiable_schemas(57, CASES)):
        settings = sampling_settings(rng)
        options = library_options(settings, rng)
        case = (index, schema, settings, options["sampler"])
        result = cn.generate(smollm, "Answer in JSON.", schema=schema, seed=settings["seed"],
                             **options)  # fmt: skip
        check_answer(schema, result.finish_reason, result.text, result.reason, case)


@pytest.fixture(scope="module")
def server_url():
    pytest.importorskip("uvicorn")
    from constrain import serve

    with serve.spawned(max_tokens=120) as (url, _):
        yield url


def test_server_answers_are_valid_or_cut_by_the_budget(server_url):
    rng = random.Random(58)
    for index, schema in enumerate(satisfiable_schemas(58, CASES)):
        settings = sampling_settings(rng)
        body = {"messages": [{"role": "user", "content": "Answer in JSON."}], **settings,
                "response_format": {"type": "json_schema",
                                    "json_schema": {"name": "answer", "schema": schema}}}  # fmt: skip
        response = httpx.post(f"{server_url}/v1/chat/completions", json=body, timeout=120)
        assert response.status_code == 200, (index, schema, settings, response.text)
        choice = response.json()["choices"][0]
        reason = choice.get("incomplete_reason", "")
        check_answer(schema, choice["finish_reason"], choice["message"]["content"], reason,
                     (index, schema, settings))  # fmt: skip
