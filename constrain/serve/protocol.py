"""OpenAI request bodies read into what the decoding loop runs: `read_chat`, `read_completion`.

Every field OpenAI defines is either honoured or refused with a `RequestError` naming it: a
field is never silently dropped. What OpenAI has no field for travels as extra body fields
(``extra_body`` in the `openai` client): `regex`, `grammar` (Lark text or a library name),
`choices`, `sampler` (``"awrs"``, ``"lcd"``, ``"smc"`` with `particles`), `speculative` (true
or the fields of `cn.Speculative`), `top_k`, `min_p`, `repetition_penalty`,
`max_reasoning_tokens`, `tool_format`, `json_whitespace`, `timeout`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from functools import cached_property
from typing import Any

from constrain.constraints import ConstraintSpec
from constrain.errors import ConstrainError, UnsupportedSchemaError
from constrain.models.base import PromptIds
from constrain.models.prompts import encode_chat, encode_text, render_chat
from constrain.options import SMC, DecodingConfig, Speculative
from constrain.processors.warpers import MinP, RepetitionPenalty, TopK, TopP
from constrain.serve import tools as toolbox
from constrain.serve.errors import RequestError
from constrain.serve.sections import AnswerPlan, Calls, Thinking

__all__ = ["Served", "Request", "read_chat", "read_completion"]

# fields accepted and not acted on: they change nothing in the output
_INFORMATIONAL = {"user", "metadata", "store", "service_tier", "stream_options", "model"}
# fields accepted only at their default value (no effect), refused otherwise
_DEFAULT_ONLY = {
    "frequency_penalty": 0,
    "presence_penalty": 0,
    "logit_bias": None,
    "echo": False,
    "suffix": None,
    "best_of": 1,
    "reasoning_effort": None,
}
_COMMON = {
    "max_tokens", "temperature", "top_p", "seed", "n", "stop", "stream", "logprobs",
    "response_format", "regex", "grammar", "choices", "sampler", "particles", "speculative",
    "top_k", "min_p", "repetition_penalty", "json_whitespace", "timeout",
}  # fmt: skip
_CHAT_ONLY = {
    "messages", "max_completion_tokens", "top_logprobs", "tools", "tool_choice",
    "parallel_tool_calls", "max_reasoning_tokens", "tool_format",
}  # fmt: skip
_THINKING_MARKERS = (("<think>", "</think>"), ("<thinking>", "</thinking>"))


@dataclass
class Served:
    """The served model and the server's limits, as requests are read against them."""

    model: Any  # a TransformersLM
    name: str
    max_tokens: int = 512  # default max_tokens of a request
    max_n: int = 8
    timeout: float = 120.0  # default and longest decoding time of a request, seconds
    tool_format_name: str | None = None  # a registry name forcing the format (else derived)

    @property
    def tokenizer(self):
        return self.model.tokenizer

    def encode_plain(self, text: str) -> list[int]:
        """Token ids of text the format fixes (no BOS, special-token text as text)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    @cached_property
    def thinking_markers(self) -> tuple[str, str, bool] | None:
        """(open, close, whether the generation prompt opens it) when the chat template has a
        thinking section (read once: the template does not change)."""
        template = getattr(self.tokenizer, "chat_template", None) or ""
        for open_, close in _THINKING_MARKERS:
            if open_ in template and close in template:
                prompt = render_chat(self.tokenizer, [{"role": "user", "content": "?"}])
                return open_, close, prompt.rstrip().endswith(open_)
        return None

    @cached_property
    def tool_format(self) -> toolbox.ToolFormat:
        """The tool-call format: `tool_format_name` from the registry, else derived from the
        chat template (read once), else the default."""
        return toolbox.tool_format(self.tokenizer, self.tool_format_name)

    @cached_property
    def template_renders_tools(self) -> bool:
        return toolbox.template_renders_tools(self.tokenizer)


@dataclass
class Request:
    """One request, read: the prompt, the decoding settings, the answer's sections."""

    kind: str  # "chat" or "completion"
    prompt: PromptIds
    config: DecodingConfig
    spec: ConstraintSpec  # the content's (what `Generator` compiles; sections swap matchers)
    plan: AnswerPlan
    n: int = 1
    seed: int | None = None
    stream: bool = False
    logprobs: bool = False
    top_logprobs: int = 0
    include_usage: bool = False


def read_chat(body: Mapping, served: Served) -> Request:
    """A chat completions body, read (`RequestError` names what is wrong)."""
    _check_fields(body, _COMMON | _CHAT_ONLY, "chat completions")
    messages = _messages(body.get("messages"))
    functions = toolbox.check_tools(body["tools"]) if body.get("tools") else []
    choice = _tool_choice(body.get("tool_choice"), functions)
    fmt = _format(body, served) if functions else None
    if functions and choice != "none" and not served.template_renders_tools:
        system = toolbox.tools_system_prompt(fmt, functions)
        messages = _with_system(messages, system)
        tools_arg = None
    else:
        tools_arg = body.get("tools") if functions else None
    if served.model.has_chat_template:
        try:
            ids = encode_chat(served.tokenizer, messages, tools=tools_arg)
        except ConstrainError as exc:
            raise RequestError(str(exc), "messages") from None
    else:
        text = "\n\n".join(str(m["content"] or "") for m in messages)
        ids = encode_text(served.tokenizer, text)
    max_tokens = _positive_int(
        body, "max_completion_tokens", _positive_int(body, "max_tokens", served.max_tokens)
    )
    markers = served.thinking_markers
    thinking = None
    if markers is not None:
        default = max(1, max_tokens // 2)
        budget = _positive_int(body, "max_reasoning_tokens", default)
        if budget >= max_tokens:
            raise RequestError(
                f"max_reasoning_tokens ({budget}) must be below max_tokens ({max_tokens}): "
                f"the answer needs tokens after the thinking",
                "max_reasoning_tokens",
            )
        thinking = Thinking(markers[0], markers[1], budget, markers[2])
    elif "max_reasoning_tokens" in body:
        raise RequestError(
            f"{served.name}'s chat template has no thinking section", "max_reasoning_tokens"
        )
    calls = None
    if functions and choice != "none":
        only = choice if choice not in ("auto", "required") else None
        parallel = bool(body.get("parallel_tool_calls", True))
        schema = toolbox.call_schema(fmt, functions, only=only, parallel=parallel)
        body_spec = ConstraintSpec(schema=schema, schema_options=_schema_options(body))
        body_constraint = _compile(body_spec, served, "tools")
        calls = Calls(fmt, body_constraint, "auto" if choice == "auto" else "required", parallel)
    return _request("chat", body, served, PromptIds(tuple(ids)), max_tokens, thinking, calls)


def read_completion(body: Mapping, served: Served) -> Request:
    """A (legacy) completions body, read."""
    _check_fields(body, _COMMON | {"prompt", "echo", "suffix", "best_of"}, "completions")
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise RequestError("prompt must be a string (one prompt per request)", "prompt")
    ids = encode_text(served.tokenizer, prompt)
    max_tokens = _positive_int(body, "max_tokens", served.max_tokens)
    return _request("completion", body, served, PromptIds(tuple(ids)), max_tokens, None, None)


def _request(kind, body, served, prompt, max_tokens, thinking, calls) -> Request:
    content_spec = _content_spec(body)
    content = _compile(content_spec, served, _constraint_field(body))
    if calls is not None and calls.choice == "auto" and content_spec.kind != "free":
        raise RequestError(
            "tool_choice 'auto' with a constrained content: the answer would have to be "
            "either; use tool_choice 'required' or 'none', or drop the content constraint",
            "tool_choice",
        )
    config = _config(body, served, max_tokens)
    sectioned = thinking is not None or calls is not None
    if sectioned and not config.token_samples:
        raise RequestError(
            "sampler 'smc' runs plain content only, not a thinking section or tool calls",
            "sampler",
        )
    if sectioned and config.speculative is not None:
        raise RequestError(
            "speculative decoding runs plain content only, not a thinking section or tool calls",
            "speculative",
        )
    logprobs, top = _logprobs(body, kind)
    if logprobs and (config.speculative is not None or not config.token_samples):
        raise RequestError("logprobs come with the token samplers, not speculative or SMC",
                           "logprobs")  # fmt: skip
    stops = _stops(body.get("stop"))
    plan = AnswerPlan(
        served.model.vocab,
        served.encode_plain,
        content,
        thinking,
        calls,
        stops,
        config.fit_max_tokens,
        max_tokens,
    )
    n = _positive_int(body, "n", 1)
    if n > served.max_n:
        raise RequestError(f"n is at most {served.max_n} here, got {n}", "n")
    seed = body.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise RequestError(f"seed must be an integer, got {seed!r}", "seed")
    options = body.get("stream_options") or {}
    return Request(
        kind,
        prompt,
        config,
        content_spec,
        plan,
        n,
        seed,
        bool(body.get("stream", False)),
        logprobs,
        top,
        bool(options.get("include_usage", False)),
    )


# -- fields -----------------------------------------------------------------------------------


def _check_fields(body: Mapping, known: set[str], endpoint: str) -> None:
    if not isinstance(body, Mapping):
        raise RequestError("the request body must be a JSON object")
    for name, value in body.items():
        if name in _DEFAULT_ONLY:
            if value not in (_DEFAULT_ONLY[name], None) and value != {}:
                raise RequestError(f"{name} is not supported (only its default)", name)
        elif name not in known and name not in _INFORMATIONAL:
            raise RequestError(f"unknown field {name!r} for {endpoint}", name)


def _positive_int(body: Mapping, name: str, default: int) -> int:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise RequestError(f"{name} must be a positive integer, got {value!r}", name)
    return value


def _number(body: Mapping, name: str, default: float, low: float, high: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if (
        not isinstance(value, (int, float))
        or isinstance(value, bool)
        or not math.isfinite(value)
        or not low <= value <= high
    ):
        raise RequestError(f"{name} must be a number in [{low}, {high}], got {value!r}", name)
    return float(value)


def _messages(messages) -> list[dict]:
    """Chat messages with their content as text (text parts joined)."""
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list", "messages")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
            raise RequestError(f"message {i} needs a role", f"messages[{i}].role")
        content = m.get("content")
        if isinstance(content, list):
            texts = []
            for j, part in enumerate(content):
                if not (isinstance(part, Mapping) and part.get("type") == "text"):
                    raise RequestError(
                        "only text content parts are supported", f"messages[{i}].content[{j}]"
                    )
                texts.append(str(part.get("text", "")))
            content = "".join(texts)
        elif content is not None and not isinstance(content, str):
            raise RequestError("content must be text", f"messages[{i}].content")
        if content is None and m["role"] != "assistant":
            raise RequestError(f"a {m['role']} message needs content", f"messages[{i}].content")
        message = {**m, "content": content}
        if content is None and not m.get("tool_calls"):
            message["content"] = ""
        out.append(_arguments_as_objects(message, i))
    return out


def _arguments_as_objects(message: dict, i: int) -> dict:
    """An assistant message's tool calls with their arguments as objects, as templates
    render them (OpenAI sends them as JSON text)."""
    calls = message.get("tool_calls")
    if not calls:
        return message
    if not isinstance(calls, list):
        raise RequestError("tool_calls must be a list", f"messages[{i}].tool_calls")
    read = []
    for j, call in enumerate(calls):
        if not (isinstance(call, Mapping) and isinstance(call.get("function"), Mapping)):
            raise RequestError(
                'a tool call is {"id", "type", "function": {"name", "arguments"}}',
                f"messages[{i}].tool_calls[{j}]",
            )
        function = dict(call["function"])
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            try:
                function["arguments"] = json.loads(arguments)
            except json.JSONDecodeError:
                pass
        read.append({**call, "function": function})
    return {**message, "tool_calls": read}


def _with_system(messages: list[dict], text: str) -> list[dict]:
    if messages and messages[0]["role"] == "system":
        first = messages[0]
        return [{**first, "content": f"{first['content']}\n\n{text}"}, *messages[1:]]
    return [{"role": "system", "content": text}, *messages]


def _tool_choice(choice, functions: list[dict]) -> str:
    """ "none", "auto", "required" or a function's name."""
    if choice is None:
        return "auto" if functions else "none"
    if choice in ("none", "auto", "required"):
        if choice != "none" and not functions:
            raise RequestError(f"tool_choice {choice!r} needs tools", "tool_choice")
        return choice
    if isinstance(choice, Mapping) and isinstance(choice.get("function"), Mapping):
        name = choice["function"].get("name")
        if name not in {f["name"] for f in functions}:
            raise RequestError(f"tool_choice names no tool: {name!r}", "tool_choice")
        return name
    raise RequestError(f"tool_choice must be none, auto, required or a function, got "
                       f"{choice!r}", "tool_choice")  # fmt: skip


def _format(body: Mapping, served: Served) -> toolbox.ToolFormat:
    name = body.get("tool_format")
    if name is None:
        return served.tool_format
    try:
        return toolbox.tool_format(served.tokenizer, name)
    except ConstrainError as exc:
        raise RequestError(str(exc), "tool_format") from None


def _content_spec(body: Mapping) -> ConstraintSpec:
    """The content's constraint: `response_format`, or one of the extensions."""
    kinds = {}
    fmt = body.get("response_format")
    if fmt is not None:
        if not isinstance(fmt, Mapping) or fmt.get("type") not in (
            "text", "json_object", "json_schema",
        ):  # fmt: skip
            raise RequestError(
                "response_format.type must be text, json_object or json_schema",
                "response_format.type",
            )
        if fmt["type"] == "json_object":
            kinds["schema"] = {"type": "object"}
        elif fmt["type"] == "json_schema":
            spec = fmt.get("json_schema")
            if not isinstance(spec, Mapping) or "schema" not in spec:
                raise RequestError(
                    "response_format.json_schema needs a schema",
                    "response_format.json_schema.schema",
                )
            kinds["schema"] = spec["schema"]
    for name in ("regex", "grammar", "choices"):
        if body.get(name) is not None:
            kinds[name] = body[name]
    if len(kinds) > 1:
        raise RequestError(
            f"at most one constraint per request, got {', '.join(sorted(kinds))}",
            sorted(kinds)[1],
        )
    if "choices" in kinds and not (
        isinstance(kinds["choices"], list) and all(isinstance(c, str) for c in kinds["choices"])
    ):
        raise RequestError("choices must be a list of strings", "choices")
    options = _schema_options(body) if "schema" in kinds else None
    return ConstraintSpec(**kinds, schema_options=options)


def _schema_options(body: Mapping) -> dict:
    whitespace = body.get("json_whitespace", "default")
    if whitespace not in ("compact", "default", "pretty"):
        raise RequestError("json_whitespace must be compact, default or pretty",
                           "json_whitespace")  # fmt: skip
    return {"whitespace": whitespace}


def _constraint_field(body: Mapping) -> str:
    fmt = body.get("response_format")
    if isinstance(fmt, Mapping) and fmt.get("type") == "json_schema":
        return "response_format.json_schema.schema"
    return next((k for k in ("regex", "grammar", "choices") if body.get(k) is not None),
                "response_format")  # fmt: skip


def _compile(spec: ConstraintSpec, served: Served, param: str):
    """The spec's constraint (cached by content); a bad one is a 400 naming the keyword and
    JSON pointer (schemas) or position (regexes, grammars)."""
    try:
        return spec.constraint(served.model.vocab)
    except UnsupportedSchemaError as exc:
        pointer = exc.pointer or "#"
        raise RequestError(str(exc), f"{param}{'' if pointer == '#' else pointer.lstrip('#')}",
                           code="unsupported_schema") from None  # fmt: skip
    except ConstrainError as exc:
        raise RequestError(str(exc), param) from None


def _config(body: Mapping, served: Served, max_tokens: int) -> DecodingConfig:
    temperature = _number(body, "temperature", 1.0, 0.0, 2.0)
    processors = []
    top_p = _number(body, "top_p", 1.0, 0.0, 1.0)
    if top_p < 1.0:
        if top_p == 0.0:
            raise RequestError("top_p must be above 0", "top_p")
        processors.append(TopP(top_p))
    if body.get("top_k") is not None:
        processors.append(TopK(_positive_int(body, "top_k", 0)))
    if body.get("min_p") is not None:
        processors.append(MinP(_number(body, "min_p", 0.0, 0.0, 1.0)))
    if body.get("repetition_penalty") is not None:
        processors.append(RepetitionPenalty(_number(body, "repetition_penalty", 1.0, 0.01, 10.0)))
    timeout = _number(body, "timeout", served.timeout, 0.001, served.timeout)
    return DecodingConfig(
        sampler=_sampler(body),
        processors=tuple(processors),
        max_tokens=max_tokens,
        temperature=temperature if temperature > 0 else 1.0,
        greedy=temperature == 0.0,
        timeout=timeout,
        speculative=_speculative(body.get("speculative")),
        chat=False,
    )


def _sampler(body: Mapping):
    name = body.get("sampler", "awrs")
    if name in ("awrs", "lcd"):
        if "particles" in body:
            raise RequestError("particles go with sampler 'smc'", "particles")
        return name
    if name == "smc":
        return SMC(particles=_positive_int(body, "particles", 8))
    raise RequestError(f"sampler must be awrs, lcd or smc, got {name!r}", "sampler")


def _speculative(value) -> Speculative | None:
    if value in (None, False):
        return None
    if value is True:
        return Speculative()
    if not isinstance(value, Mapping):
        raise RequestError("speculative must be true or an object", "speculative")
    known = {f.name for f in fields(Speculative)} - {"draft"}
    for name in value:
        if name not in known:
            raise RequestError(
                f"unknown speculative field {name!r} (one of {', '.join(sorted(known))})",
                f"speculative.{name}",
            )
    try:
        return Speculative(**value)
    except ConstrainError as exc:
        raise RequestError(str(exc), "speculative") from None


def _logprobs(body: Mapping, kind: str) -> tuple[bool, int]:
    value = body.get("logprobs")
    if kind == "completion":  # an integer: how many alternatives
        if value is None:
            return False, 0
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 20:
            raise RequestError("logprobs must be an integer in [0, 20]", "logprobs")
        return True, value
    top = body.get("top_logprobs")
    if top is not None and (not isinstance(top, int) or not 0 <= top <= 20):
        raise RequestError("top_logprobs must be an integer in [0, 20]", "top_logprobs")
    if top and not value:
        raise RequestError("top_logprobs needs logprobs: true", "top_logprobs")
    return bool(value), top or 0


def _stops(stop) -> tuple[str, ...]:
    if stop is None:
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise RequestError("stop must be a string or a list of non-empty strings", "stop")
    if len(stops) > 4:
        raise RequestError("at most 4 stop strings", "stop")
    return tuple(stops)
