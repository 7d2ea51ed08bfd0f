"""Products of byte DFAs: intersection, union and difference.

`combine` builds the minimal DFA of ``a & b``, ``a | b`` or ``a - b``; `is_empty_combination`
decides whether ``a & b`` or ``a - b`` is empty without building it. Both step a breadth-first
search of pairs of states over the byte classes `joint_byte_classes` finds (lexers step over
those classes too).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from constrain.engine.regex._limits import DEFAULT_MAX_MEMORY, SET_ENTRY_BYTES, CompileLimits
from constrain.engine.regex.budget import CELLS_PER_STEP, NUMPY_STEPS, unlimited
from constrain.engine.regex.bytedfa import DEAD, ByteDFA, weights
from constrain.engine.regex.minimize import minimize

_MERGE_LIMIT = 600  # products larger than this are pruned but not minimised (Moore is O(n * depth))
_SMALL_PRODUCT = 1024  # operands with at most this many pairs of states combine in plain Python
_SMALL_COMBINE_STEPS = 8 * NUMPY_STEPS  # the fixed work of a small product (~150 us: 128 units)


def joint_byte_classes(dfas: Sequence[ByteDFA]) -> tuple[np.ndarray, np.ndarray]:
    """Bytes every DFA of `dfas` treats alike share a class: (class of each byte, one byte of
    each class). Products and lexers step once per class instead of once per byte."""
    if not dfas:
        return np.zeros(256, dtype=np.int64), np.zeros(1, dtype=np.int64)
    columns = np.stack([dfa.byte_classes() for dfa in dfas])  # (len(dfas), 256)
    signature = weights(len(dfas)) @ columns  # wraps: a 64-bit hash of each byte's column
    _, representatives, classes = np.unique(signature, return_index=True, return_inverse=True)
    classes = classes.ravel()
    if not np.array_equal(columns[:, representatives][:, classes], columns):  # a collision
        _, representatives, classes = np.unique(
            columns, axis=1, return_index=True, return_inverse=True
        )
        classes = classes.ravel()
    return classes.astype(np.int64), representatives


def _product_search(a: ByteDFA, b: ByteDFA, op: str, limits: CompileLimits, stop=None):
    """Breadth-first search of the pairs of states of `a` and `b` reachable for `op` (pairs
    where the result can no longer accept are dropped), within `limits`. Pairs are numbered in
    order of discovery; returns (pair keys, rows of next pair keys per byte class (-1: none),
    classes), or None as soon as `stop(x, y)` holds for a pair of the frontier."""
    classes, representatives = joint_byte_classes((a, b))
    width = np.int64(b.n_states)
    start = int(a.start) * int(width) + int(b.start)
    index = {start: 0}
    order = [start]
    levels = []
    frontier = np.array([start], dtype=np.int64)
    while frontier.size:  # one level of pairs at a time
        x, y = np.divmod(frontier, width)
        if stop is not None and stop(x, y):
            return None
        kx = a.table[x][:, a.classes[representatives]].astype(np.int64)
        ky = b.table[y][:, b.classes[representatives]].astype(np.int64)
        dead = kx == DEAD
        if op == "or":
            dead &= ky == DEAD
        elif op == "and":
            dead |= ky == DEAD
        keys = np.where(dead, -1, kx * width + ky)
        levels.append(keys)
        fresh = [k for k in np.unique(keys[~dead]).tolist() if k not in index]
        for k in fresh:
            index[k] = len(order)
            order.append(k)
        limits.states(len(order), f"the {op} of two automata")
        limits.did(2 * NUMPY_STEPS + keys.size // CELLS_PER_STEP + 4 * len(fresh))
        limits.charge(keys.nbytes + len(fresh) * SET_ENTRY_BYTES)
        frontier = np.array(fresh, dtype=np.int64)
    return np.array(order, dtype=np.int64), np.concatenate(levels), classes


def combine(
    a: ByteDFA,
    b: ByteDFA,
    op: str,
    pattern: str,
    max_states: int = 100_000,
    *,
    timeout: float = 10.0,
    max_memory: int = DEFAULT_MAX_MEMORY,
    max_work: int | None = None,
) -> ByteDFA:
    """The minimal DFA of ``a & b`` (op "and"), ``a | b`` ("or") or ``a - b`` ("minus"): a
    product search over byte classes, then minimisation.

    Raises:
        RegexError: the product exceeds `max_states` states, `timeout` seconds or `max_memory`
            bytes.
    """
    if op not in ("and", "or", "minus"):
        raise ValueError(f"unknown operation {op!r}")
    limits = CompileLimits(
        pattern[:200], timeout=timeout, max_states=max_states, max_memory=max_memory,
        max_work=max_work,
    )  # fmt: skip
    if a.n_states * b.n_states <= _SMALL_PRODUCT:
        return _small_combine(a, b, op, pattern, limits)
    pairs, table, classes = _product_search(a, b, op, limits)
    sorter = np.argsort(pairs)
    live = table >= 0
    table[live] = sorter[np.searchsorted(pairs, table[live], sorter=sorter)]
    x, y = np.divmod(pairs, np.int64(b.n_states))
    ax, by = a.accepting[x], b.accepting[y]
    accepting = {"and": ax & by, "or": ax | by, "minus": ax & ~by}[op]
    merge = len(pairs) <= _MERGE_LIMIT
    table, acc = minimize(table, accepting, 0, merge=merge, limits=limits)
    return ByteDFA.from_classes(table, classes, acc, 1 if len(table) > 1 else DEAD, pattern)


def _small_combine(a: ByteDFA, b: ByteDFA, op: str, pattern: str, limits: CompileLimits):
    """`combine` of small DFAs in plain Python (the numpy passes cost more than the work):
    the same product search, pruning, Moore refinement and breadth-first numbering over the
    same byte classes, so the same DFA."""
    limits.check(work=_SMALL_COMBINE_STEPS)  # the classes and the DFA built: a dozen numpy calls
    classes, representatives = joint_byte_classes((a, b))
    rows_a = a.columns(representatives).tolist()
    rows_b = b.columns(representatives).tolist()
    acc_a, acc_b = a.accepting.tolist(), b.accepting.tolist()
    index = {(a.start, b.start): 0}
    pairs = [(a.start, b.start)]
    table: list[list[int]] = []  # per pair, per class: the next pair (-1: none)
    for x, y in pairs:  # grows as pairs are found: breadth first
        row = []
        for kx, ky in zip(rows_a[x], rows_b[y]):
            dead = kx == DEAD
            if op == "or":
                dead = dead and ky == DEAD
            elif op == "and":
                dead = dead or ky == DEAD
            if dead:
                row.append(-1)
                continue
            found = index.get((kx, ky))
            if found is None:
                found = index[(kx, ky)] = len(pairs)
                pairs.append((kx, ky))
            row.append(found)
        table.append(row)
    limits.states(len(pairs), f"the {op} of two automata")
    # burnt now: a product's limits often end with it, and steps counted but never checked
    # were never burnt (2.5 s between two looks of the fuel on one schema's products)
    limits.check(work=NUMPY_STEPS + len(pairs) * len(representatives))
    accepting = [
        {"and": acc_a[x] and acc_b[y], "or": acc_a[x] or acc_b[y], "minus": acc_a[x] and not acc_b[y]}[op]
        for x, y in pairs
    ]  # fmt: skip
    # live pairs (some accepting pair reachable); the others merge into the dead state
    back: list[list[int]] = [[] for _ in pairs]
    for i, row in enumerate(table):
        for t in row:
            if t >= 0:
                back[t].append(i)
    live = [False] * len(pairs)
    todo = [i for i, ok in enumerate(accepting) if ok]
    for i in todo:
        live[i] = True
    while todo:
        for j in back[todo.pop()]:
            if not live[j]:
                live[j] = True
                todo.append(j)
    if not live[0]:
        return ByteDFA.from_classes(np.zeros((1, 1), np.int32), np.zeros(256, np.int64),
                                    np.zeros(1, bool), DEAD, pattern)  # fmt: skip
    # Moore refinement; state n is the dead one
    n = len(pairs)
    succ = [[t if t >= 0 and live[t] else n for t in row] for row in table]
    succ.append([n] * len(representatives))
    cls = [(2 if accepting[i] else 1) if live[i] else 0 for i in range(n)] + [0]
    count = len(set(cls))
    while True:
        ids: dict[tuple, int] = {}
        of = cls.__getitem__
        cls = [ids.setdefault((c, *map(of, row)), len(ids)) for c, row in zip(cls, succ)]
        limits.check(work=len(cls) * len(representatives))
        if len(ids) == count:
            break
        count = len(ids)
    # breadth-first numbering of the classes from the start's: 0 dead, 1 start
    rep = {}
    for i in range(n, -1, -1):
        rep[cls[i]] = i
    number = {cls[n]: 0, cls[0]: 1}
    queue = [cls[0]]
    for c in queue:
        for t in succ[rep[c]]:
            if cls[t] not in number:
                number[cls[t]] = len(number)
                queue.append(cls[t])
    out = np.zeros((len(number), len(representatives)), dtype=np.int32)
    out_acc = np.zeros(len(number), dtype=bool)
    for c, k in number.items():
        if k:
            out[k] = [number[cls[t]] for t in succ[rep[c]]]
            out_acc[k] = rep[c] < n and accepting[rep[c]]
    return ByteDFA.from_classes(out, classes, out_acc, 1, pattern)


def is_empty_combination(a: ByteDFA, b: ByteDFA, op: str) -> bool:
    """Whether ``a & b`` (op "and") or ``a - b`` ("minus") is empty, without building it: the
    product search stops at the first pair accepting the result."""
    if op not in ("and", "minus"):
        raise ValueError(f"unknown operation {op!r}")
    if a.is_empty() or (op == "and" and b.is_empty()):
        return True

    def accepts(x, y) -> bool:
        other = b.accepting[y] if op == "and" else ~b.accepting[y]
        return bool((a.accepting[x] & other).any())

    return _product_search(a, b, op, unlimited(), stop=accepts) is not None
