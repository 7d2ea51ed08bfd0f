"""Batches across prompts decode as single prompts do, for every strategy of the loop.

Greedy: the same tokens, batched or not, speculative or not, with or without CFG's auxiliary
prompts. Sampled, on a toy model whose next-token distribution depends on the prompt (so a
batch that mixed up its prompts would be caught): batched speculative decoding draws each
prompt's exact constrained distribution (enumerated), and batched SMC weighs each prompt's
particles by that prompt's model (an unbiased marginal likelihood and a posterior that
approaches the exact one).

Tolerance: a chi-square statistic below df + 5 sqrt(2 df) for distributions; a mean within
4.5 standard errors for the marginal likelihood (fixed seeds).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np
import pytest

import constrain as cn
from constrain.models.toy import ToyLM

TOKENS = ["a", "b", "ab"]
PATTERN = "(a|bb)(ab)?b?(a|b)?"
PROMPTS = ["x", "a longer prompt"]  # one BOS per character, plus one: different models


def _probs(ctx, prompt=()):
    """EOS grows with length; after `a`, `b` is likely; a longer prompt favours `ab`."""
    eos = [0.05, 0.15, 0.3, 0.5, 0.7, 1.0][min(len(ctx), 5)]
    rest = [0.2, 0.6, 0.2] if ctx and ctx[-1] == 0 else [0.5, 0.2, 0.3]
    if len(prompt) > 2:
        rest = [rest[0] * 0.5, rest[1], rest[2] * 2]
        rest = [r / sum(rest) for r in rest]
    return [(1 - eos) * r for r in rest] + [eos]


@pytest.fixture(scope="module")
def lm():
    return ToyLM(TOKENS, _probs, conditional=True, name="conditional")


def _enumerate(lm: ToyLM, prompt: str) -> tuple[dict, dict, float]:
    """For `prompt`: the locally constrained distribution q(x) (what plain and speculative
    sampling draw), the posterior p(x | x in L), and Z = P(L)."""
    prompt_ids = lm.encode_prompt(prompt)
    constraint = cn.Constraint(cn.Grammar.from_regex(PATTERN), lm.vocab)
    local, gamma = {}, {}
    for n in range(0, 7):
        for seq in itertools.product(range(3), repeat=n):
            m, q, p = constraint.start(), 1.0, 1.0
            for i, t in enumerate([*seq, lm.eos_id]):
                if not m.check(t):
                    break
                row = np.exp(lm.next_logprobs(seq[:i], prompt_ids).numpy())
                q *= row[t] / sum(row[u] for u in range(len(row)) if m.check(u))
                p *= row[t]
                m.advance(t)
            else:
                local[seq], gamma[seq] = q, p
    z = sum(gamma.values())
    return local, {k: v / z for k, v in gamma.items()}, z


def _chi_square_ok(counts: Counter, probs: dict, n: int) -> bool:
    support = [k for k, p in probs.items() if p > 0]
    assert set(counts) <= set(support)
    stat = sum((counts.get(k, 0) - n * probs[k]) ** 2 / (n * probs[k]) for k in support)
    df = len(support) - 1
    return stat <= df + 5 * math.sqrt(2 * df)


GREEDY_CASES = {
    "regex": dict(regex=r"[a-z]{2,6}( [a-z]{2,6}){0,2}"),
    "schema": dict(
        schema={
            "type": "object",
            "properties": {"n": {"type": "integer", "maximum": 99}, "ok": {"type": "boolean"}},
            "required": ["n", "ok"],
        },
        max_tokens=24,
    ),
    "CFG": dict(regex=r"[a-z ]{3,12}", processors=[cn.CFG(1.5, negative_prompt="no")]),
}


@pytest.mark.parametrize("case", GREEDY_CASES)
def test_batched_greedy_equals_single_prompts(tiny_model, case):
    """Each prompt of a batch gets the tokens it gets alone, with and without speculation."""
    prompts = ["first", "a second, longer prompt", "3"]
    options = dict(GREEDY_CASES[case], greedy=True, chat=False)
    single = [cn.generate(tiny_model, p, **options).tokens for p in prompts]
    for speculative in (None, cn.Speculative(), cn.Speculative(branches=2)):
        batch = cn.generate(tiny_model, prompts=prompts, speculative=speculative, **options)
        assert [out.tokens for out in batch] == single, (case, speculative)


def test_batched_stream_with_speculation(tiny_model):
    """A stream with speculation yields the text of the non-speculative generation."""
    options = dict(regex=r"[a-z]{2,6}( [a-z]{2,6}){0,3}", greedy=True, chat=False)
    stream = cn.stream(tiny_model, "x", speculative=cn.Speculative(), **options)
    text = "".join(stream)
    assert text == stream.result.text == cn.generate(tiny_model, "x", **options).text


@pytest.mark.parametrize("speculative", [False, True])
def test_batched_sampling_draws_each_prompts_distribution(lm, speculative):
    """Batches of two prompts: each prompt's outputs follow its own exact constrained
    distribution (speculative: a draft model's, lookup and forced drafts, verified in one
    forward for both)."""
    exact = {p: _enumerate(lm, p)[0] for p in PROMPTS}
    assert sum(abs(exact[PROMPTS[0]][k] - exact[PROMPTS[1]][k]) for k in exact[PROMPTS[0]]) > 0.2
    draft = ToyLM(TOKENS, lambda ctx, prompt: [0.3, 0.3, 0.3, 0.1], conditional=True)
    spec = cn.Speculative(draft=draft, k=4, lookup=2, branches=2) if speculative else None
    generator = cn.Generator(lm, regex=PATTERN, speculative=spec)
    n = 2000
    counts = {p: Counter() for p in PROMPTS}
    for seed in range(n):
        for prompt, out in zip(PROMPTS, generator.batch(PROMPTS, seed=seed)):
            counts[prompt][tuple(out.tokens)] += 1
    for prompt in PROMPTS:
        assert _chi_square_ok(counts[prompt], exact[prompt], n), prompt


def test_batched_smc_weighs_each_prompt(lm):
    """SMC over a batch: each prompt's log marginal likelihood is unbiased for its own Z, and
    with many particles its weighted particles approach its own posterior."""
    exact = {p: _enumerate(lm, p) for p in PROMPTS}
    generator = cn.Generator(lm, regex=PATTERN, sampler=cn.SMC(particles=4))
    runs = np.array(
        [[math.exp(out.log_weight) for out in generator.batch(PROMPTS, seed=s)] for s in range(400)]
    )
    for column, prompt in enumerate(PROMPTS):
        samples, z = runs[:, column], exact[prompt][2]
        assert abs(samples.mean() - z) <= 4.5 * samples.std(ddof=1) / math.sqrt(len(samples))
    many = cn.Generator(lm, regex=PATTERN, sampler=cn.SMC(particles=1500, ess_threshold=0.9))
    for prompt, out in zip(PROMPTS, many.batch(PROMPTS, seed=3)):
        mass: Counter = Counter()
        for particle in out.particles:
            mass[tuple(particle.tokens)] += particle.weight
        posterior = exact[prompt][1]
        tv = 0.5 * sum(abs(mass.get(k, 0) - posterior[k]) for k in posterior)
        assert tv < 0.07, (prompt, tv)


def test_jobs_joining_a_running_batch_decode_as_alone(lm):
    """Jobs of different constraints and seeds, joining a `Batch` at different steps, draw
    exactly the tokens each draws alone, and the batch makes one forward per step for all
    the `Sampling` jobs in it."""
    from constrain.decoding import Batch

    settings = [dict(regex=PATTERN, seed=1), dict(regex="(ab|b)+a?", seed=2),
                dict(choices=["ab", "bab", "a"], seed=3)]  # fmt: skip

    def start(i: int):
        options = dict(settings[i])
        seed = options.pop("seed")
        return cn.Generator(lm, max_tokens=6, **options).start([PROMPTS[i % 2]], seed)

    alone = []
    for i in range(len(settings)):
        run = start(i)
        for _ in run.steps():
            pass
        alone.append(run.sequences[0].tokens)

    runs = [start(i) for i in range(len(settings))]
    jobs = [run.job() for run in runs]
    batch = Batch([jobs[0]])
    before = lm.n_forwards
    steps = 0
    while batch.jobs or steps < 2:
        if steps == 1:
            batch.add(jobs[1])
        if steps == 2:
            batch.add(jobs[2])
        batch.step()
        steps += 1
    assert all(job.ended for job in jobs)
    assert [job.sequences[0].tokens for job in jobs] == alone
    assert lm.n_forwards - before <= steps  # one forward per step, whoever is in the batch


def test_a_failing_job_fails_alone_and_the_batch_goes_on(lm):
    """A job whose step raises (a broken constraint, a bug) ends with the error kept in
    `Job.error`, its sequences finished "error"; the batch's other job decodes exactly as it
    does alone. Run alone (`Job.steps`), the job raises what its work raised."""
    from constrain.decoding import Batch

    class Broken(RuntimeError):
        pass

    def start(seed: int):
        return cn.Generator(lm, max_tokens=6, regex=PATTERN).start([PROMPTS[0]], seed)

    alone = start(1)
    for _ in alone.steps():
        pass
    healthy, failing = start(1).job(), start(2).job()
    calls = []

    def advance(sequences, scored):  # the shared forward's draws of the failing job
        calls.append(len(sequences))
        if len(calls) == 2:
            raise Broken("the second step of this job breaks")
        return type(failing.strategy).advance(failing.strategy, sequences, scored)

    failing.strategy.advance = advance
    batch = Batch([healthy, failing])
    while batch.jobs:
        batch.step()
    assert isinstance(failing.error, Broken) and failing.ended
    assert [s.finish_reason for s in failing.sequences] == ["error"]
    assert healthy.error is None and healthy.sequences[0].tokens == alone.sequences[0].tokens
    broken = start(2).job()
    broken.strategy.step = lambda sequences: (_ for _ in ()).throw(Broken("alone"))
    with pytest.raises(Broken, match="alone"):
        list(broken.steps())


def test_a_run_prefilled_in_chunks_decodes_as_one_prefilled_at_once(tiny_model):
    """`Generator.start(prefill=False)` then `Run.prefill` in chunks (what a server does with a
    long prompt) gives the tokens of a run prefilled at once, SMC's particles included."""
    for i, options in enumerate((dict(greedy=True), dict(sampler=cn.SMC(particles=3)))):
        prompt = f"Write two short words ({i}), and then " * 6  # not in the prompt cache yet
        generator = cn.Generator(tiny_model, max_tokens=8, regex=r"[a-z]{2,5} [a-z]{2,5}",
                                 **options)  # fmt: skip
        chunked = generator.start([prompt, prompt], seed=5, prefill=False)
        left = [chunked.prefill(16) for _ in range(40)]
        assert left[0] > 16 and left[-1] == 0 and sorted(left, reverse=True) == left
        for _ in chunked.steps():
            pass
        whole = generator.start([prompt, prompt], seed=5)
        for _ in whole.steps():
            pass
        assert [s.tokens for s in chunked.sequences] == [s.tokens for s in whole.sequences]
