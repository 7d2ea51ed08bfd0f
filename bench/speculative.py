"""Speculative decoding benchmark: JSON extraction under a schema, with and without drafts.

With the bundled SmolLM2-135M-Instruct, for N schemas of the shared JSONSchemaBench data that
compile and have a MaskBench valid instance (round-robin over the subsets, file order), the
prompt asks to convert a record to JSON; the record lists the instance's values as
``field: value`` lines, so the values to copy are in the prompt (extraction). Each
configuration decodes greedily (up to `--max-tokens`) right after the plain run of the same
schema (side by side):

* plain: non-speculative constrained decoding (AWRS);
* forced: grammar-forced tokens as drafts;
* lookup: prompt-lookup drafts (n-grams of the prompt and the text so far);
* layer skip: a self-speculative draft (the target's first layers, `--draft-layers`);
* forced + lookup, as chains and as trees of 3 lookup continuations;
* combined: forced + lookup + layer skip.

Reported: decode tokens/s (output tokens over the decoding time, prefill excluded) and the
ratio to plain, acceptance, tokens per target forward, and whether every output is identical
to plain greedy decoding.

Run: ``python bench/speculative.py [--limit 50] [--markdown docs/benchmarks/speculative.md]``.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

# run as a script: import `bench.common` and `constrain` from the repository root
if __package__ in (None, ""):
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import numpy as np

import constrain as cn
from bench.common import argument_parser, emit
from constrain.bench.report import fmt

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
PROMPT = "Convert this record to a JSON object valid under the schema.\nSchema: {schema}\nRecord:\n{record}"
_MAX_SCHEMA_CHARS = 1500
_MAX_INSTANCE_CHARS = 600


def _record(value, indent: str = "") -> str:
    """An instance as ``field: value`` lines (strings unquoted): the values, not the JSON."""
    if isinstance(value, dict):
        lines = []
        for key, item in value.items():
            if isinstance(item, (dict, list)) and item:
                lines.append(f"{indent}{key}:")
                lines.append(_record(item, indent + "  "))
            else:
                lines.append(f"{indent}{key}: {_scalar(item)}")
        return "\n".join(lines)
    if isinstance(value, list):
        return "\n".join(f"{indent}- {_record(v, indent + '  ').strip()}" for v in value)
    return indent + _scalar(value)


def _scalar(value) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def extraction_cases(data: Path, n: int) -> list[tuple[str, dict, str]]:
    """(name, schema, prompt) for n schemas with a valid instance, round-robin by subset."""
    queues = {}
    for path in sorted((data / "maskbench").glob("*.jsonl")):
        subset = path.stem
        rows = []
        for line in path.read_text(encoding="utf-8").split("\n"):
            if line.strip():
                rec = json.loads(line)
                if rec["valid"]:
                    rows.append((rec["id"], rec["valid"][0]))
        queues[subset] = rows
    cases = []
    while len(cases) < n and any(queues.values()):
        for subset, rows in queues.items():
            while rows and len(cases) < n:
                ident, value = rows.pop(0)
                schema_path = data / "jsonschemabench" / subset / f"{ident}.json"
                text = schema_path.read_text()
                if len(text) > _MAX_SCHEMA_CHARS or len(json.dumps(value)) > _MAX_INSTANCE_CHARS:
                    continue
                if not isinstance(value, dict):
                    continue
                schema = json.loads(text)
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        cn.Grammar.from_json_schema(schema)
                except cn.ConstrainError:
                    continue
                prompt = PROMPT.format(schema=json.dumps(schema), record=_record(value))
                cases.append((f"{subset}/{ident}", schema, prompt))
                break
    return cases


def main(argv: list[str] | None = None) -> None:
    parser = argument_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--limit", type=int, default=50)
    parser.add_argument("--max-tokens", type=int, default=200)
    parser.add_argument("--draft-layers", type=int, default=10, help="layers of the draft")
    parser.add_argument("--k", type=int, default=6)
    args = parser.parse_args(argv)
    model = cn.load_model()
    draft = model.with_layers(range(args.draft_layers))
    configs = {
        "forced": cn.Speculative(k=args.k, lookup=0),
        "lookup": cn.Speculative(k=args.k, forced=False),
        f"layer skip ({args.draft_layers}/30 layers)": cn.Speculative(
            draft=draft, k=args.k, forced=False, lookup=0
        ),
        "forced + lookup": cn.Speculative(k=args.k),
        "forced + lookup tree (3 branches)": cn.Speculative(k=args.k, branches=3),
        "combined (forced + lookup + layer skip)": cn.Speculative(draft=draft, k=args.k),
    }
    cases = extraction_cases(args.data, args.limit)
    rows = {
        name: {
            "tokens": 0,
            "seconds": 0.0,
            "forwards": 0,
            "drafted": 0,
            "kept": 0,
            "identical": 0,
            "ratios": [],
        }
        for name in ["plain", *configs]
    }
    for i, (name, schema, prompt) in enumerate(cases):
        common = dict(schema=schema, greedy=True, max_tokens=args.max_tokens)
        plain = cn.generate(model, prompt, **common)
        plain_s = sum(plain.stats.token_s)
        _add(rows["plain"], plain, plain_s, None, True)
        rows["plain"].setdefault("texts", []).append(plain.text)
        for label, settings in configs.items():
            out = cn.generate(model, prompt, speculative=settings, **common)
            seconds = out.stats.decode_s
            _add(rows[label], out, seconds, out.stats.speculative, out.tokens == plain.tokens)
            rows[label]["ratios"].append(plain_s / seconds if seconds else float("nan"))
        print(
            f"# {i + 1}/{len(cases)} {name}: {len(plain.tokens)} tokens",
            file=sys.stderr,
            flush=True,
        )
    results = []
    for label, r in rows.items():
        results.append(
            {
                "configuration": label,
                "tokens": r["tokens"],
                "tokens_per_s": r["tokens"] / r["seconds"] if r["seconds"] else float("nan"),
                "speedup_mean": float(np.mean(r["ratios"])) if r["ratios"] else 1.0,
                "acceptance": r["kept"] / r["drafted"] if r["drafted"] else float("nan"),
                "tokens_per_forward": r["tokens"] / r["forwards"] if r["forwards"] else 1.0,
                "identical": r["identical"],
                "texts": r.get("texts", []),  # plain decoding's outputs, to compare runs
            }
        )
    plain_rate = results[0]["tokens_per_s"]
    lines = [
        f"Speculative decoding on {len(cases)} extraction prompts (JSONSchemaBench schemas with "
        f"a MaskBench instance as the record), SmolLM2-135M-Instruct on {model.device}, greedy, "
        f"k = {args.k} (adaptive)",
        "",
        "| configuration | tokens | decode tok/s | vs plain (total) | vs plain (mean per schema) | "
        "acceptance | tokens per target forward | identical to plain |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['configuration']} | {r['tokens']} | {fmt(r['tokens_per_s'], 1)} | "
            f"{fmt(r['tokens_per_s'] / plain_rate, 2)}x | {fmt(r['speedup_mean'], 2)}x | "
            f"{fmt(100 * r['acceptance'], 0)}% | {fmt(r['tokens_per_forward'], 2)} | "
            f"{r['identical']}/{len(cases)} |"
        )
    emit(results, "\n".join(lines), args, "bench/speculative.py", argv)


def _add(row: dict, out, seconds: float, report, identical: bool) -> None:
    row["tokens"] += len(out.tokens)
    row["seconds"] += seconds
    row["identical"] += identical
    if report is not None:
        row["forwards"] += report.forwards
        row["drafted"] += sum(report.drafted.values())
        row["kept"] += sum(report.kept.values())
    else:
        row["forwards"] += len(out.stats.token_s)


if __name__ == "__main__":
    main()
