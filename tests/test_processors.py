"""The processor stack: each processor against a direct computation of its formula on fixed
inputs, model arithmetic term by term, the stage order, batching and rollback of term streams,
and generation under a constraint with processors."""

from __future__ import annotations

import json
import math

import jsonschema
import numpy as np
import pytest
import torch

import constrain as cn
from constrain.decoding import Sampling, Sequence, forward
from constrain.processors import ProcessorStack, Step
from constrain.processors.bound import BoundStack
from constrain.processors.guidance import jensen_shannon
from constrain.processors.reflection import triangle
from constrain.results import DecodeStats
from constrain.samplers import LCD

STEP = Step(prefix=(3, 1), prompt_ids=(0,))


def _row(seed: int, n: int = 12) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.log_softmax(torch.randn(n, generator=g, dtype=torch.float64) * 2, dim=-1)


def _close(a, b):
    torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-10)


# -- warpers --------------------------------------------------------------------------------------


def test_temperature_and_truncation_warpers_match_their_definitions():
    lp = _row(0)
    p = np.exp(lp.numpy())
    _close(cn.Temperature(0.5)(lp), torch.log_softmax(lp / 0.5, -1))

    def kept(out):
        return set(np.flatnonzero(np.isfinite(out.numpy())).tolist())

    order = np.argsort(-p)
    assert kept(cn.TopK(3)(lp)) == set(order[:3].tolist())
    # top-p: the smallest prefix of the sorted tokens whose mass reaches p
    n = int(np.searchsorted(np.cumsum(p[order]), 0.7) + 1)
    assert kept(cn.TopP(0.7)(lp)) == set(order[:n].tolist())
    assert kept(cn.MinP(0.2)(lp)) == {i for i in range(len(p)) if p[i] >= 0.2 * p.max()}
    # typical: by |surprisal - entropy|, until the mass reaches 0.5 (the crossing token kept)
    h = -(p * np.log(p)).sum()
    by_typicality = np.argsort(np.abs(-np.log(p) - h))
    m = int(np.searchsorted(np.cumsum(p[by_typicality]), 0.5) + 1)
    assert kept(cn.Typical(0.5)(lp)) == set(by_typicality[:m].tolist())
    # top-H: most likely first while the cumulated -p log p stays within top_h * H
    contribution = np.cumsum(-(p[order] * np.log(p[order])))
    allowed = max(1, int((contribution <= 0.4 * h + 1e-12).sum()))
    assert kept(cn.TopH(0.4)(lp)) == set(order[:allowed].tolist())
    for warper in (cn.TopK(3), cn.TopP(0.7), cn.MinP(0.2), cn.Typical(0.5), cn.TopH(0.4)):
        out = warper(lp)
        assert math.isclose(float(torch.logsumexp(out, -1)), 0.0, abs_tol=1e-9)  # renormalised
        _close(
            out[torch.isfinite(out)] - lp[torch.isfinite(out)],
            torch.full_like(
                out[torch.isfinite(out)],
                float(out[torch.isfinite(out)][0] - lp[torch.isfinite(out)][0]),
            ),
        )  # a constant shift: the kept tokens keep their ratios


def test_repetition_penalty_and_its_transformers_twin():
    from transformers import RepetitionPenaltyLogitsProcessor

    lp = _row(1)
    out = cn.RepetitionPenalty(1.5)(lp, [], STEP)
    expected = lp.clone()
    for t in (0, 1, 3):  # prefix and prompt tokens
        expected[t] = lp[t] * 1.5
    _close(out, expected)
    wrapped = cn.HFProcessor(RepetitionPenaltyLogitsProcessor(1.5))
    _close(wrapped(lp, [], STEP), expected)
    no_prompt = cn.RepetitionPenalty(1.5, include_prompt=False)(lp, [], STEP)
    assert no_prompt[0] == lp[0] and no_prompt[3] == lp[3] * 1.5


def test_warper_argument_errors():
    for make in (
        lambda: cn.Temperature(0),
        lambda: cn.TopK(0),
        lambda: cn.TopP(1.5),
        lambda: cn.MinP(-1),
        lambda: cn.Typical(1.0),
        lambda: cn.TopH(0),
    ):
        with pytest.raises(ValueError):
            make()


# -- guidance ---------------------------------------------------------------------------------------


def test_cfg_contrastive_adacad_uscd_formulas():
    lc, lu = _row(2), _row(3)
    _close(cn.CFG(2.5)(lc, [lu], STEP), lu + 2.5 * (lc - lu))
    _close(cn.CFG(1.0)(lc, [lu], STEP), lc)

    out = cn.Contrastive(amateur=None, alpha=0.2, beta=0.5)(lc, [lu], STEP)
    plausible = lc >= lc.max() + math.log(0.2)
    _close(out[plausible], 1.5 * lc[plausible] - 0.5 * lu[plausible])
    assert plausible.sum() < len(lc)  # the others demoted, finite: probability 0 beside them
    assert torch.isfinite(out).all() and out[~plausible].max() < out[plausible].min() - 1e3
    assert torch.softmax(out, -1)[~plausible].max() == 0

    p, q = np.exp(lc.numpy()), np.exp(lu.numpy())
    mix = (p + q) / 2
    jsd = 0.5 * (p * np.log(p / mix)).sum() + 0.5 * (q * np.log(q / mix)).sum()
    assert math.isclose(jensen_shannon(lc, lu), jsd, rel_tol=1e-6)
    assert 0 <= jsd <= math.log(2)
    ada = cn.AdaCAD(context="doc")
    _close(ada(lu, [lc], STEP), (1 + jsd) * lc - jsd * lu)  # main = no context, term = context
    assert cn.AdaCAD(context="doc", floor=0.9).weight(lc, lu) == 0.9

    flat = torch.log_softmax(torch.zeros(12, dtype=torch.float64) + 0.01 * lc, -1)  # uncertain
    uscd = cn.USCD("lame", weight=-0.7, mean_num=0.005, filter_num=2 / 3)
    out = uscd(flat, [lu], STEP)
    ps = np.exp(flat.numpy())
    keep = ps >= (2 / 3) / 12
    with np.errstate(divide="ignore"):
        expected = np.log(np.clip(ps - 0.7 * q, 0, None))
    finite = keep & (ps - 0.7 * q > 0)
    np.testing.assert_allclose(out.numpy()[finite], expected[finite], rtol=1e-9)
    np.testing.assert_allclose(out.numpy()[~finite], flat.numpy()[~finite] - 1e4)
    peaked = torch.log_softmax(lc * 50, -1)  # confident: unchanged
    _close(uscd(peaked, [lu], STEP), peaked)


# -- model arithmetic --------------------------------------------------------------------------------


class _Named:
    def __init__(self, name):
        self.name = name


def test_model_arithmetic_term_by_term():
    m = _Named("m")
    child, adult = cn.M(m, "child"), cn.M(m, "adult")
    lc, la = _row(4), _row(5)

    def run(formula, *rows):
        return formula(None, list(rows), STEP)

    # child - 0.6 adult = (l_c - 0.6 l_a) / 0.4 = 2.5 l_c - 1.5 l_a, normalised
    _close(run(child - 0.6 * adult, lc, la), torch.log_softmax(2.5 * lc - 1.5 * la, -1))
    _close(run(child, lc), lc)  # a single term is plain decoding
    _close(run(child + 0.2 * adult, lc, la), torch.log_softmax((lc + 0.2 * la) / 1.2, -1))
    _close(run(2 * child - adult, lc, la), torch.log_softmax(2 * lc - la, -1))
    _close(run(cn.Union(child, adult), lc, la), torch.log_softmax(torch.maximum(lc, la), -1))
    _close(run(cn.Intersection(child, adult), lc, la), torch.log_softmax(torch.minimum(lc, la), -1))
    # the paper's toxicity form: M - 0.96 Union(M_tox, M), norm 1 - 0.96 = 0.04
    tox = cn.M(m, "toxic")
    out = run(child - 0.96 * cn.Union(tox, child), lc, la)  # terms: child, tox
    _close(out, torch.log_softmax((lc - 0.96 * torch.maximum(la, lc)) / 0.04, -1))
    assert len((child - 0.96 * cn.Union(tox, child)).terms()) == 2  # child counted once
    with pytest.raises(ValueError, match="sum to 0"):
        run(child - adult, lc, la)
    with pytest.raises(TypeError, match="formulas"):
        child + 1


def test_classifier_term_reweights_the_top_tokens_by_bayes_rule():
    m = _Named("m")
    base = cn.M(m)
    texts_seen = []

    def classify(texts):  # log P(attribute | text): likes texts ending in token 7
        texts_seen.append(texts)
        return [math.log(0.9) if t.endswith("|7") else math.log(0.3) for t in texts]

    decode = lambda ids: "".join(f"|{i}" for i in ids)  # noqa: E731
    lp = _row(6)
    formula = base + cn.Classifier(classify, base, top_n=3, decode=decode)
    out = formula(None, [lp], Step(prefix=(7,)))  # the prefix itself ends in 7: log c = log .9
    top = torch.topk(lp, 3).indices.tolist()
    expected = lp.clone()
    for t in top:
        expected[t] += (math.log(0.9) if t == 7 else math.log(0.3)) - math.log(0.9)
    _close(out, torch.log_softmax(expected, -1))
    assert len(texts_seen[0]) == 4  # the prefix and the three candidates


# -- reflection ------------------------------------------------------------------------------------


def test_cyclic_reflex_wave_tokens_and_end_marker(smollm_vocab):
    assert triangle(0, 2.0, 100) == 0 and triangle(25, 2.0, 100) == 2.0
    assert triangle(50, 2.0, 100) == 0 and triangle(75, 2.0, 100) == -2.0
    assert triangle(100, 2.0, 100) == 0 and math.isclose(triangle(10, 2.0, 100), 0.8)
    reflex = cn.CyclicReflex(amplitude=2.0, period=100, words=("wait",))
    ids = reflex.token_ids(smollm_vocab)
    spelled = {smollm_vocab.token_bytes(i) for i in ids}
    assert {b"wait", b" wait", b"Wait", b" Wait"} & spelled == spelled and b" Wait" in spelled
    lp = torch.zeros(smollm_vocab.size, dtype=torch.float64)
    prefix = tuple(smollm_vocab.encode("x" * 25))[:25]
    out = reflex(lp, [], Step(prefix=prefix, vocab=smollm_vocab))
    assert torch.all(out[ids] == triangle(len(prefix), 2.0, 100))
    assert int((out != 0).sum()) == len(ids)
    ended = tuple(smollm_vocab.encode("so </think> the answer"))
    _close(reflex(lp, [], Step(prefix=ended, vocab=smollm_vocab)), lp)


# -- the stack ------------------------------------------------------------------------------------


def test_stage_order_and_validation():
    stack = ProcessorStack([cn.TopK(2), cn.CFG(2.0), cn.RepetitionPenalty()], temperature=0.5)
    stages = [p.stage for p in stack.processors]
    assert stages == ["control", "control", "temperature", "truncation"]
    assert isinstance(stack.processors[0], cn.CFG)  # the given order within a stage
    assert stack.truncates and len(stack.terms) == 1
    with pytest.raises(TypeError, match="HFProcessor"):
        ProcessorStack([lambda ids, scores: scores])


def test_truncation_only_keeps_allowed_tokens(tiny_model):
    """top-k = 1 after the constraint is the most likely *allowed* token (before it, the top
    token would usually be forbidden)."""
    out = cn.generate(
        tiny_model, "x", regex=r"[0-9]{3}", processors=[cn.TopK(1)], chat=False, seed=0
    )
    greedy = cn.generate(tiny_model, "x", regex=r"[0-9]{3}", greedy=True, chat=False)
    assert out.tokens == greedy.tokens


def _manual_cfg_greedy(model, cond_ids, uncond_ids, scale, regex, n):
    """Greedy CFG decoding with two independent streams and a hand-written combination."""
    c = cn.Constraint(cn.Grammar.from_regex(regex), model.vocab)
    m = c.start()
    a, b = model.start(cond_ids), model.start(uncond_ids)
    tokens = []
    for _ in range(n):
        lc, lu = model.logprobs([a])[0], model.logprobs([b])[0]
        row = torch.log_softmax(lu + scale * (lc - lu), -1)
        row = row.masked_fill(~torch.from_numpy(m.mask().copy()), -math.inf)
        t = int(torch.argmax(row))
        if t in model.vocab.eos_ids:
            break
        m.advance(t)
        tokens.append(t)
        model.append(a, t)
        model.append(b, t)
    return tokens


def test_cfg_generation_equals_a_direct_computation(tiny_model):
    prompt, negative = "Write about the sea", "Write about mountains"
    out = cn.generate(
        tiny_model,
        prompt,
        regex=r"[a-z ]{1,12}",
        greedy=True,
        chat=False,
        processors=[cn.CFG(3.0, negative_prompt=negative)],
    )
    manual = _manual_cfg_greedy(
        tiny_model,
        tiny_model.encode_prompt(prompt, chat=False),
        tiny_model.encode_prompt(negative, chat=False),
        3.0,
        r"[a-z ]{1,12}",
        len(out.tokens) + 1,
    )
    assert out.tokens == manual[: len(out.tokens)] and len(manual) == len(out.tokens)
    plain = cn.generate(tiny_model, prompt, regex=r"[a-z ]{1,12}", greedy=True, chat=False)
    assert plain.tokens != out.tokens  # guidance changed the choice somewhere


def test_term_streams_batch_and_roll_back_with_the_sequence(tiny_model):
    """Rows from the batched forward equal separate forwards; after a rollback, the next
    rows equal those of a fresh run over the same tokens."""
    stack = BoundStack(
        ProcessorStack([cn.CFG(2.0, negative_prompt="no")]),
        tiny_model,
        tiny_model.encode_prompt("yes", chat=False),
        "yes",
        chat=False,
    )
    c = cn.Constraint(cn.Grammar.from_regex(r"[a-z]{40}"), tiny_model.vocab)

    def fresh(tokens):
        s = Sequence(tiny_model, stack, c.start(), c)
        s.emit(tokens)
        return s

    def rows(s):
        ((main, (uncond,)),) = forward([s])
        return main[-1], uncond[-1]

    sequences = [fresh([]), fresh([])]
    sampling = Sampling(LCD(), torch.Generator().manual_seed(0), DecodeStats())
    for _ in range(4):
        sampling.step(sequences)
    s = sequences[0]
    for got, want in zip(rows(s), rows(fresh(list(s.tokens)))):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    s.rollback(2)
    for got, want in zip(rows(s), rows(fresh(list(s.tokens)))):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_processors_with_a_json_schema_stay_valid(tiny_model):
    schema = {
        "type": "object",
        "properties": {"tag": {"enum": ["x", "y"]}, "n": {"type": "integer", "maximum": 50}},
        "required": ["tag", "n"],
        "additionalProperties": False,
    }
    processors = [
        cn.CFG(1.5),
        cn.RepetitionPenalty(1.3),
        cn.TopP(0.9),
        cn.CyclicReflex(amplitude=2.0, period=8),
    ]
    for seed in range(4):
        out = cn.generate(
            tiny_model,
            "Give JSON",
            schema=schema,
            processors=processors,
            max_tokens=40,
            seed=seed,
            chat=False,
        )
        if out.complete:
            jsonschema.validate(json.loads(out.text), schema)
    res = cn.smc(
        tiny_model,
        "Give JSON",
        schema=schema,
        particles=3,
        max_tokens=30,
        seed=0,
        processors=[cn.CFG(1.5)],
        chat=False,
    )
    assert len(res.particles) == 3
    with pytest.raises(ValueError, match="truncation"):
        cn.smc(tiny_model, "x", regex="a+", processors=[cn.TopP(0.9)], chat=False)


@pytest.mark.parametrize("sampler", ["awrs", "lcd"])
def test_truncating_guidance_never_leaves_a_constrained_step_empty(sampler):
    """The expert finds only `a` plausible, the constraint allows only `b` and `c`: before,
    contrastive decoding and USCD gave every allowed token -inf (a dead end); now the allowed
    ones are ranked by what the processor computes, and the text completes, with `c`, the
    better of the two under the contrastive score."""
    from constrain.models.toy import ToyLM

    expert = ToyLM(["a", "b", "c"], lambda context: [0.97, 0.005, 0.02, 0.005])
    amateur = ToyLM(["a", "b", "c"], lambda context: [0.2, 0.5, 0.2, 0.1])
    for processor in (cn.Contrastive(amateur, alpha=0.5), cn.USCD("x", mean_num=1.0)):
        out = cn.generate(expert, "q", regex="[bc]", processors=[processor], greedy=True,
                          sampler=sampler, backtracks=0)  # fmt: skip
        assert out.finish_reason == "stop" and out.text == "c", (processor, out)
