"""`compile_regex`: a regex to its minimal byte-level DFA, cached.

The stages are the sibling modules; this one runs them in order within one `CompileLimits` and
keeps the results in a bounded cache shared by all threads.

Pipeline: interegular syntax tree -> Thompson NFA over code-point sets -> subset construction
over *atoms* (the elementary code-point intervals the regex distinguishes) -> UTF-8 expansion
(each code-point range becomes byte-range sequences; intermediate states are interned by the
structure that remains, so "any continuation byte, then state t" exists once) -> pruning to
reachable and live states -> Moore minimisation with byte-class compression.

Invariants of the result: state 0 is dead (all its transitions lead to 0); every other state is
reachable from the start state (1) and live, i.e. can still reach an accepting state.
"""

from __future__ import annotations

import threading

import numpy as np

from constrain.engine.cache import BoundedCache
from constrain.engine.regex._limits import DEFAULT_MAX_MEMORY, STEPS_PER_UNIT, CompileLimits
from constrain.engine.regex._syntax import PARSE_STEPS_PER_CHAR, parse
from constrain.engine.regex.bytedfa import ByteDFA
from constrain.engine.regex.lowering import to_bytes
from constrain.engine.regex.minimize import minimize
from constrain.engine.regex.nfa import NFA
from constrain.engine.regex.subsets import determinize
from constrain.errors import RegexError
from constrain.fuel import looking_in

# compiled regexes by (pattern, max_states, max_memory, dialect, encoding), with the work
# their compilation took (a `max_work` below it refuses them cached too, so a cap answers the
# same whatever was compiled before); the timeout is not part of the key, so callers passing
# the time left of a larger compilation still share entries; bounded by their tables' bytes
# too (4 bytes per state and byte class)
_COMPILED: BoundedCache[tuple, tuple[ByteDFA, int]] = BoundedCache(
    256, max_bytes=128 * 2**20, size=lambda entry: entry[0].table.nbytes
)
_COMPILED_LOCK = threading.Lock()


def compile_regex(
    pattern: str,
    *,
    max_states: int = 100_000,
    timeout: float = 10.0,
    max_memory: int = DEFAULT_MAX_MEMORY,
    dialect: str = "python",
    encoding: str = "utf-8",
    max_work: int | None = None,
) -> ByteDFA:
    """Compile `pattern` (full-match semantics over UTF-8 bytes) to a minimal byte DFA (cached:
    the 256 most recently compiled are kept; `compile_regex.cache_clear()` forgets them).

    Args:
        pattern: the regex; see docs/regex.md for the supported syntax.
        max_states: cap on character-DFA states (and 4x that on NFA states).
        timeout: cap on compile time, in seconds, checked by every stage (none while a
            `constrain.fuel.Fuel` is active: it bounds the work).
        max_memory: cap on the memory the compilation holds, in bytes (an estimate counted
            by every stage: sets of states, tables).
        dialect: "python", or "ecma" for ECMA-262 meanings of ``.``, ``\\s`` and ``\\S`` (as
            JSON Schema's ``pattern`` uses them).
        encoding: "utf-8" (the text itself), or "json": the text as it appears between the
            quotes of a JSON string (``"``, ``\\`` and control characters escaped).
        max_work: cap on the compilation's work, in fuel units (counted, not timed: the
            same answer on any machine); None, no cap but the active fuel's.

    Raises:
        RegexError: malformed or unsupported syntax (with its position), or a limit exceeded
            (naming it: ``max_states=``, ``timeout=``, ``max_memory=``, ``max_work=``).
    """
    if not isinstance(pattern, str):
        raise RegexError(f"a regex must be a str, got {type(pattern).__name__}", repr(pattern))
    if dialect not in ("python", "ecma") or encoding not in ("utf-8", "json"):
        raise ValueError(f"unknown dialect {dialect!r} or encoding {encoding!r}")
    key = (pattern, max_states, max_memory, dialect, encoding)
    with _COMPILED_LOCK:
        found = _COMPILED.get(key)
    limits = CompileLimits(
        pattern, timeout=timeout, max_states=max_states, max_memory=max_memory,
        max_work=max_work,
    )  # fmt: skip
    if found is None:
        found = _compile(pattern, limits, dialect, encoding), limits.work
        with _COMPILED_LOCK:
            _COMPILED[key] = found
    elif max_work is not None and found[1] > max_work:
        limits.check(work=max_work * STEPS_PER_UNIT)  # refused, as the compilation was
    return found[0]


def _clear_compiled() -> None:
    with _COMPILED_LOCK:
        _COMPILED.clear()


compile_regex.cache_clear = _clear_compiled  # type: ignore[attr-defined]  (as lru_cache's)


def _compile(pattern: str, limits: CompileLimits, dialect: str, encoding: str) -> ByteDFA:
    """The pipeline of `compile_regex`, every stage within `limits`."""
    limits.check(work=len(pattern) * PARSE_STEPS_PER_CHAR)  # the parser burns nothing itself,
    with looking_in():  # so the fuel looks in on it (it gives way, and stops when cancelled)
        tree, lookaheads = parse(pattern, ecma=dialect == "ecma")
    nfa = NFA(pattern, limits, lookaheads=lookaheads)
    start = nfa.new()
    final = nfa.build(tree, start)
    rows, accepting, atoms = determinize(nfa, start, final)
    limits.check(len(rows) * len(atoms) * 8, len(rows) * 4 * STEPS_PER_UNIT)  # 4 per row
    table = np.full((len(rows), len(atoms)), -1, dtype=np.int64)
    for state, row in enumerate(rows):
        if row:
            table[state, list(row)] = list(row.values())
    table, acc = minimize(table, np.array(accepting), 0, limits=limits)
    return to_bytes(table, acc, atoms, pattern, limits, encoding)
