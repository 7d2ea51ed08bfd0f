"""Streamed answers join to exactly the non-streamed ones, for every form and both APIs.

The same request (same seed) is sent twice, one after the other so that it decodes alone both
times: once whole, once streamed, through the official `openai` client. The streamed chunks,
joined as the SDK's helpers join them, must give exactly the whole answer: the content, the
reasoning, every tool call (its name and arguments, in order: a call the answer drops, such
as one repeating an earlier call, is never streamed), the finish reason, and with
`stream_partial` the last value equal to the content's. Over chat templates of three tool
formats, tool choices `auto`, `required` and a named tool, random tool sets and seeds, random
schemas for content, on chat completions and on the Responses API.
"""

from __future__ import annotations

import json
import random

import pytest
from chat_templates import TEMPLATES, TOOLS, WEATHER
from served import NAME, PERSON, client, with_template

pytest.importorskip("openai")
pytest.importorskip("uvicorn")

from constrain.serve import serving  # noqa: E402

ASK = [{"role": "user", "content": "What is the weather in Paris, and what is 2 + 3?"}]
EXTRA_TOOLS = [
    {"type": "function", "function": {"name": "lookup", "parameters": {
        "type": "object", "properties": {"query": {"type": "string", "maxLength": 16},
        "limit": {"type": "integer", "minimum": 1, "maximum": 5}}, "required": ["query"]}}},
    {"type": "function", "function": {"name": "convert", "parameters": {
        "type": "object", "properties": {"value": {"type": "number"},
        "to": {"enum": ["km", "mi"]}}, "required": ["value", "to"]}}},
    {"type": "function", "function": {"name": "tags", "parameters": {
        "type": "object", "properties": {"items": {"type": "array", "maxItems": 3,
        "items": {"type": "string", "maxLength": 6}}}, "required": ["items"]}}},
]  # fmt: skip
SCHEMAS = [
    PERSON,
    {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "uniqueItems": True},
    {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": "number"}}},
    WEATHER,
]


def joined_chat(chunks) -> dict:
    """A streamed chat answer joined as the SDK's stream helpers join it."""
    content, reasoning, calls, finish, partial = "", "", {}, None, None
    for chunk in chunks:
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        delta = choice.delta
        content += delta.content or ""
        reasoning += getattr(delta, "reasoning_content", None) or ""
        for d in delta.tool_calls or []:
            call = calls.setdefault(d.index, {"id": d.id, "name": "", "arguments": ""})
            call["name"] += (d.function.name or "") if d.function else ""
            call["arguments"] += (d.function.arguments or "") if d.function else ""
        if (delta.model_extra or {}).get("partial") is not None:
            partial = delta.model_extra["partial"]
        finish = choice.finish_reason or finish
    return {"content": content or None, "reasoning": reasoning or None, "finish": finish,
            "calls": [(c["name"], c["arguments"]) for _, c in sorted(calls.items())],
            "partial": partial}  # fmt: skip


def whole_chat(response) -> dict:
    choice = response.choices[0]
    message = choice.message
    return {"content": message.content, "finish": choice.finish_reason,
            "reasoning": (message.model_extra or {}).get("reasoning_content"),
            "calls": [(t.function.name, t.function.arguments) for t in message.tool_calls or []],
            "partial": None}  # fmt: skip


def output_items(items) -> list[tuple]:
    """A Responses output, as (type, text or name and arguments)."""
    out = []
    for item in items:
        if item.type == "message":
            out.append(("message", "".join(part.text for part in item.content)))
        elif item.type == "function_call":
            out.append(("function_call", item.name, item.arguments))
        else:
            out.append((item.type,))
    return out


def joined_responses(events) -> tuple[list[tuple], list[tuple], str]:
    """(the output the streamed deltas build, the output the final event carries, status)."""
    texts, args, names, order = {}, {}, {}, []
    final = None
    for event in events:
        if event.type == "response.output_item.added":
            order.append(event.output_index)
            if event.item.type == "function_call":
                names[event.output_index] = event.item.name
        elif event.type == "response.output_text.delta":
            texts[event.output_index] = texts.get(event.output_index, "") + event.delta
        elif event.type == "response.function_call_arguments.delta":
            args[event.output_index] = args.get(event.output_index, "") + event.delta
        elif event.type in ("response.completed", "response.incomplete"):
            final = event.response
    built = [("function_call", names[i], args.get(i, "")) if i in names
             else ("message", texts.get(i, "")) for i in order]  # fmt: skip
    return built, output_items(final.output), final.status


def _tools(rng: random.Random) -> list[dict]:
    return rng.sample(TOOLS + EXTRA_TOOLS, rng.randint(1, 4))


@pytest.fixture(scope="module", params=[
    "bundled", pytest.param("hermes", marks=pytest.mark.slow),
    pytest.param("llama3", marks=pytest.mark.slow), pytest.param("mistral", marks=pytest.mark.slow),
])  # fmt: skip
def family_url(request, smollm):
    """The bundled model under its own chat template, or a test template of a tool format."""
    family = request.param
    model = smollm if family == "bundled" else with_template(smollm, TEMPLATES[family])
    with serving(model, name=NAME, max_tokens=96) as base:
        yield family, base


def test_a_repeated_call_is_neither_answered_nor_streamed(family_url):
    """Greedy, this model calls the one tool twice the same way; the answer drops the repeat
    (the same work again), and the stream must not have sent it: once it did, and the SDK's
    helpers ran the tool twice."""
    family, url = family_url
    c = client(url)
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    kwargs = dict(model=NAME, messages=[{"role": "user", "content": "What is the weather in "
                  "Paris?"}], tools=tools, tool_choice="required", temperature=0, max_tokens=64)
    whole = whole_chat(c.chat.completions.create(**kwargs))
    assert joined_chat(c.chat.completions.create(stream=True, **kwargs)) == whole, family
    assert len(set(whole["calls"])) == len(whole["calls"])


@pytest.mark.parametrize("seed", range(2))
def test_streamed_tool_calls_are_the_whole_answers(family_url, seed):
    family, url = family_url
    c = client(url)
    rng = random.Random(seed)
    tools = _tools(rng)
    named = {"type": "function", "function": {"name": rng.choice(tools)["function"]["name"]}}
    for choice, parallel in (("required", True), ("required", False), ("auto", True),
                             (named, True)):  # fmt: skip
        kwargs = dict(model=NAME, messages=ASK, tools=tools, tool_choice=choice,
                      parallel_tool_calls=parallel, max_tokens=rng.choice([48, 96]),
                      temperature=1.0, seed=seed)  # fmt: skip
        whole = whole_chat(c.chat.completions.create(**kwargs))
        streamed = joined_chat(c.chat.completions.create(stream=True, **kwargs))
        assert streamed == whole, (family, choice, parallel, tools)


@pytest.mark.parametrize("seed", range(2))
def test_streamed_responses_are_the_whole_answers(family_url, seed):
    family, url = family_url
    c = client(url)
    rng = random.Random(100 + seed)
    tools = [{"type": "function", **t["function"]} for t in _tools(rng)]
    for choice in ("required", "auto", {"type": "function", "name": tools[0]["name"]}, None):
        kwargs = dict(model=NAME, input=ASK[0]["content"], max_output_tokens=rng.choice([48, 96]),
                      temperature=1.0, extra_body={"seed": seed})  # fmt: skip
        if choice is not None:
            kwargs.update(tools=tools, tool_choice=choice)
        whole = c.responses.create(**kwargs)
        built, final, status = joined_responses(c.responses.create(stream=True, **kwargs))
        assert built == final == output_items(whole.output), (family, choice, tools)
        assert status == whole.status


@pytest.mark.parametrize("seed", range(3))
def test_streamed_content_and_partial_values_are_the_whole_answers(family_url, seed):
    _, url = family_url
    c = client(url)
    rng = random.Random(200 + seed)
    schema = rng.choice(SCHEMAS)
    kwargs = dict(model=NAME, messages=[{"role": "user", "content": "Answer in JSON."}],
                  max_tokens=rng.choice([12, 40, 80]), temperature=1.0, seed=seed,
                  response_format={"type": "json_schema",
                                   "json_schema": {"name": "x", "schema": schema}})  # fmt: skip
    whole = whole_chat(c.chat.completions.create(**kwargs))
    streamed = joined_chat(c.chat.completions.create(stream=True, **kwargs))
    partial = joined_chat(c.chat.completions.create(stream=True, extra_body={
        "stream_partial": True}, **kwargs))  # fmt: skip
    assert {**streamed, "partial": None} == whole
    assert {**partial, "partial": None} == whole
    if whole["finish"] == "stop":
        assert partial["partial"] == json.loads(whole["content"])
