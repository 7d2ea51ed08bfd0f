"""How a request's answer goes back to its client: `Reply` waits for the scheduler's updates
and streams them as server-sent events; `ChatReply` writes them in the shapes of OpenAI's chat
completions and (legacy) completions: chunks, the whole response, usage, log-probs.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator

from constrain.serve.errors import RequestError
from constrain.serve.protocol import Request, Served
from constrain.serve.readout import CallDelta, Choice, ChoiceDelta, ToolCall
from constrain.serve.scheduler import Ticket, Update

__all__ = ["ChatReply", "Reply", "as_request_error", "token_entry"]

_POLL = 0.25  # seconds between checks that a waiting client is still there


class Reply:
    """One request's way back to its client: waiting for its updates, streaming them as
    server-sent events, and the response body; an endpoint's shapes are its subclass's
    (`ChatReply`, `constrain.serve.responses.ResponsesReply`)."""

    def __init__(self, served: Served, request: Request, ticket: Ticket):
        self.served, self.request, self.ticket = served, request, ticket
        self.created = int(time.time())

    async def _next(self, http) -> Update | None:
        """The next update, or None when the client has gone (the request is cancelled)."""
        while True:
            try:
                return await asyncio.wait_for(self.ticket.updates.get(), _POLL)
            except asyncio.TimeoutError:
                if await http.is_disconnected():
                    self.ticket.cancel()
                    return None

    async def wait(self, http) -> list[Choice] | None:
        """The finished choices (None: the client left)."""
        try:
            while True:
                update = await self._next(http)
                if update is None:
                    return None
                if update.error is not None:
                    raise as_request_error(update.error)
                if update.done is not None:
                    return update.done
        except asyncio.CancelledError:
            self.ticket.cancel()
            raise

    async def events(self, http) -> AsyncIterator[str]:
        """The server-sent events of a streamed answer."""
        finished = False
        try:
            for event in self.opening():
                yield _sse(event)
            while True:
                update = await self._next(http)
                if update is None:
                    return
                if update.error is not None:
                    for event in self.failure(as_request_error(update.error)):
                        yield _sse(event)
                    break
                for i, delta in update.deltas.items():
                    for event in self.delta_events(i, delta):
                        yield _sse(event)
                if update.done is not None:
                    for event in self.closing(update.done):
                        yield _sse(event)
                    break
            finished = True
            if self.done_marker:
                yield "data: [DONE]\n\n"
        finally:
            if not finished:  # the client left mid-stream (or the stream failed)
                self.ticket.cancel()

    # -- what a subclass writes ---------------------------------------------------------

    done_marker = True  # the stream ends with ``data: [DONE]``

    def opening(self) -> list[dict]:
        """The events before the first update."""
        return []

    def delta_events(self, index: int, delta: ChoiceDelta) -> list[dict]:
        """The events of one choice's delta."""
        raise NotImplementedError

    def closing(self, choices: list[Choice]) -> list[dict]:
        """The events after the last delta."""
        raise NotImplementedError

    def failure(self, error: RequestError) -> list[dict]:
        """The events of a request that failed after it began streaming."""
        return [error.body()]

    def response(self, choices: list[Choice]) -> dict:
        """The body of a whole (not streamed) answer."""
        raise NotImplementedError

    def usage_counts(self, choices: list[Choice]) -> tuple[int, int]:
        """(prompt tokens, completion tokens)."""
        return self.ticket.prompt_tokens, sum(c.tokens for c in choices)


class ChatReply(Reply):
    """The chat completions and (legacy) completions shapes."""

    def __init__(self, served: Served, request: Request, ticket: Ticket):
        super().__init__(served, request, ticket)
        prefix = "chatcmpl" if request.kind == "chat" else "cmpl"
        self.id = f"{prefix}-{uuid.uuid4().hex}"

    def opening(self) -> list[dict]:
        if self.request.kind != "chat":
            return []
        return [self.chunk(i, {"role": "assistant", "content": ""}) for i in range(self.request.n)]

    def delta_events(self, index: int, delta: ChoiceDelta) -> list[dict]:
        return self.delta_chunks(index, delta)

    def closing(self, choices: list[Choice]) -> list[dict]:
        out = [self.last_chunk(c) for c in choices]
        if self.request.include_usage:
            out.append({**self.envelope(), "choices": [], "usage": self.usage(choices)})
        return out

    # -- shapes ---------------------------------------------------------------------------

    def envelope(self) -> dict:
        chat = self.request.kind == "chat"
        kind = ("chat.completion" if chat else "text_completion") + (
            ".chunk" if chat and self.request.stream else ""
        )
        return {"id": self.id, "object": kind, "created": self.created, "model": self.served.name}

    def chunk(self, index: int, delta) -> dict:
        if self.request.kind == "chat":
            choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": None}
        else:
            choice = {"index": index, "text": delta, "logprobs": None, "finish_reason": None}
        return {**self.envelope(), "choices": [choice]}

    def delta_chunks(self, index: int, delta: ChoiceDelta) -> list[dict]:
        """The chunks of one choice's delta: its reasoning, then its content, tool-call
        deltas (OpenAI's shape: the first of a call carries its id and name) and value so
        far."""
        if self.request.kind != "chat":
            return [self.chunk(index, delta.content)] if delta.content else []
        out = []
        if delta.reasoning:
            out.append(self.chunk(index, {"reasoning_content": delta.reasoning}))
        fields: dict = {}
        if delta.content:
            fields["content"] = delta.content
        if delta.calls:
            fields["tool_calls"] = [_call_delta(d) for d in delta.calls]
        if delta.has_partial:
            fields["partial"] = delta.partial
        if fields:
            out.append(self.chunk(index, fields))
        return out

    def last_chunk(self, c: Choice) -> dict:
        if self.request.kind == "chat":
            choice = {"index": c.index, "delta": {}, "logprobs": self.logprobs(c),
                      "finish_reason": c.finish_reason, **_incomplete(c)}  # fmt: skip
        else:
            choice = {"index": c.index, "text": "", "logprobs": self.logprobs(c),
                      "finish_reason": c.finish_reason, **_incomplete(c)}  # fmt: skip
        return {**self.envelope(), "choices": [choice]}

    def response(self, choices: list[Choice]) -> dict:
        out = []
        for c in choices:
            if self.request.kind == "chat":
                message = {"role": "assistant", "content": c.content}
                if c.reasoning is not None:
                    message["reasoning_content"] = c.reasoning
                if c.calls:
                    message["tool_calls"] = [_tool_call(call) for call in c.calls]
                out.append({"index": c.index, "message": message, "logprobs": self.logprobs(c),
                            "finish_reason": c.finish_reason, **_incomplete(c)})  # fmt: skip
            else:
                out.append({"index": c.index, "text": c.content or "", "logprobs": self.logprobs(c),
                            "finish_reason": c.finish_reason, **_incomplete(c)})  # fmt: skip
        return {**self.envelope(), "choices": out, "usage": self.usage(choices)}

    def usage(self, choices: list[Choice]) -> dict:
        prompt, completion = self.usage_counts(choices)
        return {"prompt_tokens": prompt, "completion_tokens": completion,
                "total_tokens": prompt + completion}  # fmt: skip

    def logprobs(self, c: Choice):
        """The content tokens' log-probs in the endpoint's shape (None unless asked for)."""
        if not self.request.logprobs:
            return None
        vocab = self.served.model.vocab

        def entry(token: int, logprob: float) -> dict:
            return token_entry(vocab, token, logprob)

        if self.request.kind == "chat":
            return {"content": [
                {**entry(lp.token, lp.logprob), "top_logprobs": [entry(t, v) for t, v in lp.top]}
                for lp in c.logprobs
            ]}  # fmt: skip
        tokens = [entry(lp.token, lp.logprob) for lp in c.logprobs]
        offsets, at = [], 0
        for t in tokens:
            offsets.append(at)
            at += len(t["token"])
        return {
            "tokens": [t["token"] for t in tokens],
            "token_logprobs": [t["logprob"] for t in tokens],
            "top_logprobs": [{entry(t, v)["token"]: v for t, v in lp.top} for lp in c.logprobs],
            "text_offset": offsets,
        }


def _tool_call(call: ToolCall) -> dict:
    return {"id": call.id, "type": "function",
            "function": {"name": call.name, "arguments": call.arguments}}  # fmt: skip


def _call_delta(delta: CallDelta) -> dict:
    out: dict = {"index": delta.index}
    if delta.id is not None:
        out.update(id=delta.id, type="function")
        out["function"] = {"name": delta.name, "arguments": delta.arguments}
    else:
        out["function"] = {"arguments": delta.arguments}
    return out


def token_entry(vocab, token: int, logprob: float) -> dict:
    """A token's log-prob entry: its text, log-probability and bytes."""
    data = vocab.decode_bytes([token])
    return {"token": data.decode("utf-8", errors="replace"), "logprob": logprob,
            "bytes": list(data)}  # fmt: skip


def _sse(data: dict) -> str:
    return f"data: {json.dumps(data)}\n\n"


def _incomplete(c: Choice) -> dict:
    """A "length" choice's reason in words (``incomplete_reason``, our extension: the text
    is not complete, and this says why: max_tokens, the timeout, or no allowed way on)."""
    return {"incomplete_reason": c.incomplete_reason} if c.incomplete_reason else {}


def as_request_error(exc: Exception) -> RequestError:
    """`exc` as the error the client gets (a bug is a 500 naming it)."""
    if isinstance(exc, RequestError):
        return exc
    return RequestError(f"internal error (the server logged it): {exc}", status=500,
                        code="internal_error")  # fmt: skip
