"""Preparing a request: its body read, compiled and planned under one `Fuel`, off the
scheduler's thread.

Everything a request needs before its first decoding step runs here, in a thread of its own
(beyond `Limits.max_preparing` requests under way, one more is a 429; `Limits.max_compiling`
of them may compile new constraints at once, see `protocol`), under one fuel of `Limits.prepare_fuel` work units: parsing the body, reading it into a `Request`
(compiling its constraints), planning their shortest completions and building their first
masks (`AnswerPlan.prepare`). Work is counted, not timed, so a request gets the same answer
on an idle and on a loaded server; running out is a 400 naming the limit. While the work runs
the event loop watches the client: a client that goes away cancels the fuel, and the work
stops at its next burn, its memory freed as it unwinds; the server's shutdown cancels every
preparation the same way. The fuel's wall-clock backstop (`Limits.prepare_seconds`) is a 503.
The scheduler then only prefills and decodes.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from constrain.errors import Abandoned, ConstrainError, WorkLimitError
from constrain.fuel import Fuel, stage
from constrain.serve.errors import RequestError
from constrain.serve.limits import Limits
from constrain.serve.protocol import Request, Served

__all__ = ["Preparer", "read_body"]

Reader = Callable[[Mapping, Served], Request]
_WATCH_EVERY = 0.1  # seconds between two looks at the client while its request is prepared
_CLIENT_LEFT = "the client went away"
_DRAINED = 64 * 2**20  # bytes of a body past the limit read and dropped before the 413
_SHUTTING_DOWN = RequestError("the server is shutting down: retry on another replica or later",
                              status=503, code="shutting_down")  # fmt: skip


async def read_body(http, limits: Limits) -> bytes:
    """The request's body, refused with a 413 naming the limit once it is longer than
    `Limits.max_body_bytes`. A client reads a response only once it has sent its body, so
    the rest of a too-large one is read and dropped (up to `_DRAINED` bytes more) before the
    413 is sent; a client that waits for ``Expect: 100-continue`` gets it at once, and so does
    one that declares more than that."""
    limit = limits.max_body_bytes
    declared = http.headers.get("content-length")
    size = int(declared) if declared is not None and declared.isdigit() else 0
    waits = http.headers.get("expect", "").lower() == "100-continue"
    if size > limit and (waits or size > limit + _DRAINED):
        raise _too_large(size, limit)
    chunks, size = [], 0
    async for chunk in http.stream():
        size += len(chunk)
        if size > limit + _DRAINED:
            break
        if size <= limit:
            chunks.append(chunk)
    if size > limit:
        raise _too_large(size, limit)
    return b"".join(chunks)


def _too_large(size: int, limit: int) -> RequestError:
    return RequestError(
        f"the request body has {size:,} bytes or more; this server takes at most {limit:,} "
        f"(--max-body-bytes)",
        status=413,
        code="request_too_large",
    )


class Preparer:
    """Prepares requests in its own threads, each under its own fuel (see the module
    docstring); `close` abandons every preparation under way."""

    def __init__(self, limits: Limits, give_way: Callable[[], None] | None = None):
        self.limits = limits
        self.give_way = give_way  # called every thousand units (`Scheduler.give_way`)
        # a thread per request under way: at most `max_compiling` of them compile, the
        # others wait for a slot or do cheap work, so a cached request never waits
        self.pool = ThreadPoolExecutor(limits.max_preparing, thread_name_prefix="constrain-prepare")
        self.under_way: set[Fuel] = set()  # touched by the event loop's thread only
        self.closed = False

    async def prepare(self, read: Reader, raw: bytes, served: Served, http) -> Request | None:
        """The request in `raw` (a body read by `read_body`) read by `read`, compiled and
        planned; None when the client went away meanwhile.

        Raises:
            RequestError: the body is not a request (400 naming the field), it needs more
                work than the fuel (400, code ``work_limit_exceeded``), too many requests are
                being prepared or compiled (429), or the backstop or the shutdown stopped it (503).
        """
        if self.closed:
            raise _SHUTTING_DOWN
        if len(self.under_way) >= self.limits.max_preparing:
            raise RequestError(
                f"the server is preparing {len(self.under_way)} requests already, its limit "
                f"(--max-preparing): retry later",
                status=429,
                code="too_many_preparations",
            )
        fuel = Fuel(self.limits.prepare_fuel, limit="--prepare-fuel",
                    seconds=self.limits.prepare_seconds, pause=self.give_way)  # fmt: skip
        self.under_way.add(fuel)
        try:
            work = asyncio.get_running_loop().run_in_executor(
                self.pool, _prepare, fuel, read, raw, served
            )
            while not (await asyncio.wait({work}, timeout=_WATCH_EVERY))[0]:
                if fuel.stopped is None and await http.is_disconnected():
                    fuel.cancel(_CLIENT_LEFT)
            return work.result()
        except Abandoned as exc:
            if fuel.stopped == _CLIENT_LEFT:
                return None
            if self.closed:
                raise _SHUTTING_DOWN from None
            raise RequestError(f"the request was abandoned: {exc.reason}", status=503,
                               code="abandoned") from None  # fmt: skip
        except futures.CancelledError:  # never started: the pool was shut down
            raise _SHUTTING_DOWN from None
        finally:
            self.under_way.discard(fuel)

    def close(self) -> None:
        """Abandon every preparation under way and refuse new ones (the server is shutting
        down): each is answered 503 ``shutting_down``."""
        self.closed = True
        for fuel in list(self.under_way):
            fuel.cancel("the server is shutting down")
        self.pool.shutdown(wait=False, cancel_futures=True)


def _prepare(fuel: Fuel, read: Reader, raw: bytes, served: Served) -> Request:
    """Parse, read and plan one request under `fuel` (in a thread of the pool)."""
    with fuel.active():
        with stage("parsing the body"):
            body = _parse(raw, served.limits)
        model = body.get("model")
        if model is not None and model != served.name:
            raise RequestError(f"model {model!r} is not served here (only {served.name!r})",
                               "model", status=404, code="model_not_found")  # fmt: skip
        try:
            with stage("reading the request"):
                request = read(body, served)
        except (RequestError, Abandoned):
            raise
        except WorkLimitError as exc:  # outside a compile (which names its field)
            raise RequestError(str(exc), code="work_limit_exceeded") from None
        except RecursionError:
            raise RequestError("the request nests too deeply to be read") from None
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise RequestError(f"malformed request: {exc}") from None
        try:  # the compiled constraints' plans and first masks: errors name their field
            request.plan.prepare()
        except Abandoned:
            raise
        except WorkLimitError as exc:
            raise RequestError(f"{request.param}: {exc}", request.param,
                               code="work_limit_exceeded") from None  # fmt: skip
        except ConstrainError as exc:
            raise RequestError(f"{request.param}: {exc}", request.param) from None
    return request


def _parse(raw: bytes, limits: Limits) -> Mapping[str, Any]:
    """The body as a JSON object, at most `Limits.max_json_depth` deep."""
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RequestError(f"the body is not JSON: {exc}") from None
    except (RecursionError, ValueError) as exc:  # too deep for the parser; a 5000-digit int
        raise RequestError(f"the body is not JSON this server reads: {exc}") from None
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    depth = _depth(body, limits.max_json_depth)
    if depth > limits.max_json_depth:
        raise RequestError(
            f"the body nests deeper than {limits.max_json_depth} levels (--max-json-depth)",
            code="limit_exceeded",
        )
    return body


def _depth(value: Any, limit: int) -> int:
    """How deep `value` nests (lists and objects), counted up to `limit` + 1."""
    deepest, level = 0, [value]
    while level and deepest <= limit:
        deepest += 1
        level = [
            item
            for v in level
            if isinstance(v, (dict, list))
            for item in (v.values() if isinstance(v, dict) else v)
            if isinstance(item, (dict, list))
        ]
    return deepest
