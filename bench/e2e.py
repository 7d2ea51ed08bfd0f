"""End-to-end decoding speed: transformers' own `generate` against constrain's loop, free and
under JSON Schemas, measured side by side in one process.

    python bench/e2e.py --limit 10 --markdown docs/benchmarks/e2e.md

For each schema (JSONSchemaBench, round-robin over the subsets in file order, those that
compile and are short enough for a prompt), the same chat prompt ("Generate a JSON object
valid under this schema: ...") is decoded greedily by the bundled SmolLM2-135M-Instruct in
four ways, interleaved (the order rotates from schema to schema):

  (a) `hf_model.generate(...)`, unconstrained (plain `nn.Linear` layers, its own KV cache);
  (b) `cn.generate(model, prompt, greedy=True)`, unconstrained;
  (c) `cn.generate(..., schema=schema)` with the default sampler;
  (d) the same with `speculative=cn.Speculative()`.

Decode time excludes the prefill the same way for everyone: for (b)-(d) it is
``stats.total_s - stats.prefill_s``, everything after the prompt's forward; for (a) it runs
from the first generated token (a streamer's clock) to the return of `generate`. Tokens are
those generated, EOS excluded; decode tok/s is tokens over decode time, summed over schemas.
Each constraint is compiled before it is timed (a warm-up generation), so (c) and (d) time
decoding, not compilation. This file puts its checkout first on the import path: it measures
the code next to it.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROMPT = "Generate a JSON object valid under this schema: {schema}"
MODES = ("a", "b", "c", "d")
LABELS = {
    "a": "(a) transformers generate, free",
    "b": "(b) cn.generate, free",
    "c": "(c) cn.generate, schema",
    "d": "(d) cn.generate, schema, speculative",
}
GOALS = {("b", "a"): 1.0, ("c", "b"): 0.95, ("d", "b"): None}


@dataclass
class Run:
    """One generation: tokens (EOS excluded) and decode seconds (prefill excluded)."""

    tokens: list[int]
    decode_s: float

    @property
    def tok_s(self) -> float:
        return len(self.tokens) / self.decode_s if self.decode_s > 0 else float("nan")


@dataclass
class Case:
    """One schema and its four runs."""

    name: str
    schema: dict
    runs: dict[str, Run] = field(default_factory=dict)


def select_schemas(data: Path, limit: int, max_chars: int) -> list[tuple[str, dict]]:
    """`limit` schemas, round-robin over the subsets (sorted), each subset in file order:
    those at most `max_chars` long that `cn.Grammar.from_json_schema` compiles."""
    import constrain as cn

    queues = [sorted(d.glob("*.json")) for d in sorted(p for p in data.iterdir() if p.is_dir())]
    chosen: list[tuple[str, dict]] = []
    position = [0] * len(queues)
    while len(chosen) < limit and any(i < len(q) for i, q in zip(position, queues)):
        for k, queue in enumerate(queues):
            while len(chosen) < limit and position[k] < len(queue):
                path = queue[position[k]]
                position[k] += 1
                text = path.read_text(encoding="utf-8")
                if len(text) > max_chars:
                    continue
                try:
                    schema = json.loads(text)
                    cn.Grammar.from_json_schema(schema)
                except Exception:  # unsupported or invalid schemas are skipped
                    continue
                chosen.append((f"{path.parent.name}/{path.stem}", schema))
                break
    return chosen


class Clock:
    """A `generate` streamer that notes when each batch of tokens arrives (the first call
    brings the prompt, the second the first generated token)."""

    def __init__(self):
        self.times: list[float] = []

    def put(self, value) -> None:
        self.times.append(time.perf_counter())

    def end(self) -> None:
        pass


def run_transformers(hf_model, prompt_ids: list[int], eos_ids, max_tokens: int) -> Run:
    """(a): transformers' own greedy loop; decode time from the first generated token."""
    import torch

    ids = torch.tensor([prompt_ids])
    clock = Clock()
    with torch.inference_mode():
        out = hf_model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=max_tokens,
            eos_token_id=list(eos_ids),
            pad_token_id=eos_ids[0],
            streamer=clock,
        )
    done = time.perf_counter()
    new = [int(t) for t in out[0, len(prompt_ids) :]]
    if new and new[-1] in eos_ids:
        new = new[:-1]
    return Run(new, done - clock.times[1])


def run_constrain(model, prompt: str, max_tokens: int, **options) -> Run:
    """(b)-(d): `cn.generate`; decode time is everything after the prefill."""
    import constrain as cn

    out = cn.generate(model, prompt, greedy=True, max_tokens=max_tokens, **options)
    return Run(list(out.tokens), out.stats.total_s - out.stats.prefill_s)


def run_mode(mode: str, case: Case, model, hf_model, max_tokens: int) -> Run:
    import constrain as cn

    prompt = PROMPT.format(schema=json.dumps(case.schema))
    if mode == "a":
        return run_transformers(hf_model, model.encode_prompt(prompt), model.eos_ids, max_tokens)
    if mode == "b":
        return run_constrain(model, prompt, max_tokens)
    if mode == "c":
        return run_constrain(model, prompt, max_tokens, schema=case.schema)
    return run_constrain(
        model, prompt, max_tokens, schema=case.schema, speculative=cn.Speculative()
    )


def rate(cases: list[Case], mode: str) -> float:
    """Decode tok/s of a mode over all schemas (total tokens over total decode time)."""
    tokens = sum(len(c.runs[mode].tokens) for c in cases)
    seconds = sum(c.runs[mode].decode_s for c in cases)
    return tokens / seconds if seconds else float("nan")


def markdown(cases: list[Case], header: list[str]) -> str:
    lines = [*header, ""]
    lines.append(
        "| schema | "
        + " | ".join(f"{m} tokens" for m in MODES)
        + " | "
        + " | ".join(f"{m} tok/s" for m in MODES)
        + " | a = b |"
    )
    lines.append("|---" * (2 * len(MODES) + 2) + "|")
    for c in cases:
        same = "yes" if c.runs["a"].tokens == c.runs["b"].tokens else "no"
        lines.append(
            f"| {c.name} | "
            + " | ".join(str(len(c.runs[m].tokens)) for m in MODES)
            + " | "
            + " | ".join(f"{c.runs[m].tok_s:.1f}" for m in MODES)
            + f" | {same} |"
        )
    totals = [str(sum(len(c.runs[m].tokens) for c in cases)) for m in MODES]
    same_all = sum(c.runs["a"].tokens == c.runs["b"].tokens for c in cases)
    lines.append(
        "| **all** | "
        + " | ".join(totals)
        + " | "
        + " | ".join(f"**{rate(cases, m):.1f}**" for m in MODES)
        + f" | {same_all}/{len(cases)} |"
    )
    lines.append("")
    for m in MODES:
        lines.append(f"- {LABELS[m]}: {rate(cases, m):.1f} tok/s")
    lines.append("")
    for (num, den), goal in GOALS.items():
        ratio = rate(cases, num) / rate(cases, den)
        per_schema = statistics.median(c.runs[num].tok_s / c.runs[den].tok_s for c in cases)
        met = "met" if goal is not None and ratio >= goal else "NOT met"
        verdict = "" if goal is None else f" (goal >= {goal:.2f}x: {met})"
        lines.append(
            f"- ({num})/({den}) = **{ratio:.2f}x**{verdict}; median over schemas {per_schema:.2f}x"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=10, help="how many schemas")
    parser.add_argument(
        "--data", type=Path, default=ROOT.parent / "shared" / "data" / "jsonschemabench"
    )
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--max-schema-chars", type=int, default=1500)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--markdown", type=Path, help="write the table there")
    args = parser.parse_args(argv)

    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(args.threads)
    import constrain as cn
    from constrain.models.bundled import model_dir, resolve
    from constrain.models.kernels import TIMER

    t0 = time.perf_counter()
    model = cn.load_model()
    load_s = time.perf_counter() - t0
    measure_s = TIMER.last_measure_s
    # (a) runs on its own copy of the same weights, with plain nn.Linear layers
    hf_model = AutoModelForCausalLM.from_pretrained(
        str(model_dir(resolve(None))), dtype=torch.float32
    ).eval()
    cases = [
        Case(name, schema)
        for name, schema in select_schemas(args.data, args.limit, args.max_schema_chars)
    ]
    print(f"{len(cases)} schemas; warming up", file=sys.stderr, flush=True)
    warm = Case("warm-up", {"type": "object", "properties": {"a": {"type": "integer"}}})
    for mode in MODES:
        run_mode(mode, warm, model, hf_model, 8)
    for case in cases:  # compile every constraint before timing
        cn.Generator(model, schema=case.schema, max_tokens=args.max_tokens)
    for i, case in enumerate(cases):
        order = MODES[i % len(MODES) :] + MODES[: i % len(MODES)]
        for mode in order:
            case.runs[mode] = run_mode(mode, case, model, hf_model, args.max_tokens)
        print(
            f"{case.name}: "
            + ", ".join(
                f"{m} {len(case.runs[m].tokens)} tok {case.runs[m].tok_s:.1f}/s" for m in MODES
            ),
            file=sys.stderr,
            flush=True,
        )
    command = "python bench/e2e.py " + " ".join(argv if argv is not None else sys.argv[1:])
    cpu = _cpu_name()
    header = [
        f"<!-- generated by {command} -->",
        "# End to end: transformers generate vs constrain, free and under JSON Schemas",
        "",
        f"{cpu}, {args.threads} threads; torch {torch.__version__}, transformers "
        f"{transformers.__version__}; SmolLM2-135M-Instruct (float32), greedy, at most "
        f"{args.max_tokens} tokens; {len(cases)} JSONSchemaBench schemas (round-robin over the "
        f"subsets, <= {args.max_schema_chars} chars). Model load {load_s:.2f} s, of which "
        f"kernel timing {measure_s:.2f} s; layers taking the few-row product: "
        f"{model.kernel_layers['patched']} of "
        f"{model.kernel_layers['patched'] + model.kernel_layers['plain']}. Decode tok/s "
        "excludes the prefill (see bench/e2e.py). a = b: the same tokens.",
    ]
    table = markdown(cases, header)
    print(table)
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(table, encoding="utf-8")


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


if __name__ == "__main__":
    main()
