"""The `constrain` command line.

constrain generate --schema schemas/person.json "Invent a person."
constrain generate --grammar sql "Write a SQL query that selects the employees older than 30."
constrain generate --regex "\\d{4}-\\d{2}-\\d{2}" "When did Apollo 11 land?"
constrain bench jsonschemabench --limit 30 --sampler awrs --out report.json
constrain conformance test-suite | maskbench
constrain models
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from dataclasses import fields
from pathlib import Path

from constrain.decoding import ASAp
from constrain.errors import ConfigError, ConstrainError
from constrain.options import HELP, SMC, DecodingConfig, Speculative
from constrain.processors import CFG, MinP, Processor, RepetitionPenalty, TopH, TopK, TopP, Typical
from constrain.samplers import token_sampler
from constrain.serve import limits as serve_limits


def _cmd_models(args: argparse.Namespace) -> int:
    from constrain.models import bundled_models, cache_dir

    print(f"cache: {cache_dir()}")
    for m in bundled_models():
        state = ("installed" if m["installed"] else "not installed") + (
            ", cached" if m["cached"] else ""
        )
        print(f"  {m['name']:<24} {state:<24} package {m['package']}")
    return 0


_PROCESSORS = {  # the processors the command line can name, with their one number
    "top_k": lambda v: TopK(int(v)),
    "top_p": lambda v: TopP(float(v)),
    "min_p": lambda v: MinP(float(v)),
    "typical": lambda v: Typical(float(v)),
    "top_h": lambda v: TopH(float(v)),
    "repetition_penalty": lambda v: RepetitionPenalty(float(v)),
    "cfg": lambda v: CFG(float(v)),
}


def sampler_named(text: str) -> str | SMC | ASAp:
    """A sampler from its name: awrs, lcd, awrs-two-pass, smc or smc:N (N particles), asap."""
    name, _, particles = text.partition(":")
    if name == "smc":
        return SMC(particles=int(particles)) if particles else SMC()
    if name == "asap":
        return ASAp()
    token_sampler(text)  # an unknown name fails here
    return text


def processor_named(text: str) -> Processor:
    """A processor from NAME=VALUE (top_k, top_p, min_p, typical, top_h, repetition_penalty,
    cfg)."""
    name, _, value = text.partition("=")
    if name not in _PROCESSORS or not value:
        raise ValueError(f"expected NAME=VALUE with NAME one of {sorted(_PROCESSORS)}")
    return _PROCESSORS[name](value)


def speculative_named(text: str) -> Speculative:
    """Speculative settings from '+'-separated draft sources: forced, lookup."""
    sources = set(text.split("+"))
    if not sources <= {"forced", "lookup"}:
        raise ValueError(f"unknown draft sources {sorted(sources - {'forced', 'lookup'})}")
    return Speculative(forced="forced" in sources, lookup=3 if "lookup" in sources else 0)


# the decoding options the command line spells as text, and how to read them
_READERS = {
    "sampler": sampler_named,
    "processors": processor_named,
    "speculative": speculative_named,
}


def _add_decoding_options(parser: argparse.ArgumentParser) -> None:
    """One option per `DecodingConfig` field, with its documented help (only the options
    given reach the config: the rest keep its defaults)."""
    group = parser.add_argument_group("decoding (DecodingConfig)")
    for f in fields(DecodingConfig):
        flag = "--" + f.name.replace("_", "-")
        options = dict(dest=f.name, default=argparse.SUPPRESS, help=HELP[f.name])
        if f.name == "processors":  # repeatable: one processor per --processor
            group.add_argument("--processor", flag, type=_option(_READERS[f.name]),
                               action="append", metavar="NAME=VALUE", **options)  # fmt: skip
        elif f.name in _READERS:
            group.add_argument(flag, type=_option(_READERS[f.name]), **options)
        elif f.type.startswith("bool"):
            group.add_argument(flag, action=argparse.BooleanOptionalAction, **options)
        else:
            kind = {"int": int, "float": float}.get(f.type.split(" ")[0], str)
            group.add_argument(flag, type=kind, **options)


def _option(read):
    """`read` as an argparse type: a ValueError becomes a usage error naming the value."""

    def parse(text: str):
        try:
            return read(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from exc

    parse.__name__ = read.__name__
    return parse


def _schema(text: str | None):
    """--schema: inline JSON text, or the path of a JSON file."""
    if text is None:
        return None
    if text.lstrip().startswith("{") or text.strip() in ("true", "false"):
        source, raw = "the inline --schema", text
    else:
        path = Path(text)
        if not path.is_file():
            raise ConstrainError(f"--schema {text!r}: no such file (or give the schema as JSON)")
        try:
            source, raw = str(path), path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConstrainError(f"--schema {text!r}: cannot read the file: {exc}") from exc
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConstrainError(f"{source} is not JSON: {exc}") from exc


def _grammar(text: str | None):
    """--grammar: a library grammar name, the path of an existing file (read as a grammar: on
    the command line the user names their own files), or else Lark text. Compiled here, so a
    bad grammar is reported before the model loads."""
    from constrain.constraints import grammar_from
    from constrain.grammars import names

    if text is None:
        return None
    try:
        is_file = text not in names() and Path(text).is_file()
    except (OSError, ValueError):  # a name too long for a path, a NUL: grammar text
        is_file = False
    return grammar_from(Path(text) if is_file else text)


def _cmd_generate(args: argparse.Namespace) -> int:
    import constrain as cn

    schema = _schema(args.schema)
    grammar = _grammar(args.grammar)
    config = DecodingConfig(
        **{f.name: getattr(args, f.name) for f in fields(DecodingConfig) if hasattr(args, f.name)}
    )
    model = cn.load_model(args.model, device=args.device)
    options = dict(
        regex=args.regex,
        choices=args.choices,
        grammar=grammar,
        schema=schema,
        schema_options={"whitespace": args.whitespace} if schema is not None else None,
        config=config,
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
    if args.benchmark == "serve":
        from constrain.bench import serve

        return serve.main(args.rest)
    if args.benchmark == "cold":
        from constrain.bench import cold

        return cold.main(args.rest) or 0
    if args.benchmark == "vllm":
        from constrain.bench import vllm

        return vllm.main(args.rest)
    from constrain.bench import jsonschemabench

    return jsonschemabench.main(args.rest) or 0


class _Printed(logging.Handler):
    """The server's warnings (a public address without a key) printed on stderr, as the
    command's own (``constrain: warning: ...``)."""

    def emit(self, record: logging.LogRecord) -> None:
        print(f"constrain: {record.levelname.lower()}: {record.getMessage()}", file=sys.stderr)


_PRINTED = _Printed(logging.WARNING)


def _cmd_serve(args: argparse.Namespace) -> int:
    try:
        from constrain import serve
    except ImportError as exc:  # pragma: no cover - the extra is missing
        raise ConfigError(f"constrain serve needs the serve extra: pip install 'constrain[serve]' "
                          f"({exc})") from None  # fmt: skip
    logging.getLogger("constrain.serve").addHandler(_PRINTED)  # once: the same handler
    serve.run(
        args.model, host=args.host, port=args.port, device=args.device, name=args.name,
        log_level=args.log_level,
        max_running=args.max_running, max_queue=args.max_queue, max_tokens=args.max_tokens,
        prefill_chunk=args.prefill_chunk,
        timeout=args.timeout, tool_format=args.tool_format,
        api_key=args.api_key or os.environ.get("CONSTRAIN_API_KEY") or None,
        allowed_hosts=args.allowed_hosts, allowed_origins=args.allowed_origins, docs=args.docs,
        limits=serve.Limits(**{f.name: getattr(args, f.name) for f in fields(serve.Limits)}),
    )  # fmt: skip
    return 0


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
        "--grammar",
        help="a library grammar name (json, sql, ...), the path of a .lark file, or Lark text",
    )
    kind.add_argument("--schema", help="a JSON Schema: a file, or inline JSON text")
    gen.add_argument(
        "--whitespace",
        default="compact",
        help="JSON whitespace: compact | natural | default | pretty",
    )
    gen.add_argument("--model", default=None, help="bundled name, local directory or Hub id")
    gen.add_argument("--device", default="auto")
    gen.add_argument("--seed", type=int, default=None)
    _add_decoding_options(gen)
    gen.add_argument("--stream", action="store_true", help="print the text as it is generated")
    gen.add_argument("-v", "--verbose", action="store_true", help="print stats to stderr")
    gen.set_defaults(run=_cmd_generate)

    bench = sub.add_parser(
        "bench",
        help="run a benchmark (jsonschemabench, serve, vllm, cold)",
        description="Run a benchmark; the options after its name are the benchmark's own "
        "(`constrain bench jsonschemabench --help`). The micro-benchmarks are scripts in the "
        "repository's bench/ (`python bench/samplers.py --help`).",
    )
    bench.add_argument("benchmark", choices=["jsonschemabench", "serve", "vllm", "cold"])
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

    srv = sub.add_parser(
        "serve",
        help="serve a model over an OpenAI-compatible HTTP API",
        description="Serve MODEL (default: the bundled one) at /v1/chat/completions, "
        "/v1/completions, /v1/models, /health and /metrics (docs/serving.md).",
    )
    srv.add_argument("model", nargs="?", default=None, help="bundled name, directory or Hub id")
    srv.add_argument("--name", default=None, help="the model id clients send (default: MODEL)")
    srv.add_argument("--host", default="127.0.0.1")
    srv.add_argument("--log-level", default="info", help="uvicorn's: warning, info, debug")
    srv.add_argument("--port", type=int, default=8000)
    srv.add_argument("--device", default="auto")
    srv.add_argument("--max-running", type=int, default=16, help="requests batched together")
    srv.add_argument("--max-queue", type=int, default=64, help="requests waiting (then 429)")
    srv.add_argument("--prefill-chunk", type=int, default=128, help="prompt tokens fed between "
                     "two decoding steps (a long prompt delays others by one chunk)")  # fmt: skip
    srv.add_argument("--max-tokens", type=int, default=512, help="a request's default")
    srv.add_argument("--timeout", type=float, default=120.0, help="seconds per request, at most")
    srv.add_argument("--tool-format", default=None, help="hermes | llama3 | mistral (default: "
                     "derived from the chat template)")  # fmt: skip
    access = srv.add_argument_group("access (docs/serving.md#security)")
    access.add_argument("--api-key", default=None, metavar="KEY",
                        help="every request but /health sends Authorization: Bearer KEY "
                        "(default: the environment's CONSTRAIN_API_KEY, else none)")  # fmt: skip
    access.add_argument("--allowed-hosts", default=None, metavar="HOST,...",
                        help="Host names served beside localhost, 127.0.0.1 and [::1] ('*': "
                        "any; default on a non-loopback --host: any with --api-key, else also "
                        "IP addresses)")  # fmt: skip
    access.add_argument("--allowed-origins", default=None, metavar="ORIGIN,...",
                        help="web origins whose pages may call the server, with CORS headers "
                        "('*': any; default: none, other origins are refused)")  # fmt: skip
    access.add_argument("--docs", action="store_true",
                        help="serve /docs, /redoc and /openapi.json (default: off)")  # fmt: skip
    limits = srv.add_argument_group("limits on one request (docs/serving.md#limits)")
    for flag, kind, default, text in serve_limits.options():
        shown = "" if default is None else f" (default: {default:,})"
        limits.add_argument(flag, type=kind, default=default, help=text + shown)
    srv.set_defaults(run=_cmd_serve)

    models = sub.add_parser("models", help="list the bundled models and the cache")
    models.set_defaults(run=_cmd_models)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run a command; a `ConstrainError` (the user's input or setting is wrong) is reported as
    one line on stderr with exit status 2, as argparse reports usage errors."""
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except ConstrainError as exc:
        print(f"constrain: error: {one_line(str(exc))}", file=sys.stderr)
        return 2


def one_line(message: str) -> str:
    """`message` on one line: its non-blank lines joined (a grammar error's excerpt and
    caret included, stripped)."""
    return " | ".join(line.strip() for line in message.splitlines() if line.strip())


if __name__ == "__main__":
    sys.exit(main())
