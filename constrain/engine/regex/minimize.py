"""Pruning and Moore minimisation of a DFA table over any alphabet.

`minimize` serves the atoms of a character DFA, and the bytes or byte classes of a product: it
keeps the states reachable from the start and live (some accepting state reachable), merges
equivalent ones by Moore refinement over hashed rows (checked exactly), and numbers the result
breadth-first with state 0 dead and 1 the start.
"""

from __future__ import annotations

import numpy as np

from constrain.engine.regex._limits import CompileLimits
from constrain.engine.regex.budget import CELLS_PER_STEP, NUMPY_STEPS, unlimited
from constrain.engine.regex.bytedfa import weights

_CELL_COPIES = 5  # dense int64 tables minimisation holds at once (table, full, compact, ...)
_SMALL = 40_000  # tables with fewer cells are traversed in plain Python (no per-level numpy)


def _reachable(trans: np.ndarray, start: int) -> np.ndarray:
    if trans.size <= _SMALL:
        return _python_reachable(trans.tolist(), [start], len(trans))
    seen = np.zeros(len(trans), dtype=bool)
    seen[start] = True
    frontier = np.array([start])
    while len(frontier):
        nxt = np.unique(trans[frontier])
        nxt = nxt[~seen[nxt]]
        seen[nxt] = True
        frontier = nxt
    return seen


def _python_reachable(rows: list, starts: list[int], n: int) -> np.ndarray:
    """The states reachable from `starts` along `rows` (lists of successors)."""
    seen = bytearray(n)
    for s in starts:
        seen[s] = 1
    stack = list(starts)
    while stack:
        for t in rows[stack.pop()]:
            if not seen[t]:
                seen[t] = 1
                stack.append(t)
    return np.frombuffer(bytes(seen), dtype=np.uint8).astype(bool)


def _live(trans: np.ndarray, accepting: np.ndarray) -> np.ndarray:
    n = len(trans)
    if trans.size <= _SMALL:
        preds: list[list[int]] = [[] for _ in range(n)]
        for s, row in enumerate(trans.tolist()):
            for t in set(row):
                preds[t].append(s)
        return _python_reachable(preds, np.flatnonzero(accepting).tolist(), n)
    src = np.repeat(np.arange(n), trans.shape[1])
    dst = trans.ravel()
    order = np.argsort(dst, kind="stable")
    src, dst = src[order], dst[order]
    starts = np.searchsorted(dst, np.arange(n + 1))
    live = accepting.copy()
    frontier = np.flatnonzero(live)
    while len(frontier):
        preds = np.unique(np.concatenate([src[starts[s] : starts[s + 1]] for s in frontier]))
        preds = preds[~live[preds]]
        live[preds] = True
        frontier = preds
    return live


def _column_representatives(table: np.ndarray) -> np.ndarray:
    """One column index per class of equal columns of `table` (hashed, checked exactly)."""
    columns = table.T.astype(np.int64)
    signature = columns @ weights(len(table))
    _, first, inverse = np.unique(signature, return_index=True, return_inverse=True)
    if np.array_equal(columns[first][inverse.ravel()], columns):
        return first
    _, first = np.unique(columns, axis=0, return_index=True)
    return first


_MIX = np.random.default_rng(0).integers(1, 2**62, size=(257,), dtype=np.int64) | 1


def _refine(
    cls: np.ndarray, n_classes: int, compact: np.ndarray, acc: np.ndarray, limits: CompileLimits
):
    """Moore refinement to the coarsest congruence. Rows are compared through 64-bit hashes
    (one cheap 1-D unique per round); the result is then checked exactly, and recomputed with
    exact row comparison in the (astronomically unlikely) case a collision merged two states.
    The rounds can be as many as the states (a chain), so each checks the deadline."""
    hashed, initial = cls, n_classes
    work = compact.size // CELLS_PER_STEP + NUMPY_STEPS  # one round's work
    while True:
        limits.check(work=work)
        signature = hashed * _MIX[0] + (hashed[compact] * _MIX[1 : compact.shape[1] + 1]).sum(1)
        _, hashed = np.unique(signature, return_inverse=True)
        hashed = hashed.ravel()
        if hashed.max() + 1 == n_classes:
            break
        n_classes = int(hashed.max()) + 1
    rows = np.column_stack([acc, hashed[compact]])
    rep = np.zeros(n_classes, dtype=np.int64)
    rep[hashed] = np.arange(len(hashed))
    if np.array_equal(rows, rows[rep[hashed]]):  # every class is a congruence class
        return hashed, n_classes
    n_classes = initial
    while True:  # exact fallback
        limits.check(work=work)
        _, cls = np.unique(np.column_stack([cls, cls[compact]]), axis=0, return_inverse=True)
        cls = cls.ravel()
        if cls.max() + 1 == n_classes:
            return cls, n_classes
        n_classes = int(cls.max()) + 1


def minimize(
    trans: np.ndarray,
    accepting: np.ndarray,
    start: int,
    merge: bool = True,
    limits: CompileLimits | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Prune to reachable and live states and merge equivalent ones (Moore refinement; skipped
    when `merge` is false, e.g. for large products whose refinement would take long), within
    `limits` (the dense copies it makes are checked against the memory budget up front).

    `trans` is (n, k) with -1 for "no transition". The result is (m, k) with state 0 dead (all
    its transitions and every missing one lead to 0), start state 1, the others in BFS order;
    m == 1 when the language is empty.
    """
    n = len(trans) + 1
    limits = limits or unlimited()
    # the work: small tables are pruned in Python (a step per cell), large ones with numpy
    cells = n * trans.shape[1]
    work = 4 * NUMPY_STEPS + (cells if cells <= _SMALL else cells // CELLS_PER_STEP)
    limits.check(cells * 8 * _CELL_COPIES, work)
    full = np.zeros((n, trans.shape[1]), dtype=np.int64)
    full[1:] = trans + 1
    acc = np.zeros(n, dtype=bool)
    acc[1:] = accepting
    start += 1
    keep = _reachable(full, start) & _live(full, acc)
    keep[0] = False
    if not keep[start]:
        return np.zeros((1, trans.shape[1]), dtype=np.int32), np.zeros(1, dtype=bool)
    full[~keep[full]] = 0
    full[~keep] = 0
    compact = full[:, _column_representatives(full)]  # one column per class of symbols
    cls = np.where(keep, acc.astype(np.int64) + 1, 0)
    n_classes = len(np.unique(cls))
    if not merge:
        cls = np.where(keep, np.cumsum(keep), 0)
        n_classes = int(cls.max()) + 1
    if merge:
        cls, n_classes = _refine(cls, n_classes, compact, acc, limits)
    rep = np.zeros(n_classes, dtype=np.int64)
    rep[cls[::-1]] = np.arange(n - 1, -1, -1)  # a representative state of each class
    class_trans = cls[full[rep]]
    number = np.full(n_classes, -1, dtype=np.int64)
    number[cls[0]] = 0
    number[cls[start]] = 1
    next_id = 2
    if class_trans.size <= _SMALL:  # breadth-first numbering
        rows = class_trans.tolist()
        numbers = number.tolist()
        queue = [int(cls[start])]
        for state in queue:
            for t in rows[state]:
                if numbers[t] < 0:
                    numbers[t] = next_id
                    next_id += 1
                    queue.append(t)
        number = np.array(numbers, dtype=np.int64)
    else:  # one level at a time
        frontier = np.array([cls[start]])
        while frontier.size:
            reached = np.unique(class_trans[frontier])
            fresh = reached[number[reached] < 0]
            number[fresh] = np.arange(next_id, next_id + fresh.size)
            next_id += fresh.size
            frontier = fresh
    valid = number >= 0
    out = np.zeros((next_id, trans.shape[1]), dtype=np.int32)
    out_acc = np.zeros(next_id, dtype=bool)
    out[number[valid]] = number[class_trans[valid]]
    out_acc[number[valid]] = acc[rep[valid]]
    out[0] = 0
    out_acc[0] = False
    return out, out_acc
