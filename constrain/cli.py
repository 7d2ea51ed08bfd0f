"""The `constrain` command line: `constrain generate ...`, `constrain models`."""

from __future__ import annotations

import argparse
import json
import sys

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


def _cmd_generate(args: argparse.Namespace) -> int:
    import constrain as cn

    model = cn.load_model(args.model, device=args.device)
    out = cn.generate(
        model,
        args.prompt,
        regex=args.regex,
        choices=args.choices,
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        greedy=args.greedy,
        seed=args.seed,
    )
    print(out.text)
    if args.verbose:
        s = out.stats
        print(
            json.dumps(
                {
                    "finish_reason": out.finish_reason,
                    "complete": out.complete,
                    "tokens": len(out.tokens),
                    "tokens_per_s": round(s.tokens_per_s, 2),
                }
            ),
            file=sys.stderr,
        )
    return 0 if out.complete else 3


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="constrain", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    gen = sub.add_parser("generate", help="generate text under a constraint")
    gen.add_argument("prompt")
    kind = gen.add_mutually_exclusive_group()
    kind.add_argument("--regex", help="the output fully matches this regex")
    kind.add_argument("--choices", nargs="+", help="the output is one of these strings")
    gen.add_argument("--model", default=None, help="bundled name, local directory or Hub id")
    gen.add_argument("--device", default="auto")
    gen.add_argument("--max-tokens", type=int, default=256)
    gen.add_argument("--temperature", type=float, default=1.0)
    gen.add_argument("--greedy", action="store_true")
    gen.add_argument("--seed", type=int, default=None)
    gen.add_argument("-v", "--verbose", action="store_true", help="print stats to stderr")
    gen.set_defaults(run=_cmd_generate)

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
