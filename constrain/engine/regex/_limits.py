"""The limits of one automaton compilation: a deadline, a state cap, a memory budget and a cap
on its work.

Every stage of a compilation (NFA, subset construction, dense tables, minimisation, UTF-8
expansion, products) calls `check` often enough that none runs much past the deadline, and
`charge`s what it keeps, so the compilation stops before holding more than `max_memory` bytes.
The memory is an estimate from counted entries (a set entry, a table cell), not a measurement;
the counts are chosen high, so the real peak stays below the budget plus the interpreter.

Both also `burn` the active `constrain.fuel.Fuel`, if any: one unit per call, one per
`BYTES_PER_UNIT` bytes charged (what a stage keeps is what it built) and one per
`STEPS_PER_UNIT` steps of `work` a check reports (what an inner loop did since its last check,
kept or not). The counts depend on the pattern alone, so a fuel bounds a compilation the same
way on an idle and on a loaded machine (docs/limits.md).
"""

from __future__ import annotations

import time

from constrain.errors import RegexError
from constrain.fuel import burn, deadline_after

__all__ = [
    "BYTES_PER_UNIT",
    "CompileLimits",
    "DEFAULT_MAX_MEMORY",
    "SET_ENTRY_BYTES",
    "STEPS_PER_UNIT",
]

DEFAULT_MAX_MEMORY = 512 * 2**20
SET_ENTRY_BYTES = 48  # one entry of a Python set or dict of states (slot, hash, share of the int)
# fuel burnt per unit (about a microsecond of work; calibrated in docs/benchmarks/fuel.md)
BYTES_PER_UNIT = 128  # bytes charged: a set entry built and kept is a third of a unit
STEPS_PER_UNIT = 4  # steps of an inner loop (a set insertion, a dict lookup)


class CompileLimits:
    """What one compilation of `pattern` may spend: `timeout` seconds from now (none while a
    fuel is active), `max_states` automaton states (each stage says which states it counts),
    `max_memory` bytes held and `max_work` units of work (None: no cap but the fuel's), a
    limit counted, not timed, for callers that try a form and fall back to another.

    Raises (from `check`, `charge` and `states`): `RegexError` naming the limit exceeded and the
    keyword argument that raises it.
    """

    __slots__ = (
        "pattern", "timeout", "deadline", "max_states", "max_memory", "max_work", "held",
        "steps", "work",
    )  # fmt: skip

    def __init__(self, pattern: str, *, timeout: float, max_states: int, max_memory: int,
                 max_work: int | None = None):  # fmt: skip
        self.pattern = pattern
        self.timeout = timeout
        self.deadline = deadline_after(timeout)  # none under a fuel: it bounds the work
        self.max_states = max_states
        self.max_memory = max_memory
        self.max_work = max_work
        self.held = 0
        self.steps = 0  # steps of work done (`did`) and not burnt yet
        self.work = 0  # units burnt

    def check(self, transient: int = 0, work: int = 0) -> None:
        """Raise past the deadline, or when what is held plus `transient` bytes (a temporary
        about to be built) exceeds the memory budget; burn the fuel for `work` steps done
        since the last check (`WorkLimitError`, `Abandoned` from the active fuel)."""
        steps = self.steps + work
        self.steps = steps % STEPS_PER_UNIT
        units = 1 + steps // STEPS_PER_UNIT
        burn(units)
        self.work += units
        if self.max_work is not None and self.work > self.max_work:
            raise RegexError(
                f"compilation exceeds its work limit of {self.max_work:,} units (max_work=); "
                f"simplify the pattern or raise the limit",
                self.pattern,
            )
        if time.monotonic() > self.deadline:
            raise RegexError(
                f"compilation exceeded its time limit of {self.timeout:g} s (timeout=); "
                f"simplify the pattern or raise the limit",
                self.pattern,
            )
        if self.held + transient > self.max_memory:
            raise RegexError(
                f"compilation exceeds its memory budget of {self.max_memory / 2**20:g} MiB "
                f"(max_memory=); simplify the pattern (large repetitions of groups that can "
                f"match the empty string?) or raise the limit",
                self.pattern,
            )

    def did(self, work: int) -> None:
        """Count `work` steps done, burnt at the next `check` (for loops too short to check)."""
        self.steps += work

    def charge(self, n_bytes: int) -> None:
        """Count `n_bytes` more as held until the end of the compilation (and burn the fuel
        for building them), then `check`."""
        self.held += n_bytes
        self.check(work=n_bytes * STEPS_PER_UNIT // BYTES_PER_UNIT)

    def states(self, n: int, what: str, cap: int | None = None) -> None:
        """Raise when `what` ("regex DFA", "regex NFA", ...) has more than `cap` (default
        `max_states`) states."""
        cap = self.max_states if cap is None else cap
        if n > cap:
            raise RegexError(
                f"{what} exceeds {cap} states (max_states={self.max_states}); simplify the "
                f"pattern or raise the limit",
                self.pattern,
            )
