"""The native engine core against the Python reference engine: the same mask, bit for bit.

`Grammar.with_engine("python")` and ``("native")`` build the same grammar's automaton in each
engine; every test walks both through the same token sequences and compares the full mask at
every position, `check` for the token taken, and `accepting()` at the end. The Python engine is
the specification (it is itself held to `re`, `jsonschema`, `lark` and brute force elsewhere).
The full MaskBench run is ``python -m constrain.bench.differential``.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import constrain as cn
from constrain.engine.engines import native_available
from constrain.engine.grammar.sample import random_text

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

pytestmark = pytest.mark.skipif(not native_available(), reason="the native core is not built")


def assert_same_masks(grammar: cn.Grammar, vocab, tokens: list[int]) -> bool:
    """Walk `tokens` in both engines: equal masks before each token and after the last, equal
    checks; stop at the first refused token. Returns whether every token was accepted and the
    text is complete."""
    python = cn.Constraint(grammar.with_engine("python"), vocab).start()
    native = cn.Constraint(grammar.with_engine("native"), vocab).start()
    # the native check reads each token in one call (`native.TokenSteps`), not the mask
    checks = cn.Constraint(grammar.with_engine("native"), vocab).start()
    rng = np.random.default_rng(len(tokens))
    for i, token in enumerate(tokens):
        a, b = python.mask(), native.mask()
        if not np.array_equal(a, b):
            diff = np.flatnonzero(a != b)[:10].tolist()
            texts = [vocab.token_bytes(t) for t in diff]
            pytest.fail(f"masks differ at token {i}: ids {diff} {texts} (python has {a[diff]})")
        probes = [
            *rng.integers(0, vocab.size, 24).tolist(),
            *rng.choice(vocab.size, 8, p=a / a.sum()),
        ]
        for probe in [*probes, *vocab.eos_ids, *vocab.special_ids.values()]:
            assert checks.check(int(probe)) == a[probe], (i, int(probe))
        # the checks' native cursor follows forks, and a step there and back
        if i % 3 == 1:
            checks = checks.fork()
        detour = next((int(t) for t in probes if a[t] and int(t) not in vocab.eos_ids), None)
        if i % 5 == 2 and detour is not None:
            checks.advance(detour)
            checks.rollback(1)
        ok = python.check(token)
        assert native.check(token) == ok, (i, token)
        if not ok:
            return False
        python.advance(token)
        native.advance(token)
        checks.advance(token)
    assert np.array_equal(python.mask(), native.mask()), "after the last token"
    assert checks.accepting() == python.accepting()
    assert python.accepting() == native.accepting()
    if python.accepting():  # after EOS nothing is allowed, and a rollback undoes it
        eos = vocab.eos_ids[0]
        checks.advance(eos)
        assert not any(checks.check(t) for t in [eos, *tokens[:8]])
        checks.rollback(1)
        assert checks.check(eos)
    return python.accepting()


def _maskbench_sample(per_subset: int, seed: int = 0):
    """(schema, instances) of `per_subset` schemas per MaskBench subset, drawn with `seed`."""
    rng = random.Random(seed)
    for path in sorted((DATA / "maskbench").glob("*.jsonl")):
        rows = [json.loads(line) for line in path.read_text().split("\n") if line.strip()]
        for row in rng.sample(rows, min(per_subset, len(rows))):
            yield path.stem, row


@pytest.mark.skipif(not (DATA / "maskbench").exists(), reason="no shared MaskBench data")
def test_maskbench_sample_same_masks(smollm_vocab):
    """Two schemas per subset, every instance (valid and invalid), every position."""
    compared = 0
    for subset, row in _maskbench_sample(2):
        schema_path = DATA / "jsonschemabench" / subset / f"{row['id']}.json"
        try:
            grammar = cn.Grammar.from_json_schema(
                json.loads(schema_path.read_text()), spellings="all", timeout=5
            )
        except cn.ConstrainError:
            continue
        for value in [*row["valid"], *row["invalid"]]:
            text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
            assert_same_masks(grammar, smollm_vocab, smollm_vocab.encode(text))
            compared += 1
    assert compared >= 10


_LIBRARY = ["json", "sql", "python_expr", "arithmetic", "csv"]
_TEXTS = {
    "json": ['{"a": [1, 2.5, true, null], "b": "x\\u00e9"}', "[1,,2]"],
    "sql": ["SELECT name FROM users WHERE age > 30", "SELECT a FROMusers"],
    "python_expr": ["f(x, y=2) + [i for i in range(3)]", "lambda: (1 +"],
    "arithmetic": ["(1 + 2) * 3 - 4 / 5", "1 + * 2"],
    "csv": ["a,b,c\n1,2,3\n", 'a,"b\n'],
}


@pytest.mark.parametrize("name", _LIBRARY)
def test_library_grammars_same_masks(name, any_vocab):
    grammar = cn.grammars.load(name)
    for text in _TEXTS[name]:
        assert_same_masks(grammar, any_vocab, any_vocab.encode(text))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_token_sequences_same_masks(data, smollm_vocab):
    """Random walks: each next token drawn from the allowed ones (or any token, now and then)."""
    name = data.draw(st.sampled_from(_LIBRARY))
    _random_walk(data, cn.grammars.load(name), smollm_vocab, 12)


@pytest.mark.parametrize("name", _LIBRARY)
def test_slice_containment_same(name, smollm_vocab):
    """`admits` (is a vocabulary slice's whole language live from here?) agrees in both
    engines at every byte of the example texts: a wrong True would show in the masks, a wrong
    False only in their cost, so it is compared directly."""
    from constrain.engine.slices import slices_of

    grammar = cn.grammars.load(name)
    python, native = (
        grammar.with_engine("python").automaton,
        grammar.with_engine("native").automaton,
    )
    languages = [part.language for part in slices_of(smollm_vocab).slices]
    compared = 0
    for text in _TEXTS[name]:
        a, b = python.start, native.start
        for byte in text.encode():
            for language in languages:
                assert python.admits(a, language) == native.admits(b, language), (text, byte)
                compared += 1
            a, b = python.step(a, bytes([byte])), native.step(b, bytes([byte]))
            assert (a is None) == (b is None)
            if a is None:
                break
    assert compared > 40


@given(pattern=st.sampled_from([r"[a-z ]{0,12}", r"\w+( \w+)*", r'"[^"]*"', r"(ab|a b)*c?"]))
@settings(max_examples=8, deadline=None)
def test_regex_slice_containment_same(pattern, smollm_vocab):
    """The same for a regex's DFA, at every state."""
    from constrain.engine.slices import slices_of

    grammar = cn.Grammar.from_regex(pattern)
    python, native = (
        grammar.with_engine("python").automaton,
        grammar.with_engine("native").automaton,
    )
    for language in [part.language for part in slices_of(smollm_vocab).slices]:
        for state in range(1, python.dfa.n_states):
            assert python.admits(state, language) == native.admits(state, language)


def _random_walk(data, grammar, vocab, steps: int, favoured: np.ndarray | None = None) -> None:
    """Up to `steps` tokens drawn from the allowed ones (from the `favoured` ones among them
    half of the time), both engines' bitmasks equal before each."""
    python = cn.Constraint(grammar.with_engine("python"), vocab).start()
    native = cn.Constraint(grammar.with_engine("native"), vocab).start()
    for _ in range(data.draw(st.integers(1, steps))):
        assert np.array_equal(python.bitmask(), native.bitmask())
        allowed = np.flatnonzero(python.mask())
        if favoured is not None and data.draw(st.booleans()):
            allowed = allowed[favoured[allowed]] if favoured[allowed].any() else allowed
        if not len(allowed):
            break
        token = int(allowed[data.draw(st.integers(0, len(allowed) - 1))])
        if token in vocab.eos_ids:
            break
        python.advance(token)
        native.advance(token)


def test_special_token_steps_are_the_reference():
    """Every sequence of up to four tokens over a vocabulary with special tokens, EOS and
    padding: the native token steps (`check`, `advance`) agree with the Python engine's
    masks and steps, a special token ending the lexeme in progress."""
    from constrain.engine.vocab import Vocabulary

    grammar = cn.Grammar.from_lark(
        'start: NAME SEP NAME (SEP | "!")?\nNAME: /[ab]+/\nWS: " "\n%ignore WS\n%declare SEP\n',
        special_tokens={"SEP": "<|sep|>"},
    )
    vocab = Vocabulary(
        [b"a", b"b", b"ab", b" ", b"a b", None, None, None, b"!", None],
        eos_ids=[7], special_ids={"<|sep|>": 5, "<|other|>": 6},
    )  # fmt: skip
    python = cn.Constraint(grammar.with_engine("python"), vocab)
    native = cn.Constraint(grammar.with_engine("native"), vocab)
    assert native.token_automaton.native_steps is not None
    frontier = [[]]
    for _ in range(4):
        grown = []
        for prefix in frontier:
            p, n = python.start(), native.start()
            p.advance_many(prefix)
            n.advance_many(prefix)
            allowed = p.mask()
            for token in range(vocab.size):
                assert n.check(token) == allowed[token] == p.check(token), (prefix, token)
                if allowed[token] and token not in vocab.eos_ids:
                    grown.append([*prefix, token])
            assert n.accepting() == p.accepting(), prefix
        frontier = grown
    assert len(frontier) > 20


def test_token_steps_check_their_arguments():
    """What crosses into `native.TokenSteps` is validated there: a missing core or texts, and
    special or EOS ids outside the texts, are errors, not reads out of bounds."""
    import constrain.engine.native as native

    from constrain.engine.vocab import Vocabulary

    vocab = Vocabulary([b"a", None], eos_ids=[1])
    chart = cn.Grammar.from_lark('start: "a"').with_engine("native").automaton._native
    with pytest.raises(ValueError, match="core and token texts"):
        native.TokenSteps(None, vocab.native_texts, [], [1])
    with pytest.raises(ValueError, match="EOS id is out of range"):
        native.TokenSteps(chart.core, vocab.native_texts, [], [2])
    with pytest.raises(ValueError, match="special token id is out of range"):
        native.TokenSteps(chart.core, vocab.native_texts, [(0, -1)], [1])
    steps = native.TokenSteps(chart.core, vocab.native_texts, [], [1])
    assert steps.step(chart.root, 0, 5, chart.unmetered) is None  # an id past the texts


def test_token_cursors_check_their_arguments():
    """What crosses into `native.TokenCursor` is validated there: its steps, a key check
    over the same vocabulary, a chart node, a lexer state in range and a key state when it
    checks keys."""
    import constrain.engine.native as native

    from constrain.engine.vocab import Vocabulary
    from constrain.jsonschema.checks import JsonKeyChecks

    vocab = Vocabulary([b"a", None], eos_ids=[1])
    chart = cn.Grammar.from_lark('start: "a"').with_engine("native").automaton._native
    steps = native.TokenSteps(chart.core, vocab.native_texts, [], [1])
    with pytest.raises(ValueError, match="needs token steps"):
        native.TokenCursor(None)
    other = Vocabulary([b"a", b"b", None], eos_ids=[2])
    with pytest.raises(ValueError, match="another vocabulary"):
        native.TokenCursor(steps, JsonKeyChecks().native_check(other))
    cursor = native.TokenCursor(steps)
    assert not cursor.allows(0)  # never moved: nowhere to read from
    with pytest.raises(ValueError, match="chart node"):
        cursor.move_to((None, 0))
    with pytest.raises(ValueError, match="out of range"):
        cursor.move_to((chart.root, 10**6))
    with pytest.raises(ValueError, match=r"\(node, s\)"):
        cursor.move_to((chart.root,))
    cursor.move_to((chart.root, 0))
    assert cursor.allows(0) and not cursor.allows(1) and not cursor.allows(7)
    keyed = native.TokenCursor(steps, JsonKeyChecks().native_check(vocab))
    with pytest.raises(ValueError, match="needs its state"):
        keyed.move_to((chart.root, 0))


def test_lexer_limit_is_a_grammar_error(monkeypatch):
    """The state budget holds in the native lexer and is reported as the Python one reports
    it: a `GrammarError` naming the terminals."""
    import constrain.engine.grammar.lexers as lexers

    monkeypatch.setattr(lexers, "MAX_LEXER_STATES", 5)
    grammar = cn.Grammar.from_lark("start: WORD\nWORD: /[a-z]{1,20}/").with_engine("native")
    with pytest.raises(cn.GrammarError, match="WORD"):
        grammar.automaton.step(grammar.automaton.start, b"abcdefghij")
    from constrain.engine.vocab import Vocabulary

    vocab = Vocabulary([b"abcdefghijk", None], eos_ids=[1])
    for read in (lambda m: m.check(0), lambda m: m.advance(0)):  # one native call per token
        with pytest.raises(cn.GrammarError, match="WORD"):
            read(cn.Constraint(grammar, vocab).start())
    # a check through the cursor that also applies the native key check
    schema = cn.Grammar.from_json_schema({"type": "object"}).with_engine("native")
    keyed = cn.Constraint(schema, Vocabulary([b'{"abcdefghijk', None], eos_ids=[1])).start()
    with pytest.raises(cn.GrammarError, match="key"):
        keyed.check(0)


def test_unknown_engine_is_a_config_error():
    with pytest.raises(cn.ConfigError, match="engine"):
        cn.grammars.load("json").with_engine("rust")


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pattern=st.sampled_from(["[a-z]+( [a-z]+)*", "-?(0|[1-9][0-9]*)(\\.[0-9]+)?", "(ab|é)*x?"]),
    text=st.text(st.sampled_from("ab x-0.19é"), max_size=8),
)
def test_regex_masks_same(pattern, text, any_vocab):
    """A regex's trie walk: the same masks along any text."""
    assert_same_masks(cn.Grammar.from_regex(pattern), any_vocab, any_vocab.encode(text))


_KEY_SCHEMAS = [
    {"type": "object"},
    {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": True},
    {"type": "array", "items": {"type": "object", "additionalProperties": {"type": "object"}}},
]
# keys as written: repeats spelled alike or through escapes, quotes and backslashes inside
_KEY_SPELLINGS = ["a", "b", "ab", "\\u0061", "\\u0062", "\u00e9", "\\u00e9", '\\"', "\\\\", "a\\/"]


def _object(draw, depth: int = 0) -> str:
    """A JSON object whose keys are drawn from `_KEY_SPELLINGS` (so they may repeat)."""
    keys = draw(st.lists(st.sampled_from(_KEY_SPELLINGS), max_size=4))
    members = []
    for key in keys:
        nested = depth < 2 and draw(st.booleans())
        value = _object(draw, depth + 1) if nested else draw(st.sampled_from(_VALUES))
        members.append(f'"{key}": {value}')
    return "{" + ", ".join(members) + "}"


_VALUES = ["1", '"x"', "[]", '["a", {"a": 1}]', "{}"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_repeated_keys_same_masks(data, smollm_vocab):
    """Objects whose keys may repeat (spelled alike or escaped), read as the tokenizer splits
    them and along random walks that favour tokens holding quotes (keys ending inside a
    token): the native key scan refuses exactly the tokens the Python check refuses."""
    schema = data.draw(st.sampled_from(_KEY_SCHEMAS))
    spellings = data.draw(st.sampled_from(["all", "canonical"]))
    grammar = cn.Grammar.from_json_schema(schema, spellings=spellings, whitespace="default")
    document = _object(data.draw)
    if schema["type"] == "array":
        document = f"[{document}, {_object(data.draw)}]"
    assert_same_masks(grammar, smollm_vocab, smollm_vocab.encode(document))
    quoted = np.array([b'"' in text for text in smollm_vocab.texts])
    _random_walk(data, grammar, smollm_vocab, 16, favoured=quoted)


# -- escaped spellings: the subtrees both engines build as they read them ------------------------

_ESCAPE_SCHEMAS = [
    {
        "type": "object",
        "properties": {"naïve": {"enum": ["café", "a/b", 'q"t', "😀x"]}, "k": {"type": "string"}},
        "required": ["naïve"],
    },
    {"type": "array", "items": {"type": "string", "pattern": "^[a-fé😀/\\\\]{1,4}$"}},
    {"type": "object", "additionalProperties": {"type": "string", "maxLength": 3}},
]
_ESCAPE_VALUES = ["café", "a/b", 'q"t', "😀x", "é", "ab\\", "/😀", "x\n", "naïve", "k"]


def _spelled_json(value, draw) -> str:
    """`value` as JSON text, each character of each string spelled as drawn: raw (where JSON
    allows), its short escape, or ``\\u`` in either case (a surrogate pair above U+FFFF)."""
    if isinstance(value, str):
        out = []
        for ch in value:
            pick = draw(st.integers(0, 2))
            short = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\n": "\\n"}.get(ch)
            if pick == 0 and ch >= " " and ch not in '"\\':
                out.append(ch)
            elif pick == 1 and short:
                out.append(short)
            else:
                cp = ord(ch)
                units = [cp] if cp < 0x10000 else [0xD800 + ((cp - 0x10000) >> 10),
                                                   0xDC00 + ((cp - 0x10000) & 0x3FF)]  # fmt: skip
                text = "".join(f"\\u{u:04x}" for u in units)
                out.append(text.upper().replace("\\U", "\\u") if draw(st.booleans()) else text)
        return '"' + "".join(out) + '"'
    if isinstance(value, dict):
        items = [f"{_spelled_json(k, draw)}:{_spelled_json(v, draw)}" for k, v in value.items()]
        return "{" + ",".join(items) + "}"
    return "[" + ",".join(_spelled_json(v, draw) for v in value) + "]"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_escaped_spellings_same_masks(data, smollm_vocab):
    """Keys, enums, patterns and free strings spelled with every kind of escape: both engines
    give the same masks at every position, and the text is accepted exactly when `jsonschema`
    says its value is valid (an independent oracle of what each spelling decodes to)."""
    import jsonschema

    index = data.draw(st.integers(0, len(_ESCAPE_SCHEMAS) - 1))
    schema = _ESCAPE_SCHEMAS[index]
    strings = st.sampled_from(_ESCAPE_VALUES)
    if index == 1:
        value = data.draw(st.lists(strings, max_size=3))
    else:
        value = data.draw(st.dictionaries(strings, strings, max_size=3))
    text = _spelled_json(value, data.draw)
    assert json.loads(text) == value
    grammar = cn.Grammar.from_json_schema(schema, spellings="all", any_order=True)
    accepted = assert_same_masks(grammar, smollm_vocab, smollm_vocab.encode(text))
    assert accepted == jsonschema.Draft202012Validator(schema).is_valid(value), text


_COUNTED_SCHEMA = {
    "type": "array",
    "items": {"type": "string", "pattern": r"^(?:\S+\s+){0,99}\S+$", "maxLength": 30},
}


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_counted_strings_same_masks(data, smollm_vocab):
    """A length bound beside a large pattern (a `CountedDFA`, built as read in both engines):
    the same masks at every position, with every kind of escape, on texts at, under and past
    the bound; acceptance as `jsonschema` says."""
    import jsonschema

    from constrain.engine.regex.counted import CountedDFA

    grammar = cn.Grammar.from_json_schema(_COUNTED_SCHEMA, spellings="all")
    assert any(isinstance(lx.dfa, CountedDFA) for lx in grammar.ir.lexemes.values())
    words = st.text(st.sampled_from('ab\u00e9\U0001f389"\\/'), min_size=1, max_size=4)
    value = data.draw(st.lists(st.lists(words, min_size=1, max_size=9).map(" ".join), max_size=2))
    text = _spelled_json(value, data.draw)
    accepted = assert_same_masks(grammar, smollm_vocab, smollm_vocab.encode(text))
    assert accepted == jsonschema.Draft202012Validator(_COUNTED_SCHEMA).is_valid(value), text


_CHUNKED_SCHEMAS = [
    {"type": "string", "maxLength": 300},
    {"type": "string", "minLength": 290},
    {"type": "array", "items": {"type": "string", "minLength": 260, "maxLength": 330}},
]


@pytest.mark.parametrize("schema", _CHUNKED_SCHEMAS, ids=["max", "min", "min-max"])
def test_long_strings_same_masks(schema, any_vocab):
    """A long length bound is counted in chunk lexemes; the native masks admit text slices
    whose tokens run on into the next chunk (the parser moving on inside a slice check), the
    Python engine walks them: the same masks at every position, strings of long and short
    tokens (escapes and multi-byte characters among them) ending under, at and past the
    bounds; acceptance as `jsonschema` says."""
    import jsonschema

    grammar = cn.Grammar.from_json_schema(schema, spellings="all")
    words = ["lorem ipsum ", "dolor\u00e9 ", "sit🎉amet, ", "consectetur adipiscing "]
    rng = random.Random(3)
    for n in (255, 300, 301, 331):
        body = "".join(rng.choice(words) for _ in range(n // 8 + 1))
        value = json.loads(f'"{body}"')[:n]
        document = value if schema["type"] == "string" else [value, value[: n // 2]]
        text = json.dumps(document, ensure_ascii=False, separators=(",", ":"))
        accepted = assert_same_masks(grammar, any_vocab, any_vocab.encode(text))
        assert accepted == jsonschema.Draft202012Validator(schema).is_valid(document), n


_BOUNDED_SCHEMAS = [
    {"type": "string", "minLength": 12, "maxLength": 12, "pattern": "[0-9a-fA-F]+"},
    {"type": "string", "maxLength": 5},
    {"type": "array", "items": {"type": "string", "minLength": 3, "maxLength": 29}},
    {"type": "object", "additionalProperties": {"type": "string", "maxLength": 30}},
]


@pytest.mark.parametrize("schema", _BOUNDED_SCHEMAS, ids=["hex-12", "max-5", "3-29", "keys"])
def test_short_bounded_strings_same_masks(schema, any_vocab):
    """Within a short length bound the native masks decide plain-text tokens by their length
    in characters (admitted up to what is left, refused past it), the Python engine walks them:
    the same masks at every position, for strings of ASCII, multi-byte characters and escapes
    under, at and past the bounds; acceptance as `jsonschema` says."""
    import jsonschema

    grammar = cn.Grammar.from_json_schema(schema)
    rng = random.Random(5)
    pieces = ["a", "0f", "ab12", "\u00e9", "\u00e9t\u00e9", "\U0001f389", "x y", '\\"', "'"]
    for n in (1, 3, 5, 11, 12, 13, 29, 30, 31):
        body = "".join(rng.choice(pieces) for _ in range(n))[:n]
        document = {
            "string": body, "array": [body, body[: n // 2]], "object": {"k": body, body: "v"}
        }[schema["type"]]  # fmt: skip
        text = json.dumps(document, ensure_ascii=False, separators=(",", ":"))
        accepted = assert_same_masks(grammar, any_vocab, any_vocab.encode(text))
        assert accepted == jsonschema.Draft202012Validator(schema).is_valid(document), text


def test_text_next_to_text_lexemes_same_masks(smollm_vocab):
    """Where a text lexeme may end inside a token and another begin, tokens are not decided
    by length: the same masks as the Python engine."""
    grammar = cn.Grammar.from_lark('start: A B ("-" A)*\nA: /[a-z]{3}/\nB: /[a-z ]{2,4}/')
    for text in ["abcde", "abcd e-xyz", "abc  x-abc-def", "abcdefgh"]:
        assert_same_masks(grammar, smollm_vocab, smollm_vocab.encode(text))


@pytest.mark.parametrize(
    "pattern", ["^[^/]", "^$|^[^/](.+)[^/]$", "^[a-z\u00e9]", "^\\S", "^[a-z][0-9]"]
)
def test_first_character_then_free_same_masks(pattern, any_vocab):
    """Where only a string's first character is constrained, the native walk takes the text
    tokens below each allowed first character whole (ASCII and multi-byte first characters),
    the Python engine walks them: the same masks; acceptance as `jsonschema` says."""
    import jsonschema

    schema = {"type": "array", "items": {"type": "string", "pattern": pattern}}
    grammar = cn.Grammar.from_json_schema(schema)
    for document in [["abc", "x/y z"], ["\u00e9t\u00e9 /", "/"], ["\U0001f389a/b"], [" a", ""]]:
        text = json.dumps(document, ensure_ascii=False, separators=(",", ":"))
        accepted = assert_same_masks(grammar, any_vocab, any_vocab.encode(text))
        assert accepted == jsonschema.Draft202012Validator(schema).is_valid(document), text


@pytest.mark.parametrize(
    "text_slices, message",
    [
        ([1], "need an infinite one"),
        ([0, 3], "one infinite text slice"),
        ([2, 0], "not a string of the infinite text slice"),
        ([16], "out of range"),
    ],
)
def test_slices_refuse_a_wrong_text_family(text_slices, message, smollm_vocab):
    """The slices decided together by length must be plain text with one infinite slice holding
    the others' tokens; anything else is refused naming what is wrong."""
    from constrain.engine.native import Slices

    from constrain.engine.slices import slices_of

    slices = slices_of(smollm_vocab)
    languages = [
        (s.language.native_table(), s.language.start, s.language.longest() is None)
        for s in slices.slices
    ]
    bitmasks = [s.bitmask for s in slices.slices]
    within = [[] for _ in slices.slices]
    trie = smollm_vocab.trie.native
    Slices(languages, bitmasks, within, slices.n_words, trie, [1, 2, 3])  # as slices.py does
    with pytest.raises(ValueError, match=message):
        Slices(languages, bitmasks, within, slices.n_words, trie, text_slices)


def _broken(arrays: dict, name: str, index, value):
    out = {k: v.copy() for k, v in arrays.items()}
    if value is None:
        out[name] = out[name][:index]
    else:
        out[name][index] = value(out[name][index]) if callable(value) else value
    return out


_TRIE_FAULTS = {
    "a short array": ("depth", -1, None, "differ in size"),
    "a root that is not": ("subtree_end", 0, lambda v: v - 1, "root"),
    "a depth out of order": ("depth", 3, lambda v: v + 2, "depth out of DFS order"),
    "a subtree that ends late": ("subtree_end", 2, lambda v: v + 1, "wrong subtree_end"),
    "a subtree that ends early": ("subtree_end", 1, lambda v: v - 1, "wrong subtree_end"),
    "a child outside": ("children", 0, 0, "child outside"),
    "tokens past their range": ("token_start", -1, lambda v: v + 1, "does not span"),
    "a decreasing range": ("token_start", 2, lambda v: v + 50, "decreasing"),
    "a negative token": ("tokens", 0, -1, "token id"),
    "a token id past int32": ("tokens", 0, 2**31, "token id"),
}


@pytest.mark.parametrize("fault", list(_TRIE_FAULTS))
def test_a_malformed_trie_is_refused_at_the_boundary(fault):
    """The native core checks a trie's arrays when they cross into C++ (the walks index them
    unchecked): each broken invariant is a ValueError naming it, and the intact copy passes."""
    from types import SimpleNamespace

    from constrain.engine.native import Trie

    from constrain.engine.vocab import TokenTrie

    trie = TokenTrie.build([b"a", b"ab", b"abc", b"b", b"ba", b"c", None, b"ca"])
    names = ("byte", "depth", "subtree_end", "token_start", "tokens", "child_start", "children")
    arrays = {n: np.array(getattr(trie, n)) for n in names}
    Trie(SimpleNamespace(**arrays))  # the intact copy
    name, index, value, message = _TRIE_FAULTS[fault]
    with pytest.raises(ValueError, match=message):
        Trie(SimpleNamespace(**_broken(arrays, name, index, value)))


def _chart_path(automaton, text: bytes) -> list[list[tuple[int, int]]] | None:
    """The parser nodes along `text`, byte by byte: each node's items in order, an item's
    origin named by the step that first reached it (-1: the node itself)."""
    seen: dict = {}
    out = []
    for i in range(len(text) + 1):
        state = automaton.step(automaton.start, text[:i])
        if state is None:
            return out
        node = state[0]
        seen.setdefault(node, i)
        out.append([(d, -1 if o is None else seen.get(o, -2)) for d, o in node.items])
    return out


@pytest.mark.parametrize("name", _LIBRARY)
def test_parser_nodes_same_items(name):
    """The native parser builds the Python parser's nodes: the same items in the same order
    (so the same completions), with origins at the same steps, along random sentences and
    their prefixes with a byte changed; and the same shortest completions."""
    grammar = cn.grammars.load(name)
    python = grammar.with_engine("python").automaton
    native = grammar.with_engine("native").automaton
    rng = np.random.default_rng(3)
    for _ in range(8):
        text = random_text(python.ir, rng, max_depth=4).encode()
        cut = int(rng.integers(0, len(text) + 1))
        broken = text[:cut] + bytes([int(rng.integers(32, 127))]) + text[cut + 1 :]
        for sample in (text, broken):
            assert _chart_path(python, sample) == _chart_path(native, sample), sample
            a = python.step(python.start, sample)
            b = native.step(native.start, sample)
            assert (a is None) == (b is None)
            if a is not None:
                assert python.completion(a) == native.completion(b), sample
                assert python.accepting(a) == native.accepting(b)


def _batch_sample(vocab, n: int) -> list[tuple[cn.Grammar, list[int]]]:
    """(grammar, tokens of a valid instance) for `n` MaskBench schemas, then a second
    sequence of the first grammar (rows of one grammar in one batch)."""
    picked = []
    for subset, row in _maskbench_sample(per_subset=2, seed=4):
        path = DATA / "jsonschemabench" / subset / f"{row['id']}.json"
        if len(picked) == n or not row["valid"]:
            continue
        try:
            grammar = cn.Grammar.from_json_schema(
                json.loads(path.read_text()), spellings="all", any_order=True, timeout=5
            )
        except cn.ConstrainError:
            continue
        text = json.dumps(row["valid"][0], ensure_ascii=False, separators=(",", ":"))
        picked.append((grammar, vocab.encode(text)))
    return [*picked, (picked[0][0], picked[0][1][:-2])]


def _prefill_walk(sample, vocab, threads: int, reference: str = "python"):
    """Step every sequence of `sample` in lockstep, filling the batch's masks with
    `prefill_masks` before each step; yield (step, sequence, batch mask, reference mask), the
    reference from a fresh automaton of engine `reference`, one mask at a time."""
    from constrain.engine.matcher import TokenAutomaton, prefill_masks

    batch = [TokenAutomaton(grammar, vocab) for grammar, _ in sample]
    oracle = [TokenAutomaton(grammar.with_engine(reference), vocab) for grammar, _ in sample]
    here = [a.start().state for a in batch]
    there = [a.start().state for a in oracle]
    for step in range(max(len(tokens) for _, tokens in sample)):
        live = [k for k, (_, tokens) in enumerate(sample) if step < len(tokens)]
        live = [k for k in live if here[k] is not None]  # (a refused token ends a sequence)
        prefill_masks([(batch[k], here[k]) for k in live], threads)
        for k in live:
            yield step, k, batch[k].masks.get(here[k]), oracle[k].bitmask_for(there[k])
            token = sample[k][1][step]
            here[k], there[k] = batch[k].step(here[k], token), oracle[k].step(there[k], token)
            assert (here[k] is None) == (there[k] is None), (step, k)


@pytest.mark.skipif(not (DATA / "maskbench").exists(), reason="no shared MaskBench data")
def test_batch_fill_gives_the_reference_masks(smollm_vocab):
    """A batch filled on two threads without the GIL (rows of nine grammars, two rows of
    one) gives, at every step, the Python reference engine's mask of each sequence."""
    sample = _batch_sample(smollm_vocab, 8)
    assert len(sample) == 9
    compared = 0
    for step, k, got, expected in _prefill_walk(sample, smollm_vocab, threads=2):
        assert got is not None, (step, k)
        assert np.array_equal(got, expected), (step, k)
        compared += 1
    assert compared > 100


def test_batch_fill_checks_its_arguments(smollm_vocab):
    """Rows out of range, a row twice, a buffer of the wrong shape: ValueErrors, no write."""
    import constrain.engine.native as native

    from constrain.engine.matcher import TokenAutomaton

    automaton = TokenAutomaton(cn.grammars.load("json"), smollm_vocab)
    masks = automaton.native_masks()
    node, s = automaton.automaton.start
    words = masks.n_words
    for jobs, out in [
        ([(masks._filler, node, s, 1)], np.zeros((1, words), np.int32)),
        ([(masks._filler, node, s, 0)] * 2, np.zeros((2, words), np.int32)),
        ([(masks._filler, node, s, 0)], np.zeros((1, words - 1), np.int32)),
        ([(masks._filler, node, 10**6, 0)], np.zeros((1, words), np.int32)),
    ]:
        with pytest.raises(ValueError):
            native.fill_batch(jobs, out, 2)
        assert not out.any()


@pytest.mark.skipif(not (DATA / "maskbench").exists(), reason="no shared MaskBench data")
def test_batches_from_two_threads_share_grammars_safely(smollm_vocab):
    """Two Python threads stepping batches of the same grammars at once (each batch releasing
    the GIL while it fills, the grammars' lazily built lexers, parsers and walks shared):
    every mask is still the reference engine's."""
    import threading

    sample = _batch_sample(smollm_vocab, 4)
    failures: list = []

    def walk():
        try:
            for step, k, got, expected in _prefill_walk(sample, smollm_vocab, threads=2):
                if got is None or not np.array_equal(got, expected):
                    failures.append((step, k))
        except Exception as exc:  # noqa: BLE001 (reported below)
            failures.append(exc)

    threads = [threading.Thread(target=walk) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads)
    assert failures == []


def test_native_parse_states_are_invisible_to_the_collector():
    """A native parse holds no object the garbage collector walks: a state is a tuple of an
    untracked node and an int (so a collection untracks it too), and stepping through a long
    nested text leaves the collector's object count where it was (the Python parser's items
    were tuples naming nodes: 65k tracked objects and 60-70 ms collections on large schemas)."""
    import gc

    automaton = cn.grammars.load("json").with_engine("native").automaton
    text = b'{"a": [1, "x", {"b": ' * 40 + b"null" + b"}]}" * 40
    automaton.step(automaton.start, text[:200])  # imports and first-use caches
    gc.collect()
    before = len(gc.get_objects())
    states = [automaton.step(automaton.start, text[:cut]) for cut in range(0, len(text), 7)]
    gc.collect()
    assert all(s is not None for s in states)
    assert not any(gc.is_tracked(s[0]) or gc.is_tracked(s) for s in states)
    assert len(gc.get_objects()) - before < 50


def _key_text(rng: random.Random) -> bytes:
    """Bytes between a key's quotes, often not a JSON string's: escapes of every kind (good,
    bad, surrogates alone and in pairs), raw UTF-8, surrogates' and invalid bytes, controls."""
    parts = [
        b"a", b"b", b"\xc3\xa9", b"\xf0\x9f\x98\x80", b"\xed\xa0\x80", b"\xed\xb8\x80", b"\xc3",
        b"\xe0\x80\x80", b"\xf4\x90\x80\x80", b"\x7f", b"\t", b"\\\"", b"\\\\", b"\\/", b"\\b",
        b"\\n", b"\\t", b"\\u00e9", b"\\u00E9", b"\\ud83d", b"\\ude00", b"\\uD83D\\uDE00",
        b"\\u0041", b"\\x", b"\\u12", b"\\uzzzz", b"\\", b"\\u",
    ]  # fmt: skip
    return b"".join(rng.choice(parts) for _ in range(rng.randrange(5)))


@pytest.mark.parametrize("seed", range(3))
def test_native_key_decoding_is_json_loads(seed):
    """A key's value decoded natively is the string `json.loads` reads from its quoted text,
    in UTF-8 with surrogates passed (None exactly where `json.loads` fails)."""
    from constrain.engine.native import decode_key

    rng = random.Random(seed)
    for _ in range(3000):
        text = _key_text(rng)
        try:
            expected = json.loads(b'"' + text + b'"').encode("utf-8", "surrogatepass")
        except ValueError:
            expected = None
        assert decode_key(text) == expected, text


def _key_document(rng: random.Random, depth: int = 0) -> bytes:
    """A JSON-like text whose objects may repeat keys, spelled in several ways."""
    kind = rng.randrange(6 if depth < 3 else 3)
    if kind == 0:
        return rng.choice([b"1", b"true", b'"v"', b'"a\\"}"', b"null"])
    if kind in (1, 2, 3):
        keys = [b"a", b"ab", b"\xc3\xa9", b"\\u00e9", b"a\\u0062", b'a\\"', b"", b"\\ud800"]
        members = [
            b'"' + rng.choice(keys) + b'":' + _key_document(rng, depth + 1)
            for _ in range(rng.randrange(4))
        ]
        return b"{" + b",".join(members) + b"}"
    return b"[" + b", ".join(_key_document(rng, depth + 1) for _ in range(rng.randrange(3))) + b"]"


@pytest.mark.parametrize("escapes", [False, True])
def test_native_key_check_is_the_reference(escapes):
    """The native duplicate-key check against `JsonChecks(None)` at every byte of documents
    that repeat keys spelled every way: the same verdict on each piece, the same state keys,
    and over a vocabulary of pieces of them the same refusals, `risky_tokens` and `allows`."""
    from constrain.engine.vocab import Vocabulary
    from constrain.jsonschema.checks import JsonChecks, JsonKeyChecks

    rng = random.Random(7)
    documents = [_key_document(rng) for _ in range(60)]
    pieces = {text[i : i + n] for text in documents for i in range(len(text)) for n in (1, 3, 6)}
    vocab = Vocabulary([b"x"] + sorted(pieces), eos_ids=[0])
    reference, native = JsonChecks(None, escapes=escapes), JsonKeyChecks(escapes)
    refusals = 0
    for text in documents:
        expected, here = reference.start, native.start
        for i in range(0, len(text), 2):
            piece = text[i : i + 2]
            for token in range(1, vocab.size, 7):
                data = vocab.token_bytes(token)
                assert native.allows(here, token, vocab) == (
                    reference.feed(expected, data) is not None
                )
            wanted = reference.refusals(expected, vocab)
            assert native.refusals(here, vocab).tolist() == wanted.tolist(), text[:i]
            assert (
                native.risky_tokens(here, vocab).tolist()
                == reference.risky_tokens(expected, vocab).tolist()
            )
            refusals += len(wanted)
            expected, here = reference.feed(expected, piece), native.feed(here, piece)
            assert (here is None) == (expected is None), text[: i + 2]
            if here is None:
                break
            assert native.state_key(here) == reference.state_key(expected)
    assert refusals > 100  # the documents reach repeated keys


_SIZED_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "tags": {"type": "array", "items": {"type": "string"}},
        "score": {"type": "number"},
        "kind": {"enum": ["alpha", "beta", "gamma"]},
    },
    "required": ["name", "tags", "score", "kind"],
}


def _allowed(mask: np.ndarray, vocab) -> list[int]:
    """The text tokens a mask (one bool or bit per token) allows, EOS left out."""
    if mask.dtype != bool:  # packed: bit t of the little-endian words
        mask = np.unpackbits(mask.view(np.uint8), bitorder="little").astype(bool)
    ids = np.flatnonzero(mask[: vocab.size])
    return [int(t) for t in ids if int(t) not in vocab.eos_ids]


def test_nbytes_grows_with_the_states_a_grammar_visits(smollm_vocab):
    """A compiled schema's automaton reports bytes at once, and more after masks and steps
    of new states: its lexer, its parser's nodes and its native masks' memos all grow."""
    from constrain.engine.grammar.native_chart import NativeMasks

    grammar = cn.Grammar.from_json_schema(_SIZED_SCHEMA)
    constraint = cn.Constraint(grammar, smollm_vocab)
    automaton = grammar.automaton
    constraint.start().mask()
    fresh = automaton.nbytes()
    lexer, chart = automaton.lexer.nbytes, automaton.parser.nbytes
    masks = [made for made in automaton._handed if isinstance(made, NativeMasks)]
    assert fresh > 0 and lexer > 0 and chart > 0 and len(masks) == 1
    filled = masks[0].nbytes
    rng = random.Random(11)
    for _ in range(6):
        matcher = constraint.start()
        for _ in range(40):
            allowed = _allowed(matcher.mask(), smollm_vocab)
            if not allowed:
                break
            matcher.advance(rng.choice(allowed))
    assert automaton.lexer.nbytes > lexer
    assert automaton.parser.nbytes > chart
    assert masks[0].nbytes > filled
    assert automaton.nbytes() > fresh + (automaton.lexer.nbytes - lexer)


def test_native_chart_bytes_fall_when_its_nodes_are_released():
    """The parser's running count of node bytes follows the nodes: it grows as states are
    built and falls back once they are forgotten and no state holds them."""
    automaton = cn.grammars.load("json").with_engine("native").automaton
    text = b'{"a": [1, "x", {"b": ' * 30 + b"null" + b"}]}" * 30
    base = automaton.parser.nbytes
    states = [automaton.step(automaton.start, text[:cut]) for cut in range(0, len(text), 3)]
    grown = automaton.parser.nbytes
    assert all(s is not None for s in states) and grown > base + 50_000
    automaton.parser.max_items = 1  # the next new node forgets every interned one
    assert automaton.step(automaton.start, b"[[7, 8") is not None
    automaton.parser.max_items = 1 << 18
    del states
    assert automaton.parser.nbytes < base + (grown - base) // 4


def test_native_lexer_rows_stay_within_their_byte_bound(monkeypatch):
    """The Python copies of the native lexer's rows stay under their byte bound however many
    states are read, and read the same rows as the native lexer."""
    from constrain.engine.grammar import lexers

    monkeypatch.setattr(lexers, "ROW_CACHE_BYTES", 20_000)
    automaton = cn.Grammar.from_json_schema(_SIZED_SCHEMA).automaton
    lexer = automaton.lexer
    assert isinstance(lexer, lexers.NativeLexer)
    text = b'{"name":"abcdefghijklmnopqrstuvw","tags":["x y","zz"],"score":-12.5,"kind":"gam'
    assert automaton.step(automaton.start, text) is not None  # new lexer states on the way
    states = np.arange(1, lexer.n_states)
    assert len(states) > 50
    rows = lexer.rows(states)
    for s in random.Random(5).sample(states.tolist(), 20):
        assert lexer.row(s) == lexer.native.row(s).tolist()
        assert lexer.live_bytes(s) == tuple(np.flatnonzero(rows[s - 1]).tolist())
    assert lexer._rows.bytes <= 20_000 and len(lexer._rows) < len(states)
    assert lexer._live.bytes <= 5_000
    assert lexer.nbytes >= lexer.native.nbytes + lexer._rows.bytes


def test_nbytes_is_read_safely_while_batches_fill(smollm_vocab):
    """Threads reading `nbytes` (which takes each grammar's lock) while two other threads fill
    batches of those grammars' masks without the GIL and step them, with the interpreter
    switching threads as often as it can: no crash, no deadlock, every reading positive."""
    import sys
    import threading

    from constrain.engine.matcher import TokenAutomaton, prefill_masks

    grammars = [
        cn.Grammar.from_json_schema(_SIZED_SCHEMA),
        cn.Grammar.from_json_schema({"type": "array", "items": {"type": "integer"}}),
        cn.grammars.load("json"),
    ]
    automata = [TokenAutomaton(grammar, smollm_vocab) for grammar in grammars]
    done = threading.Event()
    failures: list = []
    readings: list[int] = []

    def fill(seed: int):
        rng = random.Random(seed)
        try:
            for _ in range(3):
                here = [a.start().state for a in automata]
                for _ in range(25):
                    prefill_masks(list(zip(automata, here)), threads=2)
                    for k, a in enumerate(automata):
                        allowed = _allowed(a.masks.get(here[k]), smollm_vocab)
                        if allowed:
                            here[k] = a.step(here[k], rng.choice(allowed))
        except Exception as exc:  # noqa: BLE001 (reported below)
            failures.append(exc)

    def read():
        try:
            while not done.is_set():
                for a in automata:
                    masks = a.native_masks()
                    sizes = [a.automaton.nbytes(), masks.nbytes, a.automaton.lexer.nbytes]
                    readings.extend(sizes)
                    if min(sizes) <= 0:
                        failures.append(sizes)
        except Exception as exc:  # noqa: BLE001 (reported below)
            failures.append(exc)

    switching = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        fillers = [threading.Thread(target=fill, args=(seed,)) for seed in range(2)]
        readers = [threading.Thread(target=read) for _ in range(3)]
        for t in [*readers, *fillers]:
            t.start()
        for t in fillers:
            t.join(timeout=300)
        done.set()
        for t in readers:
            t.join(timeout=60)
    finally:
        sys.setswitchinterval(switching)
    assert not any(t.is_alive() for t in [*fillers, *readers])
    assert failures == []
    assert len(readings) > 30


def test_python_engine_grammars_answer_nbytes(monkeypatch):
    """A Python engine grammar has no native parts, yet answers `nbytes` from its Python
    structures, growing with the states it reads; its per-state memos stay in their bound."""
    from constrain.engine.grammar import cfg

    monkeypatch.setattr(cfg, "_MEMO_BYTES", 4_000)
    automaton = cn.grammars.load("json").with_engine("python").automaton
    fresh = automaton.nbytes()
    text = b'{"a": [1, "x", {"b": ' * 8 + b"null" + b"}]}" * 8
    for cut in range(len(text)):
        automaton.expected_bytes(automaton.step(automaton.start, text[:cut]))
    assert 0 < fresh < automaton.nbytes()
    assert 0 < automaton._expected.bytes <= 4_000
