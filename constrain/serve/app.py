"""The HTTP layer: OpenAI's endpoints over the `Scheduler` (FastAPI).

    POST /v1/chat/completions   POST /v1/completions   GET /v1/models   GET /health
    GET /metrics (Prometheus)

Bodies are read by `constrain.serve.protocol` (in a worker thread: compiling a schema never
stalls the event loop), queued on the scheduler, and answered in OpenAI's shapes, streamed as
server-sent events (``data: {...}``, then ``data: [DONE]``) when asked. A client that goes
away, streaming or not, cancels its request.
"""

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi import Request as HTTPRequest
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse

from constrain.constraints.spec import compiled_constraints
from constrain.serve import tools as toolbox
from constrain.serve.errors import RequestError
from constrain.serve.protocol import Request, Served, read_chat, read_completion
from constrain.serve.scheduler import Choice, Scheduler, Ticket, Update

__all__ = ["create_app"]

_POLL = 0.25  # seconds between checks that a waiting client is still there


def create_app(served: Served, scheduler: Scheduler):
    """The FastAPI application serving `served` through `scheduler` (started and stopped
    with the application)."""

    @asynccontextmanager
    async def lifespan(app):
        scheduler.start()
        yield
        scheduler.stop()

    app = FastAPI(title="constrain", lifespan=lifespan)

    def error(exc: RequestError) -> JSONResponse:
        headers = {"Retry-After": "1"} if exc.status == 429 else None
        return JSONResponse(exc.body(), status_code=exc.status, headers=headers)

    async def serve(http: HTTPRequest, kind: str):
        try:
            try:
                body = await http.json()
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise RequestError(f"the body is not JSON: {exc}") from None
            model = body.get("model") if isinstance(body, dict) else None
            if model is not None and model != served.name:
                raise RequestError(f"model {model!r} is not served here (only "
                                   f"{served.name!r})", "model", status=404,
                                   code="model_not_found")  # fmt: skip
            read = read_chat if kind == "chat" else read_completion
            try:
                request = await asyncio.to_thread(read, body, served)
            except (AttributeError, KeyError, TypeError, ValueError) as exc:
                if isinstance(exc, RequestError):
                    raise
                raise RequestError(f"malformed request: {type(exc).__name__}: {exc}") from None
            ticket = Ticket(request, asyncio.get_running_loop())
            scheduler.submit(ticket)
        except RequestError as exc:
            return error(exc)
        answer = Reply(served, request, ticket)
        if request.stream:
            return StreamingResponse(
                answer.events(http), media_type="text/event-stream",
                headers={"Cache-Control": "no-cache"},
            )  # fmt: skip
        try:
            choices = await answer.wait(http)
        except RequestError as exc:
            return error(exc)
        if choices is None:  # the client left
            return JSONResponse({}, status_code=499)
        return JSONResponse(answer.response(choices))

    @app.post("/v1/chat/completions")
    async def chat_completions(http: HTTPRequest):
        return await serve(http, "chat")

    @app.post("/v1/completions")
    async def completions(http: HTTPRequest):
        return await serve(http, "completion")

    @app.get("/v1/models")
    async def models():
        card = {"id": served.name, "object": "model", "created": 0, "owned_by": "constrain"}
        return {"object": "list", "data": [card]}

    @app.get("/health")
    async def health():
        return {"status": "ok", "running": len(scheduler.running),
                "waiting": len(scheduler.waiting),
                "sequences_in_flight": scheduler.sequences_in_flight}  # fmt: skip

    @app.get("/metrics")
    async def metrics():
        cache = compiled_constraints(served.model.vocab)
        held = getattr(served.model, "prompt_cache_used", 0)
        text = scheduler.metrics.text(cache.hits, cache.misses, held)
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    return app


# no `from __future__ import annotations` here: FastAPI reads the handlers' annotations


class Reply:
    """One request's way back to its client: waiting, streaming, and the response body."""

    def __init__(self, served: Served, request: Request, ticket: Ticket):
        self.served, self.request, self.ticket = served, request, ticket
        prefix = "chatcmpl" if request.kind == "chat" else "cmpl"
        self.id = f"{prefix}-{uuid.uuid4().hex}"
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
                    raise _as_request_error(update.error)
                if update.done is not None:
                    return update.done
        except asyncio.CancelledError:
            self.ticket.cancel()
            raise

    async def events(self, http) -> AsyncIterator[str]:
        """The server-sent events of a streamed answer."""
        chat, finished = self.request.kind == "chat", False
        try:
            if chat:
                for i in range(self.request.n):
                    yield _sse(self.chunk(i, {"role": "assistant", "content": ""}))
            while True:
                update = await self._next(http)
                if update is None:
                    return
                if update.error is not None:
                    yield _sse(_as_request_error(update.error).body())
                    break
                for i, text in update.reasoning.items():
                    yield _sse(self.chunk(i, {"reasoning_content": text}))
                for i, text in update.content.items():
                    yield _sse(self.chunk(i, {"content": text} if chat else text))
                if update.done is not None:
                    for c in update.done:
                        yield _sse(self.last_chunk(c))
                    if self.request.include_usage:
                        yield _sse({**self.envelope(), "choices": [],
                                    "usage": self.usage(update.done)})  # fmt: skip
                    break
            finished = True
            yield "data: [DONE]\n\n"
        finally:
            if not finished:  # the client left mid-stream (or the stream failed)
                self.ticket.cancel()

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

    def last_chunk(self, c: Choice) -> dict:
        if self.request.kind == "chat":
            delta = {}
            if c.bodies:
                calls = toolbox.parse_calls(c.bodies, self.request.plan.calls.format)
                delta["tool_calls"] = [{"index": k, **call} for k, call in enumerate(calls)]
            choice = {"index": c.index, "delta": delta, "logprobs": self.logprobs(c),
                      "finish_reason": c.finish_reason}  # fmt: skip
        else:
            choice = {"index": c.index, "text": "", "logprobs": self.logprobs(c),
                      "finish_reason": c.finish_reason}  # fmt: skip
        return {**self.envelope(), "choices": [choice]}

    def response(self, choices: list[Choice]) -> dict:
        out = []
        for c in choices:
            if self.request.kind == "chat":
                message = {"role": "assistant", "content": c.content}
                if c.reasoning is not None:
                    message["reasoning_content"] = c.reasoning
                if c.bodies:
                    fmt = self.request.plan.calls.format
                    message["tool_calls"] = toolbox.parse_calls(c.bodies, fmt)
                out.append({"index": c.index, "message": message,
                            "logprobs": self.logprobs(c), "finish_reason": c.finish_reason})  # fmt: skip
            else:
                out.append({"index": c.index, "text": c.content or "",
                            "logprobs": self.logprobs(c), "finish_reason": c.finish_reason})  # fmt: skip
        return {**self.envelope(), "choices": out, "usage": self.usage(choices)}

    def usage(self, choices: list[Choice]) -> dict:
        prompt, completion = self.ticket.prompt_tokens, sum(c.tokens for c in choices)
        return {"prompt_tokens": prompt, "completion_tokens": completion,
                "total_tokens": prompt + completion}  # fmt: skip

    def logprobs(self, c: Choice):
        """The content tokens' log-probs in the endpoint's shape (None unless asked for)."""
        if not self.request.logprobs:
            return None
        vocab = self.served.model.vocab

        def entry(token: int, logprob: float) -> dict:
            data = vocab.decode_bytes([token])
            return {"token": data.decode("utf-8", errors="replace"), "logprob": logprob,
                    "bytes": list(data)}  # fmt: skip

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


def _sse(data: dict) -> str:
    return f"data: {json.dumps(data)}\n\n"


def _as_request_error(exc: Exception) -> RequestError:
    if isinstance(exc, RequestError):
        return exc
    return RequestError(f"internal error: {type(exc).__name__}: {exc}", status=500,
                        code="internal_error")  # fmt: skip
