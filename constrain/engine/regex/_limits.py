"""The limits of one automaton compilation: a deadline, a state cap and a memory budget.

Every stage of a compilation (NFA, subset construction, dense tables, minimisation, UTF-8
expansion, products) calls `check` often enough that none runs much past the deadline, and
`charge`s what it keeps, so the compilation stops before holding more than `max_memory` bytes.
The memory is an estimate from counted entries (a set entry, a table cell), not a measurement;
the counts are chosen high, so the real peak stays below the budget plus the interpreter.
"""

from __future__ import annotations

import time

from constrain.errors import RegexError

__all__ = ["CompileLimits", "DEFAULT_MAX_MEMORY", "SET_ENTRY_BYTES"]

DEFAULT_MAX_MEMORY = 512 * 2**20
SET_ENTRY_BYTES = 48  # one entry of a Python set or dict of states (slot, hash, share of the int)


class CompileLimits:
    """What one compilation of `pattern` may spend: `timeout` seconds from now, `max_states`
    automaton states (each stage says which states it counts) and `max_memory` bytes held.

    Raises (from `check`, `charge` and `states`): `RegexError` naming the limit exceeded and the
    keyword argument that raises it.
    """

    __slots__ = ("pattern", "timeout", "deadline", "max_states", "max_memory", "held")

    def __init__(self, pattern: str, *, timeout: float, max_states: int, max_memory: int):
        self.pattern = pattern
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self.max_states = max_states
        self.max_memory = max_memory
        self.held = 0

    def check(self, transient: int = 0) -> None:
        """Raise past the deadline, or when what is held plus `transient` bytes (a temporary
        about to be built) exceeds the memory budget."""
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

    def charge(self, n_bytes: int) -> None:
        """Count `n_bytes` more as held until the end of the compilation, then `check`."""
        self.held += n_bytes
        self.check()

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
