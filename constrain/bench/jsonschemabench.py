"""JSONSchemaBench: generate a JSON object for each schema with a real model, and score it.

The protocol of the official harness (notes/benchmarks.md): chat messages with the system
prompt "You need to generate a JSON object that matches the schema below.", two worked
examples of the subset's group as user/assistant turns, then the schema (``json.dumps``);
greedy decoding, at most 2048 new tokens, a 10 s compile timeout and a 60 s generation
timeout; the output is valid when it parses and validates under jsonschema's
`Draft202012Validator` with a `FormatChecker` (the formats it really checks are listed in the
report: jsonschema checks only those whose optional dependencies are installed). As that
validator reads every schema as Draft 2020-12 whatever its ``$schema`` says, so does the
compiler here (``draft="2020-12"``): a draft-04 ``$ref`` then keeps its siblings.

Metrics per subset: declared coverage (the schema compiles within the timeout), empirical
coverage (valid outputs over all schemas), compliance (valid over compiled), medians of GCT
(compile), TTFT (compile + prefill + first token), TPOT, output tokens, finish reasons, and the
constraint's share of the decoding time. Each record keeps the length in tokens of the shortest
text the engine finds for the schema, and the finish reasons say how many ``length`` finishes
had no such text within the budget (a schema whose every valid document is longer than 2048
tokens cannot be completed by any engine).

Two deviations, both reported: the few-shot examples are our own (the official ones are not
in the shared data), and a schema longer than `--max-schema-tokens` is cut in the *prompt*
(the constraint still enforces all of it), so a small model with a short context can run the
long schemas.

``--speculative forced+lookup`` drafts grammar-forced and prompt-lookup tokens: greedy output is
token for token the same, in fewer forwards (a small model often repeats itself until the
budget closes the text, which prompt lookup drafts many tokens at a time). TPOT is then
decoding time per output token. The report is rewritten after every schema, subsets are
visited round-robin, and ``--resume`` continues a stopped run.

Run: ``python -m constrain.bench.jsonschemabench --data ../shared/data/jsonschemabench
[--subset S ...] [--limit 30] [--sampler awrs] [--model NAME] [--out report.json]
[--markdown table.md]``; ``--compare a.json b.json [--plot out.png]`` draws two runs side by
side. Works on any folder of ``<Subset>/<id>.json`` schemas.
"""

from __future__ import annotations

import argparse
import itertools
import json
import signal
import statistics
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

import jsonschema

import constrain as cn
from constrain.bench.report import fmt

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "jsonschemabench"
# greedy speculative decoding emits exactly the tokens of plain decoding, in fewer forwards
_SPECULATIVE = {"none": None, "forced": cn.Speculative(lookup=0), "forced+lookup": cn.Speculative()}
SYSTEM = "You need to generate a JSON object that matches the schema below."

# two worked examples per task group (written for this harness)
_SHOTS: dict[str, list[tuple[dict, dict]]] = {
    "Glaiveai2K": [
        (
            {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "The city to look up"},
                    "units": {"type": "string", "enum": ["metric", "imperial"]},
                },
                "required": ["city"],
            },
            {"city": "Lisbon", "units": "metric"},
        ),
        (
            {
                "type": "object",
                "properties": {
                    "amount": {"type": "number", "description": "The loan amount"},
                    "rate": {"type": "number", "description": "Annual interest rate"},
                    "years": {"type": "integer"},
                },
                "required": ["amount", "rate", "years"],
            },
            {"amount": 25000, "rate": 4.5, "years": 10},
        ),
    ],
    "Github": [
        (
            {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "version": {"type": "string", "pattern": "^[0-9]+\\.[0-9]+\\.[0-9]+$"},
                    "private": {"type": "boolean"},
                },
                "required": ["name", "version"],
            },
            {"name": "tiny-cli", "version": "1.4.2", "private": False},
        ),
        (
            {
                "type": "object",
                "properties": {
                    "servers": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "host": {"type": "string"},
                                "port": {"type": "integer", "minimum": 1, "maximum": 65535},
                            },
                            "required": ["host"],
                        },
                    }
                },
            },
            {"servers": [{"host": "db.internal", "port": 5432}]},
        ),
    ],
    "Snowplow": [
        (
            {
                "type": "object",
                "description": "Schema for a link click event",
                "properties": {
                    "targetUrl": {"type": "string", "format": "uri", "maxLength": 4096},
                    "elementId": {"type": ["string", "null"], "maxLength": 255},
                },
                "required": ["targetUrl"],
                "additionalProperties": False,
            },
            {"targetUrl": "https://example.com/docs", "elementId": "nav-docs"},
        ),
        (
            {
                "type": "object",
                "description": "Schema for a screen view",
                "properties": {
                    "name": {"type": "string", "maxLength": 255},
                    "id": {"type": "string", "format": "uuid"},
                },
                "required": ["name", "id"],
            },
            {"name": "Settings", "id": "0b7a3c52-2f8e-4d5b-9a61-3c1f2e7d9b40"},
        ),
    ],
    "Kubernetes": [
        (
            {
                "type": "object",
                "description": "ConfigMap holds configuration data for pods to consume.",
                "properties": {
                    "apiVersion": {"type": ["string", "null"]},
                    "kind": {"type": ["string", "null"], "enum": ["ConfigMap"]},
                    "data": {
                        "type": ["object", "null"],
                        "additionalProperties": {"type": "string"},
                    },
                },
            },
            {"apiVersion": "v1", "kind": "ConfigMap", "data": {"LOG_LEVEL": "info"}},
        ),
        (
            {
                "type": "object",
                "description": "A port exposed by a container.",
                "properties": {
                    "containerPort": {"type": "integer"},
                    "protocol": {"type": ["string", "null"]},
                },
                "required": ["containerPort"],
            },
            {"containerPort": 8080, "protocol": "TCP"},
        ),
    ],
    "WashingtonPost": [
        (
            {
                "type": "object",
                "description": "A credit for a piece of content.",
                "properties": {
                    "type": {"type": "string", "enum": ["author"]},
                    "name": {"type": "string"},
                    "org": {"type": "string"},
                },
                "required": ["type", "name"],
            },
            {"type": "author", "name": "Jane Doe", "org": "Metro desk"},
        ),
        (
            {
                "type": "object",
                "description": "A tag attached to a story.",
                "properties": {
                    "text": {"type": "string"},
                    "slug": {"type": "string", "pattern": "^[a-z0-9-]+$"},
                },
                "required": ["text"],
            },
            {"text": "Local news", "slug": "local-news"},
        ),
    ],
    "JsonSchemaStore": [
        (
            {
                "type": "object",
                "properties": {
                    "extends": {"type": "string"},
                    "rules": {"type": "object", "additionalProperties": {"type": "boolean"}},
                },
                "additionalProperties": False,
            },
            {"extends": "recommended", "rules": {"no-unused-vars": True}},
        ),
        (
            {
                "type": "object",
                "properties": {
                    "tasks": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "label": {"type": "string"},
                                "command": {"type": "string"},
                            },
                            "required": ["label", "command"],
                        },
                    }
                },
                "required": ["tasks"],
            },
            {"tasks": [{"label": "build", "command": "make"}]},
        ),
    ],
}


def shots_for(subset: str) -> list[tuple[dict, dict]]:
    """The worked examples of a subset's group (GitHub's for an unknown subset)."""
    return _SHOTS.get("Github" if subset.startswith("Github") else subset, _SHOTS["Github"])


def messages(subset: str, schema_text: str) -> list[dict]:
    out = [{"role": "system", "content": SYSTEM}]
    for shot_schema, shot_value in shots_for(subset):
        out.append({"role": "user", "content": json.dumps(shot_schema)})
        out.append({"role": "assistant", "content": json.dumps(shot_value)})
    out.append({"role": "user", "content": schema_text})
    return out


def checked_formats() -> list[str]:
    """The formats jsonschema's FormatChecker really checks in this environment."""
    return sorted(jsonschema.FormatChecker().checkers)


class _Timeout(Exception):
    pass


def _alarm(*_):
    raise _Timeout


def run_schema(model, subset: str, path: Path, args) -> dict:
    """Compile (10 s timeout), generate (greedy, timeout), validate: one record."""
    schema = json.loads(path.read_text())
    record = {"subset": subset, "id": path.stem, "compiled": False, "valid": False}
    t0 = time.perf_counter()
    signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, args.compile_timeout + 1.0)  # a safety net
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            generator = cn.Generator(
                model,
                schema=schema,
                # read every schema as the official validator does (Draft 2020-12), whatever
                # its $schema says
                schema_options={
                    "whitespace": args.whitespace,
                    "draft": "2020-12",
                    "timeout": args.compile_timeout,  # the compiler's own limit, a clear error
                },
                sampler=args.sampler,
                max_tokens=args.max_tokens,
                greedy=True,
                timeout=args.generation_timeout,
                speculative=_SPECULATIVE[args.speculative],
            )
        record["compiled"] = True
    except _Timeout:
        record["error"] = f"compile timeout ({args.compile_timeout} s)"
    except Exception as exc:  # unsupported keyword, empty language, ...
        record["error"] = f"{type(exc).__name__}: {exc}"[:500]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    record["gct_s"] = time.perf_counter() - t0
    if not record["compiled"]:
        return record
    schema_text, record["prompt_cut"] = _schema_in_prompt(model, schema, args.max_schema_tokens)
    try:
        with warnings.catch_warnings():  # a budget nothing fits: recorded below
            warnings.simplefilter("ignore")
            out = generator(messages(subset, schema_text))
    except cn.ConstrainError as exc:
        record["error"] = f"{type(exc).__name__}: {exc}"[:500]
        return record
    # a "length" finish is the engine's failure unless no text fits the budget at all (asked
    # after generating, when the budget has searched it: it stays in the measured time)
    record["shortest_tokens"] = generator.constraint.shortest_tokens()
    s = out.stats
    decode_s = sum(s.token_s)
    record.update(
        finish_reason=out.finish_reason,
        output_tokens=len(out.tokens),
        ttft_s=s.ttft_s,
        # a speculative step can emit several tokens: TPOT is then decoding time per token
        tpot_s=s.tpot_s if s.speculative is None else decode_s / max(len(out.tokens), 1),
        forwards=len(s.token_s),
        prefill_s=s.prefill_s,
        decode_s=decode_s,
        constraint_s=s.constraint_s,
        checks=s.checks,
        masks=s.masks,
        text=out.text[:2000],
    )
    record["valid"] = out.complete and _validates(out.text, schema)
    return record


def _schema_in_prompt(model, schema, max_tokens: int) -> tuple[str, bool]:
    text = json.dumps(schema)
    ids = model.tokenizer.encode(text, add_special_tokens=False)
    if len(ids) <= max_tokens:
        return text, False
    return model.tokenizer.decode(ids[:max_tokens]) + " ...", True


def _validates(text: str, schema) -> bool:
    try:
        value = json.loads(text)
        jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker()).validate(
            value
        )
        return True
    except Exception:
        return False


def summarise(records: list[dict]) -> list[dict]:
    """Per-subset metrics (and a total row)."""
    rows = []
    groups: dict[str, list[dict]] = {}
    for r in records:
        groups.setdefault(r["subset"], []).append(r)
    groups["total"] = records
    for subset, rs in groups.items():
        compiled = [r for r in rs if r["compiled"]]
        ran = [r for r in compiled if "finish_reason" in r]
        valid = sum(r["valid"] for r in rs)
        decode = sum(r["decode_s"] for r in ran)
        rows.append(
            {
                "subset": subset,
                "schemas": len(rs),
                "declared_coverage": len(compiled) / len(rs),
                "empirical_coverage": valid / len(rs),
                "compliance": valid / len(compiled) if compiled else float("nan"),
                "gct_ms": _median([r["gct_s"] * 1e3 for r in rs]),
                "ttft_s": _median([r["ttft_s"] for r in ran]),
                "tpot_ms": _median([r["tpot_s"] * 1e3 for r in ran if r["output_tokens"] > 1]),
                "output_tokens": _median([r["output_tokens"] for r in ran]),
                "finish": dict(Counter(r["finish_reason"] for r in ran)),
                "length_share": sum(r["finish_reason"] != "stop" for r in ran) / max(len(ran), 1),
                "length_past_budget": sum(
                    r["finish_reason"] == "length"
                    and (r.get("shortest_tokens") or 0) > r["output_tokens"]
                    for r in ran
                ),
                "constraint_share": sum(r["constraint_s"] for r in ran) / decode if decode else 0,
                "prompt_cut": sum(bool(r.get("prompt_cut")) for r in rs),
            }
        )
    return rows


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def table(rows: list[dict], title: str) -> str:
    lines = [
        title,
        "",
        "| subset | schemas | declared cov. | empirical cov. | compliance | GCT ms | TTFT s | "
        "TPOT ms | out tokens | finish reasons | constraint / decode time | prompt cut |",
        "|---" * 12 + "|",
    ]
    for r in rows:
        finish = ", ".join(f"{k} {v}" for k, v in sorted(r["finish"].items()))
        if r.get("length_past_budget"):
            finish += f" ({r['length_past_budget']} with no text found within the budget)"
        name = f"**{r['subset']}**" if r["subset"] == "total" else r["subset"]
        lines.append(
            f"| {name} | {r['schemas']} | {100 * r['declared_coverage']:.1f}% | "
            f"{100 * r['empirical_coverage']:.1f}% | {100 * r['compliance']:.1f}% | "
            f"{fmt(r['gct_ms'], 1)} | {fmt(r['ttft_s'], 2)} | {fmt(r['tpot_ms'], 1)} | "
            f"{fmt(r['output_tokens'], 0)} | {finish} | {100 * r['constraint_share']:.2f}% | "
            f"{r['prompt_cut']} |"
        )
    return "\n".join(lines)


def compare(paths: list[Path], plot: Path | None) -> str:
    """Two or more reports side by side (a markdown table; a bar chart with `plot`)."""
    reports = [json.loads(p.read_text()) for p in paths]
    names = [f"{r['settings']['sampler']} ({p.stem})" for r, p in zip(reports, paths)]
    subsets = [row["subset"] for row in reports[0]["summary"]]
    lines = ["| subset | " + " | ".join(f"{n} compliance / TPOT ms" for n in names) + " |"]
    lines.append("|---" * (len(names) + 1) + "|")
    by = [{row["subset"]: row for row in r["summary"]} for r in reports]
    for subset in subsets:
        cells = [
            f"{100 * b[subset]['compliance']:.1f}% / {fmt(b[subset]['tpot_ms'], 1)}"
            if subset in b
            else "-"
            for b in by
        ]
        lines.append(f"| {subset} | " + " | ".join(cells) + " |")
    if plot is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 2, figsize=(12, 4))
        width = 0.8 / len(reports)
        for i, (name, b) in enumerate(zip(names, by)):
            xs = [j + i * width for j in range(len(subsets))]
            axes[0].bar(
                xs, [100 * b.get(s, {}).get("compliance", 0) for s in subsets], width, label=name
            )
            axes[1].bar(xs, [b.get(s, {}).get("tpot_ms", 0) for s in subsets], width, label=name)
        for ax, label in zip(axes, ("compliance (%)", "TPOT (ms)")):
            ax.set_xticks(
                [j + 0.4 - width / 2 for j in range(len(subsets))], subsets, rotation=45, ha="right"
            )
            ax.set_ylabel(label)
            ax.legend()
        fig.tight_layout()
        fig.savefig(plot, dpi=120)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="constrain bench jsonschemabench", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--data", type=Path, default=DATA, help="folder of <Subset>/<id>.json")
    parser.add_argument("--subset", nargs="*", help="subsets to run (default: all)")
    parser.add_argument("--limit", type=int, default=30, help="schemas per subset, in file order")
    parser.add_argument("--sampler", default="awrs", help="awrs | lcd | awrs-two-pass")
    parser.add_argument(
        "--speculative",
        choices=sorted(_SPECULATIVE),
        default="none",
        help="draft grammar-forced / prompt-lookup tokens (greedy: the same output, faster)",
    )
    parser.add_argument("--model", default=None, help="default: the bundled SmolLM2")
    parser.add_argument("--max-tokens", type=int, default=2048)
    parser.add_argument("--compile-timeout", type=float, default=10.0)
    parser.add_argument("--generation-timeout", type=float, default=60.0)
    parser.add_argument("--max-schema-tokens", type=int, default=3000)
    parser.add_argument(
        "--whitespace", default="compact", help="compact | natural | default | pretty"
    )
    parser.add_argument("--out", type=Path, help="write the JSON report here")
    parser.add_argument("--markdown", type=Path, help="write the markdown table here")
    parser.add_argument(
        "--resume", action="store_true", help="skip the schemas already in --out (same settings)"
    )
    parser.add_argument("--compare", nargs="+", type=Path, help="reports to put side by side")
    parser.add_argument("--plot", type=Path, help="with --compare: a PNG bar chart")
    args = parser.parse_args(argv)
    if args.compare:
        text = compare(args.compare, args.plot)
        if args.plot:
            text += f"\n\n![compliance and TPOT by subset]({args.plot.name})"
        for path in args.compare:
            report = json.loads(path.read_text())
            text += "\n\n" + table(report["summary"], report.get("title", path.stem))
        _write(text, args, argv)
        return 0

    from tqdm import tqdm

    model = cn.load_model(args.model)
    subsets = args.subset or sorted(p.name for p in args.data.iterdir() if p.is_dir())
    per_subset = [
        [(s, p) for p in sorted((args.data / s).glob("*.json"))[: args.limit]] for s in subsets
    ]
    # round-robin over the subsets: a run stopped early still covers every subset evenly
    jobs = [job for round_ in itertools.zip_longest(*per_subset) for job in round_ if job]
    settings = {
        "sampler": args.sampler,
        "speculative": args.speculative,
        "model": model.name,
        "device": str(model.device),
        "max_tokens": args.max_tokens,
        "compile_timeout": args.compile_timeout,
        "generation_timeout": args.generation_timeout,
        "max_schema_tokens": args.max_schema_tokens,
        "whitespace": args.whitespace,
        "limit": args.limit,
        "formats_checked": checked_formats(),
    }

    def title() -> str:
        return (
            f"JSONSchemaBench ({args.data.name}, {len(records)} of {len(jobs)} schemas, at most "
            f"{args.limit} per subset), {model.name} on {model.device}, greedy, sampler "
            f"{args.sampler}"
            + (f", speculative {args.speculative}" if args.speculative != "none" else "")
            + f"; formats checked by the validator: {', '.join(settings['formats_checked'])}"
        )

    records = _resumed(args, settings)
    done = {(r["subset"], r["id"]) for r in records}
    for subset, path in tqdm(jobs, desc="schemas", file=sys.stderr):
        if (subset, path.stem) in done:
            continue
        records.append(run_schema(model, subset, path, args))
        if args.out:  # after every schema: a long run that stops keeps what it measured
            report = {"settings": settings, "title": title(), "records": records}
            args.out.write_text(json.dumps({**report, "summary": summarise(records)}, indent=1))
    text = table(summarise(records), title())
    _write(text, args, argv)
    return 0


def _resumed(args, settings: dict) -> list[dict]:
    """With ``--resume``, the records already in ``--out`` (same settings), else none."""
    if not (args.resume and args.out and args.out.exists()):
        return []
    report = json.loads(args.out.read_text())
    if report["settings"] != settings:
        raise SystemExit(f"--resume: {args.out} was made with other settings")
    return report["records"]


def _write(text: str, args, argv: list[str] | None) -> None:
    """Print the tables, and write them to ``--markdown`` with the command that made them."""
    print(text)
    if args.markdown:
        cmd = "python -m constrain.bench.jsonschemabench " + " ".join(
            argv if argv is not None else sys.argv[1:]
        )
        args.markdown.write_text(f"<!-- generated by `{cmd.strip()}` -->\n\n{text}\n")


if __name__ == "__main__":
    sys.exit(main())
