"""Exactness of the samplers on toy language models, against enumerated distributions.

Every statistical assertion uses a fixed seed and a stated tolerance: z-scores below 4.5 for
means (with the empirical standard error), chi-square statistics below df + 5 sqrt(2 df)
(about five standard deviations of the statistic), and total-variation / KL bounds stated
next to the assertion together with their expected size from sampling noise.
"""

from __future__ import annotations

import itertools
import json
import math
from collections import Counter

import numpy as np
import pytest
import torch

import constrain as cn
from constrain.decoding.smc import resample
from constrain.models.toy import ToyLM
from constrain.samplers import AWRS, LCD
from constrain.samplers import awrs as awrs_module

TOKEN_SAMPLERS = {
    "lcd": LCD,
    "awrs-recursive": lambda: AWRS("recursive"),
    "awrs-two-pass": lambda: AWRS("two-pass"),
}


def _z_ok(samples: np.ndarray, target: float, z: float = 4.5) -> bool:
    """The sample mean is within z standard errors of `target`, up to float rounding (1e-9
    relative) and 1e-12 absolute: a token of probability 1e-15 is never drawn in a few
    thousand samples, so its mean is 0 however exact the sampler."""
    mean, sd = samples.mean(), samples.std(ddof=1)
    return abs(mean - target) <= z * sd / math.sqrt(len(samples)) + 1e-9 * abs(target) + 1e-12


def _chi_square_ok(counts: Counter, probs: dict, n: int) -> tuple[bool, float, int]:
    support = [k for k, p in probs.items() if p > 0]
    assert set(counts) <= set(support), set(counts) - set(support)
    stat = sum((counts.get(k, 0) - n * probs[k]) ** 2 / (n * probs[k]) for k in support)
    df = len(support) - 1
    return stat <= df + 5 * math.sqrt(2 * max(df, 1)), stat, df


# -- token samplers: per-token proper weighting ------------------------------------------------------

TOKENS = ["a", "b", "c", "ab", "ba", "cc"]
# next-token distributions over the 6 tokens and EOS
DISTRIBUTIONS = {
    "spread": [0.05, 0.30, 0.10, 0.25, 0.15, 0.10, 0.05],
    "peaked-on-invalid": [0.02, 0.90, 0.01, 0.03, 0.02, 0.01, 0.01],
    "tiny-valid": [1e-15, 0.5, 0.2, 1e-16, 0.1, 0.2 - 2e-15, 0.0],
    "eos-heavy": [0.1, 0.1, 0.05, 0.05, 0.1, 0.1, 0.5],
}


def _matcher(vocab, pattern: str, prefix: str):
    constraint = cn.Constraint(cn.Grammar.from_regex(pattern), vocab)
    m = constraint.start()
    for ch in prefix:
        m.advance(TOKENS.index(ch))
    return m


@pytest.mark.parametrize("head", [32, 2])
@pytest.mark.parametrize("sampler_name", TOKEN_SAMPLERS)
@pytest.mark.parametrize("dist", DISTRIBUTIONS)
@pytest.mark.parametrize("pattern,prefix", [("a[ac]*b?", ""), ("a[ac]*b?", "a"), ("(ab)*", "")])
def test_token_samplers_are_properly_weighted_per_token(
    sampler_name, dist, pattern, prefix, head, monkeypatch
):
    """E[w 1{y = t}] = p(t) c(t) for every token t (the token-sampler contract). With `head`
    2, AWRS's race holds only the two most likely tokens apart and draws the others from its
    tail block (a real vocabulary's usual case, here on 7 tokens)."""
    if head != 32 and sampler_name == "lcd":
        pytest.skip("LCD has no race")
    monkeypatch.setattr(awrs_module, "_HEAD", head)
    if sampler_name == "awrs-two-pass" and dist == "tiny-valid":
        # unbiased, but the mass that makes it so sits on events of probability ~1e-15:
        # no finite sample can check it (test_two_pass_with_tiny_valid_mass covers the case)
        pytest.skip("two-pass variance is concentrated on events of probability 1e-15")
    lm = ToyLM(TOKENS, lambda ctx: DISTRIBUTIONS[dist])
    matcher = _matcher(lm.vocab, pattern, prefix)
    logprobs = lm.next_logprobs(())
    p = torch.exp(logprobs).numpy()
    allowed = np.array([matcher.check(t) for t in range(lm.vocab.size)])
    target = p * allowed
    sampler = TOKEN_SAMPLERS[sampler_name]()
    gen = torch.Generator().manual_seed(1234)
    n = 6000
    weights = np.zeros((n, lm.vocab.size))
    for i in range(n):
        draw = sampler.sample(logprobs, matcher, gen)
        if draw.log_weight > -math.inf:
            assert allowed[draw.token]
            weights[i, draw.token] = math.exp(draw.log_weight)
    for t in range(lm.vocab.size):
        assert _z_ok(weights[:, t], target[t]), (t, weights[:, t].mean(), target[t])
    assert _z_ok(weights.sum(axis=1), target.sum())


def test_two_pass_with_tiny_valid_mass():
    """Valid tokens of total mass 1.1e-15: the paper's estimator returns Z / (rejections + 1)
    almost surely (its expectation is restored by events of probability ~1e-15), while the
    recursive estimator is exact on this input."""
    lm = ToyLM(TOKENS, lambda ctx: DISTRIBUTIONS["tiny-valid"])
    matcher = _matcher(lm.vocab, "a[ac]*b?", "")
    logprobs = lm.next_logprobs(())
    z = 1e-15 + 1e-16
    gen = torch.Generator().manual_seed(0)
    for _ in range(50):
        two = AWRS("two-pass").sample(logprobs, matcher, gen)
        assert two.token in (0, 3) and math.exp(two.log_weight) == pytest.approx(z / 5)
        rec = AWRS("recursive").sample(logprobs, matcher, gen)
        assert rec.token in (0, 3) and math.exp(rec.log_weight) == pytest.approx(z)


@pytest.mark.parametrize("sampler_name", TOKEN_SAMPLERS)
def test_nothing_acceptable_gives_minus_infinity_with_reason(sampler_name):
    # every token the constraint allows ("c", "cc") has probability 0
    lm = ToyLM(TOKENS, lambda ctx: [0.3, 0.3, 0.0, 0.2, 0.2, 0.0, 0.0])
    matcher = _matcher(lm.vocab, "c+", "")
    draw = TOKEN_SAMPLERS[sampler_name]().sample(lm.next_logprobs(()), matcher)
    assert draw.log_weight == -math.inf and draw.reason


@pytest.mark.parametrize("sampler_name", TOKEN_SAMPLERS)
def test_greedy_takes_the_most_likely_allowed_token(sampler_name):
    lm = ToyLM(TOKENS, lambda ctx: DISTRIBUTIONS["spread"])
    matcher = _matcher(lm.vocab, "a[ac]*b?", "a")  # allowed: a, c, cc, b, EOS
    draw = TOKEN_SAMPLERS[sampler_name]().sample(lm.next_logprobs(()), matcher, greedy=True)
    assert draw.token == TOKENS.index("b")


class _CountingMatcher:
    """Records the order of `check` calls (AWRS must never ask for a mask here)."""

    def __init__(self, matcher):
        self.inner = matcher
        self.calls: list[bool] = []

    def check(self, token):
        ok = self.inner.check(token)
        self.calls.append(ok)
        return ok

    def mask(self):
        raise AssertionError("AWRS computed a mask")

    def bitmask(self):
        raise AssertionError("AWRS computed a mask")


def test_awrs_cost_matches_the_rejection_formula():
    """Checks up to the first acceptance average 1 + sum over rejected r of p_r / (p_r + Z)."""
    rng = np.random.default_rng(0)
    letters = [chr(ord("a") + i) for i in range(20)]
    probs = rng.dirichlet(np.ones(21) * 0.7)
    lm = ToyLM(letters, lambda ctx: probs)
    matcher = cn.Constraint(cn.Grammar.from_regex("[a-f]"), lm.vocab).start()
    valid = np.array([matcher.check(t) for t in range(21)])
    z = probs[valid[:21]].sum()
    expected = 1 + sum(probs[r] / (probs[r] + z) for r in range(21) if not valid[r])
    sampler = AWRS("recursive", mask_after=None)
    gen = torch.Generator().manual_seed(7)
    costs = []
    for _ in range(4000):
        counting = _CountingMatcher(matcher)
        sampler.sample(lm.next_logprobs(()), counting, gen)
        costs.append(counting.calls.index(True) + 1)
    assert _z_ok(np.array(costs, dtype=float), expected), (np.mean(costs), expected)


def test_awrs_falls_back_to_a_mask_and_stays_exact():
    """With mask_after=1, every step after one rejection is an LCD step: still proper."""
    lm = ToyLM(TOKENS, lambda ctx: DISTRIBUTIONS["peaked-on-invalid"])
    matcher = _matcher(lm.vocab, "a[ac]*b?", "")
    logprobs = lm.next_logprobs(())
    target = torch.exp(logprobs).numpy() * [matcher.check(t) for t in range(lm.vocab.size)]
    sampler = AWRS("recursive", mask_after=1)
    gen = torch.Generator().manual_seed(3)
    w = np.zeros((4000, lm.vocab.size))
    masks = 0
    for i in range(len(w)):
        draw = sampler.sample(logprobs, matcher, gen)
        masks += draw.masks
        w[i, draw.token] = math.exp(draw.log_weight)
    assert masks > 0
    assert all(_z_ok(w[:, t], target[t]) for t in range(lm.vocab.size))


# -- sequences: enumeration on a toy LM ---------------------------------------------------------------

SEQ_TOKENS = ["a", "b", "ab"]
SEQ_PATTERN = "(a|bb)(ab)?b?"  # 13 token sequences of 1 to 5 tokens; LCD is 0.29 away in TV


def _seq_probs(ctx):
    """A context-dependent toy LM: EOS grows with length, `b` follows `a`."""
    n = len(ctx)
    eos = [0.05, 0.1, 0.3, 0.5, 0.7, 1.0][min(n, 5)]
    last_a = bool(ctx) and ctx[-1] == 0
    rest = [0.2, 0.6, 0.2] if last_a else [0.5, 0.2, 0.3]
    return [(1 - eos) * r for r in rest] + [eos]


@pytest.fixture(scope="module")
def seq_lm():
    return ToyLM(SEQ_TOKENS, _seq_probs)


@pytest.fixture(scope="module")
def seq_exact(seq_lm):
    """gamma(x) = P(x EOS) 1{x in L} for every token sequence of length <= 5, its normaliser Z,
    and the LCD (locally normalised) distribution q(x)."""
    grammar = cn.Grammar.from_regex(SEQ_PATTERN)
    constraint = cn.Constraint(grammar, seq_lm.vocab)
    gamma, lcd = {}, {}
    for n in range(1, 6):
        for seq in itertools.product(range(3), repeat=n):
            text = "".join(SEQ_TOKENS[t] for t in seq)
            if not grammar.matches(text):
                continue
            gamma[seq] = math.exp(seq_lm.sequence_logprob(seq))
            m, q = constraint.start(), 1.0
            for i, t in enumerate([*seq, seq_lm.eos_id]):
                lp = torch.exp(seq_lm.next_logprobs(seq[:i]))
                z = float(sum(lp[u] for u in range(len(lp)) if m.check(u)))
                q *= float(lp[t]) / z
                m.advance(t)
            lcd[seq] = q
    z = sum(gamma.values())
    return {k: v / z for k, v in gamma.items()}, z, lcd


@pytest.mark.parametrize("sampler", ["lcd", "awrs"])
def test_lcd_is_locally_normalised_and_weights_recover_the_conditional(seq_lm, seq_exact, sampler):
    """Unweighted local sampling follows q(x) = prod of local conditionals (a known bias);
    reweighting each sample by its product of Z_t recovers p(x | x in L)."""
    posterior, _, lcd = seq_exact
    n = 6000
    counts: Counter = Counter()
    weighted: Counter = Counter()
    for seed in range(n):
        out = cn.generate(seq_lm, "", regex=SEQ_PATTERN, sampler=sampler, seed=seed)
        key = tuple(out.tokens)
        counts[key] += 1
        weighted[key] += math.exp(out.log_weight)
    ok, stat, df = _chi_square_ok(counts, lcd, n)
    assert ok, (stat, df)
    total = sum(weighted.values())
    tv_lcd = 0.5 * sum(abs(lcd[k] - posterior[k]) for k in posterior)
    tv = 0.5 * sum(abs(weighted.get(k, 0) / total - posterior[k]) for k in posterior)
    # sampling noise of a self-normalised estimate with 6000 draws is ~0.02 here; the bias that
    # reweighting removes is tv_lcd (0.29)
    assert tv_lcd > 0.25 and tv < 0.05, (tv_lcd, tv)


def test_forced_eos_is_weighted_when_sampling(seq_lm):
    """A sampled generation's weight is the product of the allowed masses Z_t, the EOS the
    grammar forces included (one more forward); greedy decoding has no weight and skips it."""
    sampled = cn.generate(seq_lm, "", regex="bb?", sampler="lcd", seed=0)
    tokens = [*sampled.tokens, seq_lm.eos_id]
    matcher = cn.Constraint(cn.Grammar.from_regex("bb?"), seq_lm.vocab).start()
    expected = 0.0
    for i, t in enumerate(tokens):
        p = torch.exp(seq_lm.next_logprobs(tuple(tokens[:i])))
        expected += math.log(sum(float(p[u]) for u in range(len(p)) if matcher.check(u)))
        matcher.advance(t)
    assert sampled.log_weight == pytest.approx(expected)
    seq_lm.n_forwards = 0
    greedy = cn.generate(seq_lm, "", regex="bb", greedy=True)
    assert greedy.text == "bb" and seq_lm.n_forwards == 2


@pytest.mark.parametrize("token_sampler", ["lcd", "awrs", "awrs-two-pass"])
def test_smc_marginal_likelihood_is_unbiased(seq_lm, seq_exact, token_sampler):
    """mean over runs of exp(log_ml) ~ Z, the probability of the constraint under the LM."""
    _, z, _ = seq_exact
    runs = np.array(
        [
            math.exp(
                cn.smc(
                    seq_lm, "", regex=SEQ_PATTERN, particles=4, token_sampler=token_sampler, seed=s
                ).log_ml
            )
            for s in range(500)
        ]
    )
    assert _z_ok(runs, z), (runs.mean(), z, runs.std() / math.sqrt(len(runs)))


@pytest.mark.parametrize("resampling", ["stratified", "systematic", "multinomial"])
def test_smc_posterior_approaches_the_conditional(seq_lm, seq_exact, resampling):
    posterior, _, lcd = seq_exact
    res = cn.smc(
        seq_lm,
        "",
        regex=SEQ_PATTERN,
        particles=3000,
        resampling=resampling,
        seed=11,
        ess_threshold=0.9,
    )
    assert res.resamples > 0
    mass: Counter = Counter()
    for p in res.particles:
        mass[tuple(p.tokens)] += p.weight
    tv = 0.5 * sum(abs(mass.get(k, 0) - posterior[k]) for k in posterior)
    tv_lcd = 0.5 * sum(abs(lcd[k] - posterior[k]) for k in posterior)
    # 3000 particles over 13 outcomes: TV from noise ~0.02-0.03; plain LCD is 0.29 away
    assert tv < 0.06 and tv_lcd > 0.25, (tv, tv_lcd)
    assert abs(sum(p.weight for p in res.particles) - 1) < 1e-9
    assert res.best is not None and tuple(res.best.tokens) in posterior


def test_smc_at_max_tokens_forces_eos_or_kills(seq_lm):
    res = cn.smc(seq_lm, "", regex="(ab|ba)+", particles=16, max_tokens=2, seed=0)
    for p in res.particles:
        assert p.finish_reason in ("stop", "length")
        if p.finish_reason == "length" and not p.complete:
            assert p.log_weight == -math.inf and p.weight == 0


def test_every_sampler_name_resolves():
    """The names the options accept are the token samplers the loop can build."""
    from constrain.options import TOKEN_SAMPLERS
    from constrain.samplers import token_sampler

    for name in TOKEN_SAMPLERS:
        assert callable(token_sampler(name).sample)
    with pytest.raises(ValueError, match="unknown sampler"):
        token_sampler("beam")


def test_resampling_schemes_are_unbiased():
    """Each scheme's expected offspring count is N * w_i."""
    w = np.array([0.5, 0.3, 0.15, 0.05])
    for method in ("multinomial", "stratified", "systematic"):
        rng = np.random.default_rng(0)
        counts = np.zeros(4)
        reps = 4000
        for _ in range(reps):
            counts += np.bincount(resample(w, method, rng), minlength=4)
        assert np.allclose(counts / reps, 4 * w, atol=0.05), (method, counts / reps)


# -- ASAp -------------------------------------------------------------------------------------------

BINARY = "00000|1[01]{4}"  # the 17-string example of the GAD paper


def _binary_efg(prefix: str, p_eos: float) -> float:
    """Exact expected future grammaticality under the uniform-bit LM, by enumeration."""
    bit = (1 - p_eos) / 2
    strings = ["00000"] + ["1" + "".join(b) for b in itertools.product("01", repeat=4)]
    return sum(bit ** (len(s) - len(prefix)) * p_eos for s in strings if s.startswith(prefix))


def test_asap_converges_on_the_17_string_grammar():
    p_eos = 0.1
    lm = ToyLM.uniform(["0", "1"], p_eos)
    asap = cn.ASAp()
    texts = []
    previous: dict = {}
    for seed in range(1500):
        out = cn.generate(lm, "", regex=BINARY, sampler=asap, seed=seed)
        texts.append(out.text)
        if seed < 150:  # the invariants, at every node after every sample
            for prefix, theta in asap.nodes():
                text = "".join(lm.vocab.decode([t]) for t in prefix if t != lm.eos_id)
                exact = _binary_efg(text, p_eos) if lm.eos_id not in prefix else 1.0
                assert theta >= exact - 1e-12, (text, theta, exact)
                assert theta <= previous.get(prefix, 1.0) + 1e-15
                previous[prefix] = theta
    # the target is uniform over the 17 strings; plain masking gives P(00000) = 1/2, KL 0.754
    window = Counter(texts[-600:])
    kl = sum(c / 600 * math.log((c / 600) * 17) for c in window.values())
    lcd = Counter(cn.generate(lm, "", regex=BINARY, sampler="lcd", seed=s).text for s in range(600))
    kl_lcd = sum(c / 600 * math.log((c / 600) * 17) for c in lcd.values())
    # noise alone gives KL ~ 16 / (2 * 600) = 0.013
    assert kl < 0.05 and kl_lcd > 0.6, (kl, kl_lcd)
    assert abs(asap.theta([]) - _binary_efg("", p_eos)) < 1e-9  # the root is exact by now


def test_asap_save_load_and_signature(tmp_path):
    lm = ToyLM.uniform(["0", "1"], 0.1)
    asap = cn.ASAp()
    for s in range(30):
        cn.generate(lm, "", regex=BINARY, sampler=asap, seed=s)
    path = tmp_path / "trie.json"
    asap.save(path)
    loaded = cn.ASAp.load(path)
    assert loaded.samples == 30 and sorted(loaded.nodes()) == sorted(asap.nodes())
    cn.generate(lm, "", regex=BINARY, sampler=loaded, seed=99)  # continues
    with pytest.raises(cn.ConfigError, match="grammar"):
        cn.generate(lm, "", regex="0+", sampler=loaded)


def _trie_file(tmp_path, nodes, **fields):
    data = {"format": "constrain.asap/1", "signature": None, "samples": 1, "nodes": nodes}
    path = tmp_path / "crafted.json"
    path.write_text(json.dumps({**data, **fields}))
    return path


def test_asap_load_refuses_crafted_files(tmp_path):
    """Whatever a file holds, `load` builds a tree or raises a ConfigError naming the file."""
    leaf = [-0.5, 0.5, []]
    crafted = {
        "a cycle below the root": [
            [0.0, 1.0, []],
            [None, 1.0, [[0, -1.0, 2]]],
            [None, 1.0, [[1, -1.0, 1]]],
        ],
        "a self-loop": [[0.0, 1.0, [[0, -1.0, 1]]], [None, 1.0, [[0, -1.0, 1]]]],
        "the root as a child": [[0.0, 1.0, [[0, -1.0, 0]]]],
        "a shared child": [[0.0, 1.0, [[0, -1.0, 1], [1, -1.0, 1]]], leaf],
        "an index out of range": [[0.0, 1.0, [[0, -1.0, 7]]]],
        "a token twice": [[0.0, 1.0, [[0, -1.0, 1], [0, -1.0, 2]]], leaf, leaf],
        "a negative token": [[0.0, 1.0, [[-3, -1.0, 1]]], leaf],
        "a float token": [[0.0, 1.0, [[0.5, -1.0, 1]]], leaf],
        "theta above 1": [[0.0, 1.5, []]],
        "theta NaN": [[0.0, float("nan"), []]],
        "a positive log-probability": [[0.0, 1.0, [[0, 2.0, 1]]], leaf],
        "a short node": [[0.0, 1.0]],
        "no nodes": [],
    }
    for what, nodes in crafted.items():
        path = _trie_file(tmp_path, nodes)
        with pytest.raises(cn.ConfigError, match="crafted.json"):
            cn.ASAp.load(path)
            pytest.fail(what)
    for fields in ({"format": "other"}, {"samples": -1}, {"signature": [1]}, {"nodes": {}}):
        with pytest.raises(cn.ConfigError, match="crafted.json"):
            cn.ASAp.load(_trie_file(tmp_path, **{"nodes": [leaf], **fields}))
    token_past_vocab = _trie_file(
        tmp_path, [[0.0, 1.0, [[5, -1.0, 1]]], leaf], signature={"vocab_size": 4}
    )
    with pytest.raises(cn.ConfigError, match="token 5"):
        cn.ASAp.load(token_past_vocab)
    (tmp_path / "text.json").write_text("not json")
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe")
    for name in ("text.json", "binary.json", "missing.json"):
        with pytest.raises(cn.ConfigError, match=name):
            cn.ASAp.load(tmp_path / name)
    # a well-formed file loads: a root with one child, values kept
    fine = cn.ASAp.load(_trie_file(tmp_path, [[0.0, 1.0, [[3, -0.25, 1]]], leaf]))
    assert sorted(fine.nodes()) == [((), 1.0), ((3,), 0.5)]


def test_asap_save_is_atomic(tmp_path, monkeypatch):
    """A save that fails midway leaves the previous file whole."""
    lm = ToyLM.uniform(["0", "1"], 0.1)
    asap = cn.ASAp()
    cn.generate(lm, "", regex=BINARY, sampler=asap, seed=0)
    path = tmp_path / "trie.json"
    asap.save(path)
    before = json.loads(path.read_text())
    asap.signature = {**asap.signature, "unsavable": object()}
    with pytest.raises(TypeError):
        asap.save(path)
    assert json.loads(path.read_text()) == before
    assert [p.name for p in tmp_path.iterdir()] == ["trie.json"]


# -- with a real tokenizer ---------------------------------------------------------------------------


def test_smc_and_awrs_on_a_real_tokenizer(tiny_model):
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
        "required": ["n"],
        "additionalProperties": False,
    }
    res = cn.smc(tiny_model, "x", schema=schema, particles=4, max_tokens=12, seed=0, chat=False)
    assert len(res.particles) == 4 and res.stats.forwards <= 13
    for p in res.particles:
        if p.complete:
            assert p.text.startswith('{"n":') and p.text.endswith("}")
    out = cn.generate(tiny_model, "x", schema=schema, sampler="awrs", max_tokens=12, seed=1)
    assert out.stats.masks <= len(out.tokens) and out.stats.checks >= len(out.tokens)
    smc_out = cn.generate(tiny_model, "x", schema=schema, sampler=cn.SMC(particles=3), seed=2)
    assert smc_out.particles is not None and len(smc_out.particles) == 3
