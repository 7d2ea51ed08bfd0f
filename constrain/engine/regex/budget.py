"""The work and memory accounting the stages of the regex compiler share.

How often inner loops check their `CompileLimits`, what a numpy pass over a table costs in
steps, and `unlimited`, limits that never stop anything (for callers that bound their inputs
themselves). Kept apart so that every stage charges its work the same way without importing
another stage.
"""

from __future__ import annotations

import math

from constrain.engine.regex._limits import CompileLimits


def unlimited() -> CompileLimits:
    """Limits that never stop anything (for callers that bound their inputs themselves)."""
    return CompileLimits("", timeout=math.inf, max_states=2**62, max_memory=2**62)


CHECK_EVERY = 1 << 16  # inner loops check the limits after this many steps
CELLS_PER_STEP = 12  # cells of a numpy pass over a table per step of work (see `CompileLimits`)
NUMPY_STEPS = 64  # the steps of a handful of numpy calls on small arrays (their overhead)
