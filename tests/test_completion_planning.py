"""Completion planning: shortest completions against independent oracles, and work that grows
linearly with the length bounds (counted in fuel units, not timed)."""

from __future__ import annotations

import itertools
import json
import re

import jsonschema
import numpy as np
import pytest

import constrain as cn
from constrain.constraints import ConstraintSpec
from constrain.engine.grammar.completion import Completions, search_completion
from constrain.engine.regex import compile_regex
from constrain.errors import GrammarError
from constrain.fuel import Fuel

# -- regexes: the shortest string, against enumeration with `re.fullmatch` ------------------------


def _random_regex(rng: np.random.Generator, depth: int) -> str:
    if depth == 0 or rng.random() < 0.25:
        return str(rng.choice(["a", "b", "[ab]", "a?"]))
    left, right = _random_regex(rng, depth - 1), _random_regex(rng, depth - 1)
    op = int(rng.integers(0, 5))
    if op == 0:
        return f"(?:{left}|{right})"
    if op == 1:
        return f"(?:{left})*"
    if op == 2:
        low = int(rng.integers(0, 3))
        return f"(?:{left}){{{low},{low + int(rng.integers(0, 3))}}}"
    return left + right


def _shortest_by_enumeration(pattern: str, prefix: str, longest: int = 7) -> int | None:
    for n in range(longest + 1):
        for tail in itertools.product("ab", repeat=n):
            if re.fullmatch(pattern, prefix + "".join(tail)):
                return n
    return None


def test_regex_shortest_completions_match_enumeration():
    rng = np.random.default_rng(7)
    checked = 0
    for _ in range(60):
        pattern = _random_regex(rng, 3)
        dfa = compile_regex(pattern)
        if dfa.is_empty():
            continue
        for prefix in ["", "a", "b", "ab", "ba", "aab"]:
            state = dfa.walk(dfa.start, prefix.encode())
            if not state:
                assert _shortest_by_enumeration(pattern, prefix, 0) is None
                continue
            expected = _shortest_by_enumeration(pattern, prefix)
            found = dfa.shortest_from(state)
            assert re.fullmatch(pattern, prefix + found.decode()), (pattern, prefix, found)
            if expected is not None:
                assert len(found) == expected, (pattern, prefix, found)
                checked += 1
    assert checked >= 100


def test_long_bounded_regex_plans_quickly():
    """A DFA of thousands of states in a chain: one backward search, not a round per state."""
    dfa = compile_regex("[a-z]{800,2000}x")
    fuel = Fuel(10**12)
    with fuel.active():
        found = dfa.shortest_from(dfa.start)
    assert len(found) == 801 and dfa.matches(found)
    assert fuel.used < 20 * dfa.n_states


# -- grammars: shortest yields against a fixpoint, completions against a byte search -------------


def _random_lark(rng: np.random.Generator) -> str:
    names = ["start", "x", "y", "z"]
    lines = []
    for name in names:
        alternatives = []
        for _ in range(int(rng.integers(1, 4))):
            symbols = [
                str(rng.choice(['"a"', '"b"', '"c"', *names[1:]]))
                for _ in range(rng.integers(0, 4))
            ]
            alternatives.append(" ".join(symbols))
        lines.append(f"{name}: " + " | ".join(alternatives))
    return "\n".join(lines) + "\n"


def _yields_by_fixpoint(next_sym, lhs, lexeme_lengths) -> list[float]:
    """Shortest yields of the nonterminals, by rounds until nothing improves (the oracle)."""
    nts = [float("inf")] * (max(lhs) + 1)
    starts = [d for d in range(len(next_sym)) if d == 0 or next_sym[d - 1] is None]
    changed = True
    while changed:
        changed = False
        for d0 in starts:
            total, d = 0.0, d0
            while next_sym[d] is not None:
                sym = next_sym[d]
                total += nts[sym] if sym >= 0 else lexeme_lengths[~sym]
                d += 1
            if total < nts[lhs[d0]]:
                nts[lhs[d0]] = total
                changed = True
    return nts


def _random_grammars(count: int, seed: int):
    rng = np.random.default_rng(seed)
    while count:
        text = _random_lark(rng)
        try:
            automaton = cn.Grammar.from_lark(text).automaton
        except GrammarError:
            continue
        count -= 1
        yield text, automaton


def test_grammar_yields_equal_a_fixpoint_and_chosen_rules_spell_them():
    for text, automaton in _random_grammars(40, seed=1):
        plans = Completions(automaton)
        lengths = [
            float("inf") if lx.special is not None or lx.dfa.is_empty()
            else len(lx.dfa.shortest_from(lx.dfa.start))
            for lx in automaton.lexeme_table
        ]  # fmt: skip
        nts = _yields_by_fixpoint(plans.next_sym, plans.lhs, lengths)
        for d, sym in enumerate(plans.next_sym):
            if sym is not None and sym >= 0 and nts[sym] < float("inf"):
                # spelling the chosen rules ends (they form no cycle) at the shortest yield
                assert plans.rest[d] == nts[sym] + plans.rest[d + 1], text
                assert sum(map(len, plans.rest_pieces(d))) == plans.rest[d], text


def test_grammar_completions_equal_a_breadth_first_search():
    rng = np.random.default_rng(2)
    checked = 0
    for text, automaton in _random_grammars(40, seed=3):
        for _ in range(5):
            state, prefix = automaton.start, b""
            for _ in range(int(rng.integers(0, 6))):  # a random walk over viable bytes
                options = automaton.expected_bytes(state)
                if not options:
                    break
                byte = int(rng.choice(options))
                state, prefix = automaton.step(state, bytes((byte,))), prefix + bytes((byte,))
            found = automaton.completion(state)
            end = automaton.step(state, found)
            assert end is not None and automaton.accepting(end), (text, prefix, found)
            reference = search_completion(automaton, state, max_states=50_000)
            if reference is not None:
                assert len(found) == len(reference), (text, prefix, found, reference)
                checked += 1
    assert checked >= 100


# -- JSON schemas: the shortest document, against a byte search and jsonschema -------------------

SCHEMAS = [
    {"type": "string", "minLength": 3, "maxLength": 30},
    {"type": "array", "items": {"type": "integer"}, "minItems": 3},
    {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 4},
    {"type": "array", "items": {"type": "array", "items": {"type": "integer"}, "minItems": 2},
     "minItems": 2},
    {"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 2},
    {"enum": ["value0", "v1", "value22", 12]},
    {"type": "object", "properties": {"a": {"type": "string", "minLength": 2}}, "required": ["a"]},
]  # fmt: skip


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda s: json.dumps(s)[:40])
def test_schema_completions_are_valid_and_as_short_as_a_search(schema):
    automaton = cn.Grammar.from_json_schema(schema).automaton
    rng = np.random.default_rng(4)
    state = automaton.start
    for _ in range(8):
        found = automaton.completion(state)
        end = automaton.step(state, found)
        assert end is not None and automaton.accepting(end)
        reference = search_completion(automaton, state, max_states=200_000)
        assert reference is not None and len(found) == len(reference), (found, reference)
        options = automaton.expected_bytes(state)
        if not options:
            break
        state = automaton.step(state, bytes((int(rng.choice(options)),)))
    whole = automaton.completion(automaton.start)
    pairs = []  # the grammar does not keep keys apart: `{"":0,"":0}` has two properties
    document = json.loads(whole, object_pairs_hook=lambda kv: pairs.append(kv) or dict(kv))
    if all(len(dict(kv)) == len(kv) for kv in pairs):
        jsonschema.validate(document, schema)


# -- scaling: the work of planning is linear in the length bounds ---------------------------------


def _planning_work(vocab, schema: dict) -> tuple[int, int]:
    constraint = ConstraintSpec(schema=schema).constraint(vocab)
    fuel = Fuel(10**12)
    with fuel.active():
        tokens = constraint.shortest_tokens()
    return fuel.used, tokens


@pytest.mark.parametrize(
    "schema",
    [
        lambda n: {"type": "string", "minLength": n, "maxLength": 10 * n},
        lambda n: {"type": "array", "items": {"type": "integer"}, "minItems": n},
    ],
    ids=["minLength", "minItems"],
)
def test_planning_work_is_linear_in_the_bound(smollm_vocab, schema):
    small, small_tokens = _planning_work(smollm_vocab, schema(1000))
    large, large_tokens = _planning_work(smollm_vocab, schema(10_000))
    assert small > 0 and small_tokens >= 1000 and large_tokens >= 10_000
    assert large <= 12 * small, (small, large)
