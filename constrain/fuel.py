"""Fuel: a deterministic work budget for preparing one input, and the way to abandon the work.

A server prepares each request before decoding it: lark loads its grammar, a schema is
normalised and compiled into automata, the completions a token budget plans with are found,
the first mask is built. Each stage can grow far faster than its input, so each is metered:
the loops that can grow `burn` units of work as they go, and the `Fuel` active for the
thread raises `WorkLimitError` once its units are spent. Work is counted, not timed, so the
same input gets the same answer on an idle and on a loaded machine (one unit is meant to be
about a microsecond of work; docs/limits.md has the calibration).

A `Fuel` can also be stopped from another thread (`cancel`: the client went away, the server
shuts down): the next `burn` raises `Abandoned`, the stage unwinds and what it built is freed.
A wall-clock deadline is the backstop for work that burns too rarely.

Code run with no active fuel burns nothing: the library's own limits (states, memory, its
timeouts) still hold there. Third-party code (lark's loader) is metered per Python call
(`Fuel.metering_calls`).
"""

from __future__ import annotations

import contextlib
import gc
import math
import sys
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar

from constrain.errors import Abandoned, WorkLimitError

__all__ = ["Fuel", "burn", "current", "deadline_after", "looking_in", "stage", "units_left"]

_ACTIVE: ContextVar[Fuel | None] = ContextVar("constrain_fuel", default=None)
_CLOCK_EVERY = 1024  # units burnt between two looks at the wall clock


class Fuel:
    """`units` of work for one input's preparation (`limit` names the option that sets it),
    stopped early by `cancel` or, as a backstop, after `seconds` of wall-clock time; `pause`
    is called every few thousand units (a server's preparations give way to its decoding)."""

    __slots__ = (
        "units", "limit", "left", "seconds", "deadline", "stage", "stopped", "pause", "_clock_at"
    )  # fmt: skip

    def __init__(self, units: int, *, limit: str = "fuel", seconds: float = math.inf,
                 pause: Callable[[], None] | None = None):  # fmt: skip
        self.units = units
        self.limit = limit
        self.left = units
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds
        self.stage = "preparing"
        self.stopped: str | None = None  # why the work was cancelled
        self.pause = pause  # called every few thousand units: may sleep to let others run
        self._clock_at = units

    @property
    def used(self) -> int:
        return self.units - self.left

    def burn(self, units: int = 1) -> None:
        """Spend `units`; raise `WorkLimitError` when none are left, `Abandoned` when the
        work was cancelled or ran past the backstop."""
        self.left -= units
        if self.left >= 0 and self._clock_at - self.left < _CLOCK_EVERY and self.stopped is None:
            return
        self._check()

    def _check(self) -> None:
        if self.stopped is not None:
            raise Abandoned(f"{self.stage}: {self.stopped}")
        if self.left < 0:
            raise WorkLimitError(
                f"{self.stage} needs more work than this input's budget of {self.units:,} "
                f"units ({self.limit}); simplify the input or raise the limit",
                self.limit, self.units, self.stage,
            )  # fmt: skip
        self._clock_at = self.left
        if self.pause is not None:
            self.pause()
        if time.monotonic() > self.deadline:
            self.stopped = f"it ran past its backstop of {self.seconds:g} s"
            raise Abandoned(f"{self.stage}: {self.stopped}")

    def look(self) -> None:
        """Give way and stop if cancelled or past the backstop, burning nothing (for work
        charged in advance: see `looking_in`)."""
        self._check()

    def cancel(self, reason: str) -> None:
        """Stop the work (from any thread): its next `burn` raises `Abandoned(reason)`."""
        self.stopped = reason

    @contextlib.contextmanager
    def active(self) -> Iterator[Fuel]:
        """Make this the fuel that `burn` spends in this thread (and context) while the block
        runs."""
        token = _ACTIVE.set(self)
        try:
            yield self
        finally:
            _ACTIVE.reset(token)

    @contextlib.contextmanager
    def metering_calls(self, also: Fuel | None = None, units: int = 1) -> Iterator[None]:
        """Burn one unit per Python function call made in this thread while the block runs
        (and `units` of `also`, the fuel of the whole input): the meter for third-party code
        that burns nothing itself (it runs about 3x slower). Finalizers the garbage collector
        runs meanwhile are not the block's work and burn nothing: the same input burns the
        same units whenever a collection falls."""
        collecting = False

        def during_collection(phase, info):
            nonlocal collecting
            collecting = phase == "start"

        def per_call(frame, event, arg):
            if event == "call" and not collecting and frame.f_code is not own_code:
                self.burn()
                if also is not None:
                    also.burn(units)

        own_code = during_collection.__code__
        previous = sys.getprofile()
        gc.callbacks.append(during_collection)
        sys.setprofile(per_call)
        try:
            yield
        finally:
            sys.setprofile(previous)
            gc.callbacks.remove(during_collection)


@contextlib.contextmanager
def looking_in(every: int = 4096) -> Iterator[None]:
    """While the block runs third-party code that burns nothing (the regex parser) under the
    active fuel, look at that fuel every `every` Python calls: give way (its `pause`) and stop
    when it is cancelled or past its backstop. Burns nothing: the caller charged the work."""
    fuel = _ACTIVE.get()
    if fuel is None or sys.getprofile() is not None:  # none, or a profiler is using the hook
        yield
        return
    calls = 0

    def per_call(frame, event, arg):
        nonlocal calls
        if event == "call":
            calls += 1
            if calls % every == 0:
                fuel.look()

    previous = sys.getprofile()
    sys.setprofile(per_call)
    try:
        yield
    finally:
        sys.setprofile(previous)


def burn(units: int = 1) -> None:
    """Spend `units` of the active fuel, if any (see `Fuel.burn`)."""
    fuel = _ACTIVE.get()
    if fuel is not None:
        fuel.burn(units)


def current() -> Fuel | None:
    """The fuel active in this thread, if any."""
    return _ACTIVE.get()


def deadline_after(seconds: float) -> float:
    """The `time.monotonic()` by which work begun now must end: `seconds` from now, or never
    while a fuel is active in this thread. A fuel bounds the work itself, so the same input
    gets the same answer on an idle and on a loaded machine; the clock is only its backstop."""
    return math.inf if _ACTIVE.get() is not None else time.monotonic() + seconds


def units_left() -> int | None:
    """The units the active fuel has left (None: no fuel is active), for work done where
    `burn` cannot be called (native code meters itself and settles after)."""
    fuel = _ACTIVE.get()
    return None if fuel is None else max(fuel.left, 0)


@contextlib.contextmanager
def stage(name: str) -> Iterator[Fuel | None]:
    """Name what the active fuel is spent on while the block runs (errors say it)."""
    fuel = _ACTIVE.get()
    if fuel is None:
        yield None
        return
    before, fuel.stage = fuel.stage, name
    try:
        yield fuel
    finally:
        fuel.stage = before
