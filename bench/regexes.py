"""Regex constraint benchmark: compile, cold and warm masks, `check`, cache memory.

For each regex and tokenizer, random token paths are drawn through the constraint (each step
picks a uniformly random allowed token), which visits realistic states. Measured per step:

* compile: `Grammar.from_regex` + binding to the vocabulary (cold: the regex cache is cleared);
* first mask: the mask at the start state (cold cache);
* cold mask: every mask computed for a state not yet cached (p50 / p99 / max);
* warm mask: `mask()` at a cached state (p50 / p99);
* check: `Matcher.check` on a fresh constraint with nothing cached (the byte walk AWRS uses),
  for the token taken and for random tokens (p50 / p99);
* cache: bytes held by the mask cache after the run.

When llguidance or outlines-core are importable, the same regexes and paths are measured with
them in the same run (llguidance: `compute_bitmask`, compile = grammar + matcher creation;
outlines-core: `Index` build, then `write_mask_into`).

Run: ``python bench/regexes.py [--tokenizers smollm2-135m-instruct,gemma-3-270m]
[--paths 8] [--out results.json] [--markdown docs/benchmarks/regex.md]``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

# run as a script: import `bench.common` and `constrain` from the repository root
if __package__ in (None, ""):
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import numpy as np

import constrain as cn
from bench.common import argument_parser, bench_llguidance, emit, mask_summary
from constrain.bench.report import fmt, load_vocab, percentile
from constrain.engine.regex import compile_regex

REGEXES: list[tuple[str, str]] = [
    ("yes/no", r"(yes|no)"),
    ("integer", r"-?(0|[1-9][0-9]{0,17})"),
    ("ISO date", r"\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])"),
    ("phone", r"\+?1? ?\(\d{3}\) \d{3}-\d{4}"),
    ("float", r"-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?"),
    (
        "ISO date-time",
        r"\d{4}-\d{2}-\d{2}T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,6})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)",
    ),
    (
        "email",
        r"[a-zA-Z0-9._%+-]{1,64}@[a-zA-Z0-9-]{1,63}(\.[a-zA-Z0-9-]{1,63}){0,4}\.[a-zA-Z]{2,12}",
    ),
    ("[a-z]{1,200}", r"[a-z]{1,200}"),
    ("free line", r"[^\n]{1,80}\n"),
    (
        "JSON object",
        r'\{"name": "[^"\\\x00-\x1f]{1,40}", "age": (0|[1-9]\d{0,2}), "tags": \[("[a-z]{1,12}"(, "[a-z]{1,12}"){0,4})?\]\}',
    ),
]


def _paths(
    constraint: cn.Constraint, n_paths: int, max_len: int, seed: int
) -> tuple[list[list[int]], dict]:
    """Random allowed-token paths; times every mask() call (cold or warm)."""
    rng = np.random.default_rng(seed)
    eos = set(constraint.vocab.eos_ids)
    cold, warm, paths = [], [], []
    first = None
    for _ in range(n_paths):
        m = constraint.start()
        path = []
        for _ in range(max_len):
            was_cached = constraint.cached_states
            t0 = time.perf_counter()
            mask = m.mask()
            dt = time.perf_counter() - t0
            (cold if constraint.cached_states > was_cached else warm).append(dt)
            if first is None:
                first = dt
            t0 = time.perf_counter()
            m.mask()
            warm.append(time.perf_counter() - t0)
            allowed = [t for t in np.flatnonzero(mask).tolist() if t not in eos]
            if not allowed or (m.accepting() and rng.random() < 0.15):
                break
            token = int(rng.choice(allowed))
            m.advance(token)
            path.append(token)
        paths.append(path)
    return paths, {"first": first, "cold": cold, "warm": warm}


def _check_times(
    grammar: cn.Grammar, vocab: cn.Vocabulary, paths: list[list[int]], seed: int
) -> list[float]:
    rng = np.random.default_rng(seed)
    constraint = cn.Constraint(grammar, vocab)  # nothing cached: check walks the bytes
    times = []
    candidates = vocab.text_token_ids
    for path in paths:
        m = constraint.start()
        for token in path:
            for t in [token, *rng.choice(candidates, 3).tolist()]:
                t0 = time.perf_counter()
                m.check(t)
                times.append(time.perf_counter() - t0)
            m.advance(token)
    return times


def _bench_ours(
    pattern: str, vocab: cn.Vocabulary, n_paths: int, seed: int
) -> tuple[dict, list[list[int]]]:
    compile_regex.cache_clear()
    t0 = time.perf_counter()
    grammar = cn.Grammar.from_regex(pattern)
    constraint = cn.Constraint(grammar, vocab)
    compile_s = time.perf_counter() - t0
    paths, masks = _paths(constraint, n_paths, 120, seed)
    checks = _check_times(grammar, vocab, paths, seed)
    return {
        "compile_ms": compile_s * 1e3,
        "states": grammar.automaton.dfa.n_states,
        "first_mask_ms": masks["first"] * 1e3,
        "cold_p50_ms": percentile(masks["cold"], 50) * 1e3,
        "cold_p99_ms": percentile(masks["cold"], 99) * 1e3,
        "cold_max_ms": max(masks["cold"]) * 1e3,
        "warm_p50_us": percentile(masks["warm"], 50) * 1e6,
        "warm_p99_us": percentile(masks["warm"], 99) * 1e6,
        "check_p50_us": percentile(checks, 50) * 1e6,
        "check_p99_us": percentile(checks, 99) * 1e6,
        "cache_kb": constraint.cache_bytes / 1024,
        "cold_masks": len(masks["cold"]),
    }, paths


def _llguidance(pattern: str, vocab: cn.Vocabulary, paths: list[list[int]]) -> dict | None:
    try:
        import llguidance
    except ImportError:
        return None
    return bench_llguidance(vocab, llguidance.LLMatcher.grammar_from_regex(pattern), paths)


_OC_VOCABS: dict[int, object] = {}


def _bench_outlines(
    pattern: str, vocab: cn.Vocabulary, paths: list[list[int]], timeout_states: int = 5000
) -> dict | None:
    try:
        import outlines_core
        import torch
    except ImportError:
        return None
    key = id(vocab)
    if key not in _OC_VOCABS:
        mapping: dict[bytes, list[int]] = {}
        for i in vocab.text_token_ids.tolist():
            mapping.setdefault(vocab.token_bytes(i), []).append(i)
        _OC_VOCABS[key] = outlines_core.Vocabulary(vocab.eos_ids[0], mapping)
    t0 = time.perf_counter()
    try:
        index = outlines_core.Index(pattern, _OC_VOCABS[key])
    except Exception as exc:  # outlines-core raises plain exceptions on unsupported input
        return {"error": str(exc)[:80]}
    compile_s = time.perf_counter() - t0
    mask = torch.zeros((vocab.size + 31) // 32, dtype=torch.int32)
    times = []
    for path in paths:
        guide = outlines_core.Guide(index)
        for token in path:
            t0 = time.perf_counter()
            guide.write_mask_into(mask.data_ptr(), mask.numel(), mask.element_size())
            times.append(time.perf_counter() - t0)
            try:
                guide.advance(token)
            except ValueError:
                text = vocab.decode_bytes(path[: path.index(token) + 1])
                return {"error": f"rejects valid prefix {text[-12:]!r}"}
    return mask_summary(compile_s, times)


def markdown(results: list[dict]) -> str:
    lines = [
        "| tokenizer | regex | states | compile ms | first mask ms | cold p50 / p99 / max ms | warm p50 / p99 µs | check p50 / p99 µs | cache KB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        o = r["ours"]
        lines.append(
            f"| {r['tokenizer']} | {r['name']} | {o['states']} | {fmt(o['compile_ms'])} | {fmt(o['first_mask_ms'], 2)} "
            f"| {fmt(o['cold_p50_ms'], 2)} / {fmt(o['cold_p99_ms'], 2)} / {fmt(o['cold_max_ms'], 2)} "
            f"| {fmt(o['warm_p50_us'])} / {fmt(o['warm_p99_us'])} | {fmt(o['check_p50_us'])} / {fmt(o['check_p99_us'])} "
            f"| {fmt(o['cache_kb'], 0)} |"
        )
    others = [r for r in results if r.get("llguidance") or r.get("outlines_core")]
    if others:
        lines += [
            "",
            "Other engines on the same paths (mask = one full next-token bitmask):",
            "",
            "| tokenizer | regex | ours cold p50 ms / warm p50 µs | llguidance compile ms | llguidance mask p50 / p99 µs | outlines-core compile ms | outlines-core mask p50 / p99 µs |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in others:
            llg, oc = r.get("llguidance") or {}, r.get("outlines_core") or {}

            def cell(d, k, digits=1):
                return d["error"][:40] if "error" in d else fmt(d.get(k, float("nan")), digits)

            lines.append(
                f"| {r['tokenizer']} | {r['name']} | {fmt(r['ours']['cold_p50_ms'], 2)} / {fmt(r['ours']['warm_p50_us'])} "
                f"| {cell(llg, 'compile_ms')} | {cell(llg, 'mask_p50_us')} / {cell(llg, 'mask_p99_us')} "
                f"| {cell(oc, 'compile_ms')} | {cell(oc, 'mask_p50_us')} / {cell(oc, 'mask_p99_us')} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argument_parser(__doc__.split("\n")[0])
    parser.add_argument("--paths", type=int, default=8, help="random paths per regex")
    args = parser.parse_args(argv)

    results = []
    for name in args.tokenizers.split(","):
        vocab = load_vocab(name)
        for label, pattern in REGEXES:
            ours, paths = _bench_ours(pattern, vocab, args.paths, args.seed)
            row = {
                "tokenizer": f"{name} ({vocab.size // 1000}k)",
                "name": label,
                "pattern": pattern,
                "ours": ours,
            }
            if not args.no_others:
                row["llguidance"] = _llguidance(pattern, vocab, paths)
                row["outlines_core"] = _bench_outlines(pattern, vocab, paths)
            results.append(row)
            print(f"  {label}: done", file=sys.stderr)
    emit(results, markdown(results), args, "bench/regexes.py", argv)


if __name__ == "__main__":
    main()
