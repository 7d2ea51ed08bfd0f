"""The work budget (`constrain.fuel`) through the compile stages: bounded, deterministic,
abandonable, and never leaving a partial result in a cache."""

from __future__ import annotations

import re
import threading
import time

import pytest

import constrain as cn
from constrain.engine.grammar.lark_frontend import LARK_MAX_CALLS, LARK_UNITS_PER_CALL
from constrain.engine.regex import compile_regex
from constrain.errors import Abandoned, GrammarError, WorkLimitError
from constrain.fuel import Fuel

BIG = 10**12


def doubling_terminals(levels: int) -> str:
    """``T0: "ab"``, ``T1: T0 T0``, ...: lark's loading doubles with each level."""
    lines = ['T0: "ab"'] + [f"T{i}: T{i - 1} T{i - 1}" for i in range(1, levels + 1)]
    return "\n".join(lines) + f"\nstart: T{levels}\n"


def used(build, *args, **kwargs) -> int:
    """The units `build(*args, **kwargs)` burns under a fresh big fuel."""
    fuel = Fuel(BIG)
    with fuel.active():
        build(*args, **kwargs)
    return fuel.used


def fresh_regex(pattern: str):
    compile_regex.cache_clear()
    return compile_regex(pattern)


def fresh_schema(schema: dict):
    compile_regex.cache_clear()
    return cn.Grammar.from_json_schema(schema)


SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "integer", "minimum": 0},
        "name": {"type": "string", "pattern": "^[A-Z][a-z]{1,20}$"},
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3},
    },
    "required": ["id", "name"],
}
LARK = """
start: pair ("," pair)*
pair: NAME "=" value
?value: NUMBER | NAME | "[" value ("," value)* "]"
NAME: /[a-z_][a-z0-9_]*/
%import common.NUMBER
%import common.WS
%ignore WS
"""


# -- (a) lark's loading is bounded ---------------------------------------------------------------


def test_doubling_terminals_refused_without_fuel():
    start = time.monotonic()
    with pytest.raises(GrammarError, match="LARK_MAX_CALLS"):
        cn.Grammar.from_lark(doubling_terminals(20))
    # about 6 s on an idle machine (LARK_MAX_CALLS metered calls); 280 s and 6 GB unmetered
    assert time.monotonic() - start < 40


def test_doubling_terminals_stop_at_the_active_fuel():
    fuel = Fuel(500_000, limit="max_work")
    start = time.monotonic()
    with fuel.active(), pytest.raises(WorkLimitError) as info:
        cn.Grammar.from_lark(doubling_terminals(20))
    assert time.monotonic() - start < 20
    assert info.value.limit == "max_work" and "Lark" in info.value.stage


def test_doubling_terminals_stop_at_the_call_cap_under_a_large_fuel():
    """A request's fuel never lets lark run past `LARK_MAX_CALLS` (seconds, not minutes)."""
    start = time.monotonic()
    with Fuel(10**12).active(), pytest.raises(GrammarError, match="LARK_MAX_CALLS"):
        cn.Grammar.from_lark(doubling_terminals(20))
    assert time.monotonic() - start < 40


def test_real_grammars_load_well_within_the_call_cap():
    import lark

    from constrain.engine.grammar.lark_frontend import ImportResolver, _load

    path = lark.__file__.rsplit("/", 1)[0] + "/grammars/python.lark"
    with open(path, encoding="utf-8") as f:
        text = f.read()
    calls = used(_load, text, "<python.lark>", ImportResolver(), "file_input")
    assert calls // LARK_UNITS_PER_CALL * 5 < LARK_MAX_CALLS


def test_metered_calls_exclude_finalizers_run_by_the_collector():
    """A collection inside a metered block runs other objects' finalizers (a Python
    `EarleyParser.__del__` left by earlier work): their calls are not the block's."""
    import gc

    def helper() -> None:
        pass

    class Cycle:
        def __init__(self):
            self.me = self

        def __del__(self):
            helper()
            helper()

    def work() -> None:
        for _ in range(10):
            helper()
        gc.collect()

    gc.collect()
    alone = Fuel(BIG)
    with alone.metering_calls():
        work()
    Cycle()  # garbage in a cycle: only a collection frees it
    beside = Fuel(BIG)
    with beside.metering_calls():
        work()
    assert beside.used == alone.used > 0


# -- (b) the same input burns the same units -----------------------------------------------------


@pytest.mark.parametrize(
    "build, source",
    [
        (fresh_regex, r"(\w+\s*,\s*){0,20}\w+@[a-z]{2,6}"),
        (fresh_schema, SCHEMA),
        (cn.Grammar.from_lark, LARK),
    ],
    ids=["regex", "schema", "lark"],
)
def test_units_are_deterministic_and_exact(build, source):
    build(source)  # warm what is shared by design (lark's parser, the string universe ...)
    units = used(build, source)
    assert units > 0
    assert used(build, source) == units
    with Fuel(units).active():
        build(source)
    with pytest.raises(WorkLimitError), Fuel(units - 1).active():
        build(source)


def test_no_fuel_no_burning():
    compile_regex.cache_clear()
    compile_regex("[a-z]{1,50}")  # no active fuel: the library's own limits only


# -- (c) cancelling from another thread -----------------------------------------------------------


@pytest.mark.parametrize(
    "build",
    [
        lambda: fresh_regex(r"(a|b)*a(a|b){16}"),
        lambda: cn.Grammar.from_lark(doubling_terminals(20)),
        lambda: fresh_schema(
            {
                "type": "object",
                "properties": {
                    f"k{i}": {"pattern": f"^(a|b)*a(a|b){{{i}}}$"} for i in range(8, 16)
                },
            }
        ),
    ],
    ids=["regex", "lark", "schema"],
)
def test_cancel_stops_a_long_compile(build):
    fuel = Fuel(BIG)
    timer = threading.Timer(0.3, fuel.cancel, args=("the client went away",))
    start = time.monotonic()
    timer.start()
    try:
        with fuel.active(), pytest.raises(Abandoned, match="the client went away"):
            build()
    finally:
        timer.cancel()
    assert time.monotonic() - start < 1.3


# -- (d) running out caches nothing ----------------------------------------------------------------


def test_regex_out_of_fuel_caches_nothing():
    pattern = r"(a|b)*a(a|b){6}c?"
    compile_regex.cache_clear()
    with pytest.raises(WorkLimitError), Fuel(1_000).active():
        compile_regex(pattern)
    with Fuel(BIG).active():
        again = compile_regex(pattern)
    compile_regex.cache_clear()
    fresh = compile_regex(pattern)
    samples = ["", "a" * 7, "ab" * 4, "b" + "a" * 7 + "c", "abababab", "aaaaaaac", "ba" * 5 + "c"]
    for text in samples:
        expected = re.fullmatch(pattern, text) is not None
        assert again.matches(text) == fresh.matches(text) == expected, text


def test_schema_out_of_fuel_caches_nothing():
    compile_regex.cache_clear()
    units = used(fresh_schema, SCHEMA)
    for budget in (units // 10, units // 2, units - 1):
        compile_regex.cache_clear()
        with pytest.raises(WorkLimitError), Fuel(budget).active():
            cn.Grammar.from_json_schema(SCHEMA)
        with Fuel(BIG).active():
            grammar = cn.Grammar.from_json_schema(SCHEMA)
        for text, ok in [
            ('{"id":1,"name":"Ada"}', True),
            ('{"id":1,"name":"Ada","tags":["a","c"]}', True),
            ('{"id":1,"name":"ada"}', False),
            ('{"id":-1,"name":"Ada"}', False),
            ('{"id":1,"name":"Ada","tags":["a","b","c","a"]}', False),
        ]:
            assert grammar.matches(text) == ok, (budget, text)
    assert re.fullmatch("^[A-Z][a-z]{1,20}$", "Ada")


def test_grammar_mask_out_of_fuel_caches_nothing(smollm_vocab):
    grammar = cn.Grammar.from_lark(LARK)
    constraint = cn.Constraint(grammar, smollm_vocab)
    with pytest.raises(WorkLimitError), Fuel(5).active():
        constraint.start().mask()
    with Fuel(BIG).active():
        mask = constraint.start().mask()
    fresh = cn.Constraint(cn.Grammar.from_lark(LARK), smollm_vocab).start().mask()
    assert (mask == fresh).all()
