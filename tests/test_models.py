"""Model runtime: streams (KV caches, score, fork, rollback), bundled models and their cache."""

from __future__ import annotations

import pytest
import torch
from tiny import tiny_llama

from constrain.errors import ModelLoadError


def _full_forward(model, tokens):
    with torch.inference_mode():
        logits = model.hf_model(torch.tensor([tokens])).logits[0]
    return torch.log_softmax(logits.float(), dim=-1)


TOKENS = [1, 510, 2020, 33, 17, 905, 28120, 12, 13, 4000, 77]


def test_incremental_logprobs_equal_a_full_forward(tiny_model):
    s = tiny_model.start(TOKENS[:5])
    for t in TOKENS[5:]:
        tiny_model.append(s, t)
        tiny_model.logprobs([s])
    full = _full_forward(tiny_model, TOKENS)
    torch.testing.assert_close(tiny_model.logprobs([s])[0], full[-1], atol=1e-4, rtol=1e-4)


def test_score_rows_equal_token_by_token(tiny_model):
    s = tiny_model.start(TOKENS[:4])
    rows = tiny_model.score(s, TOKENS[4:9])
    assert rows.shape == (6, tiny_model.vocab_size)
    full = _full_forward(tiny_model, TOKENS[:9])
    torch.testing.assert_close(rows, full[3:9], atol=1e-4, rtol=1e-4)
    assert s.tokens == TOKENS[:9]
    # score with pending appended tokens feeds them in the same forward
    tiny_model.append(s, TOKENS[9])
    rows = tiny_model.score(s, [TOKENS[10]])
    torch.testing.assert_close(rows, _full_forward(tiny_model, TOKENS)[9:11], atol=1e-4, rtol=1e-4)


def test_fork_is_independent(tiny_model):
    s = tiny_model.start(TOKENS[:6])
    before = tiny_model.logprobs([s])[0].clone()
    f = tiny_model.fork(s)
    tiny_model.append(f, 999)
    tiny_model.logprobs([f])
    torch.testing.assert_close(tiny_model.logprobs([s])[0], before)
    tiny_model.append(s, 5)
    torch.testing.assert_close(
        tiny_model.logprobs([s])[0],
        _full_forward(tiny_model, TOKENS[:6] + [5])[-1],
        atol=1e-4,
        rtol=1e-4,
    )
    assert f.tokens == TOKENS[:6] + [999]


@pytest.mark.parametrize("n", [1, 3])
def test_rollback_then_reappend_matches_a_fresh_run(tiny_model, n):
    s = tiny_model.start(TOKENS[:3])
    tiny_model.score(s, TOKENS[3:8])
    tiny_model.rollback(s, n)
    assert s.tokens == TOKENS[: 8 - n]
    torch.testing.assert_close(
        tiny_model.logprobs([s])[0],
        _full_forward(tiny_model, TOKENS[: 8 - n])[-1],
        atol=1e-4,
        rtol=1e-4,
    )
    for t in TOKENS[8 - n : 10]:
        tiny_model.append(s, t)
    torch.testing.assert_close(
        tiny_model.logprobs([s])[0],
        _full_forward(tiny_model, TOKENS[:10])[-1],
        atol=1e-4,
        rtol=1e-4,
    )
    # rolling back tokens that were appended but never fed
    tiny_model.append(s, 42)
    tiny_model.rollback(s, 1)
    torch.testing.assert_close(
        tiny_model.logprobs([s])[0],
        _full_forward(tiny_model, TOKENS[:10])[-1],
        atol=1e-4,
        rtol=1e-4,
    )


def test_batch_logprobs_equal_individual_calls(tiny_model):
    a, b = tiny_model.start(TOKENS[:3]), tiny_model.start(TOKENS[2:9])
    batch = tiny_model.logprobs([a, b])
    assert batch.shape == (2, tiny_model.vocab_size)
    torch.testing.assert_close(
        batch[0], _full_forward(tiny_model, TOKENS[:3])[-1], atol=1e-4, rtol=1e-4
    )
    torch.testing.assert_close(
        batch[1], _full_forward(tiny_model, TOKENS[2:9])[-1], atol=1e-4, rtol=1e-4
    )


def test_unpadded_batches_of_forks_equal_individual_runs(tiny_model):
    """Forks of one prompt stepped together (no padding: the fused attention path), with one
    and with several pending tokens each, give each sequence's own log-probabilities."""
    base = tiny_model.start(TOKENS[:5])
    forks = [tiny_model.fork(base) for _ in range(3)]
    steps = [[[20], [21], [22]], [[30, 31], [32, 33], [34, 35]], [[40], [41], [42]]]
    for new in steps:
        for stream, tokens in zip(forks, new):
            for token in tokens:
                tiny_model.append(stream, token)
        batch = tiny_model.logprobs(forks)
        for row, stream in enumerate(forks):
            torch.testing.assert_close(
                batch[row], _full_forward(tiny_model, stream.tokens)[-1], atol=1e-4, rtol=1e-4
            )


def test_pending_tokens_of_several_streams_are_fed_in_one_batched_forward(tiny_model):
    # different cached lengths and different numbers of pending tokens: padding on both sides
    seqs = [TOKENS[:2], TOKENS[1:8], TOKENS[3:6]]
    streams = [tiny_model.start(seq) for seq in seqs]
    extra = [[40, 41, 42], [43], [44, 45]]
    for stream, new in zip(streams, extra):
        for token in new:
            tiny_model.append(stream, token)
    batch = tiny_model.logprobs(streams)
    for row, (seq, new) in enumerate(zip(seqs, extra)):
        torch.testing.assert_close(
            batch[row], _full_forward(tiny_model, seq + new)[-1], atol=1e-4, rtol=1e-4
        )
    # the split caches are exact: each stream continues alone, rolls back, and is batched again
    tiny_model.append(streams[1], 46)
    torch.testing.assert_close(
        tiny_model.logprobs([streams[1]])[0],
        _full_forward(tiny_model, seqs[1] + [43, 46])[-1],
        atol=1e-4,
        rtol=1e-4,
    )
    tiny_model.rollback(streams[0], 2)
    tiny_model.append(streams[2], 47)
    batch = tiny_model.logprobs(streams)
    torch.testing.assert_close(
        batch[0], _full_forward(tiny_model, seqs[0] + [40])[-1], atol=1e-4, rtol=1e-4
    )
    torch.testing.assert_close(
        batch[2], _full_forward(tiny_model, seqs[2] + [44, 45, 47])[-1], atol=1e-4, rtol=1e-4
    )


@pytest.mark.slow  # 40 s: converts the GGUF weights again
def test_cached_model_gives_the_gguf_models_logits(smollm):
    """The converted cache must reproduce the GGUF-loaded model exactly (acceptance check)."""
    from constrain.models import load_gguf_uncached

    direct = load_gguf_uncached("smollm2-135m-instruct", device=smollm.device)
    ids = smollm.encode_prompt("Name three primary colours.")
    with torch.inference_mode():
        a = smollm.hf_model(torch.tensor([ids], device=smollm.device)).logits
        b = direct.hf_model(torch.tensor([ids], device=smollm.device)).logits
    torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_chat_template_and_eos(smollm):
    ids = smollm.encode_prompt("hi")
    text = smollm.tokenizer.decode(ids)
    assert "<|im_start|>user\nhi<|im_end|>" in text
    assert text.endswith("<|im_start|>assistant\n")
    im_end = smollm.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert im_end in smollm.eos_ids and im_end in smollm.vocab.eos_ids
    assert smollm.vocab.size == smollm.vocab_size == 49152
    plain = smollm.encode_prompt("hi", chat=False)
    assert smollm.tokenizer.decode(plain) == "hi"
    with_system = smollm.tokenizer.decode(smollm.encode_prompt("hi", system="Be brief."))
    assert "<|im_start|>system\nBe brief.<|im_end|>" in with_system


def test_gemma_tokenizer_loads(gemma_tokenizer):
    assert len(gemma_tokenizer) >= 262_000
    assert (
        gemma_tokenizer.decode(gemma_tokenizer.encode("héllo 🎉", add_special_tokens=False))
        == "héllo 🎉"
    )


def test_unknown_model_fails_fast_and_clearly():
    from constrain.models import load_model

    with pytest.raises(ModelLoadError, match="no/such-model"):
        load_model("no/such-model")


def test_bundled_models_listing():
    from constrain.models import bundled_models

    names = {m["name"]: m for m in bundled_models()}
    assert names["smollm2-135m-instruct"]["installed"]
    assert set(names) == {"smollm2-135m-instruct", "gemma-3-270m"}


def _assert_next(model, stream, tokens):
    torch.testing.assert_close(
        model.logprobs([stream])[0], _full_forward(model, tokens)[-1], atol=1e-4, rtol=1e-4
    )


def test_batched_steps_reuse_the_stack_and_forks_share_rows(tiny_model):
    """SMC's pattern: steps over the same streams reuse one stacked cache; resampling (forks,
    drops, repeats) regathers rows; a fork taken before a step keeps its own view."""
    m = tiny_model
    seqs = [TOKENS[:4], TOKENS[2:9], TOKENS[5:7]]
    streams = [m.start(seq) for seq in seqs]
    for step in range(3):
        for s, seq in zip(streams, seqs):
            seq.append(100 + step)
            m.append(s, 100 + step)
        rows = m.logprobs(streams)
        for row, seq in zip(rows, seqs):
            torch.testing.assert_close(row, _full_forward(m, seq)[-1], atol=1e-4, rtol=1e-4)
        if step == 0:
            stack = streams[0]._batch
    assert stack is not None and all(s._batch is stack for s in streams)  # no restacking

    early_twin = m.fork(streams[1])  # shares a row of the stack, then the stack grows
    # resample: ancestors (2, 0, 0): drop stream 1, duplicate stream 0
    resampled = [streams[2], streams[0], m.fork(streams[0])]
    expected = [list(seqs[2]), list(seqs[0]), list(seqs[0])]
    for s, seq, t in zip(resampled, expected, (7, 8, 9)):
        m.append(s, t)
        seq.append(t)
    rows = m.logprobs(resampled)
    for row, seq in zip(rows, expected):
        torch.testing.assert_close(row, _full_forward(m, seq)[-1], atol=1e-4, rtol=1e-4)
    # the dropped stream and the early twin still continue correctly on their own
    m.append(early_twin, 11)
    _assert_next(m, early_twin, seqs[1] + [11])
    m.append(streams[1], 12)
    _assert_next(m, streams[1], seqs[1] + [12])


def test_rollback_and_score_on_a_stacked_stream(tiny_model):
    m = tiny_model
    a, b = m.start(TOKENS[:5]), m.start(TOKENS[3:7])
    for t in (20, 21):
        m.append(a, t)
        m.append(b, t)
        m.logprobs([a, b])
    m.rollback(a, 2)
    _assert_next(m, a, TOKENS[:5])
    rows = m.score(b, [30, 31])
    full = _full_forward(m, TOKENS[3:7] + [20, 21, 30, 31])
    torch.testing.assert_close(rows, full[-3:], atol=1e-4, rtol=1e-4)


def test_prompts_sharing_a_prefix_reuse_its_cache(tiny_model):
    m = tiny_model
    shared = list(range(300, 340))
    a = m.start(shared + [5, 6, 7])
    b = m.start(shared + [8, 9])  # reuses the 40 shared tokens
    torch.testing.assert_close(
        m.logprobs([b])[0], _full_forward(m, shared + [8, 9])[-1], atol=1e-4, rtol=1e-4
    )
    again = m.start(shared + [5, 6, 7])  # the same prompt: only its last token is fed again
    torch.testing.assert_close(m.logprobs([again])[0], m.logprobs([a])[0], atol=1e-5, rtol=1e-5)
    m.append(again, 11)
    _assert_next(m, again, shared + [5, 6, 7, 11])
    short = m.start(shared[:10])  # shorter than the minimum shared prefix: a plain prefill
    _assert_next(m, short, shared[:10])


def test_a_prompt_fed_in_chunks_gives_the_same_distribution(tiny_model):
    """A stream started without its prefill and fed in chunks (as a server interleaves a long
    prompt with other requests' steps) reaches the full forward's distribution; a second
    stream of the same prompt takes the first's cache and distribution and feeds nothing; a
    longer prompt feeds only what follows the cached one."""
    m = tiny_model
    prompt = list(range(400, 437))
    s = m.start(prompt, prefill=False)
    assert m.prefill(s, 0) == len(prompt)
    left = [m.prefill(s, 10) for _ in range(4)]
    assert left == [27, 17, 7, 0]
    torch.testing.assert_close(m.logprobs([s])[0], _full_forward(m, prompt)[-1], atol=1e-4,
                               rtol=1e-4)  # fmt: skip
    twin = m.start(prompt, prefill=False)
    assert m.prefill(twin, 0) == 0  # the whole prompt cached, with its distribution
    assert torch.equal(m.logprobs([twin])[0], m.logprobs([s])[0])  # bit for bit: a request
    m.append(twin, 7)  # sent twice (streamed, then not) samples the same text
    _assert_next(m, twin, [*prompt, 7])
    longer = m.start([*prompt, 9, 8], prefill=False)
    assert m.prefill(longer, 0) == 2  # a cached prefix: the rest is fed on
    assert m.prefill(longer, 2) == 0
    _assert_next(m, longer, [*prompt, 9, 8])


def test_a_layer_subset_shares_weights_and_runs(tiny_model):
    """with_layers([0]) is the model without its second block; the original is unchanged."""
    import copy as _copy

    m = tiny_model
    before = m.logprobs([m.start(TOKENS[:5])])[0].clone()
    shallow = m.with_layers([0])
    assert shallow.hf_model.model.layers[0].mlp is m.hf_model.model.layers[0].mlp  # shared
    reference = _copy.deepcopy(m.hf_model)
    del reference.model.layers[1]
    reference.config.num_hidden_layers = 1
    with torch.inference_mode():
        expected = torch.log_softmax(reference(torch.tensor([TOKENS[:5]])).logits[0, -1], -1)
    s = shallow.start(TOKENS[:5])
    torch.testing.assert_close(shallow.logprobs([s])[0], expected, atol=1e-4, rtol=1e-4)
    shallow.append(s, 9)
    assert shallow.logprobs([s]).shape == (1, m.vocab_size)  # its own cache of one layer
    torch.testing.assert_close(m.logprobs([m.start(TOKENS[:5])])[0], before)
    with pytest.raises(ValueError, match="subset"):
        m.with_layers([5])


def test_score_many_batches_several_streams(tiny_model):
    m = tiny_model
    a, b = m.start(TOKENS[:4]), m.start(TOKENS[2:8])
    m.append(b, 50)  # a pending token is fed in the same forward
    rows_a, rows_b = m.score_many([a, b], [[60, 61, 62], [63]])
    torch.testing.assert_close(
        rows_a, _full_forward(m, TOKENS[:4] + [60, 61, 62])[3:], atol=1e-4, rtol=1e-4
    )
    torch.testing.assert_close(
        rows_b, _full_forward(m, TOKENS[2:8] + [50, 63])[6:], atol=1e-4, rtol=1e-4
    )
    m.rollback(a, 2)
    _assert_next(m, a, TOKENS[:4] + [60])


@pytest.mark.parametrize("rows", [1, 2, 7, 64, 65])
@pytest.mark.parametrize("transposed", [False, True])
def test_few_row_linear_equals_nn_linear(rows, transposed):
    """The few-row product computes what `nn.Linear` does, whatever the input's layout (a
    previous layer leaves its output transposed in memory), and so does a `MeasuredLinear`
    whatever its plan says for that row count."""
    from constrain.models.kernels import MAX_ROWS, MeasuredLinear, few_row_linear

    torch.manual_seed(rows)
    plain = torch.nn.Linear(48, 80)
    measured = torch.nn.Linear(48, 80)
    measured.load_state_dict(plain.state_dict())
    measured.__class__ = MeasuredLinear
    measured.few_rows = (True,) * (MAX_ROWS + 1)
    x = torch.randn(48, rows).t() if transposed else torch.randn(rows, 48)
    x = x.reshape(1, rows, 48)
    with torch.inference_mode():
        expected = plain(x)
        out = few_row_linear(x, plain.weight, plain.bias)
        assert out.shape == (1, rows, 80) and out.is_contiguous()
        torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(measured(x), expected, atol=1e-5, rtol=1e-5)


def test_kernels_are_timed_once_per_process_and_keep_the_results(smollm_tokenizer):
    """ "measure" times each weight shape once (a second model with the same shapes recalls
    it), patches only layers whose shape has a faster few-row product, and gives the logits
    of plain layers; "torch" restores plain `nn.Linear`."""
    from constrain.models import TransformersLM
    from constrain.models.kernels import TIMER, KernelKey, MeasuredLinear, use_kernels

    hf_model = tiny_llama(len(smollm_tokenizer))
    plain = TransformersLM(hf_model, smollm_tokenizer, device="cpu", kernels="torch")
    assert not any(isinstance(m, MeasuredLinear) for m in hf_model.modules())
    ids = TOKENS[:6]
    expected = [plain.logprobs([plain.start(ids)])[0]]
    s = plain.start(ids)
    expected.append(plain.score(s, [7, 8, 9]))

    measured = TransformersLM(hf_model, smollm_tokenizer, device="cpu", kernels="measure")
    linears = [m for m in hf_model.modules() if isinstance(m, torch.nn.Linear)]
    keys = {KernelKey.of(m.weight) for m in linears}
    assert keys <= set(TIMER.timings)
    for m in linears:
        plan = [t.few_row for t in TIMER.timings[KernelKey.of(m.weight)]]
        assert isinstance(m, MeasuredLinear) == any(plan)
    assert measured.kernel_layers["patched"] + measured.kernel_layers["plain"] == len(linears)
    torch.testing.assert_close(
        measured.logprobs([measured.start(ids)])[0], expected[0], atol=1e-4, rtol=1e-4
    )
    s = measured.start(ids)
    torch.testing.assert_close(measured.score(s, [7, 8, 9]), expected[1], atol=1e-4, rtol=1e-4)

    assert use_kernels(tiny_llama(len(smollm_tokenizer)), "measure")  # same shapes: recalled
    assert TIMER.last_measure_s == 0.0
    assert measured.with_layers([0]).kernels == "measure" and TIMER.last_measure_s == 0.0
    counts = use_kernels(hf_model, "torch")
    assert counts == {"patched": 0, "plain": len(linears)}
    assert all(type(m) is torch.nn.Linear for m in linears)
    with pytest.raises(ValueError, match="kernels"):
        use_kernels(hf_model, "fast")


def test_kernel_timings_are_bounded():
    from constrain.models.kernels import KernelTimer

    timer = KernelTimer(budget_s=0.05, max_entries=2)
    weights = [torch.randn(8 + i, 16) for i in range(3)]
    plans = timer.few_rows(weights)
    assert len(plans) == 3 and all(len(p) == 65 and not p[0] for p in plans.values())
    assert len(timer.timings) == 2  # the oldest shape was forgotten


def test_models_implement_the_protocols(tiny_model):
    from constrain.models import LanguageModel, Stream
    from constrain.models.toy import ToyLM

    toy = ToyLM(["a", "b"], lambda ctx: [0.5, 0.3, 0.2])
    for model in (tiny_model, toy):
        assert isinstance(model, LanguageModel)
        stream = model.start(model.encode_prompt("x", chat=False))
        assert isinstance(stream, Stream)
        model.append(stream, 0)
        assert stream.generated == [0]
        assert model.logprobs([stream]).shape == (1, model.vocab.size)
        (rows,) = model.score_many([stream], [[1, 0]])
        assert rows.shape == (3, model.vocab.size)
        twin = model.fork(stream)
        model.rollback(stream, 2)
        assert stream.generated == [0] and twin.generated == [0, 1, 0]


def test_from_transformers_keeps_the_model_where_it_is(smollm_tokenizer, monkeypatch):
    import re

    import constrain as cn

    hf_model = tiny_llama(len(smollm_tokenizer), dtype=torch.bfloat16)

    def moved(*args, **kwargs):
        raise AssertionError("from_transformers must not move or convert the model")

    monkeypatch.setattr(hf_model, "to", moved)
    wrapped = cn.from_transformers(hf_model, smollm_tokenizer, name="mine")
    assert wrapped.hf_model is hf_model and wrapped.name == "mine"
    assert wrapped.device == torch.device("cpu")
    assert {p.dtype for p in hf_model.parameters()} == {torch.bfloat16}
    assert not hf_model.training
    out = cn.generate(wrapped, "x", regex=r"[a-z]{3}", chat=False, greedy=True)
    assert re.fullmatch(r"[a-z]{3}", out.text), out.text
    assert {p.dtype for p in hf_model.parameters()} == {torch.bfloat16}
