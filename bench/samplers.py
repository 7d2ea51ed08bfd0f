"""Sampler benchmark: LCD vs AWRS per token, and SMC's cost per step, on JSON Schemas.

With the bundled SmolLM2-135M-Instruct, for each of N schemas of the shared JSONSchemaBench data
(taken round-robin over the subsets, in file order, among those that compile and whose text
fits a short prompt), and the prompt "Generate a JSON object valid under this schema: ...":

* LCD and AWRS each generate one sequence (sampling at temperature 1, same seed) on a grammar
  compiled afresh for the run, so each pays for the parser and lexer states it visits, as a
  first generation with a schema does (neither inherits the other's). One warm-up generation
  per sampler before the measurements pays the once-per-process work (the vocabulary's token
  trie, the text check's token sets). Measured per token: constraint time (`Matcher.check` /
  `mask` / `advance`), the whole token sampler's time, `check` calls, masks; tokens per second.
* Constraint time is reported twice. *Live*: timed inside the generation, where every step
  follows a model forward that streams the weights (270 MB) through the CPU caches, so the
  constraint's first accesses after it miss the cache (3-5x slower than alone on this
  machine; a forward on a GPU does not evict them). *Alone*: the same constraint calls
  replayed in order on another fresh compile with no forward between them: the engine's
  own cost.
* SMC with 4 and 8 particles (AWRS token sampler): wall time per step (one batched forward for
  all particles plus their draws) as a ratio to the single-sequence AWRS step, measured side by
  side on the same schema; mean effective sample size; resamplings.

Run: ``python bench/samplers.py [--limit 50] [--max-tokens 64]
[--markdown docs/benchmarks/samplers.md]``.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from pathlib import Path

# run as a script: import `bench.common` and `constrain` from the repository root
if __package__ in (None, ""):
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import jsonschema
import numpy as np
import torch

import constrain as cn
from bench.common import argument_parser, emit
from constrain.bench.report import fmt, percentile
from constrain.decoding import Sampling, Sequence, decode
from constrain.processors.bound import BoundStack
from constrain.results import DecodeStats
from constrain.samplers import token_sampler

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
PROMPT = "Generate a JSON object valid under this JSON Schema:\n{schema}"
_MAX_SCHEMA_CHARS = 1200
# the warm-up's schema: open objects and a unique array, so the text check's token sets exist
_WARM_UP = {"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}}


def compile_schema(schema: dict) -> cn.Grammar:
    """The schema's grammar, compiled afresh (so no run inherits another's parser states)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cn.Grammar.from_json_schema(schema, whitespace="default")


def pick_schemas(data: Path, n: int) -> list[tuple[str, dict]]:
    """N compiling schemas, round-robin over the subsets, each in file order."""
    root = data / "jsonschemabench"
    queues = {s.name: sorted(s.glob("*.json")) for s in sorted(root.iterdir()) if s.is_dir()}
    picked: list[tuple[str, dict]] = []
    while len(picked) < n and any(queues.values()):
        for subset, files in queues.items():
            while files and len(picked) < n:
                path = files.pop(0)
                text = path.read_text()
                if len(text) > _MAX_SCHEMA_CHARS:
                    continue
                schema = json.loads(text)
                try:
                    compile_schema(schema)
                except cn.ConstrainError:
                    continue
                picked.append((f"{subset}/{path.stem}", schema))
                break
    return picked


class _Recording:
    """A Matcher that logs the calls timed as constraint time, to replay them `alone`."""

    def __init__(self, matcher: cn.Matcher):
        self._matcher = matcher
        self.calls: list[tuple[str, tuple]] = []

    def __getattr__(self, name: str):
        return getattr(self._matcher, name)

    def check(self, token: int) -> bool:
        self.calls.append(("check", (token,)))
        return self._matcher.check(token)

    def mask(self) -> np.ndarray:
        self.calls.append(("mask", ()))
        return self._matcher.mask()

    def bitmask(self) -> np.ndarray:
        self.calls.append(("bitmask", ()))
        return self._matcher.bitmask()

    def advance(self, token: int) -> None:
        self.calls.append(("advance", (token,)))
        self._matcher.advance(token)

    def rollback(self, n: int = 1) -> None:
        self.calls.append(("rollback", (n,)))
        self._matcher.rollback(n)


def alone(schema: dict, vocab, calls: list[tuple[str, tuple]]) -> list[float]:
    """Seconds per draw of `calls` replayed in order on a fresh compile, nothing in between
    (a draw ends with its `advance`, or with the `rollback` after a dead end; the EOS that
    ends a finished text outside any draw is left out)."""
    matcher = cn.Constraint(compile_schema(schema), vocab).start()
    eos = set(vocab.eos_ids)
    per_draw: list[float] = []
    spent, calls_in_draw = 0.0, 0
    for name, args in calls:
        method = getattr(matcher, name)
        t0 = time.perf_counter()
        method(*args)
        if name != "rollback":
            spent += time.perf_counter() - t0
            calls_in_draw += 1
        if name == "rollback" or name == "advance":
            if not (name == "advance" and calls_in_draw == 1 and args[0] in eos):
                per_draw.append(spent)
            spent, calls_in_draw = 0.0, 0
    return per_draw


def run_one(
    model, prompt_ids, schema, sampler, max_tokens, seed
) -> tuple[Sequence, DecodeStats, float, list]:
    """One sequence on a fresh compile; returns it, its step statistics, the wall time and the
    constraint calls it made (for `alone`)."""
    constraint = cn.Constraint(compile_schema(schema), model.vocab)
    generator = torch.Generator(device=model.device).manual_seed(seed)
    stats = DecodeStats()
    t0 = time.perf_counter()
    matcher = _Recording(constraint.start())
    sequence = Sequence(model, BoundStack.plain(model, prompt_ids), matcher, constraint)
    strategy = Sampling(token_sampler(sampler), generator, stats, scores_eos=False)
    for _ in decode([sequence], strategy, max_tokens=max_tokens):
        pass
    return sequence, stats, time.perf_counter() - t0, matcher.calls


def main(argv: list[str] | None = None) -> None:
    parser = argument_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--limit", type=int, default=50, help="schemas")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--particles", default="4,8")
    parser.add_argument("--model", default=None, help="default: the bundled SmolLM2")
    args = parser.parse_args(argv)

    model = cn.load_model(args.model)
    schemas = pick_schemas(args.data, args.limit)
    print(f"# {len(schemas)} schemas, model {model.name} on {model.device}", file=sys.stderr)
    particle_counts = [int(x) for x in args.particles.split(",") if x]
    rows: dict[str, dict] = {
        name: {
            "tokens": 0,
            "seconds": 0.0,
            "draw_s": [],
            "alone_s": [],
            "sample_s": 0.0,
            "checks": 0,
            "masks": 0,
            "step_s": [],
            "valid": 0,
            "complete": 0,
            "ess": [],
            "resamples": 0,
            "ratios": [],
            "outputs": [],  # each run's text (SMC: the best particle's), to compare runs
        }
        for name in ["lcd", "awrs", *(f"smc-{n}" for n in particle_counts)]
    }
    warm_ids = model.encode_prompt(PROMPT.format(schema=json.dumps(_WARM_UP)))
    for sampler in ("lcd", "awrs"):  # once-per-process work, not counted
        run_one(model, warm_ids, _WARM_UP, sampler, 16, args.seed)
    for i, (name, schema) in enumerate(schemas):
        prompt = PROMPT.format(schema=json.dumps(schema))
        prompt_ids = model.encode_prompt(prompt)
        single_step = None
        for sampler in ("lcd", "awrs"):
            sequence, stats, seconds, calls = run_one(
                model, prompt_ids, schema, sampler, args.max_tokens, args.seed + i
            )
            row = rows[sampler]
            row["tokens"] += len(stats.draw_s)
            row["seconds"] += seconds
            row["draw_s"] += stats.draw_s
            row["alone_s"] += alone(schema, model.vocab, calls)
            row["sample_s"] += stats.sample_s
            row["checks"] += stats.checks
            row["masks"] += stats.masks
            row["step_s"] += stats.step_s
            complete = sequence.matcher.finished()
            row["outputs"].append(model.vocab.decode(sequence.tokens))
            row["complete"] += complete
            if complete:
                value = json.loads(model.vocab.decode(sequence.tokens))
                row["valid"] += jsonschema.Draft202012Validator(schema).is_valid(value)
            if sampler == "awrs":
                single_step = float(np.mean(stats.step_s)) if stats.step_s else None
        for n in particle_counts:
            generator = cn.Generator(
                model, grammar=compile_schema(schema), sampler=cn.SMC(n), max_tokens=args.max_tokens
            )
            run = generator.start([prompt], seed=args.seed + i)
            for _ in run.steps():
                pass
            result = run.smc_result(0)
            row = rows[f"smc-{n}"]
            row["outputs"].append(result.best.text if result.best else None)
            row["tokens"] += len(result.stats.draw_s)
            row["draw_s"] += result.stats.draw_s
            row["sample_s"] += result.stats.sample_s
            row["checks"] += result.stats.checks
            row["masks"] += result.stats.masks
            row["step_s"] += result.stats.step_s
            row["ess"].append(result.mean_ess / n)
            row["resamples"] += result.resamples
            if single_step and result.stats.step_s:
                row["ratios"].append(float(np.mean(result.stats.step_s)) / single_step)
            best = result.best
            row["complete"] += bool(best and best.complete)
            if best and best.complete:
                value = json.loads(best.text)
                row["valid"] += jsonschema.Draft202012Validator(schema).is_valid(value)
        print(f"# {i + 1}/{len(schemas)} {name}", file=sys.stderr, flush=True)
    emit(_results(rows), _table(rows, len(schemas), args), args, "bench/samplers.py", argv)


def _results(rows: dict[str, dict]) -> list[dict]:
    out = []
    for name, r in rows.items():
        draws = np.array(r["draw_s"]) * 1e6
        alone_us = np.array(r["alone_s"]) * 1e6
        out.append(
            {
                "sampler": name,
                "tokens": r["tokens"],
                "constraint_us_p50": percentile(list(draws), 50),
                "constraint_us_mean": float(draws.mean()) if draws.size else float("nan"),
                "alone_us_p50": percentile(list(alone_us), 50),
                "alone_us_mean": float(alone_us.mean()) if alone_us.size else float("nan"),
                "sampler_us_mean": r["sample_s"] / max(r["tokens"], 1) * 1e6,
                "checks_per_token": r["checks"] / max(r["tokens"], 1),
                "masks_per_token": r["masks"] / max(r["tokens"], 1),
                "tokens_per_s": r["tokens"] / r["seconds"] if r["seconds"] else float("nan"),
                "step_ms_mean": float(np.mean(r["step_s"])) * 1e3 if r["step_s"] else float("nan"),
                "step_ratio": float(np.mean(r["ratios"])) if r["ratios"] else float("nan"),
                "mean_ess_fraction": float(np.mean(r["ess"])) if r["ess"] else float("nan"),
                "resamples": r["resamples"],
                "complete": r["complete"],
                "valid": r["valid"],
                "outputs": r["outputs"],
            }
        )
    return out


def _table(rows: dict[str, dict], n_schemas: int, args) -> str:
    results = _results(rows)
    head = (
        "| sampler | tokens | constraint µs/token live p50 / mean | alone p50 / mean | "
        "sampler µs/token | checks/token | masks/token | tok/s (1 seq) | step ms | "
        "step vs 1 seq | mean ESS / N | complete | valid |"
    )
    lines = [
        f"Samplers on {n_schemas} JSONSchemaBench schemas, max {args.max_tokens} tokens, "
        f"temperature 1, seed {args.seed}",
        "",
        head,
        "|---" * 13 + "|",
    ]
    for r in results:
        single = not r["sampler"].startswith("smc")
        lines.append(
            f"| {r['sampler']} | {r['tokens']} | {fmt(r['constraint_us_p50'], 0)} / "
            f"{fmt(r['constraint_us_mean'], 0)} | {fmt(r['alone_us_p50'], 0)} / "
            f"{fmt(r['alone_us_mean'], 0)} | {fmt(r['sampler_us_mean'], 0)} | "
            f"{fmt(r['checks_per_token'], 2)} | {fmt(r['masks_per_token'], 2)} | "
            f"{fmt(r['tokens_per_s'], 1) if single else '-'} | {fmt(r['step_ms_mean'], 1)} | "
            f"{'1' if single else fmt(r['step_ratio'], 2) + 'x'} | "
            f"{'-' if single else fmt(r['mean_ess_fraction'], 2)} | "
            f"{r['complete']}/{n_schemas} | {r['valid']}/{r['complete']} |"
        )
    by_name = {r["sampler"]: r for r in results}
    if "lcd" in by_name and "awrs" in by_name:
        awrs, lcd = by_name["awrs"], by_name["lcd"]
        lines.append("")
        for label, key in (("live", "constraint_us"), ("alone", "alone_us")):
            ratio = awrs[f"{key}_mean"] / lcd[f"{key}_mean"]
            lines.append(
                f"AWRS constraint time per token, {label}: {ratio:.3f} x LCD's (mean); "
                f"p50 {fmt(awrs[f'{key}_p50'], 0)} µs."
            )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
