"""OpenAI's Responses API (``POST /v1/responses``), which current SDKs and agent frameworks
default to: text, structured output (``text.format``) and function tools, streamed or not.

A Responses body is read as the chat completions body it means (`read_responses`): ``input``
items become chat messages (``function_call`` items an assistant's tool calls,
``function_call_output`` items tool results), ``instructions`` a system message first,
``text.format`` the ``response_format``, function tools the chat tools; so the same reading,
constraints and sections serve both APIs, and an error names the Responses field
(``input[2].content``, ``text.format.schema/properties/a``). This server stores nothing:
``previous_response_id``, ``conversation`` and ``background`` are refused with a 400 that
says to send the whole conversation in ``input``. `ResponsesReply` writes the answer as a
``response`` object (output items: reasoning, message, function calls) and, streamed, as the
typed events OpenAI sends (``response.created`` ... ``response.completed``), in an order the
SDK's stream helper accumulates.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from constrain.serve import conventions
from constrain.serve.errors import RequestError
from constrain.serve.protocol import Request, Served, read_chat
from constrain.serve.readout import Choice, ChoiceDelta
from constrain.serve.reply import Reply, token_entry

__all__ = ["ResponsesReply", "read_responses"]

# OpenAI's fields, read here or passed on to the chat reading under their chat names
_RENAMED = {"max_output_tokens": "max_tokens"}
_PASSED = {
    "model", "temperature", "top_p", "parallel_tool_calls", "stream", "user", "metadata",
    "service_tier", "top_logprobs",
}  # fmt: skip
_INFORMATIONAL = {
    "store", "safety_identifier", "prompt_cache_key", "prompt_cache_retention", "stream_options",
    "max_tool_calls",
}  # fmt: skip
_STATELESS = ("previous_response_id", "conversation", "background", "prompt")
# our extensions (and the conventions'), as in chat completions
_EXTENSIONS = {
    "regex", "grammar", "choices", "sampler", "particles", "speculative", "top_k", "min_p",
    "repetition_penalty", "json_whitespace", "timeout", "stream_partial", "seed", "stop",
    "max_reasoning_tokens", "tool_format", *conventions.FIELDS, *conventions.INFORMATIONAL,
}  # fmt: skip
_READ_HERE = {"input", "instructions", "text", "tools", "tool_choice", "reasoning", "truncation",
              "include", "verbosity"}  # fmt: skip
_LOGPROBS = "message.output_text.logprobs"


def read_responses(body: Mapping, served: Served) -> Request:
    """A Responses body, read (`RequestError` names the Responses field)."""
    if not isinstance(body, Mapping):
        raise RequestError("the request body must be a JSON object")
    chat, where = _chat_body(body)
    try:
        request = read_chat(chat, served)
    except RequestError as exc:
        exc.param = _responses_param(exc.param, where)
        raise
    echo = {key: body.get(key) for key in ("instructions", "max_output_tokens", "temperature",
                                           "top_p", "metadata", "user")}  # fmt: skip
    echo["tools"] = list(body.get("tools") or [])
    echo["tool_choice"] = body.get("tool_choice") or "auto"
    echo["parallel_tool_calls"] = body.get("parallel_tool_calls", True)
    echo["text"] = body.get("text") or {"format": {"type": "text"}}
    return replace(request, echo=echo)


def _chat_body(body: Mapping) -> tuple[dict, list[str]]:
    """The chat completions body `body` means, and for each chat message the Responses field
    it came from."""
    chat: dict = {}
    for name, value in body.items():
        if name in _STATELESS and value not in (None, False):
            raise RequestError(
                f"{name} is not supported: this server stores no responses or conversations; "
                f"send the whole conversation in input",
                name,
            )
        if name in _RENAMED:
            chat[_RENAMED[name]] = value
        elif name in _PASSED or name in _EXTENSIONS:
            chat[name] = value
        elif name not in _READ_HERE and name not in _INFORMATIONAL and name not in _STATELESS:
            raise RequestError(f"unknown field {name!r} for responses", name)
    for name in ("verbosity", "reasoning"):
        value = body.get(name)
        if value not in (None, {}) and not (
            isinstance(value, Mapping) and all(v is None for v in value.values())
        ):
            raise RequestError(
                f"{name} is not supported here (only its default; max_reasoning_tokens bounds "
                f"a thinking model's reasoning)",
                name,
            )
    if body.get("truncation") not in (None, "disabled"):
        raise RequestError("truncation must be 'disabled': a prompt too long for the context "
                           "is a 400, never cut", "truncation")  # fmt: skip
    include = body.get("include") or []
    if not isinstance(include, list):
        raise RequestError("include must be a list", "include")
    for i, item in enumerate(include):
        if item != _LOGPROBS:
            raise RequestError(f"include {item!r} is not supported (only {_LOGPROBS!r})",
                               f"include[{i}]")  # fmt: skip
    if include:
        chat["logprobs"] = True
    messages, where = _messages(body)
    chat["messages"] = messages
    _text_format(body.get("text"), chat)
    if body.get("tools") is not None:
        chat["tools"] = _tools(body["tools"])
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
    return chat, where


def _messages(body: Mapping) -> tuple[list[dict], list[str]]:
    messages, where = [], []
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise RequestError("instructions must be a string", "instructions")
        messages.append({"role": "system", "content": instructions})
        where.append("instructions")
    items = body.get("input")
    if isinstance(items, str):
        messages.append({"role": "user", "content": items})
        where.append("input")
        return messages, where
    if not isinstance(items, list) or not items:
        raise RequestError("input must be a string or a non-empty list of items", "input")
    for j, item in enumerate(items):
        at = f"input[{j}]"
        if not isinstance(item, Mapping):
            raise RequestError(f"{at} must be an object", at)
        kind = item.get("type", "message")
        if kind == "message":
            messages.append({"role": item.get("role"), "content": item.get("content")})
            where.append(at)
        elif kind == "function_call":
            call = {"id": item.get("call_id"), "type": "function",
                    "function": {"name": item.get("name"), "arguments": item.get("arguments")}}  # fmt: skip
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and where[-1].startswith("input"):
                last.setdefault("tool_calls", []).append(call)  # one turn's calls together
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
                where.append(at)
        elif kind == "function_call_output":
            output = item.get("output")
            messages.append({"role": "tool", "tool_call_id": item.get("call_id"),
                             "content": output})  # fmt: skip
            where.append(at)
        elif kind != "reasoning":  # earlier reasoning is not shown to the model again
            raise RequestError(
                f"{at}.type {kind!r} is not supported (message, function_call, "
                f"function_call_output and reasoning items are)",
                f"{at}.type",
            )
    if not any(w.startswith("input") for w in where):
        raise RequestError("input holds nothing to answer: reasoning items alone are not shown "
                           "to the model again", "input")  # fmt: skip
    return messages, where


def _text_format(text: Any, chat: dict) -> None:
    if text is None:
        return
    if not isinstance(text, Mapping):
        raise RequestError("text must be an object", "text")
    if text.get("verbosity") is not None:
        raise RequestError("text.verbosity is not supported here (only its default)",
                           "text.verbosity")  # fmt: skip
    fmt = text.get("format")
    if fmt is None:
        return
    if not isinstance(fmt, Mapping) or fmt.get("type") not in ("text", "json_object", "json_schema"):
        raise RequestError("text.format.type must be text, json_object or json_schema",
                           "text.format.type")  # fmt: skip
    if fmt["type"] == "json_object":
        chat["response_format"] = {"type": "json_object"}
    elif fmt["type"] == "json_schema":
        if "schema" not in fmt:
            raise RequestError("text.format json_schema needs a schema", "text.format.schema")
        spec = {"name": fmt.get("name", "output"), "schema": fmt["schema"]}
        chat["response_format"] = {"type": "json_schema", "json_schema": spec}


def _tools(tools: Any) -> Any:
    if not isinstance(tools, list):
        return tools  # the chat reading says what is wrong
    out = []
    for i, tool in enumerate(tools):
        if not (isinstance(tool, Mapping) and tool.get("type") == "function"):
            kind = tool.get("type") if isinstance(tool, Mapping) else tool
            raise RequestError(f"tools[{i}].type {kind!r} is not supported (only function tools)",
                               f"tools[{i}].type")  # fmt: skip
        function = {"name": tool.get("name")}
        for key in ("description", "parameters", "strict"):
            if tool.get(key) is not None:
                function[key] = tool[key]
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(choice: Any) -> Any:
    if isinstance(choice, Mapping) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    if isinstance(choice, Mapping):
        raise RequestError(f"tool_choice type {choice.get('type')!r} is not supported",
                           "tool_choice.type")  # fmt: skip
    return choice


_MESSAGE_PARAM = re.compile(r"messages\[(\d+)\](.*)", re.S)
# a chat message's fields, as the Responses item's (a tool result's id is its call_id)
_ITEM_FIELDS = {".tool_call_id": ".call_id", ".tool_calls[0].function.arguments": ".arguments",
                ".tool_calls[0].function.name": ".name", ".tool_calls[0].id": ".call_id"}
_PARAMS = [
    (re.compile(r"response_format\.json_schema\.schema(.*)", re.S), "text.format.schema"),
    (re.compile(r"response_format(.*)", re.S), "text.format"),
    (re.compile(r"tools\[(\d+)\]\.function(.*)", re.S), None),
    (re.compile(r"max_tokens(.*)", re.S), "max_output_tokens"),
]


def _responses_param(param: str | None, where: list[str]) -> str | None:
    """A chat field's name as the Responses field it came from."""
    if param is None:
        return None
    if param == "messages":
        return "input"
    found = _MESSAGE_PARAM.fullmatch(param)
    if found:
        i = int(found.group(1))
        rest = _ITEM_FIELDS.get(found.group(2), found.group(2))
        return (where[i] if i < len(where) else "input") + rest
    for pattern, name in _PARAMS:
        found = pattern.fullmatch(param)
        if found and name is None:
            return f"tools[{found.group(1)}]{found.group(2)}"
        if found:
            return name + found.group(1)
    return param


class ResponsesReply(Reply):
    """The Responses API's shapes: a ``response`` object, or its stream of typed events."""

    done_marker = False  # the stream ends with response.completed (or .incomplete / .failed)

    def __init__(self, served: Served, request: Request, ticket):
        super().__init__(served, request, ticket)
        self.id = f"resp_{uuid.uuid4().hex}"
        self.sequence = 0
        self.items: list[dict] = []  # the output items streamed so far
        self.open: dict | None = None  # the item being streamed
        self.call_items: dict[int, dict] = {}  # call index -> its function_call item

    # -- the response object ------------------------------------------------------------

    def skeleton(self, status: str) -> dict:
        echo = self.request.echo
        return {
            "id": self.id, "object": "response", "created_at": self.created,
            "model": self.served.name, "status": status, "error": None,
            "incomplete_details": None, "output": [], **echo, "store": False,
        }  # fmt: skip

    def response(self, choices: list[Choice]) -> dict:
        (c,) = choices
        status = "incomplete" if c.finish_reason == "length" else "completed"
        out = self.skeleton(status)
        if status == "incomplete":
            out["incomplete_details"] = {"reason": "max_output_tokens"}
            if c.incomplete_reason:
                out["incomplete_details"]["explanation"] = c.incomplete_reason
        items = []
        if c.reasoning:
            items.append(_reasoning_item(f"rs_{uuid.uuid4().hex}", c.reasoning, "completed"))
        if c.content is not None:
            items.append(self.message_item(f"msg_{uuid.uuid4().hex}", c.content, status, c))
        for call in c.calls:
            items.append(_call_item(f"fc_{uuid.uuid4().hex}", call.id, call.name,
                                    call.arguments, "completed"))  # fmt: skip
        out["output"] = items
        out["usage"] = self.usage_of(c)
        return out

    def message_item(self, ident: str, text: str, status: str, c: Choice | None = None) -> dict:
        part = {"type": "output_text", "text": text, "annotations": [],
                "logprobs": self.logprobs(c) if c is not None else []}  # fmt: skip
        return {"type": "message", "id": ident, "role": "assistant", "status": status,
                "content": [part]}  # fmt: skip

    def logprobs(self, c: Choice) -> list:
        if not self.request.logprobs:
            return []
        vocab = self.served.model.vocab
        return [
            {**token_entry(vocab, lp.token, lp.logprob),
             "top_logprobs": [token_entry(vocab, t, v) for t, v in lp.top]}
            for lp in c.logprobs
        ]  # fmt: skip

    def usage_of(self, c: Choice) -> dict:
        prompt, completion = self.usage_counts([c])
        return {
            "input_tokens": prompt, "output_tokens": completion,
            "total_tokens": prompt + completion,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": c.reasoning_tokens},
        }  # fmt: skip

    # -- the events -----------------------------------------------------------------------

    def event(self, kind: str, **fields) -> dict:
        self.sequence += 1
        return {"type": kind, "sequence_number": self.sequence - 1, **fields}

    def opening(self) -> list[dict]:
        return [
            self.event("response.created", response=self.skeleton("in_progress")),
            self.event("response.in_progress", response=self.skeleton("in_progress")),
        ]

    def delta_events(self, index: int, delta: ChoiceDelta) -> list[dict]:
        out = []
        if delta.reasoning:
            out += self.open_item("reasoning")
            out.append(self.event("response.reasoning_text.delta", **self.where(),
                                  content_index=0, delta=delta.reasoning))  # fmt: skip
            self.open["text"] += delta.reasoning
        if delta.content:
            out += self.open_item("message")
            out.append(self.event("response.output_text.delta", **self.where(), content_index=0,
                                  delta=delta.content, logprobs=[]))  # fmt: skip
            self.open["text"] += delta.content
        for call in delta.calls:
            if call.id is not None:
                out += self.close_item()
                item = _call_item(f"fc_{uuid.uuid4().hex}", call.id, call.name, "", "in_progress")
                out += self.add_item(item)
                self.call_items[call.index] = item
            if call.arguments:
                item = self.call_items[call.index]
                item["arguments"] += call.arguments
                out.append(self.event("response.function_call_arguments.delta",
                                      item_id=item["id"], output_index=self.items.index(item),
                                      delta=call.arguments))  # fmt: skip
        return out

    def where(self) -> dict:
        return {"item_id": self.open["item"]["id"], "output_index": len(self.items) - 1}

    def open_item(self, kind: str) -> list[dict]:
        """Start an item of `kind` ("reasoning" or "message") unless it is the open one."""
        if self.open is not None and self.open["item"]["type"] == kind:
            return []
        out = self.close_item()
        if kind == "reasoning":
            item = _reasoning_item(f"rs_{uuid.uuid4().hex}", None, "in_progress")
            part = {"type": "reasoning_text", "text": ""}
        else:
            item = {"type": "message", "id": f"msg_{uuid.uuid4().hex}", "role": "assistant",
                    "status": "in_progress", "content": []}  # fmt: skip
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        out += self.add_item(item)
        self.open = {"item": item, "part": part, "text": ""}
        out.append(self.event("response.content_part.added", **self.where(), content_index=0,
                              part=part))  # fmt: skip
        return out

    def add_item(self, item: dict) -> list[dict]:
        self.items.append(item)
        return [self.event("response.output_item.added", output_index=len(self.items) - 1,
                           item=dict(item))]  # fmt: skip

    def close_item(self, status: str = "completed") -> list[dict]:
        """End the open reasoning or message item (function calls end in `closing`)."""
        if self.open is None:
            return []
        item, part, text = self.open["item"], self.open["part"], self.open["text"]
        self.open = None
        where = {"item_id": item["id"], "output_index": self.items.index(item)}
        done = {**part, "text": text}
        if item["type"] == "reasoning":
            events = [self.event("response.reasoning_text.done", **where, content_index=0,
                                 text=text)]  # fmt: skip
            item.update(content=[done], status=status)
        else:
            events = [self.event("response.output_text.done", **where, content_index=0,
                                 text=text, logprobs=[])]  # fmt: skip
            item.update(content=[done], status=status)
        events.append(self.event("response.content_part.done", **where, content_index=0,
                                 part=done))  # fmt: skip
        events.append(self.event("response.output_item.done", output_index=where["output_index"],
                                 item=item))  # fmt: skip
        return events

    def closing(self, choices: list[Choice]) -> list[dict]:
        (c,) = choices
        final = self.response(choices)
        incomplete = final["status"] == "incomplete"
        out = []
        if c.content is not None and not any(i["type"] == "message" for i in self.items):
            out += self.open_item("message")  # an empty answer is still a message
        out += self.close_item("incomplete" if incomplete else "completed")
        for item in self.call_items.values():
            at = self.items.index(item)
            out.append(self.event("response.function_call_arguments.done", item_id=item["id"],
                                  output_index=at, arguments=item["arguments"]))  # fmt: skip
            item["status"] = "completed"
            out.append(self.event("response.output_item.done", output_index=at, item=item))
        final["output"] = self.items  # the items as streamed (their ids)
        if self.request.logprobs:  # the message's log-probs come with the whole answer
            for item in self.items:
                if item["type"] == "message":
                    item["content"][0]["logprobs"] = self.logprobs(c)
        kind = "response.incomplete" if incomplete else "response.completed"
        out.append(self.event(kind, response=final))
        return out

    def failure(self, error: RequestError) -> list[dict]:
        failed = self.skeleton("failed")
        failed["error"] = {"code": "server_error", "message": error.message}
        return [self.event("response.failed", response=failed)]


def _reasoning_item(ident: str, text: str | None, status: str) -> dict:
    content = [] if text is None else [{"type": "reasoning_text", "text": text}]
    return {"type": "reasoning", "id": ident, "summary": [], "content": content,
            "status": status}  # fmt: skip


def _call_item(ident: str, call_id: str, name: str, arguments: str, status: str) -> dict:
    return {"type": "function_call", "id": ident, "call_id": call_id, "name": name,
            "arguments": arguments, "status": status}  # fmt: skip
