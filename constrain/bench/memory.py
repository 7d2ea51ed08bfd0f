"""Memory per compiled schema and per matcher: ours beside llguidance and XGrammar.

Each engine runs in a fresh process of its own, so what grows is its own. The process loads the
tokenizer, then compiles and runs one warm-up schema (the first of the sample with an instance of
60 tokens: what an engine builds once per vocabulary, such as our token trie and slices or
llguidance's token trie, is not counted), then measures
the growth of its resident set (RSS, from ``/proc/self/statm``: native and Python memory alike):

* **compiled**: after compiling the sample's schemas, all kept alive, per schema;
* **median compile**: the median over the schemas of what one compile keeps (a few schemas that
  compile to megabytes move the mean, not the median). Pages are too coarse for that, so it is
  the growth of the bytes in use on the C heap (glibc's ``mallinfo2``), in another fresh process
  run with ``PYTHONMALLOC=malloc`` so that Python objects, arrays, C++ and Rust allocations
  are all on that heap;
* **after use**: after also running each schema's valid instances with a full mask before every
  token (the caches an engine fills as it serves: our masks by state, parser nodes, lexer
  states), per schema;
* **per matcher**: 1,000 matchers of the warm-up schema, each advanced through the first half
  of its longest instance and kept alive, per matcher (a sequence's own state, caches shared).

RSS moves by pages and an allocator may keep freed pages, so these are averages over many
objects and upper bounds, not exact sizes.

Run: ``python -m constrain.bench.memory [--limit 4] [--model smollm2-135m-instruct]
[--markdown docs/benchmarks/memory.md]``
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import multiprocessing
import os
import resource
import statistics
from pathlib import Path

import constrain as cn
from constrain.bench.conformance import DATA, compile_constraint, maskbench_jobs, serialise
from constrain.bench.peers import PEERS, PeerEngine, PeerError, PeerMatcher, load_peers
from constrain.bench.report import fmt, load_vocab

_MATCHERS = 1000
_CAVEAT = (
    "Resident memory moves by pages and an allocator reuses freed pages, so a small growth "
    "can read as 0 and a large one includes what compiling freed but the allocator kept: "
    "averages and upper bounds, not exact sizes. The median compile is counted in the bytes in "
    "use on the C heap instead (glibc's mallinfo2, in a process with PYTHONMALLOC=malloc), "
    "exact up to the allocator's few bytes per block. Schemas an engine cannot compile are "
    "left out of its averages."
)
_OPTIONS = {"whitespace": "default", "any_order": True}


class _ConstrainMatcher:
    def __init__(self, matcher):
        self.matcher = matcher

    def fill_mask(self) -> None:
        self.matcher.bitmask()

    def consume(self, token: int) -> bool:
        if not self.matcher.check(token):
            return False
        self.matcher.advance(token)
        return True

    def accepting(self) -> bool:
        return self.matcher.accepting()


class ConstrainEngine:
    """Ours behind the peers' interface, compiled as the conformance harness compiles."""

    name = "constrain"

    def __init__(self, vocab, options: dict):
        self.vocab = vocab
        self.options = options

    def compile(self, schema: dict) -> object:
        try:
            compiled = compile_constraint(schema, self.vocab, self.options)
        except cn.ConstrainError as exc:
            raise PeerError(str(exc)) from exc
        if compiled is None:
            raise PeerError("no instance is valid")
        return compiled

    def start(self, compiled) -> PeerMatcher:
        return _ConstrainMatcher(compiled.start())


def _rss() -> int:
    """Resident set size of this process, bytes."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def _engine(name: str, model: str) -> tuple[PeerEngine, cn.Vocabulary]:
    """The engine `name` bound to `model`'s tokenizer, and our vocabulary of it (to encode)."""
    vocab = load_vocab(model)
    if name == "constrain":
        return ConstrainEngine(vocab, _OPTIONS), vocab
    from constrain.models import load_tokenizer

    found = load_peers([name], load_tokenizer(model), vocab.size, _OPTIONS)
    if not found:
        raise ImportError(name)
    return found[0], vocab


def _sample(vocab, jobs: list[tuple]) -> tuple[tuple, list[tuple]]:
    """(the warm-up schema, the others), each with its valid instances' tokens: the warm-up
    (also the matchers' schema) is the first with an instance of 60 tokens."""
    schemas = []
    for _, _, path, valid, _ in jobs:
        texts = [vocab.encode(serialise(v, _OPTIONS)) for v in valid]
        schemas.append((json.loads(Path(path).read_text()), texts))
    first = next((i for i, (_, t) in enumerate(schemas) if max(map(len, t), default=0) >= 60), 0)
    return schemas.pop(first), schemas


def measure_in_process(name: str, model: str, jobs: list[tuple]) -> dict:
    """In a fresh process: the three growths of `name` (bytes per schema or matcher)."""
    engine, vocab = _engine(name, model)
    (warm_schema, warm_texts), schemas = _sample(vocab, jobs)

    def run(compiled, tokens: list[int]) -> None:
        matcher = engine.start(compiled)
        for token in tokens:
            matcher.fill_mask()
            if not matcher.consume(token):
                return
        matcher.fill_mask()

    warm = engine.compile(warm_schema)
    for tokens in warm_texts:
        run(warm, tokens)
    before = _rss()
    compiled = []
    for schema, texts in schemas:
        try:
            compiled.append((engine.compile(schema), texts))
        except PeerError:
            continue
    after_compile = _rss()
    for item, texts in compiled:
        for tokens in texts:
            run(item, tokens)
    after_use = _rss()
    longest = max(warm_texts, key=len, default=[])
    tokens = longest[: len(longest) // 2]
    before_matchers = _rss()
    matchers = []
    for _ in range(_MATCHERS):
        matcher = engine.start(warm)
        for token in tokens:
            matcher.consume(token)
        matchers.append(matcher)
    after_matchers = _rss()
    n = max(len(compiled), 1)
    return {
        "engine": name,
        "schemas": len(compiled),
        "compiled": (after_compile - before) / n,
        "after_use": (after_use - before) / n,
        "matcher": (after_matchers - before_matchers) / _MATCHERS,
        "matcher_tokens": len(tokens),
    }


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]  # fmt: skip


def _heap() -> int:
    """Bytes in use on the C heap: allocated chunks and mmapped blocks (glibc)."""
    mallinfo2 = ctypes.CDLL(None).mallinfo2
    mallinfo2.restype = _MallInfo2
    info = mallinfo2()
    return info.uordblks + info.hblkhd


def median_compile_in_process(name: str, model: str, jobs: list[tuple]) -> float:
    """In a fresh process run with ``PYTHONMALLOC=malloc``: the median over the schemas of
    the heap bytes one compile keeps (its result kept alive, garbage collected)."""
    engine, vocab = _engine(name, model)
    (warm_schema, _), schemas = _sample(vocab, jobs)
    kept, growths = [engine.compile(warm_schema)], []  # what is built once per vocabulary
    for schema, _ in schemas:
        gc.collect()
        at = _heap()
        try:
            kept.append(engine.compile(schema))
        except PeerError:
            continue
        gc.collect()
        growths.append(_heap() - at)
    return statistics.median(growths) if growths else 0.0


def _in_fresh_process(function, *args, malloc_only: bool = False):
    """`function(*args)` in a fresh Python process (with Python's objects on the C heap
    when `malloc_only`)."""
    before = os.environ.get("PYTHONMALLOC")
    if malloc_only:
        os.environ["PYTHONMALLOC"] = "malloc"  # read by the child interpreter as it starts
    try:
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            return pool.apply(function, args)
    finally:
        if before is None:
            os.environ.pop("PYTHONMALLOC", None)
        else:
            os.environ["PYTHONMALLOC"] = before


def measure(name: str, model: str, jobs: list[tuple]) -> dict | None:
    """`measure_in_process` and `median_compile_in_process`, each in a fresh process (None
    when the engine is not installed)."""
    try:
        row = _in_fresh_process(measure_in_process, name, model, jobs)
        row["compiled_median"] = _in_fresh_process(
            median_compile_in_process, name, model, jobs, malloc_only=True
        )
    except ImportError:
        return None
    return row


def table(rows: list[dict]) -> str:
    lines = [
        "| engine | schemas | per compiled schema KiB | median compile KiB (heap) | "
        "per schema after use KiB | per matcher KiB |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['engine']} | {r['schemas']} | {fmt(r['compiled'] / 1024)} | "
            f"{fmt(r['compiled_median'] / 1024)} | {fmt(r['after_use'] / 1024)} | "
            f"{fmt(r['matcher'] / 1024, 2)} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--limit", type=int, default=4, help="schemas per MaskBench subset")
    parser.add_argument("--model", nargs="+", default=["smollm2-135m-instruct"])
    parser.add_argument("--engines", nargs="+", default=["constrain", *PEERS])
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args(argv)
    subsets = sorted(p.stem for p in (args.data / "maskbench").glob("*.jsonl"))
    jobs = maskbench_jobs(args.data, subsets, args.limit)
    sections = []
    for model in args.model:
        rows = [r for name in args.engines if (r := measure(name, model, jobs))]
        sections.append(
            f"## Tokenizer {model}\n\n{len(jobs)} MaskBench schemas ({args.limit} per subset; "
            f"one warms up, the others are measured), options {json.dumps(_OPTIONS)}, "
            f"{_MATCHERS} matchers halfway through an instance ({rows[0]['matcher_tokens']} "
            f"tokens); each engine in a fresh process, growth of its resident set\n\n{table(rows)}"
        )
        print(sections[-1], flush=True)
    if args.markdown:
        args.markdown.write_text(
            "# Memory per compiled schema and per matcher\n\n"
            f"Generated by `python -m constrain.bench.memory --limit {args.limit} --model "
            f"{' '.join(args.model)} --markdown {args.markdown}`.\n\n"
            f"{_CAVEAT}\n\n" + "\n\n".join(sections) + "\n"
        )


if __name__ == "__main__":
    main()
