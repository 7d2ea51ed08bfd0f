"""Tool calls in the model's own format: derived from its chat template, checked, constrained
and parsed for the OpenAI-compatible server.

Chat models are trained to write tool calls the way their family's chat template renders
them: Hermes and Qwen wrap ``{"name", "arguments"}`` in ``<tool_call>`` ... ``</tool_call>``,
Llama 3.1 writes ``{"name", "parameters"}`` bare after the assistant header, Mistral writes
``[TOOL_CALLS]`` and a JSON list of calls. A `ToolFormat` is that wrapper: the text before and
after a call's JSON body, the keys of the body, and how several calls are joined.

`derive_format` reads the format off the template itself: it renders a probe conversation
whose assistant turn calls a probe function and finds the JSON body around the probe's name;
the text between the generation prompt and the body is `open`, the text after it (up to the
end of the turn) is `close`. `KNOWN_FORMATS` holds the families' formats for templates that
render no tool calls, and `DEFAULT_FORMAT` (Hermes) is the fallback of last resort.

`check_tools` validates a request's ``tools``; `call_schema` is the JSON Schema a call body
must match (the constraint on generation); `write_calls` writes calls as the model would;
`tools_system_prompt` describes the tools in a system message for templates that do not take
``tools`` themselves; `template_support` says what a template renders of tool use (the tools,
earlier calls, their results).
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from constrain.errors import ConfigError
from constrain.serve.errors import RequestError

__all__ = [
    "DEFAULT_FORMAT",
    "KNOWN_FORMATS",
    "CallStyle",
    "TemplateSupport",
    "ToolFormat",
    "call_schema",
    "check_tools",
    "derive_format",
    "template_renders_tools",
    "template_support",
    "tool_format",
    "tools_system_prompt",
    "write_calls",
]


@dataclass(frozen=True)
class ToolFormat:
    """How a model writes tool calls: ``open + body + close`` per call, where a body is the JSON
    object ``{**constants, name_key: <name>, args_key: <arguments object>}``.

    Attributes:
        name: "hermes", "llama3", "mistral" (the registry's) or "derived" (from a template).
        open: the text before a call's JSON body (what the model writes, after the generation
            prompt).
        close: the text after a call's body, before the end of the turn.
        separator: the text between two calls' blocks; unused when `list_body`.
        list_body: all calls are the items of one JSON list written after `open` (and before
            `close`), instead of one block per call.
        name_key: the body's key holding the function name.
        args_key: the body's key holding the arguments object.
        constants: the body's other keys with fixed values, in the order the template writes
            them (before `name_key`), e.g. ``(("type", "function"),)``.
    """

    name: str
    open: str
    close: str
    separator: str
    list_body: bool
    name_key: str
    args_key: str
    constants: tuple[tuple[str, object], ...] = ()


KNOWN_FORMATS: dict[str, ToolFormat] = {
    # Hermes 2 Pro, Qwen 2.5 and Qwen 3: one <tool_call> block per call, one per line
    "hermes": ToolFormat(
        "hermes", "<tool_call>\n", "\n</tool_call>", "\n", False, "name", "arguments"
    ),
    # Llama 3.1/3.2/3.3 JSON tool calls: the bare object; its template allows one call per
    # turn, and "; " is what vLLM's llama3_json parser reads between several
    "llama3": ToolFormat("llama3", "", "", "; ", False, "name", "parameters"),
    # Mistral (v0.3 and later): [TOOL_CALLS] then one JSON list of all the calls
    "mistral": ToolFormat("mistral", "[TOOL_CALLS]", "", "", True, "name", "arguments"),
}

DEFAULT_FORMAT: ToolFormat = KNOWN_FORMATS["hermes"]
"""The format used when a template renders no tool calls (and none is named): Hermes's
``<tool_call>`` blocks, the most widely trained-on format among open chat models, described to
the model by `tools_system_prompt`."""

_FUNCTION_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_EMPTY_PARAMETERS: dict = {"type": "object", "properties": {}}

# -- the probe conversation that `derive_format` renders ------------------------------------

_QUESTION, _ANSWER = "PROBE_Q", "PROBE_ANSWER"
# (name, arguments) of the probe calls; every probe value holds "probe", which is how values
# that come from the probe (names, arguments, ids) are told from a template's constants
_CALLS = (("probe_fn", {"probe_key": "probe_value"}), ("probe_fn2", {"probe_key2": 2}))
# call ids: the OpenAI-like one first, then one for templates that demand 9 alphanumerics
_IDS = (("call_probe1", "call_probe2"), ("probeid01", "probeid02"))
_USER = {"role": "user", "content": _QUESTION}
_JSON_TYPES = {str: "string", int: "integer"}


def _probe_tool(name: str, args: dict) -> dict:
    """The OpenAI definition of a probe function taking `args`' keys."""
    properties = {key: {"type": _JSON_TYPES[type(value)]} for key, value in args.items()}
    parameters = {"type": "object", "properties": properties, "required": list(args)}
    return {
        "type": "function",
        "function": {"name": name, "description": "A probe function.", "parameters": parameters},
    }


_PROBE_TOOLS = [_probe_tool(name, args) for name, args in _CALLS]


@dataclass(frozen=True)
class _Variant:
    """One way of writing the probe's assistant turn: templates differ in what they accept."""

    ids: tuple[str, str]
    arguments_as_text: bool  # arguments as a JSON string instead of a dict
    content: str | None


_VARIANTS = [
    _Variant(ids, as_text, content)
    for ids, as_text, content in itertools.product(_IDS, (False, True), ("", None))
]


@dataclass(frozen=True)
class _Probe:
    """A tokenizer's chat template, rendered with the probe tools when it accepts them."""

    tokenizer: Any
    tools: list | None
    prompt: str  # the user's question with the generation prompt

    def render(self, messages: list[dict], generation_prompt: bool) -> str | None:
        """The template's text for `messages`, or None when the template refuses them."""
        return _render(self.tokenizer, messages, self.tools, generation_prompt)


def _render(tokenizer, messages: list[dict], tools: list | None, generation_prompt: bool):
    """`apply_chat_template` as text, or None when the template raises or returns no text."""
    try:
        text = tokenizer.apply_chat_template(
            messages, tools=tools, tokenize=False, add_generation_prompt=generation_prompt
        )
    except Exception:  # jinja's errors, raise_exception(), and whatever else a template does
        return None
    return text if isinstance(text, str) else None


def _open_probe(tokenizer) -> _Probe | None:
    """The probe over `tokenizer`'s template, with tools if the template accepts them; None when
    there is no template or it cannot render a user's question."""
    if not getattr(tokenizer, "chat_template", None):
        return None
    for tools in (_PROBE_TOOLS, None):
        prompt = _render(tokenizer, [_USER], tools, True)
        if prompt is not None:
            return _Probe(tokenizer, tools, prompt)
    return None


def _assistant(variant: _Variant, count: int) -> dict:
    """The probe's assistant turn making the first `count` probe calls."""
    calls = [
        {
            "id": ident,
            "type": "function",
            "function": {
                "name": name,
                "arguments": json.dumps(args) if variant.arguments_as_text else dict(args),
            },
        }
        for (name, args), ident in zip(_CALLS[:count], variant.ids)
    ]
    return {"role": "assistant", "content": variant.content, "tool_calls": calls}


# -- finding the call in the rendered text -------------------------------------------------


def _is_arguments(value: Any, args: dict) -> bool:
    """Whether `value` is the probe arguments `args`, as an object or as its JSON text."""
    if value == args:
        return True
    if not isinstance(value, str):
        return False
    try:
        return json.loads(value) == args
    except ValueError:
        return False


def _call_in(value: Any, name: str, args: dict) -> dict | None:
    """The call object to `name` with `args` that `value` is (or, a list, holds as an item)."""
    for item in value if isinstance(value, list) else [value]:
        if isinstance(item, dict) and name in item.values():
            if any(_is_arguments(v, args) for v in item.values()):
                return item
    return None


def _find_call(text: str, start: int, name: str, args: dict) -> tuple[int, int, Any] | None:
    """(begin, end, value) of the outermost JSON value in ``text[start:]`` that is the call to
    `name` with `args` or a list holding it; None if there is none."""
    at = text.find(json.dumps(name), start)
    if at < 0:
        return None
    decoder = json.JSONDecoder()
    for begin in range(start, at):
        if text[begin] not in "{[":
            continue
        try:
            value, end = decoder.raw_decode(text, begin)
        except ValueError:
            continue
        if end > at and _call_in(value, name, args) is not None:
            return begin, end, value
    return None


def _body_keys(call: dict, name: str, args: dict) -> tuple[str, str, tuple]:
    """(name_key, args_key, constants) of the probe's call object: constants are the other
    keys whose values do not come from the probe (so not its id)."""
    name_key = next(k for k, v in call.items() if v == name)
    args_key = next(k for k, v in call.items() if _is_arguments(v, args))
    constants = tuple(
        (k, v)
        for k, v in call.items()
        if k not in (name_key, args_key) and "probe" not in json.dumps(v)
    )
    return name_key, args_key, constants


def _end_of_turn(probe: _Probe) -> str:
    """The text the template writes after an assistant's answer ("" if it cannot tell)."""
    text = probe.render([_USER, {"role": "assistant", "content": _ANSWER}], False)
    if text is None or _ANSWER not in text:
        return ""
    return text[text.rindex(_ANSWER) + len(_ANSWER) :]


def _before_end(tail: str, end: str) -> str:
    """`tail` (the text after a call's body) up to the end-of-turn text `end`; when the turn
    ends otherwise after a call, up to `end`'s markup or else the trailing whitespace."""
    if end and tail.endswith(end):
        return tail[: len(tail) - len(end)]
    mark = end.strip()
    if mark and mark in tail:
        return tail[: tail.index(mark)]
    return tail.rstrip()


def _separator(two: str | None, prompt: str, open_: str, close: str) -> str | None:
    """The text between two call blocks in `two` (the probe turn with two calls, each written
    ``open_ + body + close``); None when the template did not write them so."""
    if two is None or not two.startswith(prompt):
        return None
    first = _find_call(two, len(prompt), *_CALLS[0])
    if first is None or isinstance(first[2], list) or not two.startswith(close, first[1]):
        return None
    after = first[1] + len(close)
    second = _find_call(two, after, *_CALLS[1])
    if second is None or not two[after : second[0]].endswith(open_):
        return None
    return two[after : second[0] - len(open_)]


def _known_separator(open_: str, close: str, name_key: str, args_key: str) -> str:
    """For templates that render one call per turn: the separator of the known format with the
    same wrapper and keys, else a newline."""
    for fmt in KNOWN_FORMATS.values():
        if (fmt.open, fmt.close, fmt.name_key, fmt.args_key) == (open_, close, name_key, args_key):
            return fmt.separator
    return "\n"


def _derive_with(probe: _Probe, variant: _Variant, end: str) -> ToolFormat | None:
    """The format read off the probe turn written as `variant`, or None if the template did not
    render that turn after its generation prompt with the call as JSON."""
    one = probe.render([_USER, _assistant(variant, 1)], False)
    if one is None or not one.startswith(probe.prompt):
        return None
    start = len(probe.prompt)
    found = _find_call(one, start, *_CALLS[0])
    if found is None:
        return None
    begin, stop, value = found
    name_key, args_key, constants = _body_keys(_call_in(value, *_CALLS[0]), *_CALLS[0])
    open_, close = one[start:begin], _before_end(one[stop:], end)
    list_body = isinstance(value, list)
    separator = ""
    if not list_body:
        two = probe.render([_USER, _assistant(variant, 2)], False)
        separator = _separator(two, probe.prompt, open_, close)
        if separator is None:
            separator = _known_separator(open_, close, name_key, args_key)
    return ToolFormat("derived", open_, close, separator, list_body, name_key, args_key, constants)


def derive_format(tokenizer) -> ToolFormat | None:
    """The format the tokenizer's chat template writes tool calls in, found by rendering a
    probe conversation; None when the template renders no tool calls (or has no template).

    The probe's assistant turn is tried with the arguments as a dict, then as JSON text (and
    with content "" then None, and an OpenAI-like id then a 9-character one), since templates
    differ in what they accept; a template that raises on every variant gives None. A template
    that renders one call per turn gives the separator of the known format with the same
    wrapper (else a newline)."""
    found = _derived(tokenizer)
    return found[0] if found is not None else None


def _derived(tokenizer) -> tuple[ToolFormat, _Variant] | None:
    """The derived format and the variant of the probe turn the template rendered it from."""
    probe = _open_probe(tokenizer)
    if probe is None:
        return None
    end = _end_of_turn(probe)
    for variant in _VARIANTS:
        fmt = _derive_with(probe, variant, end)
        if fmt is not None:
            return fmt, variant
    return None


def tool_format(tokenizer, name: str | None = None) -> ToolFormat:
    """`name` from the registry (ConfigError listing the known names if unknown), else the
    derived one, else DEFAULT_FORMAT."""
    if name is not None:
        if name not in KNOWN_FORMATS:
            known = ", ".join(sorted(KNOWN_FORMATS))
            raise ConfigError(f"unknown tool-call format {name!r}: expected one of {known}")
        return KNOWN_FORMATS[name]
    return derive_format(tokenizer) or DEFAULT_FORMAT


def template_renders_tools(tokenizer) -> bool:
    """Whether the chat template takes `tools` itself (it writes their definitions into the
    prompt): else the server describes the tools in a system message (`tools_system_prompt`)."""
    if not getattr(tokenizer, "chat_template", None):
        return False
    text = _render(tokenizer, [_USER], _PROBE_TOOLS, True)
    return text is not None and _CALLS[0][0] in text


@dataclass(frozen=True)
class CallStyle:
    """How a chat template takes an assistant message's tool calls (the probe variant it
    rendered): the arguments as JSON text or as an object, the content beside the calls
    ("" or None), and whether call ids must be 9 letters and digits (Mistral's templates)."""

    arguments_as_text: bool
    content: str | None
    short_ids: bool


@dataclass(frozen=True)
class TemplateSupport:
    """What a chat template renders of tool use, found by rendering probe conversations.

    Attributes:
        format: the tool-call format (`tool_format`: named, else derived, else the default).
        tools: the template writes the tools' definitions (else a system message describes
            them: `tools_system_prompt`).
        calls: how it takes an assistant's earlier calls; None when it renders none (they
            are then written into the assistant's text in `format`).
        results: it renders a tool message's content (else results go back as user text).
    """

    format: ToolFormat
    tools: bool
    calls: CallStyle | None
    results: bool


_RESULT = "PROBE_RESULT"


def _renders_results(tokenizer, variant: _Variant | None) -> bool:
    """Whether the template renders a tool message's content after an assistant's call (made
    as `variant`, or written as text when the template renders no calls)."""
    if variant is not None:
        assistant = _assistant(variant, 1)
        ident = variant.ids[0]
    else:
        assistant, ident = {"role": "assistant", "content": _ANSWER}, _IDS[0][0]
    result = {"role": "tool", "tool_call_id": ident, "name": _CALLS[0][0], "content": _RESULT}
    for tools in (_PROBE_TOOLS, None):
        text = _render(tokenizer, [_USER, assistant, result], tools, True)
        if text is not None:
            return _RESULT in text
    return False


def template_support(tokenizer, format_name: str | None = None) -> TemplateSupport:
    """What `tokenizer`'s chat template renders of tool use (see `TemplateSupport`);
    `format_name` forces a registry format (`tool_format`)."""
    found = _derived(tokenizer)
    variant = found[1] if found is not None else None
    calls = None
    if variant is not None:
        calls = CallStyle(variant.arguments_as_text, variant.content, variant.ids == _IDS[1])
    if format_name is not None:
        fmt = tool_format(tokenizer, format_name)
    else:
        fmt = found[0] if found is not None else DEFAULT_FORMAT
    return TemplateSupport(
        fmt, template_renders_tools(tokenizer), calls, _renders_results(tokenizer, variant)
    )


# -- requests: the tools, their schema, the calls -----------------------------------------


def _object_parameters(parameters: Mapping | bool, where: str) -> dict:
    """`parameters` narrowed to JSON objects: a call's arguments are always an object, as
    OpenAI requires. A schema whose `type` admits no object is refused; one that admits other
    values too gets ``"type": "object"`` (keywords are conjuncts, so this is the
    intersection)."""
    if parameters is True:
        return dict(_EMPTY_PARAMETERS)
    if parameters is False:
        raise RequestError(f"{where} is false: no arguments would be valid", where)
    kind = parameters.get("type")
    if kind is None or kind == "object" or (isinstance(kind, list) and "object" in kind):
        return {**parameters, "type": "object"}
    raise RequestError(
        f"{where} must describe a JSON object (the arguments are one), got type {kind!r}; "
        f"wrap the value in an object property",
        f"{where}.type",
    )


def _check_function(function: Any, where: str, seen: set[str]) -> dict:
    """One tool's validated function dict ({"name", "description"?, "parameters", "strict"?});
    `seen` collects the names so far (a duplicate is an error)."""
    if not isinstance(function, Mapping):
        raise RequestError(f"{where} must be an object", where)
    name = function.get("name")
    if not isinstance(name, str) or not _FUNCTION_NAME.fullmatch(name):
        raise RequestError(
            f"{where}.name must be a string of 1 to 64 letters, digits, '_' or '-', got {name!r}",
            f"{where}.name",
        )
    if name in seen:
        raise RequestError(f"{where}.name {name!r} is defined twice", f"{where}.name")
    seen.add(name)
    out: dict = {"name": name}
    if "description" in function:
        if not isinstance(function["description"], str):
            raise RequestError(f"{where}.description must be a string", f"{where}.description")
        out["description"] = function["description"]
    parameters = function.get("parameters", _EMPTY_PARAMETERS)
    if not isinstance(parameters, (Mapping, bool)):
        raise RequestError(
            f"{where}.parameters must be a JSON Schema (an object or a boolean)",
            f"{where}.parameters",
        )
    out["parameters"] = _object_parameters(parameters, f"{where}.parameters")
    if "strict" in function:
        if not isinstance(function["strict"], bool):
            raise RequestError(f"{where}.strict must be a boolean", f"{where}.strict")
        out["strict"] = function["strict"]
    return out


def check_tools(tools: Any) -> list[dict]:
    """Validate OpenAI `tools` ([{"type": "function", "function": {"name", "description"?,
    "parameters"?, "strict"?}}]) and return their function dicts, "parameters" defaulting to
    ``{"type": "object", "properties": {}}``; None or [] gives [].

    Raises:
        RequestError: naming the field, e.g. param "tools[1].function.name" (missing, not a
            string, not matching ``^[A-Za-z0-9_-]{1,64}$``, or a duplicate), "tools[0].type"
            (not "function"), "tools[0].function.parameters" (not an object or boolean, or
            false), "tools[0].function.parameters.type" (admitting no object; arguments are
            always an object: a schema admitting more is narrowed to its objects).
    """
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise RequestError("tools must be a list of tool definitions", "tools")
    functions: list[dict] = []
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, Mapping):
            raise RequestError(f"{where} must be an object", where)
        if tool.get("type") != "function":
            raise RequestError(
                f"{where}.type must be 'function', got {tool.get('type')!r}", f"{where}.type"
            )
        if "function" not in tool:
            raise RequestError(f"{where}.function is missing", f"{where}.function")
        functions.append(_check_function(tool["function"], f"{where}.function", seen))
    return functions


def _has_local_refs(schema: Any) -> bool:
    """Whether `schema` holds a reference into its own document ("#..."), which would point
    elsewhere once the schema is embedded in a call's schema."""
    if isinstance(schema, list):
        return any(_has_local_refs(item) for item in schema)
    if not isinstance(schema, Mapping):
        return False
    for key, value in schema.items():
        if key in ("$ref", "$dynamicRef") and isinstance(value, str) and value.startswith("#"):
            return True
        if key not in ("const", "enum", "examples", "default") and _has_local_refs(value):
            return True
    return False


def _arguments_schema(function: dict) -> Any:
    """The function's parameters schema, made its own resource (an `$id`) when it refers into
    itself, so that its "#/$defs/..." references still resolve inside a call's schema."""
    parameters = function.get("parameters", _EMPTY_PARAMETERS)
    if isinstance(parameters, Mapping) and "$id" not in parameters and _has_local_refs(parameters):
        return {"$id": f"urn:constrain:tool:{function['name']}", **parameters}
    return parameters


def _one_call_schema(fmt: ToolFormat, function: dict) -> dict:
    """The schema of a body calling `function`: the constants, the name, the arguments."""
    properties: dict = {key: {"const": value} for key, value in fmt.constants}
    properties[fmt.name_key] = {"const": function["name"]}
    properties[fmt.args_key] = _arguments_schema(function)
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def call_schema(
    fmt: ToolFormat, functions: list[dict], *, only: str | None = None, parallel: bool = True
) -> dict:
    """The JSON Schema of one call body in `fmt` (for `list_body`, of the whole list: at least
    one call, at most one unless `parallel`).

    A call is an object with, in order, the constants (as "const"), `name_key` (const the
    function name) and `args_key` (the function's parameters schema), all required, no other
    keys; several functions give an "anyOf" of one such object per function; a list body's
    calls are unique.

    Args:
        fmt: the tool-call format.
        functions: the function dicts `check_tools` returns.
        only: the one function a call may name (``tool_choice`` naming a function).
        parallel: whether a list body may hold several calls.

    Raises:
        RequestError: `only` names no function in `functions` (param "tool_choice"), or
            there are no functions (param "tools").
    """
    if only is not None:
        functions = [f for f in functions if f["name"] == only]
        if not functions:
            raise RequestError(f"tool_choice names the unknown function {only!r}", "tool_choice")
    if not functions:
        raise RequestError("a tool call needs at least one function in tools", "tools")
    calls = [_one_call_schema(fmt, f) for f in functions]
    schema = calls[0] if len(calls) == 1 else {"anyOf": calls}
    if not fmt.list_body:
        return schema
    listed: dict = {"type": "array", "items": schema, "minItems": 1}
    if parallel:
        listed["uniqueItems"] = True  # a call made twice is the same work twice
    else:
        listed["maxItems"] = 1
    return listed


# -- describing the tools in a system message ----------------------------------------------


def _example_value(schema: Any) -> Any:
    """A plausible value for `schema`, to show the shape of a call (not necessarily valid)."""
    if not isinstance(schema, Mapping):
        return None
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    kind = kind[0] if isinstance(kind, list) and kind else kind
    samples = {"string": "...", "integer": 1, "number": 1.5, "boolean": True, "array": []}
    if kind in samples:
        return samples[kind]
    if kind == "object" or "properties" in schema:
        return _example_object(schema)
    return None


def _example_object(schema: Mapping) -> dict:
    """An example object for an object schema: its required properties (else all)."""
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return {}
    required = schema.get("required")
    names = [n for n in required if n in properties] if isinstance(required, list) else []
    return {name: _example_value(properties[name]) for name in names or list(properties)}


def write_calls(fmt: ToolFormat, calls: list[tuple[str, Any]]) -> str:
    """The text of calls ((name, arguments) pairs) written in `fmt`, as the model writes them:
    ``open + body + close`` per call joined by the separator, or one list of bodies."""
    bodies = []
    for name, arguments in calls:
        body: dict = dict(fmt.constants)
        body[fmt.name_key] = name
        body[fmt.args_key] = arguments
        bodies.append(body)
    if fmt.list_body:
        return fmt.open + json.dumps(bodies, ensure_ascii=False) + fmt.close
    blocks = [fmt.open + json.dumps(body, ensure_ascii=False) + fmt.close for body in bodies]
    return fmt.separator.join(blocks)


def _example_call(fmt: ToolFormat, function: dict) -> str:
    """A call to `function` written in `fmt`, with example arguments."""
    arguments = _example_value(function.get("parameters", _EMPTY_PARAMETERS)) or {}
    return write_calls(fmt, [(function["name"], arguments)])


def _several_calls(fmt: ToolFormat) -> str:
    """How `fmt` joins several calls, in words."""
    if fmt.list_body:
        return "To call several functions, put all the calls in the one list."
    return (
        "To call several functions, write one such block per call, "
        f"separated by {json.dumps(fmt.separator)}."
    )


def tools_system_prompt(fmt: ToolFormat, functions: list[dict]) -> str:
    """A system message describing `functions` and how to call them in `fmt` (for templates
    that do not take tools): each function as JSON, then the call format with an example
    written ``fmt.open + body + fmt.close``."""
    listing = "\n".join(json.dumps(f, ensure_ascii=False) for f in functions)
    keys = [f'"{key}": {json.dumps(value)}' for key, value in fmt.constants]
    keys += [f'"{fmt.name_key}": <function name>', f'"{fmt.args_key}": <arguments object>']
    shape = "{" + ", ".join(keys) + "}"
    if fmt.list_body:
        shape = f"[{shape}]"
    return (
        "You can call the following functions, given as JSON:\n"
        f"{listing}\n\n"
        "To call a function, reply with only the call, written exactly as\n"
        f"{fmt.open}{shape}{fmt.close}\n"
        "where the arguments are a JSON object matching the function's parameters. For example:\n"
        f"{_example_call(fmt, functions[0]) if functions else ''}\n"
        f"{_several_calls(fmt)}"
    )
