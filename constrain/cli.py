"""The `constrain` command line.

constrain generate --schema schemas/person.json "Invent a person."
constrain generate --grammar sql "Employees older than 30?"
constrain generate --regex "\\d{4}-\\d{2}-\\d{2}" "When did Apollo 11 land?"
constrain bench jsonschemabench --limit 30 --sampler awrs --out report.json
constrain conformance test-suite | maskbench
constrain models
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from constrain.errors import ConstrainError


def _cmd_models(args: argparse.Namespace) -> int:
    from constrain.models import bundled_models, cache_dir

    print(f"cache: {cache_dir()}")
    for m in bundled_models():
        state = ("installed" if m["installed"] else "not installed") + (
            ", cached" if m["cached"] else ""
        )
        print(f"  {m['name']:<24} {state:<24} package {m['package']}")
    return 0


def _sampler(args: argparse.Namespace):
    import constrain as cn

    if args.sampler == "smc":
        return cn.SMC(particles=args.particles)
    if args.sampler == "asap":
        return cn.ASAp()
    return args.sampler


def _cmd_generate(args: argparse.Namespace) -> int:
    import constrain as cn

    schema = json.loads(Path(args.schema).read_text()) if args.schema else None
    model = cn.load_model(args.model, device=args.device)
    options = dict(
        regex=args.regex,
        choices=args.choices,
        grammar=args.grammar,
        schema=schema,
        schema_options={"whitespace": args.whitespace} if schema is not None else None,
        sampler=_sampler(args),
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        greedy=args.greedy,
        system=args.system,
    )
    if args.stream:
        stream = cn.stream(model, args.prompt, seed=args.seed, **options)
        for piece in stream:
            print(piece, end="", flush=True)
        print()
        out = stream.result
    else:
        out = cn.generate(model, args.prompt, seed=args.seed, **options)
        print(out.text)
    if args.verbose:
        s = out.stats
        report = {
            "finish_reason": out.finish_reason,
            "complete": out.complete,
            "tokens": len(out.tokens),
            "ttft_s": round(s.ttft_s, 3),
            "tpot_ms": round(s.tpot_s * 1e3, 1),
            "constraint_ms": round(s.constraint_s * 1e3, 2),
            "log_weight": out.log_weight,
        }
        print(json.dumps(report), file=sys.stderr)
    return 0 if out.complete else 3


def _cmd_bench(args: argparse.Namespace) -> int:
    from constrain.bench import jsonschemabench

    return jsonschemabench.main(args.rest) or 0


def _cmd_conformance(args: argparse.Namespace) -> int:
    from constrain.bench import conformance

    conformance.main([args.harness, *args.rest])
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="constrain",
        description="Constrained generation with language models.",
        epilog="Each command has its own --help.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    gen = sub.add_parser(
        "generate",
        help="generate text under a constraint",
        description="Generate text for PROMPT that satisfies the constraint (at most one).",
    )
    gen.add_argument("prompt")
    kind = gen.add_mutually_exclusive_group()
    kind.add_argument("--regex", help="the output fully matches this regex")
    kind.add_argument("--choices", nargs="+", help="the output is one of these strings")
    kind.add_argument(
        "--grammar", help="a library grammar name (json, sql, ...), .lark file or Lark text"
    )
    kind.add_argument("--schema", help="a JSON Schema file")
    gen.add_argument(
        "--whitespace", default="compact", help="JSON whitespace: compact | default | pretty"
    )
    gen.add_argument(
        "--sampler", default="awrs", choices=["awrs", "lcd", "awrs-two-pass", "smc", "asap"]
    )
    gen.add_argument("--particles", type=int, default=8, help="with --sampler smc")
    gen.add_argument("--model", default=None, help="bundled name, local directory or Hub id")
    gen.add_argument("--device", default="auto")
    gen.add_argument("--system", default=None, help="a system message")
    gen.add_argument("--max-tokens", type=int, default=256)
    gen.add_argument("--temperature", type=float, default=1.0)
    gen.add_argument("--greedy", action="store_true")
    gen.add_argument("--seed", type=int, default=None)
    gen.add_argument("--stream", action="store_true", help="print the text as it is generated")
    gen.add_argument("-v", "--verbose", action="store_true", help="print stats to stderr")
    gen.set_defaults(run=_cmd_generate)

    bench = sub.add_parser(
        "bench",
        help="run a benchmark (jsonschemabench)",
        description="Run a benchmark; the options after its name are the benchmark's own "
        "(`constrain bench jsonschemabench --help`). The micro-benchmarks are scripts in the "
        "repository's bench/ (`python bench/samplers.py --help`).",
    )
    bench.add_argument("benchmark", choices=["jsonschemabench"])
    bench.add_argument("rest", nargs=argparse.REMAINDER)
    bench.set_defaults(run=_cmd_bench)

    conf = sub.add_parser(
        "conformance",
        help="JSON Schema conformance: the official test suite or MaskBench instances",
        description="`constrain conformance test-suite --help` for the harness's options.",
    )
    conf.add_argument("harness", choices=["test-suite", "maskbench"])
    conf.add_argument("rest", nargs=argparse.REMAINDER)
    conf.set_defaults(run=_cmd_conformance)

    models = sub.add_parser("models", help="list the bundled models and the cache")
    models.set_defaults(run=_cmd_models)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except ConstrainError as exc:
        print(f"constrain: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
