"""`constrain serve` end to end: the official `openai` client against live servers on
127.0.0.1 with the bundled model, every answer checked by an independent oracle (`jsonschema`,
`json`, `re`, lark, the set of choices), every request bounded in tokens and time.

The chat templates that exercise tool calls and thinking are written in tests/chat_templates.py
in each family's documented format and set on a copy of the bundled tokenizer.
"""

from __future__ import annotations

import concurrent.futures
import json
import re
import time

import httpx
import pytest
from chat_templates import TEMPLATES, THINKING_TEMPLATE, TOOLS
from jsonschema import Draft202012Validator
from served import NAME, PERSON, client, with_template

openai = pytest.importorskip("openai")
uvicorn = pytest.importorskip("uvicorn")

from constrain import serve  # noqa: E402

ASK_PERSON = [{"role": "user", "content": "Describe a person as JSON."}]


def serving(model, **options):
    return serve.serving(model, name=NAME, **options)


@pytest.fixture(scope="module")
def url(smollm):
    with serving(smollm, max_tokens=96, timeout=60) as base:
        yield base


def test_json_schema_response_validates(url):
    c = client(url)
    for temperature, seed in ((0.0, None), (1.0, 7)):
        r = c.chat.completions.create(
            model=NAME,
            messages=ASK_PERSON,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "person", "schema": PERSON, "strict": True},
            },
            max_tokens=80,
            temperature=temperature,
            seed=seed,
            n=2,
        )
        assert len(r.choices) == 2 and [ch.index for ch in r.choices] == [0, 1]
        for choice in r.choices:
            assert choice.finish_reason == "stop"
            Draft202012Validator(PERSON).validate(json.loads(choice.message.content))
        assert r.usage.completion_tokens > 0 and r.usage.prompt_tokens > 0


def test_json_object_parses(url):
    r = client(url).chat.completions.create(
        model=NAME,
        messages=[{"role": "user", "content": "A JSON object about cats."}],
        response_format={"type": "json_object"},
        max_tokens=64,
        temperature=0,
    )
    assert isinstance(json.loads(r.choices[0].message.content), dict)


def test_regex_grammar_and_choices_extensions_hold(url):
    import lark

    c = client(url)
    ask = [{"role": "user", "content": "Answer."}]
    pattern = r"[A-Z][a-z]{2,8}-\d{3}"
    r = c.chat.completions.create(
        model=NAME, messages=ask, max_tokens=20, temperature=1.0, seed=3,
        extra_body={"regex": pattern},
    )  # fmt: skip
    assert re.fullmatch(pattern, r.choices[0].message.content)
    grammar = 'start: "(" NUMBER " + " NUMBER ")"\nNUMBER: /[0-9]{1,3}/\n'
    r = c.chat.completions.create(
        model=NAME, messages=ask, max_tokens=20, temperature=1.0, seed=4,
        extra_body={"grammar": grammar},
    )  # fmt: skip
    lark.Lark(grammar).parse(r.choices[0].message.content)
    options = ["yes", "no", "it depends"]
    r = c.chat.completions.create(
        model=NAME, messages=ask, max_tokens=10, temperature=1.0, seed=5,
        extra_body={"choices": options},
    )  # fmt: skip
    assert r.choices[0].message.content in options


def test_streamed_deltas_join_to_the_greedy_text(url):
    c = client(url)
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
    kwargs = dict(model=NAME, messages=ASK_PERSON, response_format=fmt, max_tokens=60,
                  temperature=0)  # fmt: skip
    whole = c.chat.completions.create(**kwargs).choices[0]
    chunks = list(c.chat.completions.create(stream=True, **kwargs))
    pieces = [ch.choices[0].delta.content for ch in chunks if ch.choices[0].delta.content]
    assert len(pieces) > 3  # streamed, not sent at the end
    assert "".join(pieces) == whole.message.content
    assert chunks[-1].choices[0].finish_reason == whole.finish_reason
    # completions too, and the SSE stream ends with [DONE]
    text = c.completions.create(model=NAME, prompt="Once upon a time", max_tokens=24,
                                temperature=0).choices[0].text  # fmt: skip
    streamed = c.completions.create(model=NAME, prompt="Once upon a time", max_tokens=24,
                                    temperature=0, stream=True)  # fmt: skip
    assert "".join(ch.choices[0].text for ch in streamed) == text
    with httpx.stream("POST", f"{url}/v1/completions", json={
        "model": NAME, "prompt": "Hi", "max_tokens": 4, "stream": True,
    }, timeout=60) as response:  # fmt: skip
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"


def test_logprobs(url):
    r = client(url).chat.completions.create(
        model=NAME, messages=ASK_PERSON, max_tokens=12, temperature=0, logprobs=True,
        top_logprobs=3, response_format={"type": "json_object"},
    )  # fmt: skip
    content = r.choices[0].logprobs.content
    assert "".join(t.token for t in content) == r.choices[0].message.content
    for t in content:
        assert t.logprob <= 0 and len(t.top_logprobs) == 3
        assert t.top_logprobs[0].logprob >= t.top_logprobs[-1].logprob


def test_bad_requests_are_400s_naming_the_field(url):
    c = client(url)
    bad = {"type": "object", "properties": {"a": {"type": "string", "pattern": "(?<=x)y"}}}
    with pytest.raises(openai.BadRequestError) as err:
        c.chat.completions.create(
            model=NAME, messages=ASK_PERSON, max_tokens=8,
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": bad}},
        )  # fmt: skip
    e = err.value.body
    assert e["param"] == "response_format.json_schema.schema/properties/a/pattern" or (
        e["param"].startswith("response_format.json_schema.schema/properties/a")
    )
    assert "pattern" in e["message"] and "/properties/a" in e["message"]
    for extra, param in (
        ({"frequency_penalty": 0.5}, "frequency_penalty"),
        ({"unknown_thing": 1}, "unknown_thing"),
        ({"regex": "(", "choices": ["a"]}, "choices"),  # the second of two constraints
        ({"regex": "a(b"}, "regex"),
        ({"sampler": "beam"}, "sampler"),
        ({"max_tokens": 0}, "max_tokens"),
    ):
        with pytest.raises(openai.BadRequestError) as err:
            c.chat.completions.create(model=NAME, messages=ASK_PERSON, extra_body=extra)
        assert err.value.body["param"] == param, extra
    with pytest.raises(openai.NotFoundError):
        c.chat.completions.create(model="gpt-4", messages=ASK_PERSON, max_tokens=4)


def test_models_health_and_metrics(url):
    assert client(url).models.list().data[0].id == NAME
    assert httpx.get(f"{url}/health").json()["status"] == "ok"
    text = httpx.get(f"{url}/metrics").text
    for name in ("constrain_requests_total", "constrain_queue_depth",
                 "constrain_completion_tokens_total", "constrain_time_to_first_token_seconds",
                 "constrain_compile_cache_hits_total", "constrain_constraint_seconds_total"):  # fmt: skip
        assert re.search(rf"^{name}(_count)? \d", text, re.M), name


def test_16_concurrent_clients_each_get_their_own_answer(url):
    """Each client asks for a text naming its own index: a mixed-up, lost or duplicated
    answer fails."""
    c = client(url)

    def ask(i: int) -> str:
        r = c.chat.completions.create(
            model=NAME, messages=[{"role": "user", "content": f"Ticket {i}?"}], max_tokens=24,
            temperature=1.0, seed=i, extra_body={"regex": rf"ticket-{i}: [a-z]{{1,10}}"},
        )  # fmt: skip
        assert r.choices[0].finish_reason == "stop"
        return r.choices[0].message.content

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(ask, range(16)))
    for i, text in enumerate(answers):
        assert re.fullmatch(rf"ticket-{i}: [a-z]{{1,10}}", text), (i, text)
    health = httpx.get(f"{url}/health").json()
    assert health["running"] == 0 and health["sequences_in_flight"] == 0


def test_client_leaving_mid_stream_frees_its_sequence(url):
    with httpx.stream("POST", f"{url}/v1/completions", json={
        "model": NAME, "prompt": "Write a long story.", "max_tokens": 90, "stream": True,
        "temperature": 1.0, "seed": 1,
    }, timeout=60) as response:  # fmt: skip
        lines = response.iter_lines()
        received = [next(lines) for _ in range(6)]
    assert any(line.startswith("data: ") for line in received)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        health = httpx.get(f"{url}/health").json()
        if health["running"] == 0 and health["sequences_in_flight"] == 0:
            break
        time.sleep(0.1)
    assert health["running"] == 0 and health["sequences_in_flight"] == 0


def test_full_queue_answers_429_with_retry_after(smollm):
    with serving(smollm, max_running=1, max_queue=1, max_tokens=40) as base:
        body = {"model": NAME, "prompt": "Count:", "max_tokens": 40, "temperature": 1.0}
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            responses = list(pool.map(
                lambda _: httpx.post(f"{base}/v1/completions", json=body, timeout=60), range(4)
            ))  # fmt: skip
    codes = sorted(r.status_code for r in responses)
    assert codes.count(200) >= 2 and 429 in codes, codes
    refused = next(r for r in responses if r.status_code == 429)
    assert refused.headers["Retry-After"] and refused.json()["error"]["code"] == "queue_full"


@pytest.mark.parametrize(
    "family",  # one family in the fast suite (30 s each); all with -m slow
    [f if f == "hermes" else pytest.param(f, marks=pytest.mark.slow) for f in sorted(TEMPLATES)],
)
def test_tool_calls_in_each_family_format(smollm, family):
    model = with_template(smollm, TEMPLATES[family])
    with serving(model, max_tokens=80) as base:
        c = client(base)
        ask = [{"role": "user", "content": "What is the weather in Paris?"}]
        validators = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
        whole = None  # the first answer, which the streamed one must repeat
        for choice, parallel in (("required", True), ("required", False), (
            {"type": "function", "function": {"name": "add"}}, True,
        )):  # fmt: skip
            r = c.chat.completions.create(
                model=NAME, messages=ask, tools=TOOLS, tool_choice=choice, max_tokens=56,
                temperature=0, parallel_tool_calls=parallel,
            )  # fmt: skip
            message = r.choices[0].message
            whole = whole or message.tool_calls
            assert message.tool_calls, (family, choice, message)
            if not parallel:
                assert len(message.tool_calls) == 1
            for call in message.tool_calls:
                if isinstance(choice, dict):
                    assert call.function.name == "add"
                Draft202012Validator(validators[call.function.name]).validate(
                    json.loads(call.function.arguments)
                )
            if r.choices[0].finish_reason != "length":
                assert r.choices[0].finish_reason == "tool_calls"
        # streamed: the argument deltas join to the non-streamed calls (ids from the deltas)
        kwargs = dict(model=NAME, messages=ask, tools=TOOLS, tool_choice="required",
                      max_tokens=56, temperature=0)  # fmt: skip
        calls: dict[int, list] = {}
        for chunk in c.chat.completions.create(stream=True, **kwargs):
            for d in chunk.choices[0].delta.tool_calls or []:
                got = calls.setdefault(d.index, [d.id, d.function.name, ""])
                got[2] += d.function.arguments or ""
        assert [(n, a) for _, n, a in calls.values()] == [
            (t.function.name, t.function.arguments) for t in whole
        ], family
        assert all(i.startswith("call_") for i, _, _ in calls.values())
        # auto: text or calls, whichever the model starts, each well formed
        for seed in range(2):
            r = c.chat.completions.create(
                model=NAME, messages=ask, tools=TOOLS, tool_choice="auto", max_tokens=32,
                temperature=1.0, seed=seed,
            )  # fmt: skip
            message = r.choices[0].message
            assert (message.content is None) == bool(message.tool_calls)
            for call in message.tool_calls or []:
                Draft202012Validator(validators[call.function.name]).validate(
                    json.loads(call.function.arguments)
                )
        # a conversation carrying a call and its result renders and answers
        history = [*ask, {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_1", "type": "function", "function": {
                "name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'},
        }]}, {"role": "tool", "tool_call_id": "call_1", "content": "18 degrees"}]  # fmt: skip
        if family == "hermes":
            r = c.chat.completions.create(
                model=NAME, messages=history, tools=TOOLS, tool_choice="none", max_tokens=12,
                temperature=0,
            )  # fmt: skip
            assert r.choices[0].message.content and not r.choices[0].message.tool_calls


def test_tool_calls_without_template_support_use_the_default_format(url):
    r = client(url).chat.completions.create(
        model=NAME, messages=[{"role": "user", "content": "Add 2 and 3."}], tools=TOOLS,
        tool_choice="required", max_tokens=60, temperature=0, parallel_tool_calls=False,
    )  # fmt: skip
    (call,) = r.choices[0].message.tool_calls
    assert call.function.name in {"get_weather", "add"} and call.id.startswith("call_")
    json.loads(call.function.arguments)


def test_thinking_template_returns_reasoning_and_valid_content(smollm):
    model = with_template(smollm, THINKING_TEMPLATE)
    with serving(model, max_tokens=120) as base:
        c = client(base)
        fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
        r = c.chat.completions.create(
            model=NAME, messages=ASK_PERSON, response_format=fmt, max_tokens=120,
            temperature=0, extra_body={"max_reasoning_tokens": 30},
        )  # fmt: skip
        message = r.choices[0].message
        reasoning = message.model_extra["reasoning_content"]
        assert isinstance(reasoning, str) and reasoning and "<think>" not in reasoning
        Draft202012Validator(PERSON).validate(json.loads(message.content))
        assert r.choices[0].finish_reason == "stop"
        thought_tokens = len(model.tokenizer.encode(reasoning, add_special_tokens=False))
        assert thought_tokens <= 30 + 2  # the budget (re-tokenizing may differ slightly)
        # streamed: reasoning deltas first, then the content deltas
        chunks = list(c.chat.completions.create(
            model=NAME, messages=ASK_PERSON, response_format=fmt, max_tokens=120,
            temperature=0, extra_body={"max_reasoning_tokens": 30}, stream=True,
        ))  # fmt: skip
        content = "".join(ch.choices[0].delta.content or "" for ch in chunks)
        assert content == message.content
        thought = "".join(
            (ch.choices[0].delta.model_extra or {}).get("reasoning_content") or "" for ch in chunks
        )
        assert thought == reasoning  # the deltas join to exactly the whole answer's
        with pytest.raises(openai.BadRequestError) as err:
            c.chat.completions.create(
                model=NAME, messages=ASK_PERSON, max_tokens=20,
                extra_body={"max_reasoning_tokens": 20},
            )  # fmt: skip
        assert err.value.body["param"] == "max_reasoning_tokens"


def test_constrain_serve_command_serves():
    """The command line's server, in a child process as users run it."""
    with serve.spawned(name="cli-model", max_tokens=16, max_running=4) as (base, pid):
        assert pid > 0
        c = client(base)
        assert [m.id for m in c.models.list().data] == ["cli-model"]
        r = c.completions.create(model="cli-model", prompt="Digits:", temperature=0,
                                 extra_body={"regex": r"[0-9]{3}"})  # fmt: skip
        assert re.fullmatch(r"[0-9]{3}", r.choices[0].text)


@pytest.mark.parametrize(
    "body, param",
    [
        ({"messages": [{"role": "user"}]}, "messages[0].content"),
        ({"messages": "hello"}, "messages"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
         "messages[0].content[0]"),
        ({"messages": [{"role": "assistant", "content": None, "tool_calls": [5]}]},
         "messages[0].tool_calls[0]"),
        ({"messages": [{"role": "user", "content": "x"}], "n": 50}, "n"),
        ({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}, "temperature"),
        ({"messages": [{"role": "user", "content": "x"}], "grammar": 'start: "a" nowhere'},
         "grammar"),
        ({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function",
          "function": {"name": "bad name!"}}]}, "tools[0].function.name"),
    ],
)  # fmt: skip
def test_malformed_bodies_are_400s_naming_the_field(url, body, param):
    r = httpx.post(f"{url}/v1/chat/completions", json={"model": NAME, **body}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
