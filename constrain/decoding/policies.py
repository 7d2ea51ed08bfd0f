"""The policies of a sequence in flight: backing off dead ends, and the deadline.

The token budget's own policy (how far it may move) lives with it, in
`constrain.constraints.budget`; these two decide when it moves.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from constrain.decoding.sequence import Sequence

__all__ = ["Backtracker", "Deadline"]

_NEARBY = 4  # a dead end this close after the last one counts as the same
_MAX_JUMP = 64  # tokens a backtrack undoes at most
_DEADLINE_MARGIN = 0.85  # the share of the time left that a deadline budget plans to use
_STEP_WINDOW = 8  # recent steps whose mean time predicts the next ones


class Backtracker:
    """Dead ends undone: the last token is undone and forbidden at its position, so the next
    draw there takes another way, at most `left` times per sequence.

    Dead ends come from constraints checked on the text (uniqueItems over items whose
    language is not finite, duplicate keys, check sites): the grammar allows a prefix that the
    check then closes off, e.g. an array item that can only end as a copy of an earlier one. A
    dead end that recurs near the last one doubles how far the next backtrack jumps (up to 64
    tokens): the way into it may have many spellings (``inde|x``, ``ind|ex``, ...) and the
    choice to undo lies before all of them. When the token budget alone leaves nothing, the
    budget gives way first (`Budgeted.give_way`) and the draw is retried in place. After a
    backtrack the text is still in the language, but the log-weight is no longer a proper
    importance weight (SMC therefore drops dead particles by their weight instead).
    """

    __slots__ = ("left", "banned", "last_dead_end", "jump")

    def __init__(self, left: int):
        self.left = left
        self.banned: dict[int, set[int]] = {}  # position -> tokens forbidden there
        self.last_dead_end: int | None = None
        self.jump = 1  # tokens the last backtrack undid

    def fork(self) -> Backtracker:
        twin = Backtracker(self.left)
        twin.banned = {position: set(ids) for position, ids in self.banned.items()}
        twin.last_dead_end, twin.jump = self.last_dead_end, self.jump
        return twin

    def without_banned(self, row: torch.Tensor, position: int) -> torch.Tensor:
        """`row` with the tokens banned at `position` at -inf."""
        ids = self.banned.get(position)
        if not ids:
            return row
        return row.index_fill(-1, torch.tensor(sorted(ids), device=row.device), -math.inf)

    def recover(self, sequence: Sequence) -> bool:
        """Back `sequence` off its dead end; False when no backtrack is left or nothing can
        be undone."""
        if self.left <= 0:
            return False
        self.left -= 1
        position = len(sequence.tokens)
        budget = sequence.budget
        if budget is not None and budget.give_way(self.banned.get(position, set())):
            return True
        if not sequence.tokens:
            return False
        recurs = self.last_dead_end is not None and position <= self.last_dead_end + _NEARBY
        self.jump = min(2 * self.jump, _MAX_JUMP) if recurs else 1
        self.last_dead_end = position
        n = min(self.jump, len(sequence.tokens))
        position, token = len(sequence.tokens) - n, sequence.tokens[-n]
        sequence.rollback(n)
        self.banned = {p: ids for p, ids in self.banned.items() if p <= position}
        self.banned.setdefault(position, set()).add(token)
        return True


class Deadline:
    """`timeout` seconds of decoding, from now: sequences still running after it end with
    finish reason "timeout", and with `fit_budget` each budget is lowered to the tokens that
    fit in the time left, so the text is closed in time instead of cut."""

    def __init__(self, timeout: float, fit_budget: bool):
        self.timeout = timeout
        self.fit_budget = fit_budget
        self.started = time.perf_counter()

    def apply(self, sequences: list[Sequence]) -> None:
        """Called between steps: stop what ran out of time, or plan the budgets."""
        elapsed = time.perf_counter() - self.started
        for sequence in sequences:
            if not sequence.running:
                continue
            if elapsed > self.timeout:
                sequence.finish("timeout", f"decoding took more than {self.timeout} s")
            elif self.fit_budget and sequence.budget is not None:
                self.plan(sequence, elapsed)

    def plan(self, sequence: Sequence, elapsed: float) -> None:
        """Lower the budget to the steps that fit in the time left at the recent step time,
        keeping a margin and a reserve for one slow step (a cold mask: 1 s, less for short
        timeouts). Every step emits at least one token, so the text can always close within
        the budget. Recomputed every step, so slow first steps do not fix a budget later steps
        would not need."""
        recent = sequence.stats.step_s[-_STEP_WINDOW:]
        if not recent:
            return
        reserve = min(1.0, 0.05 * self.timeout)
        planned = max(0.0, _DEADLINE_MARGIN * (self.timeout - elapsed) - reserve)
        steps = int(planned * len(recent) / sum(recent))
        sequence.budget.set_limit(sequence.matcher.n_tokens + steps)
