"""`generate()` end to end: outputs always satisfy the constraint, finish reasons, stats."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Literal

import jsonschema
import pytest

import constrain as cn

# bounded regexes, so a random model always reaches an accepting state within max_tokens
GENERATION_REGEXES = [
    r"\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])",
    r"(yes|no|maybe)",
    r"[a-z]{1,8}@[a-z]{1,6}\.(com|org)",
    r'\{"id": [1-9]\d{0,3}, "ok": (true|false)\}',
    r"(café|naïve|日本|🎉){1,3}",
    r"[A-Z][a-z]{0,6}( [A-Z][a-z]{0,6}){0,2}",
    r"-?(0|[1-9]\d{0,5})(\.\d{1,3})?",
    r"\(\d{3}\) \d{3}-\d{4}",
]


@pytest.mark.slow  # 90 s; the shorter sampling tests cover the same path
def test_thousand_sampled_generations_all_match(tiny_model):
    """1,000 generations with a random-weight model across regexes all fully match (AWRS and
    LCD alternating: a random model is AWRS's worst case, nearly every step falls back to a
    mask)."""
    n_per_regex = 125
    for pattern in GENERATION_REGEXES:
        for seed in range(n_per_regex):
            out = cn.generate(
                tiny_model,
                "x",
                regex=pattern,
                max_tokens=64,
                seed=seed,
                chat=False,
                sampler=("awrs", "lcd")[seed % 2],
            )
            assert out.finish_reason == "stop" and out.complete, (pattern, out.text)
            assert re.fullmatch(pattern, out.text), (pattern, out.text)
            assert tiny_model.vocab.decode_bytes(out.tokens) == out.text.encode()


def test_choices_and_greedy_determinism(tiny_model):
    choices = ["red", "green", "blue", "light blue"]
    outs = [
        cn.generate(tiny_model, "Color?", choices=choices, greedy=True, chat=False)
        for _ in range(2)
    ]
    assert outs[0].text in choices and outs[0].text == outs[1].text
    sampled = {
        cn.generate(tiny_model, "Color?", choices=choices, seed=s, chat=False).text
        for s in range(30)
    }
    assert sampled <= set(choices) and len(sampled) >= 2


def test_same_seed_same_output(tiny_model):
    a = cn.generate(tiny_model, "x", regex=r"[a-z ]{5,20}\.", seed=7, chat=False)
    b = cn.generate(tiny_model, "x", regex=r"[a-z ]{5,20}\.", seed=7, chat=False)
    assert a.tokens == b.tokens


def test_length_cut_is_marked_incomplete(tiny_model):
    """A budget no text fits is announced up front, and the cut text is a valid prefix."""
    with pytest.warns(UserWarning, match=r"shortest text .* is \d+ tokens, more than max_tokens=3"):
        out = cn.generate(tiny_model, "x", regex=r"[a-z]{50}", max_tokens=3, seed=0, chat=False)
    assert out.finish_reason == "length" and not out.complete
    assert len(out.tokens) == 3
    assert re.fullmatch(r"[a-z]{1,50}", out.text)  # a valid prefix, never invalid text


def test_stats_and_weight(tiny_model):
    out = cn.generate(tiny_model, "x", regex=r"(ab|cd){2}", seed=0, chat=False)
    s = out.stats
    assert s.prefill_s > 0 and s.total_s >= s.prefill_s
    assert len(s.token_s) >= 1 and s.constraint_s > 0
    assert out.log_weight <= 0.0  # each step keeps a probability mass Z <= 1


def test_bad_arguments(tiny_model):
    with pytest.raises(ValueError, match="at most one"):
        cn.generate(tiny_model, "x", regex="a", choices=["a"])
    with pytest.raises(cn.RegexError):
        cn.generate(tiny_model, "x", regex=r"(?<=a)a")
    with pytest.raises(ValueError, match="temperature"):
        cn.generate(tiny_model, "x", regex="a", temperature=0)


@dataclass
class Vote:
    choice: Literal["yes", "no"]
    weight: int


def test_schema_and_type_generations_validate(tiny_model):
    """With a random-weight model, every output under `schema=` or `type=` is complete and
    valid: the token budget (`fit_max_tokens`, on by default) closes the JSON in time, so a
    cut output is a failure here, not an excuse."""
    schema = {
        "type": "object",
        "properties": {
            "id": {"type": "integer", "minimum": 1, "maximum": 99},
            "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3},
            "ok": {"type": "boolean"},
        },
        "required": ["id", "ok"],
        "additionalProperties": False,
    }
    # the shortest text, {"id":1,"ok":true}, is 9 tokens; a random model left alone often
    # writes more (tags, a long number), so the budget has to close the text in time
    max_tokens = 16
    texts = set()
    for seed in range(20):
        out = cn.generate(
            tiny_model, "x", schema=schema, max_tokens=max_tokens, seed=seed, chat=False
        )
        assert out.complete and out.finish_reason == "stop", (seed, out.finish_reason, out.text)
        assert len(out.tokens) <= max_tokens, (seed, out.text)
        jsonschema.validate(json.loads(out.text), schema)
        assert out.value == json.loads(out.text), (seed, out.text)
        texts.add(out.text)
    assert len(texts) >= 10  # sampled, not one output repeated

    out = cn.generate(tiny_model, "x", type=Vote, max_tokens=16, seed=0, chat=False)
    assert out.complete and out.finish_reason == "stop", out.text
    assert isinstance(out.value, Vote), out.value
    assert out.value == Vote(**json.loads(out.text)), out.text
    assert out.value.choice in ("yes", "no") and isinstance(out.value.weight, int)
    out = cn.generate(
        tiny_model, "x", schema={"enum": [1, 2]}, schema_options={"whitespace": "default"}
    )
    assert out.complete and out.value in (1, 2) and out.value == json.loads(out.text)


def test_generator_batch_stream_and_stats(tiny_model):
    """A Generator compiles once; batch results equal single calls with their seeds' draws;
    streaming yields the same text piece by piece; stats add up."""
    gen = cn.Generator(tiny_model, regex=r"[a-z]{2,6}( [a-z]{2,6}){0,3}", max_tokens=24, chat=False)
    again = cn.Generator(tiny_model, regex=r"[a-z]{2,6}( [a-z]{2,6}){0,3}", chat=False)
    assert again.constraint is gen.constraint  # cached by specification
    outs = gen.batch(["a", "b", "c"], seed=5)
    assert len(outs) == 3 and all(
        re.fullmatch(r"[a-z]{2,6}( [a-z]{2,6}){0,3}", o.text) for o in outs
    )
    greedy = cn.Generator(tiny_model, regex=r"[a-z]{2,6}", greedy=True, chat=False)
    batch = greedy.batch(["first", "second prompt"])
    single = [greedy("first"), greedy("second prompt")]
    assert [o.tokens for o in batch] == [o.tokens for o in single]  # batching changes nothing

    stream = gen.stream("a", seed=3)
    pieces = list(stream)
    assert "".join(pieces) == stream.result.text and stream.result.complete
    assert stream.result.tokens == gen("a", seed=3).tokens

    s = outs[0].stats
    assert s.ttft_s >= s.prefill_s > 0 and s.total_s >= s.ttft_s
    assert len(s.token_s) >= len(outs[0].tokens) and s.tpot_s > 0
    assert s.checks >= len(outs[0].tokens) and s.constraint_s > 0


def test_forced_tokens_are_counted(tiny_model):
    out = cn.generate(tiny_model, "x", regex=r'\{"id": [0-9]\}', greedy=True, chat=False)
    assert out.complete and out.stats.forced >= 3  # '{"id": ' is forced; the digit is not


def test_generate_argument_errors(tiny_model):
    with pytest.raises(ValueError, match="either prompt or prompts"):
        cn.generate(tiny_model, "x", prompts=["y"], regex="a")
    with pytest.raises(ValueError, match="greedy"):
        cn.generate(tiny_model, "x", regex="a", sampler=cn.SMC(), greedy=True)
    with pytest.raises(ValueError, match="streaming"):
        cn.stream(tiny_model, "x", regex="a", sampler=cn.SMC())
    with pytest.raises(ValueError, match="unknown sampler"):
        cn.generate(tiny_model, "x", regex="a", sampler="beam")


def test_timeout_stops_generation(tiny_model):
    out = cn.generate(tiny_model, "x", regex=r"[a-z]{400}", timeout=0.0, chat=False, seed=0)
    assert out.finish_reason == "timeout" and not out.complete and len(out.tokens) == 1


def test_budget_closes_json_that_plain_cutting_leaves_open(tiny_model):
    """A random-weight model rambles in open strings and arrays: cut by max_tokens, its JSON is
    incomplete; with `fit_max_tokens` (the default) every output closes in time and validates."""
    schema = {
        "type": "object",
        "properties": {"notes": {"type": "array", "items": {"type": "string"}}},
        "required": ["notes"],
    }
    cut, fitted = 0, 0
    for seed in range(8):
        options = dict(schema=schema, max_tokens=24, seed=seed, chat=False)
        plain = cn.generate(tiny_model, "x", fit_max_tokens=False, **options)
        cut += not plain.complete
        out = cn.generate(tiny_model, "x", **options)
        assert out.complete and len(out.tokens) <= 24, out.text
        jsonschema.validate(out.value, schema)
        fitted += out.finish_reason == "stop"
    assert cut >= 4  # the budget matters here: without it most texts are cut open
    assert fitted >= 4


def test_deadline_sets_the_budget():
    """The time left becomes a token budget at the recent step time (a step emits at least one
    token, speculative or not), with a margin and a reserve for one slow step, capped by
    max_tokens; it follows the step time both ways (a slow start does not fix it)."""
    from constrain.decoding import Deadline

    s = _toy_sequence("[ab]+", backtracks=0, max_tokens=1000)
    s.stats.step_s = [0.1] * 8
    deadline = Deadline(60.0, fit_budget=True)
    deadline.plan(s, elapsed=57.0)
    assert s.budget.limit == 15  # (0.85 * 3 s - 1 s reserve) / 0.1 s
    s.stats.step_s += [0.01] * 8
    deadline.plan(s, elapsed=57.0)
    assert s.budget.limit == 154  # 1.55 s at 0.01 s, rounded down
    deadline.plan(s, elapsed=59.5)
    assert s.budget.limit == 0  # inside the reserve: close as fast as possible
    deadline.plan(s, elapsed=30.0)
    assert s.budget.limit == 1000


def test_dead_end_backtracks_to_another_item():
    """uniqueItems over integers is checked on the text: after `[{"a":1},{"a":1` the model
    gives digits probability 0 and every way to close the item repeats the first one, a dead
    end. The generation undoes the last token, forbids it there, and ends valid; with
    `backtracks=0` the dead end ends the text incomplete, finish reason "length", saying where
    and why. Speculative decoding takes the same way."""
    from constrain.models.toy import ToyLM

    schema = {
        "type": "array",
        "uniqueItems": True,
        "items": {
            "type": "object",
            "properties": {"a": {"type": "integer"}},
            "required": ["a"],
            "additionalProperties": False,
        },
    }
    tokens = ['[{"a":', "1", "2", '},{"a":', "}]"]
    table = {
        (): [1, 0, 0, 0, 0, 0],
        (0,): [0, 1, 0, 0, 0, 0],
        (0, 1): [0, 0, 0, 1, 0, 0],
        (0, 1, 3): [0, 0.6, 0.4, 0, 0, 0],
        (0, 1, 3, 1): [0, 0, 0, 0, 1, 0],
        (0, 1, 3, 2): [0, 0, 0, 0, 1, 0],
    }
    model = ToyLM(tokens, table, default=[0, 0, 0, 0, 0, 1])
    options = dict(schema=schema, schema_options={"whitespace": "compact"}, greedy=True)
    for extra in ({}, {"sampler": "lcd"}, {"speculative": cn.Speculative(k=3)}):
        out = cn.generate(model, "x", **options, **extra)
        assert out.text == '[{"a":1},{"a":2}]' and out.finish_reason == "stop", extra
        assert out.value == [{"a": 1}, {"a": 2}]
    # the reason says where the text stopped and that no backtrack was left
    stuck = r"cannot continue after 4 tokens \(text ends '\[\{\"a\":1\},\{\"a\":1', 0 of 0"
    out = cn.generate(model, "x", backtracks=0, **options)
    assert out.finish_reason == "length" and not out.complete and out.value is None
    assert re.search(stuck, out.reason), out.reason
    # the model prefers `,` to `]`: `[true,false,` has no third boolean, the comma goes
    row = [0.1, 0.3, 0.2, 0.25, 0.05, 0.1]
    booleans = ToyLM(["[", "true", "false", ",", "]"], lambda context: row)
    schema = {"type": "array", "items": {"type": "boolean"}, "uniqueItems": True}
    out = cn.generate(
        booleans, "x", schema=schema, greedy=True, schema_options=options["schema_options"]
    )
    assert out.text == "[true,false]", out.text


def _toy_sequence(pattern: str, backtracks: int, max_tokens: int | None = None):
    """A sequence of a two-token toy model under `pattern`, able to undo `backtracks` times."""
    from constrain.decoding import Sequence
    from constrain.models.toy import ToyLM
    from constrain.processors.bound import BoundStack

    lm = ToyLM(["a", "b"], lambda context: [0.5, 0.5, 0.0])
    constraint = cn.Constraint(cn.Grammar.from_regex(pattern), lm.vocab)
    stack = BoundStack.plain(lm, [lm.bos_id])
    return Sequence(lm, stack, constraint.start(max_tokens), constraint, backtracks=backtracks)


def test_recurring_dead_ends_jump_back_further():
    """A dead end that recurs near the last one doubles how far the next backtrack undoes
    (the way into it may have many spellings); each backtrack forbids the first undone token
    at its position."""
    s = _toy_sequence("[ab]{0,20}", backtracks=10)
    s.emit([0] * 10)
    undone = []
    for _ in range(4):  # the same dead end, reached again each time
        before = len(s.tokens)
        assert s.backtracker.recover(s)
        undone.append(before - len(s.tokens))
        assert s.backtracker.banned[len(s.tokens)] == {0}
        s.emit([0] * (before - len(s.tokens)))
    assert undone == [1, 2, 4, 8]
    s.emit([0] * 5)  # far past it: a new dead end undoes one token again
    assert s.backtracker.recover(s) and len(s.tokens) == 14


def test_budget_gives_way_only_up_to_max_tokens():
    """At a dead end where the budget alone blocks, the budget grows (a floor the deadline
    plan keeps) but never past the hard max_tokens; there the dead end undoes a token."""
    from constrain.decoding import Deadline

    s = _toy_sequence("a{0,10}b", backtracks=5, max_tokens=4)
    s.budget.set_limit(3)
    s.emit([0, 0])
    assert s.backtracker.recover(s)  # grows by at most 8 tokens, here up to the limit
    assert len(s.tokens) == 2 and s.budget.limit == 4
    s.stats.step_s = [0.1] * 8
    Deadline(60.0, fit_budget=True).plan(s, elapsed=59.9)  # no time left: the floor holds
    assert s.budget.limit == 4
    s.emit([0])
    assert s.backtracker.recover(s)  # at the limit: undo instead
    assert len(s.tokens) == 2 and s.backtracker.banned[2] == {0}
    assert s.budget.limit == 4
