"""Speculative decoding is lossless: on toy models whose distributions are enumerated, the
output distribution equals the non-speculative sampler's (chains and trees, masked and
unmasked drafts, deterministic drafts, with a CFG processor); greedy outputs are identical.

Tolerance: a chi-square statistic below df + 5 sqrt(2 df) (about five standard deviations)
for 3000 fixed-seed generations per case.
"""

from __future__ import annotations

import itertools
import json
import math
from collections import Counter

import jsonschema
import pytest
import torch

import constrain as cn
from constrain.models.toy import ToyLM

TOKENS = ["a", "b", "ab"]
PATTERN = "(a|bb)(ab)?b?(a|b)?"


def _target_probs(ctx, prompt=()):
    """Context-dependent; with a prompt longer than one BOS, `b` is favoured (for CFG)."""
    n = len(ctx)
    eos = [0.05, 0.15, 0.3, 0.5, 0.7, 1.0][min(n, 5)]
    rest = [0.2, 0.6, 0.2] if ctx and ctx[-1] == 0 else [0.5, 0.2, 0.3]
    if len(prompt) > 1:
        rest = [rest[0] * 0.5, rest[1] * 1.5, rest[2]]
        rest = [r / sum(rest) for r in rest]
    return [(1 - eos) * r for r in rest] + [eos]


def _draft_probs(ctx, prompt=()):
    eos = 0.2 if len(ctx) >= 2 else 0.05
    rest = [0.4, 0.3, 0.3] if len(ctx) % 2 else [0.3, 0.4, 0.3]
    return [(1 - eos) * r for r in rest] + [eos]


def _exact(lm: ToyLM, cfg_scale: float | None = None) -> dict[tuple, float]:
    """The non-speculative sampler's distribution over token sequences: the product of the
    locally normalised, constrained, processed next-token distributions."""
    constraint = cn.Constraint(cn.Grammar.from_regex(PATTERN), lm.vocab)
    out = {}
    for n in range(0, 7):
        for seq in itertools.product(range(3), repeat=n):
            m, prob = constraint.start(), 1.0
            ok = True
            for i, t in enumerate([*seq, lm.eos_id]):
                if not m.check(t):
                    ok = False
                    break
                cond = lm.next_logprobs(seq[:i], [lm.bos_id] * 2)
                if cfg_scale is not None:
                    uncond = lm.next_logprobs(seq[:i], [lm.bos_id])
                    guided = torch.nan_to_num(uncond + cfg_scale * (cond - uncond), nan=-math.inf)
                    cond = torch.log_softmax(guided, -1)
                p = torch.exp(cond)
                z = sum(float(p[u]) for u in range(len(p)) if m.check(u))
                prob *= float(p[t]) / z
                m.advance(t)
            if ok:
                out[seq] = prob
    assert abs(sum(out.values()) - 1) < 1e-9
    return out


def _check(counts: Counter, exact: dict, n: int):
    assert set(counts) <= set(exact)
    support = [k for k, p in exact.items() if p > 0]
    stat = sum((counts.get(k, 0) - n * exact[k]) ** 2 / (n * exact[k]) for k in support)
    df = len(support) - 1
    assert stat <= df + 5 * math.sqrt(2 * df), (stat, df)


@pytest.fixture(scope="module")
def target():
    return ToyLM(TOKENS, _target_probs, conditional=True, name="target")


@pytest.fixture(scope="module")
def draft():
    return ToyLM(TOKENS, _draft_probs, conditional=True, name="draft")


CASES = {
    "draft model, masked chain": lambda d: cn.Speculative(draft=d, k=3, forced=False, lookup=0),
    "draft model, unmasked": lambda d: cn.Speculative(
        draft=d, k=3, forced=False, lookup=0, mask_drafts=False
    ),
    "forced + lookup tree": lambda d: cn.Speculative(k=4, lookup=2, branches=2),
    "everything": lambda d: cn.Speculative(draft=d, k=4, lookup=2, branches=2),
    "unmasked draft + lookup tree": lambda d: cn.Speculative(
        draft=d, k=4, lookup=2, branches=3, mask_drafts=False
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_speculative_sampling_is_exact(target, draft, case):
    exact = _exact(target)
    spec = CASES[case](draft)
    n = 3000
    counts = Counter(
        tuple(cn.generate(target, "x", regex=PATTERN, speculative=spec, seed=s).tokens)
        for s in range(n)
    )
    _check(counts, exact, n)


def test_speculative_sampling_with_cfg_is_exact(target, draft):
    exact = _exact(target, cfg_scale=2.0)
    spec = cn.Speculative(draft=draft, k=3, lookup=2)
    n = 3000
    counts = Counter(
        tuple(
            cn.generate(
                target, "x", regex=PATTERN, speculative=spec, seed=s, processors=[cn.CFG(2.0)]
            ).tokens
        )
        for s in range(n)
    )
    _check(counts, exact, n)


def test_drafts_are_verified_together():
    """Several tokens per target forward on average, and the acceptance bookkeeping adds up."""
    lm = ToyLM.uniform(TOKENS, 0.1)
    out = cn.generate(lm, "x", regex="(ab){5}", speculative=cn.Speculative(), seed=0)
    report = out.stats.speculative
    assert report.emitted == len(out.tokens) + 1  # and EOS
    assert report.tokens_per_forward > 1.5
    assert sum(report.kept.values()) <= sum(report.drafted.values())


@pytest.mark.parametrize("settings", [dict(lookup=0), dict(), dict(branches=3)])
def test_greedy_outputs_are_identical(tiny_model, settings):
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 12},
            "tags": {"type": "array", "items": {"enum": ["red", "green"]}, "maxItems": 3},
        },
        "required": ["name", "tags"],
        "additionalProperties": False,
    }
    draft = tiny_model.with_layers([0])
    for prompt in ("Extract: Ana likes red and green.", "Tom: green"):
        plain = cn.generate(tiny_model, prompt, schema=schema, greedy=True, max_tokens=40)
        for drafting in (cn.Speculative(**settings), cn.Speculative(draft=draft, **settings)):
            fast = cn.generate(
                tiny_model, prompt, schema=schema, greedy=True, max_tokens=40, speculative=drafting
            )
            assert fast.tokens == plain.tokens and fast.finish_reason == plain.finish_reason
            if fast.complete:
                jsonschema.validate(json.loads(fast.text), schema)


def test_speculative_argument_errors(target):
    with pytest.raises(ValueError, match="token samplers"):
        cn.generate(target, "x", regex="a", sampler=cn.SMC(), speculative=cn.Speculative())
    with pytest.raises(ValueError):
        cn.Speculative(k=0)


def test_choose_layers_measures_agreement_and_cost(tiny_model):
    from constrain.models.layers import choose_layers, expected_speedup

    layers, report = choose_layers(
        tiny_model, ["hello there", "a b c"], candidates=[[0], [0, 1]], tokens=6
    )
    full = next(r for r in report if r["layers"] == [0, 1])
    assert full["agreement"] == 1.0  # the whole model agrees with itself
    assert layers == report[0]["layers"] and report[0]["speedup"] >= report[1]["speedup"]
    assert expected_speedup(1.0, 0.0, 4) == 5 and expected_speedup(0.0, 0.5, 4) < 1


@pytest.mark.slow
# the 48-token budget cuts most of these schemas on purpose (cut outputs must match too)
@pytest.mark.filterwarnings("ignore:the shortest text this constraint allows")
def test_greedy_outputs_are_identical_on_the_bundled_model(smollm):
    """50 extraction prompt / schema pairs from the shared data: speculative greedy decoding
    (forced, lookup tree, and a layer-skip draft) emits exactly the tokens of plain greedy."""
    from bench.speculative import DATA, extraction_cases

    if not DATA.is_dir():
        pytest.skip(f"the shared benchmark data is not at {DATA}")
    cases = extraction_cases(DATA, 50)
    assert len(cases) == 50
    draft = smollm.with_layers(range(10))
    settings = [cn.Speculative(branches=2), cn.Speculative(draft=draft, lookup=0)]
    for i, (name, schema, prompt) in enumerate(cases):
        plain = cn.generate(smollm, prompt, schema=schema, greedy=True, max_tokens=48)
        fast = cn.generate(
            smollm, prompt, schema=schema, greedy=True, max_tokens=48, speculative=settings[i % 2]
        )
        assert fast.tokens == plain.tokens, name
        assert fast.finish_reason == plain.finish_reason, name


def test_lookup_draft_ends_at_eos():
    """A prompt-lookup continuation that holds EOS ends the draft there (nothing is drafted
    after the end of the text)."""
    from constrain.decoding import Sequence, SpeculativeSampling
    from constrain.processors.bound import BoundStack
    from constrain.results import DecodeStats

    lm = ToyLM.uniform(TOKENS, 0.1)
    eos = lm.vocab.eos_ids[0]
    prompt = [1, 0, eos, 0]  # "b a" once before, followed by EOS
    constraint = cn.Constraint(cn.Grammar.from_regex("(ba)+"), lm.vocab)
    s = Sequence(lm, BoundStack.plain(lm, prompt), constraint.start(), constraint)
    s.emit([1, 0])  # "ba"
    config = cn.DecodingConfig(speculative=cn.Speculative(forced=False, k=8), greedy=True)
    strategy = SpeculativeSampling(config, None, DecodeStats())
    (draft,), _ = strategy.propose(s, 8)
    assert draft.tokens[-1] == eos and draft.final.finished()
