"""OpenAI request bodies read into what the decoding loop runs: `read_chat`, `read_completion`.

Every field OpenAI defines is either honoured or refused with a `RequestError` naming it: a
field is never silently dropped. What OpenAI has no field for travels as extra body fields
(``extra_body`` in the `openai` client): `regex`, `grammar` (Lark or GBNF text, or a library
name), `choices`, `sampler` (``"awrs"``, ``"lcd"``, ``"smc"`` with `particles`), `speculative`
(true or the fields of `cn.Speculative`), `top_k`, `min_p`, `repetition_penalty`,
`max_reasoning_tokens`, `tool_format`, `json_whitespace`, `stream_partial`, `timeout`; the
structured-output fields of vLLM and llama.cpp are read as ours (`constrain.serve.conventions`).
The compiled constraints travel with the `Request`: the scheduler runs them as they are.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import Any

from constrain import fuel
from constrain.constraints import ConstraintSpec
from constrain.constraints.spec import compiled_constraints
from constrain.errors import Abandoned, ConstrainError, UnsupportedSchemaError, WorkLimitError
from constrain.models.base import PromptIds
from constrain.models.prompts import encode_chat, encode_text, render_chat
from constrain.options import SMC, DecodingConfig, Speculative
from constrain.processors.warpers import MinP, RepetitionPenalty, TopK, TopP
from constrain.serve import conventions
from constrain.serve import tools as toolbox
from constrain.serve.conversation import for_template, read_messages
from constrain.serve.errors import RequestError
from constrain.serve.limits import CompileSlots, Limits
from constrain.serve.sections import AnswerPlan, Calls, Thinking
from constrain.utf8 import lone_surrogate

__all__ = ["Served", "Request", "read_chat", "read_completion"]

# fields accepted and not acted on: they change nothing in the output
_INFORMATIONAL = {"user", "metadata", "store", "service_tier", "stream_options", "model"}
_INFORMATIONAL |= conventions.INFORMATIONAL
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
    "top_k", "min_p", "repetition_penalty", "json_whitespace", "timeout", "stream_partial",
    *conventions.FIELDS,
}  # fmt: skip
_CHAT_ONLY = {
    "messages", "max_completion_tokens", "top_logprobs", "tools", "tool_choice",
    "parallel_tool_calls", "max_reasoning_tokens", "tool_format",
}  # fmt: skip
_SYNTAX_NAMES = {"lark": "Lark", "gbnf": "GBNF"}
_THINKING_MARKERS = (("<think>", "</think>"), ("<thinking>", "</thinking>"))


@dataclass
class Served:
    """The served model and the server's limits, as requests are read against them."""

    model: Any  # a TransformersLM
    name: str
    max_tokens: int = 512  # default max_tokens of a request
    timeout: float = 120.0  # default and longest decoding time of a request, seconds
    tool_format_name: str | None = None  # a registry name forcing the format (else derived)
    limits: Limits = field(default_factory=Limits)
    compile_slots: CompileSlots = field(init=False, repr=False)

    def __post_init__(self):
        self.compile_slots = CompileSlots(self.limits.max_compiling)
        compiled_constraints(self.model.vocab).max_bytes = self.limits.max_cache_bytes

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
    def template(self) -> toolbox.TemplateSupport:
        """What the chat template renders of tool use, and the tool-call format (read once:
        the template does not change)."""
        return toolbox.template_support(self.tokenizer, self.tool_format_name)


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
    stream_partial: bool = False  # streamed deltas carry the content's value so far
    grammar_syntax: str | None = None  # "lark" or "gbnf" when the content is a grammar
    echo: dict = field(default_factory=dict)  # settings a response repeats (Responses API)
    param: str = "response_format"  # the field planning errors name: the constraint's


def read_chat(body: Mapping, served: Served) -> Request:
    """A chat completions body, read (`RequestError` names what is wrong)."""
    _check_fields(body, _COMMON | _CHAT_ONLY, "chat completions")
    n = _sequences(body, served)
    limits = served.limits
    for name, limit in (("messages", limits.max_messages), ("tools", limits.max_tools)):
        if isinstance(body.get(name), list):
            limits.check_count(name, len(body[name]), limit, f"--max-{name}")
    messages = read_messages(body.get("messages"))
    found = lone_surrogate({"messages": body.get("messages"), "tools": body.get("tools")}, "")
    if found is not None:
        raise RequestError(found[1], found[0])
    functions = toolbox.check_tools(body["tools"]) if body.get("tools") else []
    choice = _tool_choice(body.get("tool_choice"), functions)
    support = served.template
    fmt = _format(body, served)
    messages = for_template(messages, support, fmt)
    if served.model.has_chat_template:
        tools_arg = body.get("tools") if functions else None
        if functions and choice != "none" and not support.tools:
            messages = _with_system(messages, toolbox.tools_system_prompt(fmt, functions))
            tools_arg = None
        chars = sum(len(json.dumps(m)) for m in messages) + len(json.dumps(tools_arg or []))
        limits.check_prompt(chars, served.model.context_length, "messages")
        try:
            ids = encode_chat(served.tokenizer, messages, tools=tools_arg)
        except ConstrainError as exc:
            named = str(exc).split(" ", 1)[0]  # the field it names ("messages[0].role"), if any
            field = named if named.startswith(("messages", "tools")) else "messages"
            raise RequestError(str(exc), field) from None
    else:
        text = "\n\n".join(m["content"] or "" for m in messages)
        limits.check_prompt(len(text), served.model.context_length, "messages")
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
        # a named function is one call (as OpenAI answers it)
        parallel = only is None and _flag(body, "parallel_tool_calls", True)
        schema = toolbox.call_schema(fmt, functions, only=only, parallel=parallel)
        body_spec = ConstraintSpec(schema=schema, schema_options=conventions.schema_options(body))
        body_constraint = _compile(body_spec, served, "tools")
        calls = Calls(fmt, body_constraint, "auto" if choice == "auto" else "required", parallel)
    request = _request("chat", body, served, PromptIds(tuple(ids)), n, max_tokens,
                       thinking, calls)
    if calls is not None and calls.choice == "required":
        need = request.plan.shortest_call
        if need > max_tokens:
            field = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
            raise RequestError(
                f"{field}={max_tokens} cannot hold a tool call: the shortest call in this "
                f"format takes {need} tokens (the wrapper and the shortest arguments)",
                field,
            )
    return request


def read_completion(body: Mapping, served: Served) -> Request:
    """A (legacy) completions body, read."""
    _check_fields(body, _COMMON | {"prompt", "echo", "suffix", "best_of"}, "completions")
    n = _sequences(body, served)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise RequestError("prompt must be a string (one prompt per request)", "prompt")
    served.limits.check_prompt(len(prompt), served.model.context_length, "prompt")
    ids = encode_text(served.tokenizer, prompt)
    max_tokens = _positive_int(body, "max_tokens", served.max_tokens)
    return _request("completion", body, served, PromptIds(tuple(ids)), n, max_tokens, None, None)


def _sequences(body: Mapping, served: Served) -> int:
    """The request's `n`, once `n` and n x `particles` are known to be within the limits
    (read before any work they multiply)."""
    n = _positive_int(body, "n", 1)
    limits = served.limits
    if n > limits.max_n:
        raise RequestError(f"n is at most {limits.max_n} here (--max-n), got {n}", "n",
                           code="limit_exceeded")  # fmt: skip
    particles = _positive_int(body, "particles", 8) if body.get("sampler") == "smc" else 1
    if n * particles > limits.max_sequences:
        raise RequestError(
            f"n x particles is {n} x {particles} = {n * particles} sequences; this server "
            f"decodes at most {limits.max_sequences} for one request (--max-sequences)",
            "particles" if particles > 1 else "n",
            code="limit_exceeded",
        )
    return n


def _request(kind, body, served, prompt, n, max_tokens, thinking, calls) -> Request:
    wanted = conventions.content_constraint(body)
    content_spec = wanted.spec
    text = content_spec.regex or content_spec.choices
    if content_spec.kind == "grammar" and isinstance(content_spec.grammar, str):
        text = content_spec.grammar
    if text is not None:
        served.limits.check_text(wanted.param, text)
    whitespace = (content_spec.schema_options or {}).get("whitespace")
    if whitespace not in (None, *conventions.JSON_WHITESPACE):
        served.limits.check_text("whitespace_pattern", whitespace)
    content = _compile(content_spec, served, wanted.param, wanted.syntax)
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
    seed = body.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)
                             or not 0 <= seed < 2**63):  # fmt: skip
        raise RequestError(f"seed must be an integer in [0, 2**63), got {seed!r}", "seed")
    stream = _flag(body, "stream", False)
    options = body.get("stream_options")
    if options is not None and not isinstance(options, Mapping):
        raise RequestError("stream_options must be an object", "stream_options")
    include_usage = _flag(options or {}, "include_usage", False, "stream_options.")
    partial = _flag(body, "stream_partial", False)
    if partial and not (stream and content_spec.is_json):
        raise RequestError(
            "stream_partial sends the value of JSON content as it grows: it needs stream: true "
            "and a JSON response_format (json_schema or json_object)",
            "stream_partial",
        )
    return Request(
        kind,
        prompt,
        config,
        content_spec,
        plan,
        n,
        seed,
        stream,
        logprobs,
        top,
        include_usage,
        partial,
        wanted.syntax,
        param=wanted.param if content_spec.kind != "free" or calls is None else "tools",
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


def _flag(body: Mapping, name: str, default: bool, prefix: str = "") -> bool:
    """A boolean field (JSON true or false: the text "false" is not false)."""
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise RequestError(f"{prefix}{name} must be true or false, got {value!r}", prefix + name)
    return value


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
    """The request's tool-call format: `tool_format` from the registry, else the server's."""
    name = body.get("tool_format")
    if name is None:
        return served.template.format
    try:
        return toolbox.tool_format(served.tokenizer, name)
    except ConstrainError as exc:
        raise RequestError(str(exc), "tool_format") from None


def _compile(spec: ConstraintSpec, served: Served, param: str, syntax: str | None = None):
    """The spec's constraint (cached by content); a bad one is a 400 naming the keyword and
    JSON pointer (schemas) or position (regexes, grammars; and which syntax a grammar was
    read in). A compile takes one of the server's compile slots: none free within
    `Limits.compile_wait` is a 429."""
    vocab = served.model.vocab
    slots = None if spec.is_compiled(vocab) else served.compile_slots
    work, holder = fuel.current(), object()
    backstop = math.inf if work is None else work.deadline
    if slots is not None and not slots.take(holder, served.limits.compile_wait, backstop,
                                            lambda: fuel.burn(0)):  # fmt: skip
        raise RequestError(
            f"the server has been compiling {served.limits.max_compiling} constraints, its "
            f"limit (--max-compiling), for the {served.limits.compile_wait:g} s this request "
            f"waited (--compile-wait): retry later",
            status=429,
            code="too_many_compiles",
        )
    try:
        return spec.constraint(vocab)
    except Abandoned:
        raise
    except WorkLimitError as exc:
        raise RequestError(f"{param}: {exc}", param, code="work_limit_exceeded") from None
    except UnsupportedSchemaError as exc:
        pointer = exc.pointer or "#"
        raise RequestError(str(exc), f"{param}{'' if pointer == '#' else pointer.lstrip('#')}",
                           code="unsupported_schema") from None  # fmt: skip
    except ConstrainError as exc:
        read_as = f"{param} read as {_SYNTAX_NAMES[syntax]}: " if syntax else ""
        raise RequestError(f"{read_as}{exc}", param) from None
    except RecursionError:
        raise RequestError(f"{param} nests too deeply to be read", param) from None
    finally:
        if slots is not None:
            slots.give_back(holder)


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
    sampler = _sampler(body)
    if isinstance(sampler, SMC) and temperature == 0.0:
        raise RequestError(
            "sampler 'smc' draws weighted particles: temperature 0 (greedy) needs a token "
            "sampler ('awrs' or 'lcd')",
            "temperature",
        )
    try:
        return DecodingConfig(
            sampler=sampler,
            processors=tuple(processors),
            max_tokens=max_tokens,
            temperature=temperature if temperature > 0 else 1.0,
            greedy=temperature == 0.0,
            timeout=timeout,
            speculative=_speculative(body.get("speculative")),
            chat=False,
        )
    except ConstrainError as exc:  # a combination of settings: the first field it names
        named = [name for name in body if name in str(exc)]
        raise RequestError(str(exc), named[0] if named else "sampler") from None


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
    if top is not None and (not isinstance(top, int) or isinstance(top, bool) or not 0 <= top <= 20):
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
    found = lone_surrogate(stop, "stop")
    if found is not None:
        raise RequestError(found[1], found[0])
    if len(stops) > 4:
        raise RequestError("at most 4 stop strings", "stop")
    return tuple(stops)
