"""The scheduler: one thread runs every request's sequences in one `decoding.Batch`.

Requests wait in a bounded queue (full: `RequestError` 429, the HTTP layer adds
``Retry-After``); between steps the thread admits waiting ones up to `max_running`, feeds
their prompts in chunks of `prefill_chunk` tokens, one chunk between two steps (so a long
prompt delays other clients' next tokens by one chunk, not by its whole prefill), lets
each request whose prompt is in join the batch, moves each sequence through its answer's
sections, hands new text to streaming clients and completes finished requests. A request
whose client went away is cancelled: its sequences end before the next step and their KV
caches go with them.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ctypes
import gc
import logging
import sys
import threading
import time
from dataclasses import dataclass, field

from constrain.api import Generator, Run
from constrain.constraints.spec import compiled_constraints
from constrain.decoding import Batch, Job
from constrain.errors import ConstrainError
from constrain.serve.errors import RequestError
from constrain.serve.metrics import Metrics
from constrain.serve.protocol import Request
from constrain.serve.readout import Choice, ChoiceDelta, Readout
from constrain.serve.sections import Answer

__all__ = ["Choice", "Scheduler", "Ticket", "Update"]

log = logging.getLogger("constrain.serve")
_GONE = RequestError("the server is shutting down: retry on another replica or later",
                     status=503, code="shutting_down")  # fmt: skip
_TRIM_EVERY = 2.0  # seconds between returns of freed heap pages to the system
_RECOUNT_EVERY = 1.0  # seconds between measures of what the compiled constraints hold
_GIVE_WAY = 0.002  # seconds another thread's long work sleeps while a step is under way
_SWITCH_INTERVAL = 0.001  # seconds a thread holds the GIL while another waits for it


def _heap_trimmer():
    """glibc's `malloc_trim`, which returns freed heap pages to the system (KV caches are
    freed in blocks glibc would otherwise keep, and the resident set would creep up); None
    elsewhere."""
    with contextlib.suppress(OSError, AttributeError):
        return ctypes.CDLL("libc.so.6").malloc_trim
    return None


@dataclass
class Update:
    """What a request's client learns after a step: per choice, what it added (`ChoiceDelta`:
    reasoning, content, tool calls); `done` with the finished choices (`Choice`) or an
    `error`."""

    deltas: dict[int, ChoiceDelta] = field(default_factory=dict)
    done: list[Choice] | None = None
    error: Exception | None = None


class Ticket:
    """A request in the scheduler: its updates arrive on `updates` (an asyncio queue of the
    event loop that submitted it)."""

    def __init__(self, request: Request, loop: asyncio.AbstractEventLoop):
        self.request = request
        self.loop = loop
        self.updates: asyncio.Queue[Update] = asyncio.Queue()
        self.submitted = time.perf_counter()
        self.job: Job | None = None
        self.run: Run | None = None
        self.readouts: list[Readout] = []  # one per choice (token samplers)
        self.prompt_tokens = len(request.prompt.ids)
        self.first_token_at: float | None = None
        self.cancelled = False

    def cancel(self, why: str = "the client went away") -> None:
        """Stop the request (from any thread): waiting, it is dropped; running, its
        sequences end before the next step."""
        self.cancelled = True
        if self.job is not None:
            self.job.cancel(why)

    def send(self, update: Update) -> None:
        self.loop.call_soon_threadsafe(self.updates.put_nowait, update)


class Scheduler:
    """The thread that decodes every request, batched (`max_running` 1: one at a time)."""

    def __init__(self, model, *, max_running: int = 16, max_queue: int = 64,
                 prefill_chunk: int = 128, metrics: Metrics | None = None):  # fmt: skip
        self.model = model
        self.max_running, self.max_queue = max_running, max_queue
        self.prefill_chunk = prefill_chunk  # prompt tokens fed between two steps
        self.metrics = metrics or Metrics()
        self.waiting: collections.deque[Ticket] = collections.deque()
        self.prefilling: collections.deque[Ticket] = collections.deque()  # admitted, being fed
        self.running: list[Ticket] = []
        self.batch = Batch()
        self.wake = threading.Condition()
        self.stopped = False
        self.thread = threading.Thread(target=self._loop, name="constrain-scheduler", daemon=True)
        self.trim_heap, self.trimmed_at, self.untrimmed = _heap_trimmer(), 0.0, False
        self.compiled = compiled_constraints(model.vocab)  # shared with the preparations
        self.recounted_at = 0.0
        self.busy_since: float | None = None  # time.monotonic() when the current step began
        self.closing_at: float | None = None  # shutting down: when the last answers are due

    def start(self) -> None:
        gc.freeze()  # the model and the compiled constraints stay: full collections skip them
        # the decoding thread takes the GIL back after each tensor operation: a short switch
        # interval keeps it from waiting long behind preparations (see `give_way`)
        sys.setswitchinterval(min(sys.getswitchinterval(), _SWITCH_INTERVAL))
        self.thread.start()

    def drain(self, seconds: float) -> None:
        """Begin to shut down (from any thread): new requests and the ones not decoding yet
        are answered 503 at once; the ones decoding get `seconds` to finish, then a 503 (a
        streamed one its final error event), while the HTTP server still sends answers."""
        with self.wake:
            self.closing_at = time.monotonic() + seconds
            self.wake.notify()

    def stop(self) -> None:
        """Stop the thread after its current step; the requests still waiting or running
        are answered with a 503."""
        with self.wake:
            self.stopped = True
            self.wake.notify()
        self.thread.join(timeout=30)
        for ticket in [*self.waiting, *self.prefilling, *self.running]:
            ticket.send(Update(error=_GONE))

    def submit(self, ticket: Ticket) -> None:
        """Queue `ticket`; `RequestError` 429 when the queue is full (503 once shutting
        down)."""
        with self.wake:
            if self.closing_at is not None:
                raise _GONE
            if len(self.waiting) >= self.max_queue:
                self.metrics.rejected += 1
                raise RequestError(
                    f"the server is busy ({len(self.waiting)} requests waiting): retry later",
                    status=429,
                    code="queue_full",
                )
            self.waiting.append(ticket)
            self.metrics.requests += 1
            self.wake.notify()

    def give_way(self) -> None:
        """Sleep briefly while a step is under way (called by other threads' long work): the
        decoding thread takes the GIL back between its tensor operations at once, instead of
        waiting out the interpreter's switch interval after each of them."""
        if self.busy_since is not None:
            time.sleep(_GIVE_WAY)

    @property
    def sequences_in_flight(self) -> int:
        """Sequences of the batch still holding a KV cache."""
        return sum(s.stream is not None for job in self.batch.jobs for s in job.sequences)

    # -- the thread ---------------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            with self.wake:
                if not self.waiting and not self.running and not self.prefilling:
                    self._trim(idle=True)
                while not (self.stopped or self.waiting or self.running or self.prefilling):
                    self.wake.wait(timeout=0.5 if self.closing_at is not None else None)
                if self.stopped:
                    return
                if self.closing_at is not None:
                    self._close_some()
                admitted = []
                while self.waiting and (len(self.running) + len(self.prefilling) + len(admitted)
                                        < self.max_running):  # fmt: skip
                    admitted.append(self.waiting.popleft())
            self.busy_since = time.monotonic()
            for ticket in admitted:
                self._admit(ticket)
            self.metrics.queue_depth = len(self.waiting)
            self._prefill()
            try:
                if self.batch.jobs:
                    self._step()
            except Exception as exc:  # the shared forward failed: every request in flight
                for ticket in list(self.running):
                    self._fail(ticket, exc)
                self.batch = Batch()
            finally:
                self.busy_since = None

    def _close_some(self) -> None:
        """Shutting down (lock held): answer 503 to what is not decoding yet, and to the rest
        once `closing_at` has passed."""
        due = [*self.waiting, *self.prefilling]
        self.waiting.clear()
        self.prefilling.clear()
        if time.monotonic() >= self.closing_at:
            due += self.running
            for ticket in self.running:
                ticket.job.cancel("the server is shutting down")
            self.running = []
        for ticket in due:
            ticket.send(Update(error=_GONE))
            self.metrics.failed += 1

    def _trim(self, idle: bool) -> None:
        """Measure what the compiled constraints hold now (they grow as they are used; the
        least recently used go beyond their bound) at most every `_RECOUNT_EVERY` seconds,
        and return freed heap pages to the system: when the server goes idle, and between
        completions at most every `_TRIM_EVERY` seconds."""
        now = time.perf_counter()
        if now - self.recounted_at > _RECOUNT_EVERY:
            self.compiled.recount()
            self.recounted_at = now
        due = idle or time.perf_counter() - self.trimmed_at > _TRIM_EVERY
        if self.trim_heap is not None and self.untrimmed and due:
            self.trim_heap(0)
            self.trimmed_at, self.untrimmed = time.perf_counter(), False

    def _admit(self, ticket: Ticket) -> None:
        """Start `ticket`'s sequences, their prompts not fed yet (`_prefill` feeds them)."""
        if ticket.cancelled:
            return
        r = ticket.request
        try:
            generator = Generator.compiled(self.model, r.spec, r.plan.content, r.config)
            ticket.run = generator.start([r.prompt] * r.n, r.seed, prefill=False)
        except ConstrainError as exc:  # the prompt does not fit in the context, say
            ticket.send(Update(error=RequestError(str(exc), "messages")))
            self.metrics.failed += 1
            return
        except Exception as exc:
            ticket.send(Update(error=exc))
            self.metrics.failed += 1
            return
        self.prefilling.append(ticket)

    def _prefill(self) -> None:
        """Feed up to `prefill_chunk` prompt tokens (all of them while no request decodes:
        nobody waits), the requests with the fewest tokens left first (a short prompt does
        not wait behind a long one); a request whose prompts are in joins the batch."""
        budget = self.prefill_chunk if self.batch.jobs else None
        for ticket in list(self.prefilling):
            if ticket.cancelled:
                self.prefilling.remove(ticket)  # its streams go with its run
        try_order = sorted(self.prefilling, key=lambda t: t.run.prefill(0))
        for ticket in try_order:
            if budget is not None and budget <= 0:
                return
            try:
                pending = ticket.run.prefill(0)
                take = pending if budget is None else min(pending, budget)
                left = ticket.run.prefill(take)
                if budget is not None:
                    budget -= take
                if not left:
                    self.prefilling.remove(ticket)
                    self._join(ticket)
            except Exception as exc:  # this request's alone
                if ticket in self.prefilling:
                    self.prefilling.remove(ticket)
                ticket.send(Update(error=exc))
                self.metrics.failed += 1

    def _join(self, ticket: Ticket) -> None:
        """Put `ticket`'s sequences, their prompts fed, into their first section, and its
        job into the batch."""
        r, run = ticket.request, ticket.run
        if r.config.token_samples:  # SMC keeps its particles as they are
            for s in run.sequences:
                answer = Answer(r.plan)
                answer.begin(s)
                ticket.readouts.append(Readout(answer, partial=r.stream_partial))
                s.top_logprobs = r.top_logprobs if r.logprobs else None
        ticket.job = run.job()
        if ticket.cancelled:
            ticket.job.cancel("the client went away")
        self.batch.add(ticket.job)
        self.running.append(ticket)
        self.metrics.observe_wait(time.perf_counter() - ticket.submitted)

    def _step(self) -> None:
        t0 = time.perf_counter()
        self.batch.step()
        elapsed = time.perf_counter() - t0
        self.metrics.observe_step(elapsed, len(self.running))
        for ticket in list(self.running):
            try:
                self._after_step(ticket)
            except Exception as exc:  # a bug in this request's answer: its failure alone
                ticket.job.fail(exc)
            if ticket.job.error is not None:
                self._fail(ticket, ticket.job.error)

    def _after_step(self, ticket: Ticket) -> None:
        """Move `ticket`'s sequences through their sections; send what they added, or the
        finished choices."""
        job = ticket.job
        if job.error is not None:
            return
        smc = not ticket.request.config.token_samples
        for s, readout in zip(job.sequences, ticket.readouts):
            readout.answer.after_step(s)
        if ticket.first_token_at is None and any(s.tokens for s in job.sequences):
            ticket.first_token_at = time.perf_counter()
            self.metrics.observe_ttft(ticket.first_token_at - ticket.submitted)
        if job.ended or (not smc and all(not s.running for s in job.sequences)):
            self._complete(ticket)
        elif ticket.request.stream and not smc:
            ticket.send(self._deltas(ticket, final=False))

    def _fail(self, ticket: Ticket, error: Exception) -> None:
        """Answer `ticket` with `error` (its sequences have ended) and retire it; the other
        requests go on."""
        log.error("request failed while decoding", exc_info=error)
        if ticket in self.running:
            self.running.remove(ticket)
        ticket.job.cancel("failed")
        ticket.send(Update(error=error))
        self.metrics.failed += 1

    def _deltas(self, ticket: Ticket, final: bool) -> Update:
        """What each choice has added since the last update."""
        update = Update()
        for i, (s, readout) in enumerate(zip(ticket.job.sequences, ticket.readouts)):
            delta = readout.delta(s, final)
            if delta:
                update.deltas[i] = delta
        return update

    def _complete(self, ticket: Ticket) -> None:
        """Send the finished choices and retire `ticket`."""
        self.running.remove(ticket)
        self.metrics.running = len(self.running)
        job, r = ticket.job, ticket.request
        if not job.ended:
            job.cancel("finished")  # every sequence has ended: the job leaves at the next step
        token_samples = r.config.token_samples
        update = self._deltas(ticket, final=True) if r.stream and token_samples else Update()
        update.done = self._choices(ticket)
        if r.stream and not token_samples:  # SMC: the chosen particle's text arrives whole
            update.deltas = {c.index: ChoiceDelta(content=c.content) for c in update.done}
        ticket.send(update)
        self.metrics.completed += 1
        self.untrimmed = True
        self._trim(idle=False)
        self.metrics.observe_request(time.perf_counter() - ticket.submitted,
                                     sum(c.tokens for c in update.done),
                                     job.strategy.stats.constraint_s)  # fmt: skip

    def _choices(self, ticket: Ticket) -> list[Choice]:
        run, r = ticket.run, ticket.request
        if not r.config.token_samples:  # SMC: a particle drawn by weight per choice
            return [
                Choice(i, None, res.text, [], _reason(res.finish_reason, False), [],
                       len(res.tokens), incomplete_reason=res.reason)
                for i, res in enumerate(run.results())
            ]  # fmt: skip
        out = []
        for i, (s, readout) in enumerate(zip(ticket.job.sequences, ticket.readouts)):
            reason = _reason(s.finish_reason, bool(readout.answer.call_spans))
            out.append(readout.choice(s, i, reason, s.reason if reason == "length" else ""))
        return out


def _reason(finish_reason: str | None, calls: bool) -> str:
    """OpenAI's finish reason: "stop", "length" (max_tokens or the timeout, or a dead end:
    the text could not go on) or "tool_calls"."""
    if finish_reason in ("length", "timeout", "dead"):
        return "length"
    return "tool_calls" if calls else "stop"
