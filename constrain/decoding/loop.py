"""The decoding loop: `Batch` of `Job`s (`decode` runs one), and its plain strategy, `Sampling`.

Every generation runs here, whatever its strategy, alone or beside others' (a server's
requests join and leave a `Batch` between steps). Between steps `Job.running` ends what must
end (the deadline, `max_tokens`, a text after which only EOS can follow, a cancellation); a job
whose work raises fails alone (`Job.fail`): the other jobs of its batch go on. A step is
the strategy's: `Sampling` draws one token per sequence from one batched forward, speculative
decoding proposes and verifies several, SMC resamples between steps, ASAp reweights by its
trie. Strategies see sequences only through `Sequence` and the batched `forward`. Time is the
`Deadline`'s: it ends what runs late and plans the token budgets that close texts in time.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator
from collections.abc import Sequence as Tokens
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

import torch

from constrain.decoding import target
from constrain.decoding.sequence import Sequence
from constrain.engine.matcher import prefill_masks
from constrain.results import DecodeStats
from constrain.samplers.base import Draw, TokenSampler

__all__ = ["Batch", "Deadline", "Job", "Sampling", "Strategy", "decode", "forward"]

_DEADLINE_MARGIN = 0.85  # the share of the time left that a deadline budget plans to use
_STEP_WINDOW = 8  # recent steps whose mean time predicts the next ones
_MASK_THREADS = 2  # native threads a step's masks are filled on


class Strategy(Protocol):
    """How a step advances the running sequences."""

    stats: DecodeStats  # the run's counters
    scores_eos: bool  # draw (and weigh) EOS even where only EOS can follow: one more forward

    def step(self, sequences: list[Sequence]) -> None:
        """Advance every sequence: at least one token each, or an end, or a backtrack."""

    def between_steps(self, sequences: list[Sequence]) -> list[Sequence]:
        """The sequences to continue with (SMC resamples here)."""

    def finished(self, sequence: Sequence) -> None:
        """`sequence` has ended (ASAp learns from it)."""


def decode(
    sequences: list[Sequence],
    strategy: Strategy,
    *,
    max_tokens: int,
    deadline: Deadline | None = None,
) -> Iterator[list[Sequence]]:
    """Run `sequences` until each ends, yielding them after every step (streaming reads them
    there) and once more at the end: `Job.steps` of their job."""
    return Job(sequences, strategy, max_tokens, deadline).steps()


@dataclass(eq=False)
class Job:
    """One call's sequences in the loop: how they advance and when they must end.

    A sequence ends with EOS, when only EOS can follow (without `scores_eos`: at once, with no
    forward), at `max_tokens` (EOS forced where its text is complete), when the deadline
    passes, when the job is cancelled (finish reason "cancelled"), dead, or when its work
    raised (`fail`: finish reason "error", the exception kept in `error`)."""

    sequences: list[Sequence]
    strategy: Strategy
    max_tokens: int
    deadline: Deadline | None = None
    ended: bool = False  # every sequence has ended and the job has left its batch
    stepped: bool = False
    cancelled: str | None = None  # why it was cancelled; set from any thread
    error: Exception | None = None  # what its work raised (`fail`)

    def cancel(self, why: str) -> None:
        """End the job's sequences before the next step (their KV caches are freed then)."""
        self.cancelled = why

    def fail(self, error: Exception) -> None:
        """End the job's sequences because its work raised `error` (kept in `error`): a
        failure of one job's constraint or strategy is that job's alone."""
        self.error = self.error or error
        for s in self.sequences:
            if s.running:
                s.finish("error", str(error))

    def steps(self) -> Iterator[list[Sequence]]:
        """Run the job alone (a `Batch` of it) until it ends, yielding its sequences after
        every step and once more at the end; raises what its work raised."""
        batch = Batch([self])
        while not self.ended:
            batch.step()
            if self.error is not None:
                raise self.error
            yield self.sequences

    def running(self) -> list[Sequence]:
        """End what must end before the next step; the sequences still running."""
        running = [s for s in self.sequences if s.running]
        if self.cancelled is not None:
            for s in running:
                s.finish("cancelled", self.cancelled)
        if self.deadline is not None and self.stepped:
            self.deadline.apply(running)
        due = [s for s in running if s.running and len(s.tokens) >= self.max_tokens]
        _finish_at_length(due, self.strategy)
        for s in running:
            if s.running and not self.strategy.scores_eos and s.matcher.done():
                s.emit(s.model.vocab.eos_ids[:1])
            if not s.running:
                self.strategy.finished(s)
        return [s for s in running if s.running]


class Batch:
    """The jobs in flight: jobs join between steps and leave when their sequences end (a
    server adds requests here as they come). Each step advances every job once; the jobs
    whose strategy draws one token per sequence (`Sampling`) share one batched forward."""

    def __init__(self, jobs: Tokens[Job] = ()):
        self.jobs: list[Job] = list(jobs)

    def add(self, job: Job) -> None:
        """`job` joins at the next step."""
        self.jobs.append(job)

    def step(self) -> list[Job]:
        """End what must end, then advance every job one step; returns the jobs that ended
        (and left the batch)."""
        active, ended = [], []
        for job in self.jobs:
            running = _guarded(job, job.running) or []
            (active if running else ended).append((job, running))
        for job, _ in ended:
            job.ended = True
        self.jobs = [job for job, _ in active]
        if not active:
            return [job for job, _ in ended]
        t0 = time.perf_counter()
        shared = [(j, r) for j, r in active if isinstance(j.strategy, Sampling)]
        if len(shared) > 1:
            _shared_forward(shared)
        for job, running in active:
            if len(shared) <= 1 or not isinstance(job.strategy, Sampling):
                _guarded(job, job.strategy.step, running)
        elapsed = time.perf_counter() - t0
        for job, running in active:
            job.strategy.stats.step_s.append(elapsed)
            _guarded(job, self._after_step, job, running, elapsed)
        return [job for job, _ in ended]

    @staticmethod
    def _after_step(job: Job, running: list[Sequence], elapsed: float) -> None:
        for s in running:
            s.stats.step_s.append(elapsed)
            if not s.running:
                job.strategy.finished(s)
        job.sequences, job.stepped = job.strategy.between_steps(job.sequences), True


def _guarded(job: Job, work, *args):
    """`work(*args)`, or None when it raised: then `job` fails with what it raised, and
    the batch's other jobs go on."""
    try:
        return work(*args)
    except Exception as exc:  # a bug or a broken constraint: this job's alone
        job.fail(exc)
        return None


class MaskPrefill:
    """The masks a step's draws will read, filled while the step's forward runs: one batch
    call into the native core (`prefill_masks`) on a worker thread, which releases the GIL,
    so the mask fill overlaps the model. The draws then find them cached; they wait for the
    fill to end first (`wait`), as the masks' caches are filled by it."""

    _pool: ThreadPoolExecutor | None = None

    def __init__(self, sequences: list[Sequence]):
        states = [s.matcher.mask_source() for s in sequences]
        self._future: Future | None = None
        if states:
            if MaskPrefill._pool is None:
                MaskPrefill._pool = ThreadPoolExecutor(1, thread_name_prefix="constrain-masks")
            self._future = MaskPrefill._pool.submit(prefill_masks, states, _MASK_THREADS)

    def wait(self) -> None:
        """Until the fill ends. A failure is left to the draw that needs that mask, which
        computes it again and raises the error where it belongs."""
        if self._future is not None:
            with contextlib.suppress(Exception):
                self._future.result()
            self._future = None


def _shared_forward(jobs: list[tuple[Job, list[Sequence]]]) -> None:
    """One forward for the running sequences of several `Sampling` jobs, then each job's
    draws from its own rows."""
    flat = [s for _, running in jobs for s in running]
    needing = [s for job, running in jobs for s in job.strategy.needing_masks(running)]
    t0 = time.perf_counter()
    rows = iter(forward_and_masks(flat, needing))
    seconds = time.perf_counter() - t0
    for job, running in jobs:
        job.strategy.stats.forwards += 1
        job.strategy.stats.forward_s += seconds
        _guarded(job, job.strategy.advance, running, [next(rows) for _ in running])


def forward(
    sequences: Tokens[Sequence], drafts: Tokens[Tokens[int]] | None = None, stats=None
) -> list[tuple[torch.Tensor, list[torch.Tensor]]]:
    """For each sequence, its main rows and its term rows after appending its draft: (k+1, V)
    log-probabilities each (k = 0 without drafts), from one batched forward per model over
    every stream that needs one (targets and, say, CFG's unconditional prompts together)."""
    drafts = drafts if drafts is not None else [()] * len(sequences)
    groups: dict[int, tuple[object, list, list, list]] = {}  # model -> streams, drafts, slots
    for i, (s, tokens) in enumerate(zip(sequences, drafts)):
        for j, (model, stream) in enumerate(
            [(s.model, s.stream), *zip(s.stack.term_models, s.terms)]
        ):
            if stream is not None:
                group = groups.setdefault(id(model), (model, [], [], []))
                group[1].append(stream)
                group[2].append(list(tokens))
                group[3].append((i, j))
    out = [[None] * (1 + len(s.terms)) for s in sequences]  # main rows, then each term's
    t0 = time.perf_counter()
    for model, streams, tokens, slots in groups.values():
        for (i, j), rows in zip(slots, model.score_many(streams, tokens)):
            out[i][j] = rows
    for s in sequences:
        s.stats.forwards += 1
    if stats is not None:
        stats.forwards += 1
        stats.forward_s += time.perf_counter() - t0
    return [(rows[0], [r if r is not None else rows[0] for r in rows[1:]]) for rows in out]


def forward_and_masks(
    sequences: Tokens[Sequence], needing: list[Sequence], stats=None
) -> list[tuple[torch.Tensor, list[torch.Tensor]]]:
    """`forward(sequences)`, with the next masks of `needing` filled meanwhile (`MaskPrefill`)."""
    masks = MaskPrefill(needing)
    try:
        return forward(sequences, stats=stats)
    finally:
        masks.wait()


def record(draw: Draw, sequence: Sequence, stats: DecodeStats, seconds: float) -> None:
    """Count a draw and its constraint time for the sequence and the run."""
    for counters in (stats, sequence.stats):
        counters.draws += 1
        counters.checks += draw.checks
        counters.masks += draw.masks
        counters.constraint_s += seconds
    stats.draw_s.append(seconds)


class Sampling:
    """One token per sequence per step: one batched forward, then the token sampler draws
    from the target distribution (`constrain.decoding.target`)."""

    def __init__(
        self,
        sampler: TokenSampler,
        generator: torch.Generator | None,
        stats: DecodeStats,
        *,
        greedy: bool = False,
        scores_eos: bool = True,
    ):
        self.sampler = sampler
        self.generator = generator
        self.stats = stats
        self.greedy = greedy
        self.scores_eos = scores_eos

    def step(self, sequences: list[Sequence]) -> None:
        self.advance(
            sequences, forward_and_masks(sequences, self.needing_masks(sequences), self.stats)
        )

    def needing_masks(self, sequences: list[Sequence]) -> list[Sequence]:
        """The sequences whose next draw reads a whole mask: the sampler's (LCD), or a
        truncating stack's (the target is masked before truncation)."""
        return [s for s in sequences if self.sampler.full_masks or s.stack.truncates]

    def advance(self, sequences: list[Sequence], scored: list) -> None:
        """Draw one token per sequence from its scored rows (`forward`'s output)."""
        for s, rows in zip(sequences, scored):
            t0 = time.perf_counter()
            row = s.control_row(*rows)
            d = self.draw(row, s)
            t1 = time.perf_counter()
            self.stats.sample_s += t1 - t0
            if d.log_weight == -math.inf:
                record(d, s, self.stats, d.constraint_s)
                s.dead_end(d.reason)
                continue
            s.log_weight += d.log_weight
            if s.top_logprobs is not None:
                s.record_logprobs(row, d.token)
            s.emit([d.token])
            record(d, s, self.stats, d.constraint_s + time.perf_counter() - t1)

    def draw(self, row: torch.Tensor, s: Sequence) -> Draw:
        """The next token of `s` from its control-stage `row`."""
        return target.draw(
            row, s.matcher, s.tokens, s.stack, self.sampler, self.generator, self.greedy
        )

    def between_steps(self, sequences: list[Sequence]) -> list[Sequence]:
        return sequences

    def finished(self, sequence: Sequence) -> None:
        pass


def _finish_at_length(sequences: list[Sequence], strategy: Strategy) -> None:
    """`max_tokens` reached: EOS is forced where the text is complete (weighted by its
    probability with `scores_eos`, one forward); elsewhere the weight is -inf. The finish
    reason is "stop" where nothing but EOS could follow, else "length"."""
    complete = [s for s in sequences if s.matcher.accepting()]
    if strategy.scores_eos and complete:
        for s, rows in zip(complete, forward(complete, stats=strategy.stats)):
            row = s.stack.after_constraint(s.control_row(*rows), s.tokens, truncate=False)
            s.log_weight += float(
                torch.logsumexp(row[list(s.model.vocab.eos_ids)].double(), dim=-1)
            )
    for s in sequences:
        if s.matcher.accepting():
            ended = s.matcher.done()  # only EOS could follow: the text ended in time
            s.matcher.advance(s.model.vocab.eos_ids[0])
            s.finish("stop" if ended else "length")
        else:
            s.log_weight = -math.inf
            s.finish("length", "max_tokens reached before the text was complete")


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
