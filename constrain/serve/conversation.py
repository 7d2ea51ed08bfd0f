"""Chat histories as clients send them, made renderable by the model's chat template.

Clients send back what the server answered: an assistant message carrying `tool_calls`
(``content`` null, arguments as JSON text, the SDK's extra fields such as ``refusal``), then
one ``tool`` message per call with its result. Chat templates differ in what they render of
this: some render calls and results in their family's format, many (the bundled SmolLM2's)
render neither, or fail on a null content. `read_messages` checks a request's messages and
puts them in one form; `for_template` rewrites what the template cannot render so the model
still sees it: earlier calls are written into the assistant's text in the model's tool format
(as the model itself would have written them), results go back as user text in
``<tool_response>`` blocks, and call ids take the shape the template demands.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from constrain.models.prompts import ROLES
from constrain.serve.errors import RequestError
from constrain.serve.tools import TemplateSupport, ToolFormat, write_calls

__all__ = ["for_template", "read_messages"]

_RESULT_OPEN, _RESULT_CLOSE = "<tool_response>\n", "\n</tool_response>"
_TEXT_PARTS = ("text", "input_text", "output_text")
_PART_KEYS = {"type", "text", "annotations", "logprobs"}  # what a text part may carry


def read_messages(messages: Any) -> list[dict]:
    """A request's messages, checked and in one form: ``developer`` is ``system``, content is
    text (text parts joined), an assistant's calls are ``{"id", "type", "function": {"name",
    "arguments"}}`` with the arguments parsed from their JSON text, a legacy ``function``
    message is a ``tool`` result, and each result names its call's function when the call is
    in the history. Other fields the client sent (``refusal``, ``audio``, ...) are dropped.

    Raises:
        RequestError: naming the message and field (``messages[2].tool_calls[0].function``).
    """
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list", "messages")
    out: list[dict] = []
    names: dict[str, str] = {}  # call id -> function name
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, Mapping):
            raise RequestError(f"{where} must be an object", where)
        role = m.get("role")
        if role not in ROLES:
            raise RequestError(
                f"{where}.role must be one of {', '.join(ROLES)}, got {role!r}", f"{where}.role"
            )
        content = _text(m.get("content"), f"{where}.content")
        if role == "assistant":
            message: dict = {"role": "assistant", "content": content}
            calls = _calls(m.get("tool_calls"), f"{where}.tool_calls")
            if calls:
                message["tool_calls"] = calls
                names.update((c["id"], c["function"]["name"]) for c in calls)
            elif content is None:
                raise RequestError(
                    "an assistant message needs content or tool_calls", f"{where}.content"
                )
            reasoning = m.get("reasoning_content")
            if isinstance(reasoning, str) and reasoning:
                message["reasoning_content"] = reasoning
        elif content is None:
            raise RequestError(f"a {role} message needs content", f"{where}.content")
        elif role in ("tool", "function"):
            ident = m.get("tool_call_id")
            if ident is not None and not isinstance(ident, str):
                raise RequestError("tool_call_id must be a string", f"{where}.tool_call_id")
            if role == "tool" and ident not in names:
                said = "names no call" if ident is None else f"{ident!r} is no earlier call's id"
                raise RequestError(
                    f"a tool result answers a call of an earlier assistant message: its "
                    f"tool_call_id {said}", f"{where}.tool_call_id",
                )  # fmt: skip
            name = m.get("name") if isinstance(m.get("name"), str) else names.get(ident or "")
            message = {"role": "tool", "content": content}
            message.update((k, v) for k, v in (("tool_call_id", ident), ("name", name)) if v)
        else:
            message = {"role": "system" if role == "developer" else role, "content": content}
        out.append(message)
    return out


def _text(content: Any, where: str) -> str | None:
    """Message content as text: a string, or text parts joined (None stays None)."""
    if content is None or isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise RequestError("content must be text or a list of text parts", where)
    texts = []
    for j, part in enumerate(content):
        if not (isinstance(part, Mapping) and part.get("type") in _TEXT_PARTS):
            kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
            raise RequestError(
                f"only text content parts are supported, got {kind!r}", f"{where}[{j}]"
            )
        text = part.get("text")
        if not isinstance(text, str):
            raise RequestError("a text part needs a text string", f"{where}[{j}].text")
        unknown = sorted(set(part) - _PART_KEYS)
        if unknown:
            known = ", ".join(sorted(_PART_KEYS))
            raise RequestError(f"unknown field {unknown[0]!r} of a text part (one of {known})",
                               f"{where}[{j}].{unknown[0]}")  # fmt: skip
        texts.append(text)
    return "".join(texts)


def _calls(calls: Any, where: str) -> list[dict]:
    if calls is None:
        return []
    if not isinstance(calls, list):
        raise RequestError("tool_calls must be a list", where)
    out = []
    for j, call in enumerate(calls):
        function = call.get("function") if isinstance(call, Mapping) else None
        if not (isinstance(function, Mapping) and isinstance(function.get("name"), str)):
            raise RequestError(
                'a tool call is {"id", "type", "function": {"name", "arguments"}}',
                f"{where}[{j}]",
            )
        arguments = function.get("arguments", {})
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except ValueError as exc:
                raise RequestError(f"a tool call's arguments must be JSON text: {exc}",
                                   f"{where}[{j}].function.arguments") from None  # fmt: skip
        ident = call.get("id")
        ident = ident if isinstance(ident, str) and ident else f"call_{j}"
        out.append(
            {"id": ident, "type": "function",
             "function": {"name": function["name"], "arguments": arguments}}
        )  # fmt: skip
    return out


def for_template(messages: list[dict], support: TemplateSupport, fmt: ToolFormat) -> list[dict]:
    """`messages` (`read_messages`'s form) as the chat template renders them: calls in the
    shape it takes (`support.calls`), else written into the assistant's text in `fmt`; results
    as tool messages when it renders them, else as user text in ``<tool_response>`` blocks
    (consecutive results in one message)."""
    out: list[dict] = []
    for m in messages:
        if m["role"] == "assistant" and m.get("tool_calls"):
            out.append(_assistant_calls(m, support, fmt))
        elif m["role"] == "tool" and not support.results:
            block = _RESULT_OPEN + m["content"] + _RESULT_CLOSE
            if out and out[-1].get("results"):
                out[-1] = {**out[-1], "content": out[-1]["content"] + "\n" + block}
            else:
                out.append({"role": "user", "content": block, "results": True})
        elif m["role"] == "tool" and "tool_call_id" in m and support.calls and support.calls.short_ids:
            out.append({**m, "tool_call_id": _short_id(m["tool_call_id"])})
        else:
            out.append(m)
    return [{k: v for k, v in m.items() if k != "results"} for m in out]


def _assistant_calls(m: dict, support: TemplateSupport, fmt: ToolFormat) -> dict:
    calls = m["tool_calls"]
    style = support.calls
    if style is None:  # the template renders no calls: the model's own text of them
        written = write_calls(fmt, [(c["function"]["name"], c["function"]["arguments"]) for c in calls])
        text = f"{m['content']}\n{written}" if m["content"] else written
        return {k: v for k, v in {**m, "content": text}.items() if k != "tool_calls"}
    rendered = []
    for c in calls:
        arguments = c["function"]["arguments"]
        if style.arguments_as_text and not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        ident = _short_id(c["id"]) if style.short_ids else c["id"]
        rendered.append({**c, "id": ident, "function": {**c["function"], "arguments": arguments}})
    content = m["content"] if m["content"] else style.content
    return {**m, "content": content, "tool_calls": rendered}


def _short_id(ident: str) -> str:
    """A 9-character id of letters and digits standing for `ident` (the same each time)."""
    return hashlib.sha256(ident.encode()).hexdigest()[:9]
