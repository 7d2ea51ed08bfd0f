"""The native engine against the Python reference on MaskBench: the same masks, and their cost.

For each schema of ``jsonschemabench/<Subset>/<id>.json`` with instances in
``maskbench/<Subset>.jsonl``: compile it once (``spellings="all"``, as the conformance
harness does), then walk every instance, valid and invalid, written with ``json.dumps`` (compact
separators), through the automaton built in each engine (`Grammar.with_engine`): the full mask
before every token and after the last, compared bit for bit; `check` of each token compared;
stop at the first refused token. Each engine gets a fresh `Constraint` per schema, so first
masks are cold in both.

Prints one table per tokenizer: positions compared, differences, and per engine the mask
mean / p50 / p99 / max and first-mask p50 / p99, with the ratio python / native measured in
the same run.

Run: ``python -m constrain.bench.differential [--tokenizer smollm2-135m-instruct]
[--subset S] [--limit N] [--markdown PATH]``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import warnings
from pathlib import Path

import numpy as np

import constrain as cn
from constrain.bench.report import fmt, load_vocab, percentile

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
ENGINES = ("python", "native")
TOKENIZERS = ("smollm2-135m-instruct", "gemma-3-270m")


def schemas(data: Path, subsets: list[str] | None, limit: int | None, seed: int = 0):
    """(subset, id, schema, instances) for each MaskBench schema (a `limit` per subset, drawn
    with `seed`)."""
    rng = random.Random(seed)
    for path in sorted((data / "maskbench").glob("*.jsonl")):
        if subsets and path.stem not in subsets:
            continue
        rows = [json.loads(line) for line in path.read_text().split("\n") if line.strip()]
        if limit is not None:
            rows = rng.sample(rows, min(limit, len(rows)))
        for row in rows:
            schema_path = data / "jsonschemabench" / path.stem / f"{row['id']}.json"
            if schema_path.exists():
                schema = json.loads(schema_path.read_text())
                yield path.stem, row["id"], schema, [*row["valid"], *row["invalid"]]


class Tally:
    """Positions compared, differences (with the first few named) and per-engine timings."""

    def __init__(self):
        self.schemas = 0
        self.compile_errors = 0
        self.positions = 0
        self.differences: list[str] = []
        self.masks = {e: [] for e in ENGINES}
        self.first = {e: [] for e in ENGINES}

    def compare(self, where: str, grammar: cn.Grammar, vocab, instances: list) -> None:
        constraints = {e: cn.Constraint(grammar.with_engine(e), vocab) for e in ENGINES}
        first = True
        for value in instances:
            text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
            tokens = vocab.encode(text)
            matchers = {e: c.start() for e, c in constraints.items()}
            for i, token in enumerate([*tokens, None]):
                masks = {}
                for e, m in matchers.items():
                    t0 = time.perf_counter()
                    masks[e] = m.mask()
                    elapsed = time.perf_counter() - t0
                    self.masks[e].append(elapsed)
                    if first:
                        self.first[e].append(elapsed)
                first = False
                self.positions += 1
                if not np.array_equal(masks["python"], masks["native"]):
                    diff = np.flatnonzero(masks["python"] != masks["native"])
                    self.differences.append(f"{where} {text[:60]!r} token {i}: ids {diff[:5]}")
                    break
                if token is None:
                    break
                checks = {e: m.check(token) for e, m in matchers.items()}
                if len(set(checks.values())) > 1:
                    self.differences.append(f"{where} {text[:60]!r} token {i}: check {checks}")
                    break
                if not checks["python"]:
                    break
                for m in matchers.values():
                    m.advance(token)

    def table(self, tokenizer: str) -> str:
        ms = {e: np.array(self.masks[e]) * 1e6 for e in ENGINES}
        first = {e: np.array(self.first[e]) * 1e6 for e in ENGINES}
        lines = [
            f"{tokenizer}: {self.schemas} schemas ({self.compile_errors} not compiled), "
            f"{self.positions:,} positions compared, {len(self.differences)} differences",
            "",
            "| engine | mask mean µs | p50 | p99 | max | first mask p50 µs | p99 |",
            "|---|---|---|---|---|---|---|",
        ]
        for e in ENGINES:
            a, f = ms[e], first[e]
            lines.append(
                f"| {e} | {fmt(a.mean() if len(a) else float('nan'), 0)} "
                f"| {fmt(percentile(list(a), 50), 0)} | {fmt(percentile(list(a), 99), 0)} "
                f"| {fmt(a.max() if len(a) else float('nan'), 0)} "
                f"| {fmt(percentile(list(f), 50), 0)} | {fmt(percentile(list(f), 99), 0)} |"
            )
        if len(ms["native"]) and ms["native"].mean() > 0:
            ratio = ms["python"].mean() / ms["native"].mean()
            p99 = percentile(list(ms["python"]), 99) / percentile(list(ms["native"]), 99)
            lines.append(f"| python / native | {ratio:.1f}x | | {p99:.1f}x | | | |")
        lines += [f"- {d}" for d in self.differences[:10]]
        return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--tokenizer", nargs="*", default=list(TOKENIZERS))
    parser.add_argument("--subset", nargs="*")
    parser.add_argument("--limit", type=int, help="schemas per subset (drawn at random)")
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    tables = []
    differences = 0
    for name in args.tokenizer:
        vocab = load_vocab(name)
        tally = Tally()
        for subset, sid, schema, instances in schemas(args.data, args.subset, args.limit):
            tally.schemas += 1
            try:
                grammar = cn.Grammar.from_json_schema(schema, spellings="all", timeout=5)
            except cn.ConstrainError:
                tally.compile_errors += 1
                continue
            tally.compare(f"{subset}/{sid}", grammar, vocab, instances)
        tables.append(tally.table(name))
        differences += len(tally.differences)
        print(tables[-1], flush=True)
    if args.markdown:
        args.markdown.write_text(
            "Native engine vs the Python reference on MaskBench (`python -m "
            f"constrain.bench.differential {' '.join(argv if argv is not None else sys.argv[1:])}`), "
            "one thread, both engines in one run.\n\n" + "\n\n".join(tables) + "\n"
        )
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
