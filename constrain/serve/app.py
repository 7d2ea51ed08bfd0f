"""The HTTP layer: OpenAI's endpoints over the `Scheduler` (FastAPI).

    POST /v1/chat/completions   POST /v1/completions   POST /v1/responses
    GET /v1/models   GET /v1/models/{id}   GET /health   GET /metrics (Prometheus)

Bodies are read by `constrain.serve.protocol` and prepared (compiled, planned) by
`constrain.serve.preparation` in its threads under one work budget each, never on the event
loop or the scheduler's thread, then queued on the scheduler, and answered in OpenAI's shapes, streamed as
server-sent events (``data: {...}``, then ``data: [DONE]``) when asked. A client that goes
away, streaming or not, cancels its request. Every error, ours or the framework's (an
unknown path, a wrong method), is OpenAI's error object. Before any of this, a request passes
`constrain.serve.access`'s checks (Host, Origin, API key, JSON content type).
"""

import asyncio
import time
from contextlib import asynccontextmanager

import uvicorn
from fastapi import FastAPI
from fastapi import Request as HTTPRequest
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from constrain.constraints.spec import compiled_constraints
from constrain.serve.access import Access
from constrain.serve.errors import RequestError
from constrain.serve.preparation import Preparer, read_body
from constrain.serve.protocol import Request, Served, read_chat, read_completion
from constrain.serve.reply import ChatReply, as_request_error
from constrain.serve.responses import ResponsesReply, read_responses
from constrain.serve.scheduler import Scheduler, Ticket

__all__ = ["SHUTDOWN_GRACE", "Server", "create_app"]


def create_app(served: Served, scheduler: Scheduler, access: Access | None = None):
    """The FastAPI application serving `served` through `scheduler` (started and stopped
    with the application), behind `access`'s checks (default: a loopback server's)."""
    access = access or Access()
    preparer = Preparer(served.limits, scheduler.give_way)

    @asynccontextmanager
    async def lifespan(app):
        scheduler.start()
        yield
        preparer.close()
        scheduler.stop()

    app = FastAPI(title="constrain", lifespan=lifespan, **access.documentation())

    def shut_down() -> None:
        """Begin to shut down as soon as a signal asks for it, while the HTTP server still
        answers: preparations and queued requests get a 503 at once, requests decoding get
        `_DRAIN` seconds, then a 503 (a stream its final error event)."""
        preparer.close()
        scheduler.drain(_DRAIN)

    app.state.shut_down = shut_down

    @app.exception_handler(StarletteHTTPException)
    async def http_error(http: HTTPRequest, exc: StarletteHTTPException):
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        what = f"{http.method} {http.url.path}"
        message = {404: f"no such endpoint: {what}", 405: f"method not allowed: {what}"}
        return error(RequestError(message.get(exc.status_code, str(exc.detail)),
                                  status=exc.status_code, code=code))  # fmt: skip

    @app.exception_handler(Exception)
    async def internal_error(http: HTTPRequest, exc: Exception):
        return error(as_request_error(exc))

    async def serve(http: HTTPRequest, kind: str):
        try:
            raw = await read_body(http, served.limits)
            request = await preparer.prepare(_READERS[kind], raw, served, http)
            if request is None:  # the client left
                return JSONResponse({}, status_code=499)
            ticket = Ticket(request, asyncio.get_running_loop())
            scheduler.submit(ticket)
        except RequestError as exc:
            return error(exc)
        answer = (ResponsesReply if kind == "responses" else ChatReply)(served, request, ticket)
        headers = _headers(request)
        if request.stream:
            return StreamingResponse(
                answer.events(http), media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", **headers},
            )  # fmt: skip
        try:
            choices = await answer.wait(http)
        except RequestError as exc:
            return error(exc)
        if choices is None:  # the client left
            return JSONResponse({}, status_code=499)
        return JSONResponse(answer.response(choices), headers=headers)

    @app.post("/v1/chat/completions")
    async def chat_completions(http: HTTPRequest):
        return await serve(http, "chat")

    @app.post("/v1/completions")
    async def completions(http: HTTPRequest):
        return await serve(http, "completion")

    @app.post("/v1/responses")
    async def responses(http: HTTPRequest):
        return await serve(http, "responses")

    card = {"id": served.name, "object": "model", "created": 0, "owned_by": "constrain"}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [card]}

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str):
        if model_id != served.name:
            return error(RequestError(f"model {model_id!r} is not served here (only "
                                      f"{served.name!r})", "model", status=404,
                                      code="model_not_found"))  # fmt: skip
        return card

    @app.get("/health")
    async def health():
        """200 "ok" while the scheduler steps; 503 "stalled" when one step or admission has
        taken longer than `_STALLED` seconds (nothing new is decoded meanwhile) or when every
        compile slot is held past its preparation's backstop (no new constraint can compile);
        200 "degraded" when some are."""
        busy = scheduler.busy_since
        busy_s = 0.0 if busy is None else time.monotonic() - busy
        slots = served.compile_slots
        overdue = slots.overdue()
        stalled = busy_s > _STALLED or (overdue and overdue >= slots.slots)
        state = "stalled" if stalled else "degraded" if overdue else "ok"
        status = {"status": state, "running": len(scheduler.running),
                  "waiting": len(scheduler.waiting), "preparing": len(preparer.under_way),
                  "compiling": slots.held, "compiles_overdue": overdue,
                  "sequences_in_flight": scheduler.sequences_in_flight,
                  "step_seconds": round(busy_s, 3)}  # fmt: skip
        return JSONResponse(status, status_code=503 if stalled else 200)

    @app.get("/metrics")
    async def metrics():
        cache = compiled_constraints(served.model.vocab)
        held = getattr(served.model, "prompt_cache_used", 0)
        measured = await asyncio.to_thread(cache.recount)  # they grow as they are used
        text = scheduler.metrics.text(cache.hits, cache.misses, held,
                                      (len(cache), measured, cache.max_bytes))  # fmt: skip
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    access.install(app)
    return app


# no `from __future__ import annotations` here: FastAPI reads the handlers' annotations

_STALLED = 10.0  # seconds in one step after which /health says the scheduler is stalled
SHUTDOWN_GRACE = 5.0  # seconds a shutdown (SIGTERM) waits for the answers in flight
_DRAIN = SHUTDOWN_GRACE - 1.5  # of which requests decoding get this much to finish
_READERS = {"chat": read_chat, "completion": read_completion, "responses": read_responses}


def error(exc: RequestError) -> JSONResponse:
    """`exc` as OpenAI's error response (a 429 says when to retry)."""
    headers = {"Retry-After": "1"} if exc.status == 429 else None
    return JSONResponse(exc.body(), status_code=exc.status, headers=headers)


def _headers(request: Request) -> dict[str, str]:
    """Response headers saying how the request was read (which syntax a grammar was)."""
    if request.grammar_syntax is None:
        return {}
    return {"X-Constrain-Grammar-Syntax": request.grammar_syntax}





class Server(uvicorn.Server):
    """uvicorn's server for an application of `create_app`: it tells the application (its
    `shut_down`) as soon as a signal asks it to stop, so the answers in flight are written
    while it still serves."""

    def __init__(self, config: uvicorn.Config, app):
        super().__init__(config)
        self.app = app

    def handle_exit(self, sig, frame) -> None:
        if not self.should_exit:
            self.app.state.shut_down()
        super().handle_exit(sig, frame)
