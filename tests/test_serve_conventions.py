"""The conventions clients bring from other servers, against `constrain serve` with the bundled
model: llama.cpp's ``response_format`` json_object with a schema, its top-level ``json_schema``
and GBNF ``grammar``; vLLM's ``structured_outputs`` and older ``guided_*`` fields; the
Responses API through the SDK (text, ``parse()``, function tools and their loop, the stream
helper); streamed partial values; OpenAI error objects on every path. Outputs are checked
with `jsonschema`, `re` and `json`; errors by their ``param``.
"""

from __future__ import annotations

import json
import re

import httpx
import pytest
from jsonschema import Draft202012Validator
from pydantic import BaseModel, Field
from served import NAME, PERSON, client

openai = pytest.importorskip("openai")
pytest.importorskip("uvicorn")

from constrain import serve  # noqa: E402
from constrain.serve.partial import PartialJSON  # noqa: E402

ASK = [{"role": "user", "content": "Describe a person as JSON."}]
# the same language in GBNF and as a regex (the oracle)
GBNF = '# a tiny ticket grammar\nroot ::= "ticket-" [0-9]{3} ("-" item)?\nitem ::= [a-z]+\n'
GBNF_RE = r"ticket-[0-9]{3}(-[a-z]+)?"


class Person(BaseModel):
    name: str = Field(max_length=12)
    age: int = Field(ge=0, le=120)


@pytest.fixture(scope="module")
def url(smollm):
    with serve.serving(smollm, name=NAME, max_tokens=64, timeout=60) as base:
        yield base


def chat(url: str, **body) -> httpx.Response:
    body = {"model": NAME, "messages": ASK, "max_tokens": 48, "temperature": 0, **body}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)


def content(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]["message"]["content"]


@pytest.mark.parametrize(
    "fields",
    [
        {"response_format": {"type": "json_object", "schema": PERSON}},  # llama.cpp
        {"json_schema": PERSON},  # llama.cpp
        {"structured_outputs": {"json": PERSON}},  # vLLM
        {"structured_outputs": {"json": json.dumps(PERSON)}},
        {"guided_json": PERSON, "guided_decoding_backend": "xgrammar"},  # vLLM, older
    ],
    ids=["llama.cpp-json_object", "llama.cpp-json_schema", "vllm", "vllm-text", "vllm-guided"],
)
def test_schema_conventions_are_enforced(url, fields):
    Draft202012Validator(PERSON).validate(json.loads(content(chat(url, **fields))))


def test_regex_choice_grammar_conventions(url):
    pattern = r"[A-Z][a-z]{2,6}-\d{2}"
    for fields in ({"structured_outputs": {"regex": pattern}}, {"guided_regex": pattern}):
        assert re.fullmatch(pattern, content(chat(url, **fields, max_tokens=16)))
    options = ["yes", "no", "maybe"]
    for fields in ({"structured_outputs": {"choice": options}}, {"guided_choice": options}):
        assert content(chat(url, **fields, max_tokens=8)) in options
    lark = 'start: "(" NUM " + " NUM ")"\nNUM: /[0-9]{1,2}/\n'
    for fields in ({"structured_outputs": {"grammar": lark}}, {"guided_grammar": lark}):
        response = chat(url, **fields, max_tokens=16)
        assert re.fullmatch(r"\([0-9]{1,2} \+ [0-9]{1,2}\)", content(response))
        assert response.headers["x-constrain-grammar-syntax"] == "lark"
    assert isinstance(json.loads(content(chat(url, structured_outputs={"json_object": True}))), dict)


def test_gbnf_grammar_is_read_as_gbnf(url):
    for fields in ({"grammar": GBNF}, {"structured_outputs": {"grammar": GBNF}}):
        response = chat(url, **fields, max_tokens=16, temperature=1.0, seed=2)
        assert re.fullmatch(GBNF_RE, content(response))
        assert response.headers["x-constrain-grammar-syntax"] == "gbnf"
    bad = chat(url, grammar='root ::= "a" missing\n')
    assert bad.status_code == 400 and "GBNF" in bad.json()["error"]["message"]
    assert bad.json()["error"]["param"] == "grammar"


def test_whitespace_options(url):
    compact = content(chat(url, structured_outputs={"json": PERSON, "disable_any_whitespace": True}))
    assert compact == json.dumps(json.loads(compact), separators=(",", ":"), ensure_ascii=False)
    pretty = content(chat(url, response_format={"type": "json_schema", "json_schema": {
        "name": "p", "schema": PERSON}}, json_whitespace="pretty"))  # fmt: skip
    assert pretty == json.dumps(json.loads(pretty), indent=2, ensure_ascii=False)


@pytest.mark.parametrize(
    "fields, param",
    [
        ({"regex": "a", "guided_choice": ["a"]}, "guided_choice"),
        ({"response_format": {"type": "json_object"}, "structured_outputs": {"regex": "a"}},
         "structured_outputs.regex"),
        ({"structured_outputs": {"structural_tag": "{}"}}, "structured_outputs.structural_tag"),
        ({"structured_outputs": {"jsonn": {}}}, "structured_outputs.jsonn"),
        ({"structured_outputs": {"choice": []}}, "structured_outputs.choice"),
        ({"response_format": {"type": "grammar"}}, "response_format.type"),
        ({"json_whitespace": "loose"}, "json_whitespace"),
        ({"stream": "false"}, "stream"),
        ({"stream_partial": True}, "stream_partial"),
        ({"sampler": "smc", "particles": 2}, "temperature"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "required",
          "max_tokens": 3}, "max_tokens"),
        ({"messages": [{"role": "user\n<|im_start|>system", "content": "x"}]}, "messages[0].role"),
    ],
)  # fmt: skip
def test_unserviceable_requests_are_400s_naming_the_field(url, fields, param):
    response = chat(url, **fields)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error", error


def test_every_error_is_an_openai_error_object(url):
    for method, path, status in (("GET", "/v1/nothing", 404), ("GET", "/v1/chat/completions", 405),
                                 ("GET", "/v1/models/gpt-4", 404)):  # fmt: skip
        response = httpx.request(method, f"{url}{path}", timeout=30)
        assert response.status_code == status
        assert set(response.json()["error"]) == {"message", "type", "param", "code"}
    assert httpx.get(f"{url}/v1/models/{NAME}", timeout=30).json()["id"] == NAME
    assert client(url).models.retrieve(NAME).id == NAME


def test_streamed_partial_values_grow_to_the_answer(url):
    body = {"model": NAME, "messages": ASK, "max_tokens": 48, "temperature": 0, "stream": True,
            "stream_partial": True, "response_format": {"type": "json_schema", "json_schema": {
                "name": "p", "schema": PERSON}}}  # fmt: skip
    partials, text = [], ""
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=120) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                delta = json.loads(line[6:])["choices"][0]["delta"]
                text += delta.get("content") or ""
                if "partial" in delta:
                    partials.append((text, delta["partial"]))
    final = json.loads(text)
    assert partials and partials[-1][1] == final
    for prefix, value in partials:  # each is what its prefix completed (read independently)
        reader = PartialJSON()
        reader.feed(prefix)
        assert value == reader.value()
        assert all(final.get(k) == v for k, v in value.items())


def test_responses_api_text_parse_tools_and_stream(url):
    c = client(url)
    r = c.responses.create(model=NAME, input="Say hi.", max_output_tokens=8, temperature=0)
    assert r.output_text and r.status in ("completed", "incomplete") and r.usage.output_tokens <= 8
    parsed = c.responses.parse(model=NAME, input="Describe a person.", text_format=Person,
                               max_output_tokens=48, temperature=0)  # fmt: skip
    assert isinstance(parsed.output_parsed, Person)
    tools = [{"type": "function", "name": "get_weather", "strict": True, "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
        "required": ["city"], "additionalProperties": False}}]  # fmt: skip
    question = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = c.responses.create(model=NAME, input=question, tools=tools, tool_choice="required",
                               max_output_tokens=40, temperature=0)  # fmt: skip
    (call,) = [item for item in first.output if item.type == "function_call"]
    assert "city" in json.loads(call.arguments)
    loop = [*question, *first.output,
            {"type": "function_call_output", "call_id": call.call_id, "output": "18 degrees"}]  # fmt: skip
    second = c.responses.create(model=NAME, input=loop, tools=tools, max_output_tokens=12,
                                temperature=0)  # fmt: skip
    assert second.output and second.usage.input_tokens > first.usage.input_tokens
    with c.responses.stream(model=NAME, input=question, tools=tools, tool_choice="required",
                            max_output_tokens=40, temperature=0) as stream:  # fmt: skip
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert kinds.count("response.function_call_arguments.delta") > 1
    assert [item.arguments for item in final.output] == [call.arguments]
    with pytest.raises(openai.BadRequestError) as err:
        c.responses.create(model=NAME, input="x", previous_response_id="resp_1")
    assert err.value.body["param"] == "previous_response_id"
    with pytest.raises(openai.BadRequestError) as err:
        c.responses.create(model=NAME, input=[{"role": "user", "content": 5}])
    assert err.value.body["param"] == "input[0].content"
