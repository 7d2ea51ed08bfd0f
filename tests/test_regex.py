"""Regex -> byte DFA: agreement with Python's `re`, liveness, minimality, UTF-8, errors, limits."""

from __future__ import annotations

import itertools
import re
import time
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from constrain.engine.regex import DEAD, ByteDFA, compile_regex, dfa_from_strings
from constrain.errors import RegexError

# -- a strategy of regexes built from the supported constructs -------------------------------------

_LITERALS = ["a", "b", "c", "é", "日", "🎉", "-", r"\.", r"\n", " "]
_CLASSES = [
    r"[ab]",
    r"[a-c]",
    r"[^a]",
    r"[^ab\n]",
    r"\d",
    r"\w",
    r"\s",
    ".",
    r"[é-ë]",
    r"[^\x00-\x7f]",
]


def _regexes():
    leaf = st.sampled_from(_LITERALS + _CLASSES)

    def extend(inner):
        return st.one_of(
            st.tuples(inner, inner).map(lambda t: t[0] + t[1]),
            st.tuples(inner, inner).map(lambda t: f"(?:{t[0]}|{t[1]})"),
            inner.map(lambda r: f"(?:{r})?"),
            inner.map(lambda r: f"(?:{r})*"),
            inner.map(lambda r: f"(?:{r})+"),
            st.tuples(inner, st.integers(0, 2), st.integers(0, 2)).map(
                lambda t: f"(?:{t[0]}){{{t[1]},{t[1] + t[2]}}}"
            ),
        )

    return st.recursive(leaf, extend, max_leaves=6)


_ALPHABET = st.sampled_from(list("abcé日🎉-. \n0_x"))


def _can_accept(dfa: ByteDFA, state: int) -> bool:
    """BFS: is an accepting state reachable from `state`?"""
    seen, frontier = {state}, [state]
    while frontier:
        s = frontier.pop()
        if dfa.accepting[s]:
            return True
        for t in set(dfa.transitions[s].tolist()) - seen:
            seen.add(t)
            frontier.append(t)
    return False


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pattern=_regexes(), data=st.data())
def test_dfa_agrees_with_python_re(pattern, data):
    dfa = compile_regex(pattern)
    compiled = re.compile(pattern, re.ASCII)
    matching = data.draw(
        st.from_regex(compiled, fullmatch=True).filter(lambda s: "\r" not in s or True)
    )
    arbitrary = data.draw(st.text(_ALPHABET, max_size=8))
    for text in (matching, arbitrary):
        expected = compiled.fullmatch(text) is not None
        assert dfa.matches(text.encode("utf-8")) == expected, (pattern, text)
    # every prefix of a match (at every byte, also inside a UTF-8 character) is live
    encoded = matching.encode("utf-8")
    for k in range(len(encoded) + 1):
        assert dfa.walk(dfa.start, encoded[:k]) != DEAD
    # a non-dead state always has an accepting continuation (the liveness invariant)
    state = dfa.walk(dfa.start, arbitrary.encode("utf-8"))
    if state != DEAD:
        assert _can_accept(dfa, state)


def test_structure_invariants():
    for pattern in [r"[a-z]{1,200}", r"(ab|cd)*e", r"\d+(\.\d+)?", r"[^\n]*\n"]:
        dfa = compile_regex(pattern)
        assert dfa.start == 1 and not dfa.accepting[DEAD]
        assert (dfa.transitions[DEAD] == DEAD).all()
        assert dfa.transitions.dtype == np.int32 and dfa.transitions.shape == (dfa.n_states, 256)
        for s in range(1, dfa.n_states):
            assert _can_accept(dfa, s), (pattern, s)
        reached = {1}
        frontier = [1]
        while frontier:
            for t in set(dfa.transitions[frontier.pop()].tolist()) - reached:
                reached.add(t)
                frontier.append(t)
        assert reached | {DEAD} == set(range(dfa.n_states))


def test_minimality():
    assert compile_regex("a|a").n_states == compile_regex("a").n_states == 3
    assert compile_regex("(a|b)(a|b)").n_states == compile_regex("[ab]{2}").n_states
    assert compile_regex("[a-z]{1,200}").n_states == 202  # dead + 201 counters
    assert compile_regex("(ab)*|(ab)*ab").n_states == compile_regex("(ab)*").n_states


def test_utf8_byte_level():
    dfa = compile_regex("[^a]")
    for ch in ["b", "\x00", "é", "߿", "ࠀ", "日", "\uffff", "🎉", "\U0010ffff"]:
        assert dfa.matches(ch.encode("utf-8")), ch
    for bad in [b"a", b"\xc0\x80", b"\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xff", b"ab"]:
        assert not dfa.matches(bad), bad
    # a prefix that ends inside a multi-byte character is live
    assert dfa.walk(dfa.start, "日".encode()[:2]) != DEAD
    assert compile_regex(r"\u00e9\U0001F389").matches("é🎉")
    assert compile_regex(r"[\u00e0-\u00ff]+").matches("éàÿ")
    assert compile_regex(r"\ud83c\udf89").matches(
        "🎉"
    )  # a UTF-16 surrogate pair (JSON Schema style)


def test_semantics_of_shorthand_classes():
    assert not compile_regex(".").matches("\n") and compile_regex(".").matches("é")
    assert not compile_regex(r"\d").matches("٣")  # ASCII digits only
    assert compile_regex(r"\w+").matches("a_Z9") and not compile_regex(r"\w").matches("é")
    assert compile_regex(r"\s").matches("\x0b")
    assert compile_regex(r"^abc$").matches("abc")  # anchors at the edges are no-ops
    assert compile_regex(r"\Aabc\Z").matches("abc")
    assert compile_regex(r"a{,2}").matches("aa") and compile_regex(r"a+?b").matches("aab")
    assert compile_regex(r"(?P<year>\d{4})").matches("2024")


@pytest.mark.parametrize(
    "pattern, construct, position",
    [
        (r"(?=a(?!b))a", "negative lookahead (?!...) inside a lookahead", 4),
        (r"(?=a|b", "unterminated group", 0),
        (r"x(?<=a)b", "lookbehind", 1),
        (r"(?<!a)b", "negative lookbehind", 0),
        (r"(a)\1", "backreference", 3),
        (r"(?P<x>a)(?P=x)", "named backreference", 8),
        (r"(a)?(?(1)b|c)", "conditional", 4),
        (r"a\bb", "word boundary", 1),
        (r"(?=a$b)a", "anchor $ inside a lookahead", 4),
        (r"(?i)abc", "inline flags", 0),
        (r"\p{L}", "Unicode property", 0),
        (r"ab[cd", "unterminated character class", 2),
        (r"(ab", "malformed", None),
        (r"ba{3,1}c", "minimum above its maximum", None),
    ],
)
def test_unsupported_constructs_are_named_with_their_position(pattern, construct, position):
    with pytest.raises(RegexError) as info:
        compile_regex(pattern)
    assert construct in str(info.value)
    if position is not None:
        assert info.value.position == position
    assert info.value.pattern == pattern


def test_state_cap_is_enforced_quickly():
    t0 = time.perf_counter()
    with pytest.raises(RegexError, match="max_states=1000"):
        compile_regex(r"(a|b)*a(a|b){20}", max_states=1000)
    assert time.perf_counter() - t0 < 5


def test_timeout_is_enforced():
    with pytest.raises(RegexError, match="timeout"):
        compile_regex(r"(a|b)*a(a|b){14}", timeout=0.0)


def test_timeout_holds_in_minimisation():
    # a chain of 20,000 states: the NFA and subsets take about a second, the minimisation's
    # refinement (one round per state) ran 10 s and more past a limit checked only before it
    t0 = time.perf_counter()
    with pytest.raises(RegexError, match=r"time limit of 3 s \(timeout=\)"):
        compile_regex("[a-z]{1,20000}", timeout=3.0)
    assert time.perf_counter() - t0 < 3.0 + 1.5


def test_memory_budget_holds_for_bounded_repetitions_of_groups():
    # a group that can match the empty string, repeated: every state's closure spans the
    # whole chain (quadratic memory; this pattern held 1.7 GB at its 10 s timeout)
    budget = 16 * 2**20
    tracemalloc.start()
    try:
        with pytest.raises(RegexError, match=r"memory budget of 16 MiB \(max_memory=\)"):
            compile_regex("(a?b?){1,3000}", max_memory=budget, timeout=60.0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1.25 * budget


def test_memory_budget_holds_for_subset_blowups():
    tracemalloc.start()
    try:
        with pytest.raises(RegexError, match="max_memory="):
            compile_regex(r"(a|b)*a(a|b){20}", max_memory=8 * 2**20, timeout=60.0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1.25 * 8 * 2**20


def test_the_cache_is_shared_across_timeouts():
    # a compilation with the time left of a larger one (a grammar, a schema) reuses the entry
    pattern = "[0-9]{3}-cache-key"
    assert compile_regex(pattern, timeout=5.0) is compile_regex(pattern, timeout=7.5)


def test_forced_bytes():
    dfa = compile_regex(r'\{"name": "[a-z]+"\}')
    assert dfa.forced_bytes(dfa.start) == b'{"name": "'
    assert compile_regex("(ab)*").forced_bytes(1) == b""  # accepting: EOS is a choice
    assert compile_regex("é").forced_bytes(1) == "é".encode()


def test_dfa_from_strings():
    words = ["Paris", "Bern", "Berlin", "日本", "", "B"]
    dfa = dfa_from_strings(words)
    for w in words:
        assert dfa.matches(w)
    for w in ["Ber", "Berli", "日"]:
        assert not dfa.matches(w)
        assert dfa.walk(dfa.start, w.encode()) != DEAD  # proper prefixes stay live
    assert dfa.walk(dfa.start, b"Parisx") == DEAD
    assert dfa_from_strings([]).is_empty()
    rng = np.random.default_rng(0)
    many = ["".join(rng.choice(list("abcdef"), rng.integers(1, 10))) for _ in range(5000)]
    dfa = dfa_from_strings(many)
    assert all(dfa.matches(w) for w in many)
    assert not any(dfa.matches(w + "z") for w in many[:100])
    for s in range(1, dfa.n_states):
        assert dfa.accepting[s] or (dfa.transitions[s] != DEAD).any()


@pytest.mark.parametrize(
    "pattern",
    [
        r"a(?=b)b",
        r"a(?!b)[a-z]",
        r"(?!.*--)[a-z-]+",  # a rule over the whole rest of the text
        r"(?=.{1,5}$)[a-z]+",  # `$` in a lookahead: the whole rest must match
        r"(?:(?!ab)[ab])*",  # an assertion inside a repetition
        r"x(?![0-9]*$)[a-z0-9]*",
        r"(?=a)(?!ab)[abc]{1,3}",
        r"[a-z]+(?=-)-?[0-9]?",
    ],
)
def test_lookaheads_match_exactly_what_python_re_matches(pattern):
    """Lookaheads assert on the rest of the text: every string over a small alphabet up to
    length 6 is accepted iff `re.fullmatch` accepts it."""
    dfa = compile_regex(pattern)
    for n in range(7):
        for chars in itertools.product("ab-z0", repeat=n):
            text = "".join(chars)
            assert dfa.matches(text) == bool(re.fullmatch(pattern, text)), text


@pytest.mark.parametrize(
    "pattern",
    [
        r"^([^,]|$)",  # `$` in an alternative (JsonSchemaStore, Github_medium)
        r"(\/?((\.{2})|([a-z0-9\-]*))($|\/))*",  # inside a repetition (Github_hard)
        r"([^,]+(,|$)){3,}",
        r"[\s\S]*(?:^|\n)ab[\s\S]*",  # `^` after what may be empty (a certificate pattern)
        r"(?:^|,)a",  # `^` among single characters: one character group for interegular
        r"a*^b|(^a|b)*",
        r"a$\n?|b$b",  # `$` before what may be empty, and before what may not
    ],
)
def test_inner_anchors_match_exactly_what_ecma_means(pattern):
    """``^`` and ``$`` inside a pattern mean the text's start and end (ECMA-262 without the
    multiline flag: Python's ``\\A`` and ``\\Z``): every string over a small alphabet up to length
    5 is accepted iff `re.fullmatch` accepts it."""
    dfa = compile_regex(pattern, dialect="ecma")
    oracle = re.compile(re.sub(r"(?<!\[)\^", r"\\A", pattern).replace("$", r"\Z"))
    for n in range(6):
        for chars in itertools.product("a,\n/.b", repeat=n):
            text = "".join(chars)
            assert dfa.matches(text) == bool(oracle.fullmatch(text)), repr(text)


def test_inner_dollar_in_pythons_dialect_admits_a_final_newline():
    """In Python's dialect ``$`` also matches before a final newline, as `re` says."""
    dfa = compile_regex(r"(a$|b)\n?")
    for text in ["a", "a\n", "b", "b\n", "a\n\n", "ab"]:
        assert dfa.matches(text) == bool(re.fullmatch(r"(a$|b)\n?", text)), repr(text)


# -- products: the plain-Python path for small operands and the numpy one -----------------------


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    x=_regexes(),
    y=_regexes(),
    op=st.sampled_from(["and", "or", "minus"]),
    texts=st.lists(st.text(st.sampled_from("abcé日🎉-. \n1"), max_size=5), max_size=20),
)
def test_combine_agrees_with_re_on_both_paths(x, y, op, texts):
    """`combine` accepts exactly what `re` says of the two operands, whether the product is
    built in plain Python (small operands) or with numpy; both paths give the same DFA."""
    import constrain.engine.regex.products as products

    a, b = compile_regex(x), compile_regex(y)
    small = products.combine(a, b, op, "p")
    threshold, products._SMALL_PRODUCT = products._SMALL_PRODUCT, -1
    try:
        large = products.combine(a, b, op, "p")
    finally:
        products._SMALL_PRODUCT = threshold
    assert small.start == large.start
    assert np.array_equal(small.transitions, large.transitions)
    assert np.array_equal(small.accepting, large.accepting)
    for text in texts:
        in_a, in_b = (bool(re.fullmatch(p, text, re.ASCII)) for p in (x, y))
        want = {"and": in_a and in_b, "or": in_a or in_b, "minus": in_a and not in_b}[op]
        assert small.matches(text) == want, (x, y, op, text)
