"""Fuel calibration: the work units each compile stage burns, against its CPU time.

A `constrain.fuel.Fuel` counts work in units meant to be about a microsecond each. This runs
every stage a server prepares a request with, under a `Fuel(5 * 10**7)` (5x the server's
default budget: an input past it is an error here, as no stage's own clock stops it), on the
inputs the repository ships: the example schemas and the JSONSchemaBench schemas
(``../shared/data/jsonschemabench``, round-robin over the subsets), the grammar library and
lark's python.lark, and the regex benchmark's patterns. Per stage it reports the units, the CPU
seconds (this thread's: the machine's other load does not count) and units per µs (p1 / p50 /
p99 / max) and the longest stretch between two looks of the fuel at its clock (a look every
1,024 units: where a server's preparation gives way to decoding and sees a cancellation),
then the default budget it proposes: the units that cover 99.9% of the schema
requests (compile and first mask), times 10.

Stages:

* hostile: the inputs of the hostile-request suite that once escaped the fuel (megabyte
  literals, rules that double, long alternations, nested counted repeats, ...), each prepared
  as a server prepares a request (compiled, its shortest completion planned, its first mask);
* regex: `compile_regex`, its cache cleared first;
* schema: `Grammar.from_json_schema` (the compile-regex cache cleared first, the other caches
  as a server has them), then schema mask: the first mask of a fresh `Constraint`;
* lark load: lark's loading alone (metered per Python call), lark: `Grammar.from_lark` whole,
  lark mask: its first mask.

Run: ``python bench/fuel.py [--limit 300] [--tokenizer smollm2-135m-instruct]
[--markdown docs/benchmarks/fuel.md] [--out fuel.json]``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings
from functools import partial
from pathlib import Path

# run as a script: import `bench` and `constrain` from the repository root
if __package__ in (None, ""):
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import constrain as cn
import constrain.grammars as library
from bench.regexes import REGEXES
from bench.whitespace import bench_files
from constrain.bench.report import fmt, load_vocab, percentile
from constrain.engine.grammar.lark_frontend import ImportResolver, _load
from constrain.engine.regex import compile_regex
from constrain.fuel import Fuel

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
BIG = 5 * 10**7
MARGIN = 10  # the proposed budget: this many times the 99.9th percentile
STAGES = ("hostile", "regex", "schema", "schema mask", "lark load", "lark", "lark mask")
MB = 1_000_000
HOSTILE = {  # name -> ConstraintSpec arguments (bench/hostile.py sends them to a server)
    "GBNF literal of 1 MB": dict(grammar='root ::= "' + "a" * MB + '"'),
    "GBNF rules doubling 40 times": dict(grammar="\n".join(
        ["root ::= a40", 'a0 ::= "ab"'] + [f"a{i} ::= a{i - 1} a{i - 1}" for i in range(1, 41)])),
    "Lark rules doubling 40 times": dict(grammar="\n".join(
        ["start: a40", 'a0: "ab"'] + [f"a{i}: a{i - 1} a{i - 1}" for i in range(1, 41)])),
    "choice of 1 MB": dict(choices=["a" * MB]),
    "regex literal of 200 kB": dict(regex="ab" * 100_000),
    "schema const of 1 MB": dict(schema={"const": "a" * MB}),
    "regex alternation of 20,000 words": dict(regex="|".join(f"w{i}x" for i in range(20_000))),
    "nested counted repeats": dict(regex="((((a{1,20}){1,20}){1,20}){1,20})"),
    "GBNF of 8,000 rules": dict(grammar="root ::= r0\n" + "".join(
        f'r{i} ::= "x{i}" | r{i + 1}\n' for i in range(8_000)) + 'r8000 ::= "end"\n'),
    "minLength 1e5": dict(schema={"type": "string", "minLength": 100_000, "maxLength": MB}),
}  # fmt: skip


def measure(stage: str, name: str, build) -> tuple[dict, object]:
    """One record: `build()` run under a big fuel, its units, CPU seconds, the longest
    stretch between the fuel's looks at its clock (or its error)."""
    looked = [time.perf_counter(), 0.0]  # the last look, the longest stretch

    def look():
        now = time.perf_counter()
        looked[:] = now, max(looked[1], now - looked[0])

    fuel = Fuel(BIG, pause=look)
    t0 = time.thread_time()
    try:
        with fuel.active(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            value = build()
        error = None
    except cn.ConstrainError as exc:
        value, error = None, f"{type(exc).__name__}: {str(exc)[:120]}"
    seconds = time.thread_time() - t0
    look()
    record = {"stage": stage, "name": name, "units": fuel.used, "seconds": seconds,
              "stretch": looked[1]}  # fmt: skip
    if error:
        record["error"] = error
    return record, value


def schemas(args) -> list[tuple[str, object]]:
    """The example schemas, then up to `limit` JSONSchemaBench schemas per subset."""
    out = [(f"schemas/{n}", cn.schemas.load(n)) for n in cn.schemas.names()]
    per_subset: dict[str, int] = {}
    for name, path in bench_files(args.data):
        subset = name.split("/")[0]
        if args.limit is None or per_subset.get(subset, 0) < args.limit:
            per_subset[subset] = per_subset.get(subset, 0) + 1
            out.append((name, json.loads(path.read_text())))
    return out


def grammars() -> list[tuple[str, str, str]]:
    """(name, Lark text, start) of the grammar library and lark's python.lark."""
    import lark

    out = [(n, library.path(n).read_text(encoding="utf-8"), "start") for n in library.names()]
    python = Path(lark.__file__).parent / "grammars" / "python.lark"
    out.append(("lark:python", python.read_text(encoding="utf-8"), "file_input"))
    return out


def first_mask(grammar: cn.Grammar, vocab: cn.Vocabulary):
    """The mask at the start of a fresh constraint (nothing cached)."""
    return cn.Constraint(grammar, vocab).start().mask()


def prepared(spec: cn.ConstraintSpec, vocab: cn.Vocabulary):
    """What a server prepares: the compiled constraint, its shortest completion and first
    mask under a token budget."""
    constraint = cn.Constraint(spec.compile_grammar(), vocab)
    constraint.shortest_tokens()
    return constraint.start(64).mask()


def run(args) -> list[dict]:
    vocab = load_vocab(args.tokenizer) if args.tokenizer != "none" else None
    records: list[dict] = []
    cn.Grammar.from_lark('start: "a"')  # lark's one-time work (its own parser), as a server's
    if vocab is not None:
        for name, arguments in HOSTILE.items():
            compile_regex.cache_clear()
            spec = cn.ConstraintSpec(**arguments)
            records.append(measure("hostile", name, partial(prepared, spec, vocab))[0])
    for name, pattern in REGEXES:
        compile_regex.cache_clear()
        records.append(measure("regex", name, partial(compile_regex, pattern))[0])
    for name, text, start in grammars():
        load = partial(_load, text, name, ImportResolver(), start)
        records.append(measure("lark load", name, load)[0])
        record, grammar = measure("lark", name, partial(cn.Grammar.from_lark, text, start=start))
        records.append(record)
        if grammar is not None and vocab is not None:
            records.append(measure("lark mask", name, partial(first_mask, grammar, vocab))[0])
    todo = schemas(args)
    for i, (name, schema) in enumerate(todo):
        compile_regex.cache_clear()
        record, grammar = measure("schema", name, partial(cn.Grammar.from_json_schema, schema))
        records.append(record)
        if grammar is not None and vocab is not None:
            records.append(measure("schema mask", name, partial(first_mask, grammar, vocab))[0])
        if i % 200 == 0:
            print(f"# {i}/{len(todo)} schemas", file=sys.stderr)
    return records


def proposed_budget(records: list[dict]) -> tuple[int, float, int]:
    """(units covering 99.9% of the schema requests that compiled, that percentile, budget):
    a request is a compile and its first mask."""
    per_schema: dict[str, int] = {}
    for r in records:
        if r["stage"] in ("schema", "schema mask") and "error" not in r:
            per_schema[r["name"]] = per_schema.get(r["name"], 0) + r["units"]
    covered = percentile(list(per_schema.values()), 99.9)
    budget = _round_up(MARGIN * covered)
    return len(per_schema), covered, budget


def _round_up(x: float) -> int:
    """`x` rounded up to 1, 2 or 5 times a power of ten."""
    if not x > 0:
        return 0
    power = 10 ** math.floor(math.log10(x))
    return next(step * power for step in (1, 2, 5, 10) if step * power >= x)


def markdown(records: list[dict], settings: str) -> str:
    lines = [
        "# Fuel calibration: units against CPU time",
        "",
        settings,
        "",
        "| stage | n | errors | units p50 | units p99 | units max | CPU ms p50 | CPU ms p99 "
        "| CPU ms max | units/µs p1 | units/µs p50 | units/µs p99 | units/µs max "
        "| longest stretch between looks, ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for stage in STAGES:
        rows = [r for r in records if r["stage"] == stage]
        if not rows:
            continue
        done = [r for r in rows if "error" not in r]
        units = [r["units"] for r in done]
        ms = [r["seconds"] * 1e3 for r in done]
        rate = [r["units"] / (r["seconds"] * 1e6) for r in done if r["seconds"] > 0]
        lines.append(
            f"| {stage} | {len(rows)} | {len(rows) - len(done)} "
            + " ".join(f"| {fmt(percentile(units, q), 0)}" for q in (50, 99, 100))
            + " "
            + " ".join(f"| {fmt(percentile(ms, q), 1)}" for q in (50, 99, 100))
            + " "
            + " ".join(f"| {fmt(percentile(rate, q), 2)}" for q in (1, 50, 99, 100))
            + f" | {fmt(max(r['stretch'] for r in rows) * 1e3, 0)} |"
        )
    n, covered, budget = proposed_budget(records)
    slowest = sorted(
        (r for r in records if "error" not in r), key=lambda r: r["seconds"], reverse=True
    )[:5]
    lines += [
        "",
        f"Schema requests (compile + first mask) that compiled: {n}; 99.9% of them use at most "
        f"{fmt(covered, 0)} units. Proposed default budget per request ({MARGIN}x that, "
        f"rounded up): **{budget:,} units**.",
        "",
        "Slowest inputs: "
        + "; ".join(
            f"{r['stage']} {r['name']} ({fmt(r['units'], 0)} units, "
            f"{fmt(r['seconds'] * 1e3, 0)} ms)"
            for r in slowest
        )
        + ".",
    ]
    hostile = [r for r in records if r["stage"] == "hostile"]
    if hostile:
        lines += ["", "Hostile inputs, each prepared as a server prepares a request:", "",
                  "| input | units | CPU ms | units/µs | longest stretch between looks, ms "
                  "| outcome |", "|---|---:|---:|---:|---:|---|"]  # fmt: skip
        for r in hostile:
            rate = r["units"] / (r["seconds"] * 1e6) if r["seconds"] > 0 else 0
            lines.append(f"| {r['name']} | {fmt(r['units'], 0)} | {fmt(r['seconds'] * 1e3, 0)} "
                         f"| {fmt(rate, 2)} | {fmt(r['stretch'] * 1e3, 0)} "
                         f"| {r.get('error', 'prepared')} |")  # fmt: skip
    errors = [r for r in records if "error" in r and r["stage"] != "hostile"]
    if errors:
        kinds: dict[str, int] = {}
        for r in errors:
            kind = r["error"].split(":")[0]
            kinds[kind] = kinds.get(kind, 0) + 1
        lines += [
            "",
            "Errors (not in the percentiles): "
            + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
            + ".",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--limit", type=int, default=None, help="schemas per subset (all)")
    parser.add_argument("--tokenizer", default="smollm2-135m-instruct", help='or "none"')
    parser.add_argument("--out", type=Path, help="write the records as JSON")
    parser.add_argument("--markdown", type=Path, help="write the table as markdown")
    args = parser.parse_args(argv)
    records = run(args)
    settings = (
        f"Inputs: {sum(r['stage'] == 'schema' for r in records)} schemas (the example schemas, "
        f"then JSONSchemaBench round-robin, {args.limit or 'all'} per subset), "
        f"{sum(r['stage'] == 'lark' for r in records)} Lark grammars, "
        f"{sum(r['stage'] == 'regex' for r in records)} regexes, "
        f"{sum(r['stage'] == 'hostile' for r in records)} hostile inputs; masks over "
        f"{args.tokenizer}. CPU time of the compiling thread (`time.thread_time`)."
    )
    table = markdown(records, settings)
    print(table)
    if args.out:
        args.out.write_text(json.dumps(records, indent=1))
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        cmd = "python bench/fuel.py " + " ".join(argv if argv is not None else sys.argv[1:])
        args.markdown.write_text(
            f"<!-- generated by `{cmd.strip()}`; do not edit by hand -->\n\n{table}\n"
        )


if __name__ == "__main__":
    main()
