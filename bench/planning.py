"""Completion planning benchmark: how a token budget's plan grows with a schema's length bounds.

For each schema kind and bound n, one constraint is compiled for the bundled SmolLM2 vocabulary
(compile = `ConstraintSpec(schema=...).constraint(vocab)`), then `shortest_tokens()` plans the
shortest whole text (planning: the shortest completion in bytes, checked against the automaton,
then tokenized). Planning runs under a `Fuel`, so the work it counts is shown next to the time.

Run: ``python bench/planning.py [--sizes 1000,10000,100000] [--kinds minLength,minItems]
[--out results.json] [--markdown docs/benchmarks/planning.md]``.
"""

from __future__ import annotations

import platform
import sys
import time
from pathlib import Path

# run as a script: import `bench.common` and `constrain` from the repository root
if __package__ in (None, ""):
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import constrain as cn
from bench.common import argument_parser, emit
from constrain.constraints import ConstraintSpec
from constrain.errors import ConstrainError
from constrain.fuel import Fuel

KINDS = {
    "minLength": lambda n: {"type": "string", "minLength": n, "maxLength": 10 * n},
    "minItems": lambda n: {"type": "array", "items": {"type": "integer"}, "minItems": n},
}


def measure(vocab: cn.Vocabulary, kind: str, n: int) -> dict:
    """Compile and plan one schema; times in seconds, work in fuel units."""
    t0 = time.perf_counter()
    try:
        constraint = ConstraintSpec(schema=KINDS[kind](n)).constraint(vocab)
    except ConstrainError as e:  # a compile limit: the row says which
        return {"kind": kind, "n": n, "error": str(e).split(" (")[0]}
    t1 = time.perf_counter()
    fuel = Fuel(10**15)
    with fuel.active():
        tokens = constraint.shortest_tokens()
    t2 = time.perf_counter()
    return {
        "kind": kind, "n": n, "compile_s": t1 - t0, "planning_s": t2 - t1,
        "shortest_tokens": tokens, "fuel": fuel.used,
    }  # fmt: skip


def table(records: list[dict]) -> str:
    lines = [
        f"Shortest-completion planning with smollm2-135m-instruct on {platform.machine()} "
        f"({platform.python_implementation()} {platform.python_version()}); one run per row. "
        "Planning includes running the automaton over the completion found (the check that "
        "glued lexemes lex as planned): for minItems that is the Earley parser predicting the "
        "chain a count is compiled into, the part that grows faster than n.",
        "",
        "| schema | n | compile s | planning s | shortest tokens | planning work (fuel units) |",
        "|---|---|---|---|---|---|",
    ]
    for r in records:
        if "error" in r:
            lines.append(f"| {r['kind']} | {r['n']:,} | not compiled: {r['error']} | | | |")
            continue
        lines.append(
            f"| {r['kind']} | {r['n']:,} | {r['compile_s']:.2f} | {r['planning_s']:.2f} "
            f"| {r['shortest_tokens']:,} | {r['fuel']:,} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argument_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--kinds", default=",".join(KINDS))
    args = parser.parse_args(argv)
    vocab = cn.load_model().vocab
    records = []
    for kind in args.kinds.split(","):
        for n in map(int, args.sizes.split(",")):
            records.append(measure(vocab, kind, n))
            print(records[-1], file=sys.stderr, flush=True)
    emit(records, table(records), args, "bench/planning.py", argv)


if __name__ == "__main__":
    main()
