"""Tool-call formats (`constrain.serve.tools`): derived from chat templates written here in each
family's documented style, applied to the bundled SmolLM2 tokenizer; their schemas, parsing,
tool checking and the system prompt for templates without tools."""

from __future__ import annotations

import json

import jsonschema
import pytest
from chat_templates import HERMES_TEMPLATE, MISTRAL_TEMPLATE, TEMPLATES, TOOLS, WEATHER
from jsonschema import Draft202012Validator

from constrain.errors import ConfigError
from constrain.serve.errors import RequestError
from constrain.serve.tools import (
    DEFAULT_FORMAT,
    KNOWN_FORMATS,
    ToolFormat,
    call_schema,
    check_tools,
    derive_format,
    template_renders_tools,
    tool_format,
    tools_system_prompt,
)

WEATHER_ARGS = {"city": "Paris", "unit": "celsius"}
ADD_ARGS = {"a": 1, "b": 2}


@pytest.fixture
def templated(smollm_tokenizer):
    """Set the bundled tokenizer's chat template for one test (restored afterwards)."""
    saved = smollm_tokenizer.chat_template

    def use(template: str):
        smollm_tokenizer.chat_template = template
        return smollm_tokenizer

    yield use
    smollm_tokenizer.chat_template = saved


def body(fmt: ToolFormat, name: str, args, **extra) -> dict:
    """A call object in `fmt`: its constants, the name, the arguments (and `extra` keys)."""
    return {**dict(fmt.constants), fmt.name_key: name, fmt.args_key: args, **extra}


def written(fmt: ToolFormat, calls: list[dict]) -> str:
    """Calls as a model writes them in `fmt` (open, body, close; joined by the separator)."""
    if fmt.list_body:
        return fmt.open + json.dumps(calls) + fmt.close
    return fmt.separator.join(fmt.open + json.dumps(c) + fmt.close for c in calls)


# -- deriving the format ------------------------------------------------------------------


@pytest.mark.parametrize("family", sorted(TEMPLATES))
def test_derived_format_is_the_familys(templated, family):
    derived = derive_format(templated(TEMPLATES[family]))
    assert derived is not None
    assert derived.name == "derived"
    known = KNOWN_FORMATS[family]
    fields = ("open", "close", "separator", "list_body", "name_key", "args_key", "constants")
    assert {f: getattr(derived, f) for f in fields} == {f: getattr(known, f) for f in fields}


def test_registry_formats_differ():
    """The three families are told apart by their wrappers and keys (else the test above could
    pass with one format for all)."""
    wrappers = {(f.open, f.close, f.list_body, f.args_key) for f in KNOWN_FORMATS.values()}
    assert len(wrappers) == len(KNOWN_FORMATS) == 3
    assert DEFAULT_FORMAT is KNOWN_FORMATS["hermes"]


@pytest.mark.parametrize("family", sorted(TEMPLATES))
def test_template_calls_are_written_in_the_derived_format(templated, family):
    """What the template renders for an assistant call is the prompt plus `written(...)`."""
    tok = templated(TEMPLATES[family])
    fmt = derive_format(tok)
    user = {"role": "user", "content": "Weather in Paris?"}
    call = {"type": "function", "function": {"name": "get_weather", "arguments": WEATHER_ARGS}}
    turn = {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", **call}]}
    prompt = tok.apply_chat_template([user], tokenize=False, add_generation_prompt=True)
    full = tok.apply_chat_template([user, turn], tokenize=False)
    assert full.startswith(prompt + written(fmt, [body(fmt, "get_weather", WEATHER_ARGS)]))


def test_derived_constants_and_string_arguments(templated):
    """A template that writes a fixed "type" key and needs the arguments as JSON text (it
    writes them raw) gives those constants and keys; the call id is not a constant."""
    template = HERMES_TEMPLATE.replace(
        '({"name": call.function.name, "arguments": call.function.arguments} | tojson)',
        '\'{"type": "function", "id": "\' + call.id + \'", "name": "\' + call.function.name'
        " + '\", \"args\": ' + call.function.arguments + '}'",
    )
    fmt = derive_format(templated(template))
    assert fmt is not None
    assert (fmt.open, fmt.close, fmt.separator) == ("<tool_call>\n", "\n</tool_call>", "\n")
    assert (fmt.name_key, fmt.args_key, fmt.constants) == ("name", "args", (("type", "function"),))


def test_derived_separator_comes_from_the_template(templated):
    """Blocks a template separates by a blank line give the separator "\n\n"."""
    template = HERMES_TEMPLATE.replace(
        "{{- '\\n<tool_call>\\n' + (",
        "{{- ('\\n' if not loop.first else '') + '\\n<tool_call>\\n' + (",
    )
    assert template != HERMES_TEMPLATE
    fmt = derive_format(templated(template))
    assert (fmt.open, fmt.close, fmt.separator) == ("<tool_call>\n", "\n</tool_call>", "\n\n")


def test_derived_with_nine_character_ids(templated):
    """A Mistral v0.3-style template that demands 9-character ids and writes them in the body
    (and a space after [TOOL_CALLS]): the id is no constant, the space is part of `open`."""
    template = MISTRAL_TEMPLATE.replace(
        "{{- '[TOOL_CALLS][' -}}", "{{- '[TOOL_CALLS] [' -}}"
    ).replace(
        '{{- {"name": call.function.name, "arguments": call.function.arguments} | tojson -}}',
        "{%- if call.id | length != 9 -%}{{- raise_exception('ids have 9 characters') -}}"
        "{%- endif -%}"
        '{{- {"name": call.function.name, "arguments": call.function.arguments, "id": call.id}'
        " | tojson -}}",
    )
    fmt = derive_format(templated(template))
    assert fmt is not None
    assert (fmt.open, fmt.close, fmt.list_body) == ("[TOOL_CALLS] ", "", True)
    assert (fmt.name_key, fmt.args_key, fmt.constants) == ("name", "arguments", ())


def test_generation_prompt_not_followed_derives_none(templated):
    """A template whose generation prompt is not how it renders an assistant turn."""
    template = HERMES_TEMPLATE.replace(
        "{{- '<|im_start|>assistant\\n' -}}{%- endif -%}",
        "{{- '<|im_start|>assistant\\n<think>\\n' -}}{%- endif -%}",
    )
    assert template != HERMES_TEMPLATE
    assert derive_format(templated(template)) is None


def test_template_without_tools_derives_none(smollm_tokenizer):
    assert derive_format(smollm_tokenizer) is None
    assert tool_format(smollm_tokenizer) == DEFAULT_FORMAT
    assert not template_renders_tools(smollm_tokenizer)


def test_no_template_derives_none(templated):
    tok = templated(None)
    assert derive_format(tok) is None
    assert tool_format(tok) is DEFAULT_FORMAT


def test_template_that_raises_derives_none(templated):
    assert derive_format(templated("{{ raise_exception('no') }}")) is None


def test_tool_format_by_name(templated):
    tok = templated(HERMES_TEMPLATE)
    assert tool_format(tok, "mistral") is KNOWN_FORMATS["mistral"]
    assert tool_format(tok).name == "derived"
    with pytest.raises(ConfigError, match="hermes, llama3, mistral"):
        tool_format(tok, "chatml")


@pytest.mark.parametrize("family", sorted(TEMPLATES))
def test_templates_render_tools(templated, family):
    assert template_renders_tools(templated(TEMPLATES[family]))


# -- call schemas -------------------------------------------------------------------------


def validator(fmt: ToolFormat, **options) -> Draft202012Validator:
    schema = call_schema(fmt, check_tools(TOOLS), **options)
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def as_value(fmt: ToolFormat, calls: list[dict]):
    """The JSON value a body holds: one call, or the list of them."""
    return calls if fmt.list_body else calls[0]


@pytest.mark.parametrize("family", sorted(KNOWN_FORMATS))
def test_call_schema_accepts_valid_calls(family):
    fmt = KNOWN_FORMATS[family]
    check = validator(fmt)
    for name, args in (("get_weather", WEATHER_ARGS), ("add", ADD_ARGS)):
        assert check.is_valid(as_value(fmt, [body(fmt, name, args)]))


@pytest.mark.parametrize("family", sorted(KNOWN_FORMATS))
@pytest.mark.parametrize(
    "call",
    [
        {"name": "get_wether", "args": WEATHER_ARGS},  # unknown name
        {"name": "add", "args": {"a": "1", "b": 2}},  # wrong argument type
        {"name": "add", "args": ADD_ARGS, "extra": 1},  # extra key in the body
        {"name": "add", "args": {"a": 1}},  # missing argument
        {"name": "add", "args": WEATHER_ARGS},  # another function's arguments
    ],
)
def test_call_schema_rejects_invalid_calls(family, call):
    fmt = KNOWN_FORMATS[family]
    extra = {"extra": call["extra"]} if "extra" in call else {}
    value = as_value(fmt, [body(fmt, call["name"], call["args"], **extra)])
    assert not validator(fmt).is_valid(value)


def test_call_schema_requires_the_other_keys():
    fmt = KNOWN_FORMATS["hermes"]
    check = validator(fmt)
    assert not check.is_valid({"name": "add"})
    assert not check.is_valid({"arguments": ADD_ARGS})


def test_call_schema_order_and_constants():
    fmt = ToolFormat("derived", "", "", "\n", False, "fn", "params", (("type", "function"),))
    schema = call_schema(fmt, check_tools(TOOLS[1:]))
    assert list(schema["properties"]) == ["type", "fn", "params"]
    assert schema["required"] == ["type", "fn", "params"]
    assert schema["additionalProperties"] is False
    check = Draft202012Validator(schema)
    assert check.is_valid({"type": "function", "fn": "add", "params": ADD_ARGS})
    assert not check.is_valid({"type": "other", "fn": "add", "params": ADD_ARGS})


def test_call_schema_only():
    fmt = KNOWN_FORMATS["hermes"]
    check = validator(fmt, only="add")
    assert check.is_valid(body(fmt, "add", ADD_ARGS))
    assert not check.is_valid(body(fmt, "get_weather", WEATHER_ARGS))
    with pytest.raises(RequestError) as caught:
        call_schema(fmt, check_tools(TOOLS), only="missing")
    assert caught.value.param == "tool_choice"


def test_call_schema_list_body_parallel():
    fmt = KNOWN_FORMATS["mistral"]
    two = [body(fmt, "add", ADD_ARGS), body(fmt, "get_weather", WEATHER_ARGS)]
    assert validator(fmt).is_valid(two)
    assert not validator(fmt).is_valid([])
    single = validator(fmt, parallel=False)
    assert single.schema["maxItems"] == 1
    assert single.is_valid(two[:1])
    assert not single.is_valid(two)
    assert "maxItems" not in call_schema(fmt, check_tools(TOOLS))


def test_call_schema_keeps_local_references():
    parameters = {
        "type": "object",
        "properties": {"point": {"$ref": "#/$defs/point"}},
        "required": ["point"],
        "$defs": {"point": {"type": "object", "properties": {"x": {"type": "integer"}}}},
    }
    tools = [{"type": "function", "function": {"name": "plot", "parameters": parameters}}]
    fmt = KNOWN_FORMATS["hermes"]
    check = Draft202012Validator(call_schema(fmt, check_tools(tools)))
    assert check.is_valid(body(fmt, "plot", {"point": {"x": 1}}))
    assert not check.is_valid(body(fmt, "plot", {"point": {"x": "1"}}))


# -- parsing calls ------------------------------------------------------------------------




# -- checking tools -----------------------------------------------------------------------


def test_check_tools_returns_functions():
    functions = check_tools(
        TOOLS + [{"type": "function", "function": {"name": "now", "strict": True}}]
    )
    assert [f["name"] for f in functions] == ["get_weather", "add", "now"]
    assert functions[0] == {"name": "get_weather", "description": "Weather.", "parameters": WEATHER}
    assert functions[2]["parameters"] == {"type": "object", "properties": {}}
    assert functions[2]["strict"] is True
    assert check_tools(None) == []


def tool(**function) -> dict:
    return {"type": "function", "function": function}


@pytest.mark.parametrize(
    "tools, param",
    [
        ("get_weather", "tools"),
        ([tool(name="a"), tool(description="no name")], "tools[1].function.name"),
        ([tool(name="a"), tool(name=3)], "tools[1].function.name"),
        ([tool(name="a"), tool(name="has space")], "tools[1].function.name"),
        ([tool(name="a"), tool(name="x" * 65)], "tools[1].function.name"),
        ([tool(name="a"), tool(name="a")], "tools[1].function.name"),
        ([{"type": "retrieval", "function": {"name": "a"}}], "tools[0].type"),
        ([{"function": {"name": "a"}}], "tools[0].type"),
        ([tool(name="a", parameters="object")], "tools[0].function.parameters"),
        ([tool(name="a", parameters=["object"])], "tools[0].function.parameters"),
        ([{"type": "function"}], "tools[0].function"),
        (["a"], "tools[0]"),
    ],
)
def test_check_tools_names_the_bad_field(tools, param):
    with pytest.raises(RequestError) as caught:
        check_tools(tools)
    assert caught.value.param == param
    assert caught.value.status == 400


@pytest.mark.parametrize(
    "parameters, valid, invalid",
    [
        (True, [{}, {"a": 1}], ["Paris", 1, [], None]),
        ({"properties": {"a": {"type": "integer"}}}, [{}, {"a": 1}], ["Paris", 1, {"a": "x"}]),
        ({"type": ["object", "null"]}, [{}, {"b": [1]}], [None, "x"]),
    ],
)
def test_tool_arguments_are_always_an_object(parameters, valid, invalid):
    """A schema admitting more than objects is narrowed to its objects (the oracle:
    `jsonschema` on the original schema, and the value being an object)."""
    narrowed = check_tools([tool(name="f", parameters=parameters)])[0]["parameters"]
    for value in valid + invalid:
        original = jsonschema.Draft202012Validator(parameters).is_valid(value)
        expected = original and isinstance(value, dict)
        assert jsonschema.Draft202012Validator(narrowed).is_valid(value) == expected, value
        assert expected == (value in valid)


@pytest.mark.parametrize("parameters", [{"type": "string"}, {"type": ["array", "null"]}, False])
def test_tool_parameters_admitting_no_object_are_refused(parameters):
    with pytest.raises(RequestError) as caught:
        check_tools([tool(name="f", parameters=parameters)])
    assert caught.value.param.startswith("tools[0].function.parameters")
    assert caught.value.status == 400


# -- describing tools in a system message -------------------------------------------------


@pytest.mark.parametrize("family", sorted(KNOWN_FORMATS))
def test_tools_system_prompt(family):
    fmt = KNOWN_FORMATS[family]
    prompt = tools_system_prompt(fmt, check_tools(TOOLS))
    assert "get_weather" in prompt and "add" in prompt
    assert json.dumps(WEATHER) in prompt
    example = fmt.open + json.dumps(as_value(fmt, [body(fmt, "get_weather", WEATHER_ARGS)]))
    example = example.replace('"Paris"', '"..."')
    assert example + fmt.close in prompt
    assert fmt.args_key in prompt
