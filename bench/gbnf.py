"""GBNF benchmark: JSON written in GBNF against the library's Lark `json`, both engines.

Three grammars: the library's `json.lark`; the same language written in GBNF (bounded
whitespace between tokens, what `tests/test_gbnf.py` checks mask for mask against the Lark
one); and JSON in the style of llama.cpp's `json.gbnf` (optional whitespace after every token).
The instances are `bench/grammar.py`'s JSON documents (`json.dumps` of random values, compact
or indented), tokenized and replayed token by token. Measured, per engine (native, python):

* compile: `Grammar.from_gbnf` / `Grammar.from_lark` with the regex cache cleared (p50 of 5
  runs), and the first mask of a new Constraint after it;
* mask: `Matcher.mask()` at every step of every instance on one Constraint, as in repeated
  generation (p50 / p90 / p99).

Run: ``python bench/gbnf.py [--tokenizers smollm2-135m-instruct] [--instances 20]
[--markdown docs/benchmarks/gbnf.md]``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

# run as a script: import `bench` and `constrain` from the repository root
if __package__ in (None, ""):
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import constrain as cn
import constrain.grammars as library
from bench.common import argument_parser, emit
from bench.grammar import grammar_instances
from constrain.bench.report import fmt, load_vocab, percentile
from constrain.engine.regex import compile_regex

JSON_SAME_LANGUAGE = r"""
# the language of the library's json.lark: bounded whitespace between tokens
root   ::= value nl?
value  ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws? ( pair ( ws? "," ws? pair )* ws? )? "}"
pair   ::= string ws? ":" ws? value
array  ::= "[" ws? ( value ( ws? "," ws? value )* ws? )? "]"
string ::= "\"" ( [^"\\\x00-\x1F] | "\\" ["\\/bfnrt] | "\\u" [0-9a-fA-F]{4} )* "\""
number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
ws     ::= [ \t]{0,40} "\r"? "\n" [ \t]{0,40} | [ \t]{1,40}
nl     ::= "\r"? "\n"
"""

JSON_LLAMA_STYLE = r"""
# optional whitespace after every token, as in llama.cpp's json.gbnf
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws
array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws
string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [0-9]{0,15})? ws
ws     ::= | " " | "\n" [ \t]{0,20}
"""

GRAMMARS = {
    "Lark json (library)": ("lark", library.path("json").read_text()),
    "GBNF, same language": ("gbnf", JSON_SAME_LANGUAGE),
    "GBNF, llama.cpp style": ("gbnf", JSON_LLAMA_STYLE),
}


def _build(kind: str, text: str, engine: str) -> cn.Grammar:
    grammar = cn.Grammar.from_gbnf(text) if kind == "gbnf" else cn.Grammar.from_lark(text)
    return grammar if engine == "native" else grammar.with_engine(engine)


def bench(kind: str, text: str, engine: str, vocab: cn.Vocabulary, paths) -> dict:
    compiles, first_masks = [], []
    for _ in range(5):
        compile_regex.cache_clear()
        t0 = time.perf_counter()
        grammar = _build(kind, text, engine)
        compiles.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        cn.Constraint(grammar, vocab).start().mask()
        first_masks.append(time.perf_counter() - t0)
    constraint = cn.Constraint(_build(kind, text, engine), vocab)
    masks = []
    for path in paths:
        m = constraint.start()
        for token in path:
            t0 = time.perf_counter()
            m.mask()
            masks.append(time.perf_counter() - t0)
            m.advance(token)
        assert m.accepting(), "a JSON document the grammar does not accept"
    return {
        "compile_ms": percentile(compiles, 50) * 1e3,
        "first_mask_ms": percentile(first_masks, 50) * 1e3,
        "mask_p50_us": percentile(masks, 50) * 1e6,
        "mask_p90_us": percentile(masks, 90) * 1e6,
        "mask_p99_us": percentile(masks, 99) * 1e6,
        "tokens": len(masks),
    }


def markdown(results: list[dict]) -> str:
    lines = [
        "| tokenizer | grammar | engine | tokens | compile ms | first mask ms | mask p50 / p90 / p99 µs |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['tokenizer']} | {r['grammar']} | {r['engine']} | {r['tokens']} "
            f"| {fmt(r['compile_ms'])} | {fmt(r['first_mask_ms'], 2)} "
            f"| {fmt(r['mask_p50_us'], 0)} / {fmt(r['mask_p90_us'], 0)} / {fmt(r['mask_p99_us'], 0)} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argument_parser(__doc__.split("\n")[0])
    parser.add_argument("--instances", type=int, default=20)
    args = parser.parse_args(argv)
    cn.Grammar.from_gbnf('root ::= "x"')  # imports, outside the timings
    cn.Grammar.from_lark('start: "x"')
    results = []
    for tokenizer in args.tokenizers.split(","):
        vocab = load_vocab(tokenizer)
        paths = grammar_instances("json", library.load("json"), vocab, args.instances, args.seed)
        for label, (kind, text) in GRAMMARS.items():
            for engine in ("native", "python"):
                row = {"tokenizer": f"{tokenizer} ({vocab.size // 1000}k)", "grammar": label}
                row["engine"] = engine
                row.update(bench(kind, text, engine, vocab, paths))
                results.append(row)
                print(f"  {label}, {engine}: done", file=sys.stderr)
    emit(results, markdown(results), args, "bench/gbnf.py", argv)


if __name__ == "__main__":
    main()
