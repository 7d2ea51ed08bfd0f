"""CPU kernels for the linear layers of few-row forwards, chosen by timing them at load time.

Which product is fastest for the few rows of a decoding step (1 row), of CFG, speculative
verification or SMC particles (2-64 rows) depends on the machine: on some CPUs the BLAS
kernel behind ``F.linear`` (``x @ W.T``) is slow for a few rows and ``(W @ x.T).T`` is up to
3x faster; on others (Intel with MKL and AVX-512) that product is twice slower. So nothing
is assumed: for each weight shape of a model and each bucket of row counts, `KernelTimer`
times ``F.linear`` against the few-row product side by side (interleaved rounds, after a warm-up), and a
layer takes the few-row product only for the buckets where it was clearly faster
(`MeasuredLinear`). More than 64 rows (prefills) always take ``F.linear``.

    use_kernels(hf_model, "measure")   # time (or recall) and patch the CPU linear layers
    use_kernels(hf_model, "torch")     # plain nn.Linear everywhere

Timings are kept for the process (bounded, keyed by shape, dtype, device and thread count),
so a second model with the same shapes, or a layer subset of one, measures nothing.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

import torch
import torch.nn.functional as F

from constrain.errors import ConfigError

__all__ = [
    "MAX_ROWS",
    "ROW_BUCKETS",
    "KernelKey",
    "KernelTimer",
    "KernelTiming",
    "MeasuredLinear",
    "RowBucket",
    "TIMER",
    "few_row_linear",
    "use_kernels",
]

Kernels = Literal["measure", "torch"]
MAX_ROWS = 64  # above this (prefills) F.linear is always used


class RowBucket(NamedTuple):
    """Row counts `first`..`last` share one decision, timed at `timed` rows."""

    first: int
    last: int
    timed: int


ROW_BUCKETS = (
    RowBucket(1, 1, 1),  # a decoding step
    RowBucket(2, 8, 4),  # CFG, short drafts, a few particles
    RowBucket(9, 16, 12),  # speculative verification
    RowBucket(17, MAX_ROWS, 32),  # long drafts, many particles
)
_MARGIN = 1.1  # the few-row product must be this much faster
_CLEAR = 1.3  # a ratio beyond this after two rounds settles a cell early
_MIN_ROUNDS, _MAX_ROUNDS = 2, 5
_HARD_LIMIT = 1.5  # budgets after which timing stops even if some cells were timed once
# Past the last-level cache a product streams its weight from memory, so a slice this large
# costs what the whole weight does per byte: a 262k-token head is timed on a slice of it.
_TIMED_BYTES = 64 * 2**20


def few_row_linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` computed as ``(weight @ x.T).T`` (row-major output).

    A single row is duplicated into two: as a matrix-vector product it would get a kernel
    that some BLAS libraries run on one core. The output is made row-major again because the
    fused CPU attention kernel needs its queries so.
    """
    rows = x.numel() // x.shape[-1]
    flat = x.reshape(rows, x.shape[-1]).contiguous()
    if rows == 1:
        out = (weight @ flat.expand(2, -1).contiguous().t())[:, :1]
    else:
        out = weight @ flat.t()
    out = out.t().contiguous()
    if bias is not None:
        out += bias
    return out.reshape(*x.shape[:-1], weight.shape[0])


class MeasuredLinear(torch.nn.Linear):
    """`nn.Linear` taking `few_row_linear` for the row counts where it measured faster.

    ``few_rows[r]`` says whether r rows (0..64) take the few-row product; the weights, the
    state dict and the results (up to float rounding) are those of `nn.Linear`.
    """

    few_rows: tuple[bool, ...]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1]
        if rows <= MAX_ROWS and self.few_rows[rows]:
            return few_row_linear(x, self.weight, self.bias)
        return F.linear(x, self.weight, self.bias)


class KernelKey(NamedTuple):
    """What a timing depends on: the weight's shape, dtype and device, and the threads."""

    out_features: int
    in_features: int
    dtype: str
    device: str
    threads: int

    @classmethod
    def of(cls, weight: torch.Tensor) -> KernelKey:
        out_features, in_features = weight.shape
        return cls(
            out_features,
            in_features,
            str(weight.dtype),
            str(weight.device),
            torch.get_num_threads(),
        )


@dataclass
class KernelTiming:
    """The timings of one weight shape at one row bucket (seconds per product, one per round)."""

    key: KernelKey
    bucket: RowBucket
    linear_s: list[float] = field(default_factory=list)
    few_row_s: list[float] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        """Fastest ``F.linear`` time over fastest few-row time (> 1: the few-row one is
        faster). The fastest round, not the median: other processes on the machine only ever
        add time, and over a few rounds they can move a median."""
        if not self.linear_s:
            return 1.0
        return min(self.linear_s) / min(self.few_row_s)

    @property
    def few_row(self) -> bool:
        """Whether the few-row product was clearly faster (and timed at least twice)."""
        return len(self.linear_s) >= _MIN_ROUNDS and self.ratio > _MARGIN

    @property
    def settled(self) -> bool:
        return len(self.linear_s) >= _MAX_ROUNDS or (
            len(self.linear_s) >= _MIN_ROUNDS and not 1 / _CLEAR < self.ratio < _CLEAR
        )


class KernelTimer:
    """Times the kernels of each weight shape once per process and remembers the outcome.

    Args:
        budget_s: a measurement stops after this many seconds once every cell (shape x row
            bucket) has been timed twice, and after 1.5 times as long in any case (a busy
            machine); cells timed fewer than twice keep ``F.linear``.
        max_entries: how many shapes to remember (oldest forgotten first).
    """

    def __init__(self, budget_s: float = 1.0, max_entries: int = 256):
        self.budget_s = budget_s
        self.max_entries = max_entries
        self.timings: OrderedDict[KernelKey, tuple[KernelTiming, ...]] = OrderedDict()
        self.last_measure_s = 0.0  # wall time of the latest measurement (0: all recalled)

    def few_rows(self, weights: Iterable[torch.Tensor]) -> dict[KernelKey, tuple[bool, ...]]:
        """For each weight's key: which row counts (index 0..64) take the few-row product.
        Keys not yet timed are timed now, together, with the given weights."""
        groups: dict[KernelKey, list[torch.Tensor]] = {}
        for weight in weights:
            groups.setdefault(KernelKey.of(weight), []).append(weight)
        known = {key: self.timings[key] for key in groups if key in self.timings}
        missing = {key: group for key, group in groups.items() if key not in known}
        self.last_measure_s = 0.0
        if missing:
            t0 = time.perf_counter()
            measured = self._measure(missing)
            self.last_measure_s = time.perf_counter() - t0
            self._remember(measured)
            known.update(measured)
        plans = {}
        for key, timings in known.items():
            if key in self.timings:
                self.timings.move_to_end(key)
            plan = [False] * (MAX_ROWS + 1)
            for timing in timings:
                for rows in range(timing.bucket.first, timing.bucket.last + 1):
                    plan[rows] = timing.few_row
            plans[key] = tuple(plan)
        return plans

    def _out_of_time(self, t_start: float, round_: int) -> bool:
        """Past the budget with every cell timed twice, or past 1.5 budgets (a busy machine:
        cells timed fewer than twice keep F.linear)."""
        elapsed = time.perf_counter() - t_start
        return elapsed > _HARD_LIMIT * self.budget_s or (
            elapsed > self.budget_s and round_ >= _MIN_ROUNDS
        )

    def _remember(self, measured: dict[KernelKey, tuple[KernelTiming, ...]]) -> None:
        self.timings.update(measured)
        while len(self.timings) > self.max_entries:
            self.timings.popitem(last=False)

    def _measure(
        self, groups: dict[KernelKey, list[torch.Tensor]]
    ) -> dict[KernelKey, tuple[KernelTiming, ...]]:
        """Time every (shape, bucket) cell in interleaved rounds; each product takes the next
        weight of its shape in turn, so it reads a weight out of cache as in a forward."""
        generator = torch.Generator().manual_seed(0)  # leaves the global RNG alone
        cells, inputs, weights = [], [], []
        for key, group in groups.items():
            rotation = [_timed_part(w) for w in group]
            for bucket in ROW_BUCKETS:
                x = torch.randn(bucket.timed, key.in_features, generator=generator)
                cells.append(KernelTiming(key, bucket))
                inputs.append(x.to(dtype=group[0].dtype, device=group[0].device))
                weights.append(rotation)
        turn = 0

        def run(kernel, x: torch.Tensor, rotation: Sequence[torch.Tensor]) -> float:
            nonlocal turn
            turn += 1
            w = rotation[turn % len(rotation)]
            t0 = time.perf_counter()
            kernel(x, w)
            return time.perf_counter() - t0

        t_start = time.perf_counter()
        with torch.inference_mode():
            for cell, x, rotation in zip(cells, inputs, weights):  # warm-up at a few rows
                if cell.bucket.timed <= 4:
                    run(F.linear, x, rotation)
                    run(few_row_linear, x, rotation)
            for round_ in range(_MAX_ROUNDS):
                todo = [i for i, cell in enumerate(cells) if not cell.settled]
                for i in todo:
                    if self._out_of_time(t_start, round_):
                        break
                    cell, x, rotation = cells[i], inputs[i], weights[i]
                    if round_ % 2 == 0:  # alternate which kernel goes first
                        cell.linear_s.append(run(F.linear, x, rotation))
                        cell.few_row_s.append(run(few_row_linear, x, rotation))
                    else:
                        cell.few_row_s.append(run(few_row_linear, x, rotation))
                        cell.linear_s.append(run(F.linear, x, rotation))
                if not todo or self._out_of_time(t_start, round_):
                    break
        by_key: dict[KernelKey, list[KernelTiming]] = {}
        for cell in cells:
            by_key.setdefault(cell.key, []).append(cell)
        return {key: tuple(timings) for key, timings in by_key.items()}


def _timed_part(weight: torch.Tensor) -> torch.Tensor:
    """The weight, or its leading rows when it is larger than `_TIMED_BYTES` (a view)."""
    row_bytes = weight.shape[1] * weight.element_size()
    return weight[: max(1, _TIMED_BYTES // row_bytes)] if weight.nbytes > _TIMED_BYTES else weight


TIMER = KernelTimer()  # the process's timings


def use_kernels(model: torch.nn.Module, kernels: Kernels = "measure") -> dict[str, int]:
    """Patch `model`'s linear layers in place for `kernels`; returns how many layers take
    the few-row product for some row counts ("patched") and how many do not ("plain").

    "measure": on the CPU, time the kernels for each weight shape (or recall the timings of
    this process) and patch the layers whose shape has a faster few-row product; elsewhere
    (CUDA, MPS) and with "torch": plain `nn.Linear` everywhere (undoing an earlier patch).
    """
    if kernels not in ("measure", "torch"):
        raise ConfigError(f"kernels must be 'measure' or 'torch', not {kernels!r}")
    layers = [m for m in model.modules() if type(m) in (torch.nn.Linear, MeasuredLinear)]
    on_cpu = [m for m in layers if m.weight.device.type == "cpu"]
    plans = TIMER.few_rows(m.weight for m in on_cpu) if kernels == "measure" else {}
    patched = 0
    for module in layers:
        plan = (
            plans.get(KernelKey.of(module.weight)) if module.weight.device.type == "cpu" else None
        )
        if plan is not None and any(plan):
            module.__class__ = MeasuredLinear
            module.few_rows = plan
            patched += 1
        elif type(module) is MeasuredLinear:
            module.__class__ = torch.nn.Linear
            del module.few_rows
    return {"patched": patched, "plain": len(layers) - patched}
