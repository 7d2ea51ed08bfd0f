"""Choosing the layers of a self-speculative draft (the target with some layers skipped).

A draft made of the target's own layers needs no second model, but which layers to keep is a
trade-off: more layers agree more often with the target and cost more per token. On sample
prompts, `choose_layers` decodes greedily with the target, then measures for each candidate
subset how often its greedy token agrees with the target's (teacher-forced over the same
text, one forward per candidate) and what one of its steps costs relative to the target's,
and keeps the subset with the best expected speed-up for chains of up to `k` tokens:

    speed-up(k) = (1 - a^(k+1)) / ((1 - a) (k c + 1))        (Leviathan et al. 2023)

with a the agreement and c the cost ratio (verification taken as one target step).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch

__all__ = ["choose_layers", "expected_speedup"]


def expected_speedup(agreement: float, cost: float, k: int) -> float:
    """Tokens per unit of target time with chains of k drafts (agreement a, cost ratio c)."""
    if agreement >= 1.0:
        return (k + 1) / (k * cost + 1)
    return (1 - agreement ** (k + 1)) / ((1 - agreement) * (k * cost + 1))


def _greedy_text(model, prompt_ids: list[int], tokens: int) -> list[int]:
    stream = model.start(prompt_ids)
    out = []
    for _ in range(tokens):
        token = int(torch.argmax(model.logprobs([stream])[0]))
        if token in model.vocab.eos_ids:
            break
        out.append(token)
        model.append(stream, token)
    return out


def _step_time(model, prompt_ids: list[int], repeats: int = 5) -> float:
    stream = model.start(prompt_ids)
    times = []
    for _ in range(repeats):
        model.append(stream, prompt_ids[-1])
        t0 = time.perf_counter()
        model.logprobs([stream])
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def choose_layers(
    model,
    prompts: Sequence[str],
    *,
    candidates: Sequence[Sequence[int]] | None = None,
    tokens: int = 32,
    k: int = 4,
) -> tuple[list[int], list[dict]]:
    """The best layer subset for a self-speculative draft of `model`, and the measurements.

    Args:
        prompts: sample prompts like those the draft will serve.
        candidates: layer subsets to compare (default: the first quarter, third, half and two
            thirds of the layers, and every other layer).
        tokens: greedy tokens decoded per prompt to measure agreement on.
        k: the draft length the speed-up is computed for.

    Returns:
        (layers, report): report has, per candidate, its layers, agreement, cost ratio and
        expected speed-up, best first.
    """
    n = len(model.hf_model.model.layers)
    if candidates is None:
        candidates = [list(range(max(1, n * f // 12))) for f in (3, 4, 6, 8)]
        candidates.append(list(range(0, n, 2)))
    encoded = [model.encode_prompt(p) for p in prompts]
    texts = [_greedy_text(model, ids, tokens) for ids in encoded]
    target_cost = sum(_step_time(model, ids) for ids in encoded[:2])
    report = []
    for layers in candidates:
        draft = model.with_layers(layers)
        agree = total = 0
        for ids, text in zip(encoded, texts):
            if not text:
                continue
            rows = draft.score(draft.start(ids), text[:-1])  # its guess before each token
            guesses = torch.argmax(rows, dim=-1).tolist()
            agree += sum(g == t for g, t in zip(guesses, text))
            total += len(text)
        cost = sum(_step_time(draft, ids) for ids in encoded[:2]) / target_cost
        agreement = agree / total if total else 0.0
        report.append(
            {
                "layers": list(layers),
                "agreement": agreement,
                "cost": cost,
                "speedup": expected_speedup(agreement, cost, k),
            }
        )
    report.sort(key=lambda r: -r["speedup"])
    return report[0]["layers"], report
