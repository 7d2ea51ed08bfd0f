"""Grammar constraint benchmark: library grammars on generated instances, both tokenizers.

For each grammar, generated instances (fixed seed) are tokenized and replayed token by token:
JSON documents from `json.dumps` of random nested values (compact or indented), and for the other
grammars random derivations (`constrain.engine.grammar.sample.random_text`). Measured:

* compile: `Grammar.from_lark` on the grammar text with every cache cleared (p50 of 5 runs),
  and the cold first mask after it;
* mask: `Matcher.mask()` at every step of every instance on one Constraint, as in repeated
  generation (the first instances pay for cold states; p50 / p90 / p99 / max);
* check: `Matcher.check` on a fresh Constraint (nothing cached), for the path token and three
  random tokens per step;
* forced: the share of the instances' tokens that `Matcher.forced()` supplies when a generator
  takes forced tokens whenever there are some (and re-tokenizes the rest of the text otherwise).

When llguidance is importable, the same Lark text and token paths are measured with it in the
same run (compile = grammar + matcher creation; mask = `compute_bitmask`).

Run: ``python bench/grammar.py [--grammars json,sql] [--instances 20]
[--markdown docs/benchmarks/grammar.md]``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

# run as a script: import `bench.common` and `constrain` from the repository root
if __package__ in (None, ""):
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import numpy as np

import constrain as cn
import constrain.grammars as library
from bench.common import argument_parser, bench_llguidance, emit
from constrain.bench.report import fmt, load_vocab, percentile
from constrain.engine.grammar.sample import random_text
from constrain.engine.regex import compile_regex

_WORDS = [
    "id",
    "name",
    "price",
    "tags",
    "active",
    "created",
    "items",
    "user",
    "score",
    "notes",
    "Ada",
    "x",
]


def _random_json(rng: np.random.Generator, depth: int = 0):
    """A JSON-like Python value: nested objects and arrays of strings, numbers, booleans, null."""
    kind = int(rng.integers(7 if depth < 3 else 4))
    if kind == 0:
        return " ".join(rng.choice(_WORDS, int(rng.integers(1, 4))).tolist())
    if kind == 1:
        return int(rng.integers(-1000, 100000))
    if kind == 2:
        return round(float(rng.normal(0, 100)), int(rng.integers(1, 4)))
    if kind == 3:
        return [True, False, None][int(rng.integers(3))]
    if kind in (4, 5):
        return {
            str(k): _random_json(rng, depth + 1)
            for k in rng.choice(_WORDS, int(rng.integers(1, 5)), replace=False)
        }
    return [_random_json(rng, depth + 1) for _ in range(int(rng.integers(0, 4)))]


def _instance_text(name: str, grammar: cn.Grammar, rng: np.random.Generator) -> bytes:
    if name == "json":  # realistic documents: json.dumps output, compact or indented
        value = {"record": _random_json(rng), "meta": _random_json(rng)}
        return json.dumps(value, indent=2 if rng.random() < 0.5 else None).encode()
    return random_text(grammar.ir, rng, max_depth=7).encode()


def grammar_instances(
    name: str, grammar: cn.Grammar, vocab: cn.Vocabulary, n: int, seed: int
) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < n:
        data = _instance_text(name, grammar, rng)
        tokens = vocab.encode_bytes(data)
        if vocab.decode_bytes(tokens) == data:  # skip the rare text the vocabulary cannot spell
            out.append(tokens)
    return out


def _compile_times(text: str, vocab: cn.Vocabulary, runs: int = 5) -> tuple[float, float]:
    compiles, first_masks = [], []
    for _ in range(runs):
        compile_regex.cache_clear()
        t0 = time.perf_counter()
        grammar = cn.Grammar.from_lark(text)
        compiles.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        cn.Constraint(grammar, vocab).start().mask()
        first_masks.append(time.perf_counter() - t0)
    return percentile(compiles, 50), percentile(first_masks, 50)


def _forced_share(grammar: cn.Grammar, vocab: cn.Vocabulary, paths: list[list[int]]) -> float:
    constraint = cn.Constraint(grammar, vocab)
    forced = total = 0
    for path in paths:
        data = vocab.decode_bytes(path)
        m, pos = constraint.start(), 0
        while pos < len(data):
            tokens = m.forced()
            spelled = vocab.decode_bytes(tokens)
            if tokens and data.startswith(spelled, pos):
                forced += len(tokens)
            else:
                tokens = vocab.encode_bytes(data[pos:])[:1]
                spelled = vocab.decode_bytes(tokens)
            m.advance_many(tokens)
            total += len(tokens)
            pos += len(spelled)
    return forced / total if total else float("nan")


def bench_ours(name: str, vocab: cn.Vocabulary, paths: list[list[int]], seed: int) -> dict:
    text = library.path(name).read_text()
    compile_s, first_mask_s = _compile_times(text, vocab)
    grammar = cn.Grammar.from_lark(text)
    constraint = cn.Constraint(grammar, vocab)
    masks = []
    for path in paths:
        m = constraint.start()
        for token in path:
            t0 = time.perf_counter()
            m.mask()
            masks.append(time.perf_counter() - t0)
            m.advance(token)
    rng = np.random.default_rng(seed)
    fresh = cn.Constraint(grammar, vocab)
    checks = []
    for path in paths:
        m = fresh.start()
        for token in path:
            for t in [token, *rng.choice(vocab.text_token_ids, 3).tolist()]:
                t0 = time.perf_counter()
                m.check(t)
                checks.append(time.perf_counter() - t0)
            m.advance(token)
    return {
        "compile_ms": compile_s * 1e3,
        "first_mask_ms": first_mask_s * 1e3,
        "mask_p50_us": percentile(masks, 50) * 1e6,
        "mask_p90_us": percentile(masks, 90) * 1e6,
        "mask_p99_us": percentile(masks, 99) * 1e6,
        "mask_max_ms": max(masks) * 1e3,
        "check_p50_us": percentile(checks, 50) * 1e6,
        "check_p99_us": percentile(checks, 99) * 1e6,
        "forced_share": _forced_share(grammar, vocab, paths),
        "tokens": sum(len(p) for p in paths),
        "parser_states": grammar.automaton.parser.n_nodes,
        "cache_mb": constraint.cache_bytes / 2**20,
    }


def _llguidance(name: str, vocab: cn.Vocabulary, paths: list[list[int]]) -> dict | None:
    try:
        import llguidance
    except ImportError:
        return None
    return bench_llguidance(
        vocab, llguidance.LLMatcher.grammar_from_lark(library.path(name).read_text()), paths
    )


def markdown(results: list[dict]) -> str:
    lines = [
        "| tokenizer | grammar | tokens | compile ms | first mask ms | mask p50 / p90 / p99 µs | mask max ms | check p50 / p99 µs | forced tokens | parser states | mask cache MB |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        o = r["ours"]
        lines.append(
            f"| {r['tokenizer']} | {r['grammar']} | {o['tokens']} | {fmt(o['compile_ms'])} | {fmt(o['first_mask_ms'], 2)} "
            f"| {fmt(o['mask_p50_us'])} / {fmt(o['mask_p90_us'])} / {fmt(o['mask_p99_us'])} | {fmt(o['mask_max_ms'], 2)} "
            f"| {fmt(o['check_p50_us'])} / {fmt(o['check_p99_us'])} | {o['forced_share']:.1%} | {o['parser_states']} "
            f"| {fmt(o['cache_mb'])} |"
        )
    others = [r for r in results if r.get("llguidance")]
    if others:
        lines += [
            "",
            "llguidance on the same Lark text and token paths, same run:",
            "",
            "| tokenizer | grammar | ours mask p50 / p99 µs | llguidance compile ms | llguidance mask p50 / p90 / p99 µs | llguidance mask max ms |",
            "|---|---|---|---|---|---|",
        ]
        for r in others:
            llg, o = r["llguidance"], r["ours"]
            if "error" in llg:
                cells = f"{llg['error']} | - | -"
            else:
                cells = (
                    f"{fmt(llg['compile_ms'])} | {fmt(llg['mask_p50_us'])} / {fmt(llg['mask_p90_us'])} / "
                    f"{fmt(llg['mask_p99_us'])} | {fmt(llg['mask_max_ms'], 2)}"
                )
            lines.append(
                f"| {r['tokenizer']} | {r['grammar']} | {fmt(o['mask_p50_us'])} / {fmt(o['mask_p99_us'])} | {cells} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argument_parser(__doc__.split("\n")[0])
    parser.add_argument("--grammars", default="json,sql")
    parser.add_argument("--instances", type=int, default=20)
    args = parser.parse_args(argv)

    results = []
    for tokenizer in args.tokenizers.split(","):
        vocab = load_vocab(tokenizer)
        for name in args.grammars.split(","):
            paths = grammar_instances(name, library.load(name), vocab, args.instances, args.seed)
            row = {"tokenizer": f"{tokenizer} ({vocab.size // 1000}k)", "grammar": name}
            row["ours"] = bench_ours(name, vocab, paths, args.seed)
            if not args.no_others:
                row["llguidance"] = _llguidance(name, vocab, paths)
            results.append(row)
            print(f"  {name}: done", file=sys.stderr)
    emit(results, markdown(results), args, "bench/grammar.py", argv)


if __name__ == "__main__":
    main()
