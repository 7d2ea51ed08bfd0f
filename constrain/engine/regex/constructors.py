"""DFAs built directly, without the regex parser.

From a table of byte transitions (`dfa_from_table`), a set of code points
(`dfa_from_code_points`), a chain of byte classes (`dfa_from_byte_classes`) or a finite set of
strings (`dfa_from_strings`); and a DFA quoted or repeated (`quoted`, `repeat_unit`). For front
ends that know their language better than a pattern would spell it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from constrain.engine.regex._limits import STEPS_PER_UNIT
from constrain.engine.regex._utf8 import MAX_CODE_POINT
from constrain.engine.regex.budget import NUMPY_STEPS, unlimited
from constrain.engine.regex.bytedfa import DEAD, ByteDFA
from constrain.engine.regex.lowering import to_bytes
from constrain.engine.regex.minimize import minimize
from constrain.engine.regex.nfa import SURROGATES
from constrain.fuel import burn


def dfa_from_table(
    transitions: np.ndarray, accepting: np.ndarray, start: int, pattern: str
) -> ByteDFA:
    """The minimal DFA of a table of byte transitions (n, 256) with -1 for "none"."""
    table, acc = minimize(np.asarray(transitions, dtype=np.int64), np.asarray(accepting), start)
    return ByteDFA(table, acc, 1 if len(table) > 1 else DEAD, pattern)


def quoted(body: ByteDFA, quote: int = 0x22) -> ByteDFA:
    """The DFA of ``quote + body + quote``, for a body that never reads a raw `quote` between
    characters (true of every "json"-encoded regex: a raw ``"`` only follows a backslash)."""
    n, k = body.table.shape
    classes = body.classes.astype(np.int64)  # a copy
    classes[quote] = k  # the quote gets a class of its own
    trans = np.zeros((n + 2, k + 1), dtype=np.int32)
    trans[2 : n + 1, :k] = np.where(body.table[1:] == DEAD, DEAD, body.table[1:] + 1)
    trans[:, k] = trans[:, body.classes[quote]]  # inside a character (after "\\"), as before
    if body.is_empty():
        return ByteDFA.from_classes(trans[:1], classes, np.zeros(1, dtype=bool), DEAD,
                                    f"{chr(quote)}{body.pattern}")  # fmt: skip
    if body.table[body.accepting, body.classes[quote]].any():
        raise ValueError(f"/{body.pattern}/ reads a raw quote between characters")
    trans[1, k] = body.start + 1
    ends = np.flatnonzero(body.accepting) + 1
    trans[ends, k] = n + 1
    accepting = np.zeros(n + 2, dtype=bool)
    accepting[n + 1] = True
    # minimal already: body states keep their distinctions (acceptance became "has a quote")
    pattern = chr(quote) + body.pattern + chr(quote)
    return ByteDFA.from_classes(trans, classes, accepting, 1, pattern)


def repeat_unit(unit: ByteDFA, low: int, high: int | None) -> ByteDFA:
    """The DFA of `unit` repeated low..high times (high None: unbounded), for a unit whose
    accepting states have no way out (one character, say): copies chained end to start."""
    if unit.accepting.any() and unit.table[unit.accepting].any():
        raise ValueError(f"/{unit.pattern}/ continues after accepting")
    if high is not None and high < low:
        return dfa_from_strings([])
    final = np.flatnonzero(unit.accepting)
    inner = [q for q in range(1, unit.n_states) if not unit.accepting[q]]  # start first
    k = len(inner)
    copies = (high if high is not None else low + 1) + 1  # the last copy is the end state
    position = np.zeros(unit.n_states, dtype=np.int64)
    position[inner] = np.arange(k)
    trans = np.zeros((1 + copies * k, unit.table.shape[1]), dtype=np.int32)  # unit's classes
    rows = unit.table[inner].astype(np.int64)
    into_final = np.isin(rows, final)
    accepting = np.zeros(1 + copies * k, dtype=bool)
    for j in range(copies - 1):
        base = 1 + j * k
        nxt = j + 1 if (high is not None or j < low) else j  # unbounded: copy `low` loops
        mapped = np.where(into_final, 1 + nxt * k, base + position[rows])
        trans[base : base + k] = np.where(rows == DEAD, DEAD, mapped)
        accepting[base] = j >= low
    last = 1 + (copies - 1) * k
    accepting[last] = high is not None and high >= low
    keep = 1 + (copies - 1) * k + (1 if high is not None else 0)
    pattern = f"({unit.pattern}){{{low},{high or ''}}}"
    return ByteDFA.from_classes(trans[:keep], unit.classes, accepting[:keep], 1, pattern)


def dfa_from_code_points(ranges: Iterable[tuple[int, int]], pattern: str) -> ByteDFA:
    """The minimal DFA of the one-character texts whose code point lies in one of `ranges`
    (inclusive pairs, in any order, overlapping or not). Surrogates, which UTF-8 cannot encode,
    are left out; no code point is left (``[]``, or only surrogates): the empty language. Built
    without the regex parser, so any set of code points works, the private-use ones included."""
    pieces = sorted(
        (max(a, 0), min(b, MAX_CODE_POINT))
        for lo, hi in ranges
        for a, b in ((lo, min(hi, SURROGATES[0] - 1)), (max(lo, SURROGATES[1] + 1), hi))
    )
    merged: list[list[int]] = []
    for a, b in pieces:
        if a > b:
            continue
        if merged and a <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    if not merged:
        return ByteDFA(np.zeros((1, 256), dtype=np.int32), np.zeros(1, dtype=bool), DEAD, pattern)
    atoms, inside, prev = [], [], 0  # atoms partition the code points, gaps included
    for a, b in merged:
        if a > prev:
            atoms.append((prev, a - 1))
            inside.append(False)
        atoms.append((a, b))
        inside.append(True)
        prev = b + 1
    if prev <= MAX_CODE_POINT:
        atoms.append((prev, MAX_CODE_POINT))
        inside.append(False)
    table = np.zeros((3, len(atoms)), dtype=np.int64)  # dead, start, after one character
    table[1, inside] = 2
    accepting = np.array([False, False, True])
    return to_bytes(table, accepting, atoms, pattern, unlimited())


def dfa_from_byte_classes(classes: Sequence[Iterable[int]], pattern: str) -> ByteDFA:
    """The minimal DFA of the strings whose i-th byte is in ``classes[i]`` (a chain of states;
    e.g. an ASCII keyword matched in any case, or one string)."""
    allowed = [sorted(set(bytes_)) for bytes_ in classes]
    n = len(allowed)
    burn(NUMPY_STEPS // STEPS_PER_UNIT + n)
    byte_class, width = _class_per_byte({b for bytes_ in allowed for b in bytes_})
    trans = np.zeros((n + 2, width), dtype=np.int32)
    position = np.repeat(np.arange(1, n + 1), [len(bytes_) for bytes_ in allowed])
    trans[position, byte_class[[b for bytes_ in allowed for b in bytes_]]] = position + 1
    accepting = np.zeros(n + 2, dtype=bool)
    accepting[n + 1] = True
    return ByteDFA.from_classes(trans, byte_class, accepting, 1, pattern)


def _chain(data: bytes) -> ByteDFA:
    """The DFA of the one string `data`: a chain of states, built in a few array passes."""
    burn(NUMPY_STEPS // STEPS_PER_UNIT + len(data) // 16)
    text = np.frombuffer(data, dtype=np.uint8)
    byte_class, width = _class_per_byte(np.unique(text).tolist())
    n = len(data)
    trans = np.zeros((n + 2, width), dtype=np.int32)
    trans[np.arange(1, n + 1), byte_class[text]] = np.arange(2, n + 2, dtype=np.int32)
    accepting = np.zeros(n + 2, dtype=bool)
    accepting[n + 1] = True
    return ByteDFA.from_classes(trans, byte_class, accepting, 1, repr(data))


def _class_per_byte(used) -> tuple[np.ndarray, int]:
    """(the class of each byte: one per byte of `used`, class 0 for all the others; how many
    classes)."""
    used = sorted(used)
    byte_class = np.zeros(256, dtype=np.int64)
    byte_class[used] = np.arange(1, len(used) + 1)
    return byte_class, len(used) + 1


def dfa_from_strings(strings: Iterable[bytes | str]) -> ByteDFA:
    """The minimal DFA of a finite set of strings (str items are UTF-8 encoded).

    Builds the trie of the set, then merges equivalent states bottom-up (the trie is acyclic,
    so one pass over states in reverse creation order, keyed by their outgoing edges, is exact).
    """
    items = sorted({s.encode("utf-8") if isinstance(s, str) else bytes(s) for s in strings})
    if len(items) == 1:  # one string (a property name, say): its chain is minimal
        return _chain(items[0])
    rows: list[dict[int, int]] = [{}]
    accepting = [False]
    for data in items:
        burn(1 + len(data) // 4)  # the active fuel: the string's nodes (more below)
        state = 0
        for b in data:
            nxt = rows[state].get(b)
            if nxt is None:
                nxt = rows[state][b] = len(rows)
                rows.append({})
                accepting.append(False)
            state = nxt
        accepting[state] = True
    burn(NUMPY_STEPS // STEPS_PER_UNIT + len(rows))  # the active fuel: a unit per trie node
    canonical = [0] * len(rows)
    registry: dict[tuple, int] = {}
    for state in range(len(rows) - 1, -1, -1):  # children are created after their parents
        if not state & 1023:
            burn(1024)
        key = (accepting[state], tuple((b, canonical[t]) for b, t in sorted(rows[state].items())))
        canonical[state] = registry.setdefault(key, state)
    # renumber the canonical states: dead 0, start 1, then in creation order
    kept = sorted(set(canonical))
    number = {old: i + 1 for i, old in enumerate(kept)}
    classes, width = _class_per_byte({b for data in items for b in data})
    column = classes.tolist()
    trans = np.zeros((len(kept) + 1, width), dtype=np.int32)
    acc = np.zeros(len(kept) + 1, dtype=bool)
    for i, old in enumerate(kept):
        if not i & 1023:
            burn(512)
        for b, t in rows[old].items():
            trans[number[old], column[b]] = number[canonical[t]]
        acc[number[old]] = accepting[old]
    summary = " | ".join(repr(s) for s in items[:3]) + (
        f" ... ({len(items)} strings)" if len(items) > 3 else ""
    )
    return ByteDFA.from_classes(trans, classes, acc, 1 if items else DEAD, summary)
