"""The clients people point at OpenAI-compatible servers, against `constrain serve` with the
bundled model: the official `openai` SDK (its own message objects sent back, `model_dump()`,
`parse()` with pydantic models and `pydantic_function_tool`, the streaming helper),
LangChain's `ChatOpenAI` (`bind_tools` and the ToolMessage loop, `with_structured_output` in
its three methods) and `instructor` (TOOLS and JSON_SCHEMA modes, and its retry path, which
sends the failed call back). Every answer is checked with `jsonschema` or the client's own
pydantic validation; every request is bounded in tokens and time.
"""

from __future__ import annotations

import json

import pytest
from chat_templates import TEMPLATES, TOOLS
from jsonschema import Draft202012Validator
from pydantic import BaseModel, Field, field_validator
from served import NAME, client, with_template

openai = pytest.importorskip("openai")
pytest.importorskip("uvicorn")

from constrain import serve  # noqa: E402

ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
VALIDATORS = {t["function"]["name"]: Draft202012Validator(t["function"]["parameters"]) for t in TOOLS}


class Person(BaseModel):
    name: str = Field(max_length=20)
    age: int = Field(ge=0, le=120)


class GetWeather(BaseModel):
    """The weather in a city."""

    city: str = Field(max_length=20)


@pytest.fixture(scope="module")
def url(smollm):
    with serve.serving(smollm, name=NAME, max_tokens=96, timeout=60) as base:
        yield base


def check_calls(message) -> None:
    assert message.tool_calls
    for call in message.tool_calls:
        VALIDATORS[call.function.name].validate(json.loads(call.function.arguments))


# -- the openai SDK ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "family",
    ["smollm2", *(pytest.param(f, marks=pytest.mark.slow) for f in sorted(TEMPLATES))],
)  # the families' rendering is checked fast in test_serve_conversation.py
def test_sdk_tool_loop_sends_calls_and_results_back(smollm, family):
    """The SDK's own message object, then its `model_dump()`, go back with the tool results;
    the model reads its call (the prompt grows by it) and answers."""
    model = smollm if family == "smollm2" else with_template(smollm, TEMPLATES[family])
    with serve.serving(model, name=NAME, max_tokens=64, timeout=60) as base:
        c = client(base)
        first = c.chat.completions.create(
            model=NAME, messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=48,
            temperature=0, parallel_tool_calls=False,
        )  # fmt: skip
        message = first.choices[0].message
        assert first.choices[0].finish_reason == "tool_calls"
        check_calls(message)
        (call,) = message.tool_calls
        result = {"role": "tool", "tool_call_id": call.id, "content": "18 degrees, sunny"}
        for sent in (message, message.model_dump(), message.model_dump(exclude_none=True)):
            second = c.chat.completions.create(
                model=NAME, messages=[*ASK, sent, result], tools=TOOLS, max_tokens=12,
                temperature=0,
            )  # fmt: skip
            answer = second.choices[0]
            assert answer.message.content or answer.message.tool_calls
            grown = second.usage.prompt_tokens - first.usage.prompt_tokens
            call_tokens = len(model.tokenizer.encode(call.function.arguments))
            assert grown > call_tokens, (family, grown)  # the call is in the prompt


def test_sdk_parse_with_pydantic_models(url):
    c = client(url)
    parsed = c.chat.completions.parse(
        model=NAME, messages=[{"role": "user", "content": "Describe a person."}],
        response_format=Person, max_tokens=60, temperature=0,
    )  # fmt: skip
    assert isinstance(parsed.choices[0].message.parsed, Person)
    tooled = c.chat.completions.parse(
        model=NAME, messages=ASK, tools=[openai.pydantic_function_tool(GetWeather)],
        tool_choice="required", max_tokens=40, temperature=0,
    )  # fmt: skip
    (call,) = tooled.choices[0].message.tool_calls
    assert isinstance(call.function.parsed_arguments, GetWeather)


def test_sdk_stream_helper_gets_argument_deltas(url):
    c = client(url)
    kwargs = dict(model=NAME, messages=ASK, tools=TOOLS, tool_choice="required",
                  max_tokens=48, temperature=0)  # fmt: skip
    whole = c.chat.completions.create(**kwargs).choices[0].message
    deltas = 0
    with c.chat.completions.stream(**kwargs) as stream:
        for event in stream:
            deltas += event.type == "tool_calls.function.arguments.delta"
        final = stream.get_final_completion().choices[0].message
    assert deltas > 3  # streamed as written, not in one piece at the end
    assert [(t.function.name, t.function.arguments) for t in final.tool_calls] == [
        (t.function.name, t.function.arguments) for t in whole.tool_calls
    ]
    check_calls(final)


# -- LangChain --------------------------------------------------------------------------


def test_langchain_tool_loop_and_structured_output(url):
    lc_openai = pytest.importorskip("langchain_openai")
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import tool

    @tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"18 degrees in {city}"

    llm = lc_openai.ChatOpenAI(
        model=NAME, base_url=f"{url}/v1", api_key="none", temperature=0, max_tokens=40,
        max_retries=0, timeout=120,
    )  # fmt: skip
    question = HumanMessage("What is the weather in Paris?")
    ai = llm.bind_tools([get_weather], tool_choice="any").invoke([question])
    assert ai.tool_calls and ai.tool_calls[0]["name"] == "get_weather"
    results = [
        ToolMessage(get_weather.invoke(call["args"]), tool_call_id=call["id"])
        for call in ai.tool_calls
    ]
    final = llm.bind_tools([get_weather]).invoke([question, ai, *results])
    assert final.content or final.tool_calls
    for method in ("json_schema", "function_calling"):
        person = llm.with_structured_output(Person, method=method).invoke("Describe a person.")
        assert isinstance(person, Person), method
    schema = {"title": "thing", "type": "object", "properties": {"a": {"type": "integer"}}}
    value = llm.with_structured_output(schema, method="json_mode").invoke("A JSON object.")
    assert isinstance(value, dict)


# -- instructor -------------------------------------------------------------------------


def test_instructor_tools_json_schema_and_retry(url):
    instructor = pytest.importorskip("instructor")
    ask = [{"role": "user", "content": "Describe a person."}]
    for mode in (instructor.Mode.TOOLS, instructor.Mode.JSON_SCHEMA):
        patched = instructor.from_openai(client(url), mode=mode)
        person = patched.chat.completions.create(
            model=NAME, response_model=Person, messages=ask, max_tokens=48, temperature=0,
            max_retries=0,
        )  # fmt: skip
        assert isinstance(person, Person), mode

    seen = []

    class Picky(BaseModel):
        name: str = Field(max_length=20)

        @field_validator("name")
        @classmethod
        def not_the_first(cls, value: str) -> str:
            seen.append(value)
            if len(seen) == 1:
                raise ValueError("write another name")
            return value

    patched = instructor.from_openai(client(url), mode=instructor.Mode.TOOLS)
    picky = patched.chat.completions.create(
        model=NAME, response_model=Picky, messages=ask, max_tokens=32, temperature=0,
        max_retries=2,
    )  # fmt: skip
    assert isinstance(picky, Picky) and len(seen) >= 2  # the retry sent the failed call back
