"""Batch mask fill: the next masks of many sequences in one native call, on 1 and 2 threads.

A server steps a batch of sequences together, each under its own request's schema, and every
step needs each sequence's mask. `prefill_masks` computes the masks a batch is missing in one
call into the native core, which releases the GIL and fills rows on a small thread pool (the
rows of one grammar in turn under its lock, different grammars side by side). This measures,
for a batch of MaskBench schemas stepped in lockstep through the first tokens of one valid
instance each (so that every step has a row per sequence):

* **one by one**: each missing mask by `TokenAutomaton.bitmask_for`, as a loop over sequences
  does without the batch call;
* **batch, 1 thread** and **batch, 2 threads**: `prefill_masks` with that many threads.

Each configuration compiles the schemas afresh (outside the timing), so every one starts from
the same cold caches; the configurations alternate over the rounds and the fastest round of
each is kept (the machine is shared). Times are the masks' only: advancing the sequences is not
timed.

Run: ``python -m constrain.bench.batch [--sequences 64] [--steps 40] [--rounds 3] [--model ...]
[--markdown docs/benchmarks/batch.md]``
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import constrain as cn
from constrain.bench.conformance import DATA, compile_constraint, maskbench_jobs, serialise
from constrain.bench.report import load_vocab
from constrain.engine.matcher import prefill_masks

_OPTIONS = {"any_order": True}
_CONFIGS = (("one by one", 0), ("batch, 1 thread", 1), ("batch, 2 threads", 2))


def pick(vocab: cn.Vocabulary, n: int, steps: int, data: Path) -> list[tuple[dict, list[int]]]:
    """`n` (schema, the first `steps` tokens of its first valid instance) that compile and
    have that many, in MaskBench order (every subset in turn): every step fills `n` rows."""
    import json

    subsets = sorted(p.stem for p in (data / "maskbench").glob("*.jsonl"))
    by_subset = [maskbench_jobs(data, [subset], None) for subset in subsets]
    picked = []
    for k in range(max(map(len, by_subset))):
        for jobs in by_subset:
            if k >= len(jobs) or len(picked) >= n:
                continue
            _, _, path, valid, _ = jobs[k]
            if not valid:
                continue
            schema = json.loads(Path(path).read_text())
            try:
                constraint = compile_constraint(schema, vocab, _OPTIONS)
            except Exception:  # noqa: BLE001 (a schema we refuse is not what is measured)
                continue
            if constraint is None:
                continue
            tokens = vocab.encode_bytes(serialise(valid[0], _OPTIONS).encode())
            if len(tokens) >= steps:
                picked.append((schema, tokens[:steps]))
    return picked


def run(vocab: cn.Vocabulary, picked: list, threads: int) -> tuple[float, int, int]:
    """(seconds in masks, masks computed, steps) for one configuration (0: one by one)."""
    constraints = [compile_constraint(schema, vocab, _OPTIONS) for schema, _ in picked]
    matchers = [c.token_automaton.start() for c in constraints]
    spent, computed, steps = 0.0, 0, 0
    for step in range(max(len(tokens) for _, tokens in picked)):
        live = [
            (c.token_automaton, m, tokens[step])
            for c, m, (_, tokens) in zip(constraints, matchers, picked)
            if step < len(tokens)
        ]
        t0 = time.perf_counter()
        if threads:
            computed += prefill_masks([(a, m.state) for a, m, _ in live], threads)
        else:
            for a, m, _ in live:
                if a.masks.get(m.state) is None:
                    a.bitmask_for(m.state)
                    computed += 1
        spent += time.perf_counter() - t0
        steps += 1
        for _, m, token in live:
            m.advance(token)
    return spent, computed, steps


def table(results: dict[str, tuple[float, int, int]]) -> str:
    base = results["batch, 1 thread"][0]
    lines = [
        "| fill | total ms | masks computed | steps | µs per mask | vs batch, 1 thread |",
        "|---|---|---|---|---|---|",
    ]
    for name, (seconds, computed, steps) in results.items():
        lines.append(
            f"| {name} | {seconds * 1e3:,.1f} | {computed:,} | {steps} | "
            f"{seconds / max(computed, 1) * 1e6:,.1f} | {base / seconds:.2f}x |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--sequences", type=int, default=64)
    parser.add_argument("--steps", type=int, default=40, help="tokens per sequence")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", nargs="+", default=["smollm2-135m-instruct"])
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args(argv)
    sections = []
    for model in args.model:
        vocab = load_vocab(model)
        picked = pick(vocab, args.sequences, args.steps, args.data)
        best: dict[str, tuple[float, int, int]] = {}
        for _ in range(args.rounds):
            for name, threads in _CONFIGS:
                found = run(vocab, picked, threads)
                if name not in best or found[0] < best[name][0]:
                    best[name] = found
        sections.append(
            f"## Tokenizer {model}\n\n{len(picked)} sequences, each a MaskBench schema stepped "
            f"through the first {args.steps} tokens of its first valid instance, options "
            f"{_OPTIONS}; fastest of {args.rounds} rounds\n\n{table(best)}"
        )
        print(sections[-1], flush=True)
    if args.markdown:
        args.markdown.write_text(
            "# Batch mask fill\n\n"
            f"Generated by `python -m constrain.bench.batch --sequences {args.sequences} "
            f"--steps {args.steps} "
            f"--rounds {args.rounds} --model {' '.join(args.model)} --markdown "
            f"{args.markdown}`.\n\n"
            + __doc__.split("\n\n", 1)[1].rsplit("\n\nRun:", 1)[0]
            + "\n\n"
            + "\n\n".join(sections)
            + "\n"
        )


if __name__ == "__main__":
    main()
