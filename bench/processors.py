"""Processor benchmark: the cost of each processor per token, and how much it changes the output.

With the bundled SmolLM2-135M-Instruct, on a fixed set of prompts, greedy decoding of
`--tokens` tokens of free text, each processor configuration is run right after plain decoding
of the same prompt (side by side, so machine noise hits both alike). Reported per processor:

* time per token as a ratio to plain decoding (extra prompted streams are batched with the
  target in one forward per model);
* KL(processed || plain) of the next-token distribution at the first step, averaged over the
  prompts (the processors' effect on the distribution);
* the share of generated tokens that differ from plain greedy decoding.

Run: ``python bench/processors.py [--tokens 24] [--markdown docs/benchmarks/processors.md]``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

# run as a script: import `bench.common` and `constrain` from the repository root
if __package__ in (None, ""):
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import numpy as np
import torch

import constrain as cn
from bench.common import argument_parser, emit
from constrain.bench.report import fmt
from constrain.decoding import Sequence, forward
from constrain.processors import ProcessorStack
from constrain.processors.bound import BoundStack

PROMPTS = [
    "Write one sentence about the sea.",
    "Describe a city at night.",
    "Give advice to a new programmer.",
    "What makes a good breakfast?",
    "Tell me about your favourite animal.",
    "Explain why the sky is blue.",
]


def configurations(model) -> dict[str, list]:
    """The processor configurations measured (the amateur: the first 10 of 30 layers)."""
    amateur = model.with_layers(range(10), name="smollm2[0:10]")
    child = cn.M(model, "You are a five-year-old child. Answer like one.")
    adult = cn.M(model, "You are a university professor. Answer formally.")
    return {
        "repetition penalty 1.3": [cn.RepetitionPenalty(1.3)],
        "top-p 0.9": [cn.TopP(0.9)],
        "top-k 40": [cn.TopK(40)],
        "min-p 0.05": [cn.MinP(0.05)],
        "typical 0.9": [cn.Typical(0.9)],
        "top-H 0.4": [cn.TopH(0.4)],
        "CyclicReflex A=3 T=16": [cn.CyclicReflex(3.0, 16)],
        "CFG 1.5": [cn.CFG(1.5)],
        "CFG 3, negative prompt": [cn.CFG(3.0, negative_prompt="Answer rudely and briefly.")],
        "contrastive (10-layer amateur)": [cn.Contrastive(amateur, alpha=0.1, beta=0.5)],
        "AdaCAD (context)": [
            cn.AdaCAD(context="Context: the answer must mention the colour blue.\n")
        ],
        "USCD (lame prompt)": [cn.USCD("Answer.")],
        "model arithmetic child - 0.6 adult": [child - 0.6 * adult],
    }


def first_step_kl(model, prompt: str, processors: list) -> float:
    """KL(processed || plain) of the first next-token distribution."""
    ids = model.encode_prompt(prompt)
    stack = BoundStack(ProcessorStack(processors), model, ids, prompt)
    constraint = cn.Constraint(cn.Grammar.from_regex("(?:.|\n)*"), model.vocab)
    sequence = Sequence(model, stack, constraint.start(), constraint)
    ((rows, term_rows),) = forward([sequence])
    processed = stack.after_constraint(sequence.control_row(rows, term_rows), ()).double()
    main = rows[-1]
    p = torch.exp(processed)
    kept = p > 0
    return float((p[kept] * (processed[kept] - main.double()[kept])).sum())


def main(argv: list[str] | None = None) -> None:
    parser = argument_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--prompts", type=int, default=len(PROMPTS))
    args = parser.parse_args(argv)
    model = cn.load_model()
    prompts = PROMPTS[: args.prompts]
    configs = configurations(model)
    rows: dict[str, dict] = {
        name: {"ratios": [], "kl": [], "differ": [], "tokens": 0} for name in configs
    }
    for i, prompt in enumerate(prompts):
        for name, processors in configs.items():
            plain = cn.generate(model, prompt, max_tokens=args.tokens, greedy=True)
            out = cn.generate(
                model, prompt, max_tokens=args.tokens, greedy=True, processors=processors
            )
            row = rows[name]
            row["ratios"].append(np.mean(out.stats.token_s) / np.mean(plain.stats.token_s))
            row["kl"].append(first_step_kl(model, prompt, processors))
            n = max(len(plain.tokens), len(out.tokens))
            same = sum(a == b for a, b in zip(plain.tokens, out.tokens))
            row["differ"].append(1 - same / n if n else 0.0)
            row["tokens"] += len(out.tokens)
        print(f"# {i + 1}/{len(prompts)} prompts", file=sys.stderr, flush=True)
    results = [
        {
            "processor": name,
            "time_ratio": float(np.mean(r["ratios"])),
            "first_step_kl": float(np.mean(r["kl"])),
            "tokens_differing": float(np.mean(r["differ"])),
            "tokens": r["tokens"],
        }
        for name, r in rows.items()
    ]
    lines = [
        f"Processors on {len(prompts)} prompts, SmolLM2-135M-Instruct on {model.device}, greedy, "
        f"{args.tokens} tokens of free text; each next to plain decoding of the same prompt",
        "",
        "| processor | time per token vs plain | KL(processed ‖ plain), first step | tokens differing from plain |",
        "|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['processor']} | {fmt(r['time_ratio'], 2)}x | {fmt(r['first_step_kl'], 3)} | "
            f"{100 * r['tokens_differing']:.0f}% |"
        )
    emit(results, "\n".join(lines), args, "bench/processors.py", argv)


if __name__ == "__main__":
    started = time.perf_counter()
    main()
    print(f"# {time.perf_counter() - started:.0f} s", file=sys.stderr)
