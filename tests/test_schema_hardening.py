"""JSON Schema front end, hardened (issue 23): canonical values in generation and every
spelling in validation, invalid schemas as errors with their pointer, valid documents that
used to be refused, and a fuzz of the compiler on mutated schemas.

Oracles: `json` (what a text means), `jsonschema` (whether a value is valid), enumeration.
"""

from __future__ import annotations

import copy
import json
import random
import time
from decimal import Decimal

import jsonschema
import pytest
from contract import accepts_text, assert_mask_matches_checks
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import constrain as cn
from constrain.constraints.spec import ConstraintSpec
from constrain.errors import ConstrainError, GrammarError, SchemaError


def _constraint(schema, vocab, **options) -> cn.Constraint:
    return cn.Constraint(cn.Grammar.from_json_schema(schema, **options), vocab)


# -- 1. canonical values in generation, every spelling in validation ------------------------------

_YEAR = {
    "type": "object",
    "properties": {"year": {"type": "integer"}},
    "required": ["year"],
}
_NUMBER_TEXTS = [
    "0", "-0", "0.0", "-0.0", "7", "7.0", "7.00", "-7", "-7.0", "2.5", "2.50", "-2.5", "10",
    "10.0", "100.000", "0.05", "12345678901234567890",
]  # fmt: skip
_NUMERIC_SCHEMAS = [
    {"type": "integer"},
    {"type": "number"},
    {"type": "integer", "minimum": -5, "maximum": 10},
    {"type": "number", "maximum": 10},
    {"type": "number", "multipleOf": 0.5},
    {"enum": [7, 2.5, 0]},
    {"const": 10.0},
    {"not": {"type": "integer"}},
    {"type": ["integer", "string"]},
]


def _canonical(text: str) -> bool:
    """The oracle of canonical spelling (by `decimal`): the text is the shortest one of its
    value, without an exponent: no fraction ending in ``0`` and never ``-0``."""
    value = Decimal(text)
    return text == ("0" if value == 0 else format(value.normalize(), "f"))


@pytest.mark.parametrize("schema", _NUMERIC_SCHEMAS, ids=json.dumps)
def test_generation_writes_numbers_canonically(schema, smollm_vocab):
    """Default (canonical) spelling: a valid number text is admitted exactly when it is
    canonical; ``spellings="all"`` admits every valid no-exponent text. Before: `1972.0` and
    `-0` were admitted for integers, and `2.50` for numbers (issue 34)."""
    canonical = _constraint(schema, smollm_vocab)
    every = _constraint(schema, smollm_vocab, spellings="all")
    validator = jsonschema.Draft202012Validator(schema)
    for text in _NUMBER_TEXTS:
        valid = validator.is_valid(json.loads(text))
        assert accepts_text(every, text) == valid, text
        assert accepts_text(canonical, text) == (valid and _canonical(text)), text


def test_integer_values_have_type_int(smollm_vocab):
    """The README's case: `{"year": 1972.0}` is refused in generation, so `.value` is an int."""
    canonical = _constraint(_YEAR, smollm_vocab)
    assert accepts_text(canonical, '{"year":1972}')
    assert not accepts_text(canonical, '{"year":1972.0}')
    assert accepts_text(_constraint(_YEAR, smollm_vocab, spellings="all"), '{"year":1972.0}')
    spec = ConstraintSpec(type=int)
    grammar = spec.constraint(smollm_vocab).grammar
    assert not accepts_text(cn.Constraint(grammar, smollm_vocab), "1972.0")
    assert isinstance(spec.value("1972"), int)


def test_canonical_integers_mask_matches_brute_force(smollm_vocab):
    """After `1972` the mask refuses `.` (and every token starting with it)."""
    grammar = cn.Grammar.from_json_schema(_YEAR)
    prefix = smollm_vocab.encode('{"year":1972')
    mask = assert_mask_matches_checks(grammar, smollm_vocab, prefix)
    allowed = [smollm_vocab.token_bytes(t) or b"" for t in mask.nonzero()[0]]
    assert allowed and not any(text.startswith(b".") for text in allowed)


def test_unknown_spellings_is_an_error():
    with pytest.raises(GrammarError, match="spellings"):
        cn.Grammar.from_json_schema({"type": "integer"}, spellings="some")


# -- 3. valid documents with escapes, in the "all" spellings ---------------------------------------

_ESCAPED = [
    ({"enum": ["kg/m³", "m/s"]}, ['"kg/m\\u00b3"', '"kg/m\\u00B3"', '"kg\\/m³"', '"\\u006d/s"']),
    ({"const": 'a"b\n😀'}, ['"a\\u0022b\\u000a\\ud83d\\ude00"', '"a\\"b\\u000A\\uD83D\\uDE00"']),
    (
        {"type": "object", "properties": {"unité": {"type": "string"}}, "required": ["unité"]},
        ['{"unit\\u00e9":"x"}', '{"\\u0075nit\\u00c9":"\\u0078"}'],
    ),
    ({"type": "string", "pattern": "^[a-c]+é$", "maxLength": 4}, ['"\\u0061b\\u00e9"']),
    ({"type": "string", "maxLength": 2}, ['"\\u0041\\n"', '"\\ud83d\\ude00"']),
    (
        {"type": "object", "additionalProperties": {"type": "integer"}},
        ['{"\\u0061":1,"b":2}', '{"\\u0061":1,"\\u0062":"x"}'],
    ),
    ({"type": "string", "format": "date"}, ['"2024\\u002d01-31"']),
    ({"type": "string", "minLength": 40}, ['"' + "\\u0041" * 40 + '"', '"' + "ab" * 19 + '"']),
]


@pytest.mark.parametrize(("schema", "texts"), _ESCAPED, ids=lambda x: json.dumps(x)[:40])
def test_every_spelling_of_a_valid_value_is_accepted(schema, texts, smollm_vocab):
    """With ``spellings="all"`` acceptance is `jsonschema`'s verdict on `json.loads(text)`;
    the canonical (generation) grammar admits only texts without optional escapes. Before:
    every escaped spelling below was refused."""
    every = _constraint(schema, smollm_vocab, spellings="all")
    canonical = _constraint(schema, smollm_vocab)
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
    for text in texts:
        value = json.loads(text)
        assert accepts_text(every, text) == validator.is_valid(value), text
        plain = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        assert accepts_text(canonical, plain) == validator.is_valid(value), plain
        if plain != text:
            assert not accepts_text(canonical, text), text


def test_escaped_repeat_of_a_key_is_refused_by_mask_and_check(smollm_vocab):
    """A key spelled with an escape still counts as a repeat (``"\\u0061"`` is ``"a"``): the
    mask and `check` agree inside such a key."""
    schema = {"type": "object", "additionalProperties": {"type": "integer"}}
    grammar = cn.Grammar.from_json_schema(schema, spellings="all")
    constraint = cn.Constraint(grammar, smollm_vocab)
    assert not accepts_text(constraint, '{"ab":1,"a\\u0062":2}')
    assert accepts_text(constraint, '{"ab":1,"a\\u0063":2}')
    for prefix in ('{"ab":1,"a\\u00', '{"ab":1,"a'):
        assert_mask_matches_checks(grammar, smollm_vocab, smollm_vocab.encode(prefix))


# -- 3. any_order for any number of properties ------------------------------------------------------


def _wide_schema(n: int, required: list[int], extra) -> dict:
    return {
        "type": "object",
        "properties": {f"k{i}": {"type": "integer"} for i in range(n)},
        "required": [f"k{i}" for i in required],
        "additionalProperties": extra,
    }


@pytest.mark.parametrize("extra", [False, {"type": "string"}])
def test_any_order_holds_beyond_ten_properties(extra, smollm_vocab):
    """14 properties, 3 required, in any order: acceptance agrees with `jsonschema` on random
    member orders, with missing required keys and with repeated keys (which `jsonschema`
    cannot see: `json.loads` keeps the last; refused by us as the docs say). Before: the
    object kept schema order (with a warning), refusing valid reorderings."""
    schema = _wide_schema(14, [1, 7, 13], extra)
    constraint = _constraint(schema, smollm_vocab, any_order=True)
    validator = jsonschema.Draft202012Validator(schema)
    rng = random.Random(0)
    for _ in range(40):
        keys = rng.sample(range(14), rng.randint(0, 14))
        members = [(f"k{i}", i) for i in keys]
        if rng.random() < 0.3:
            members.append(("zz", "s" if rng.random() < 0.5 else 5))
        text = "{" + ",".join(f'"{k}":{json.dumps(v)}' for k, v in members) + "}"
        assert accepts_text(constraint, text) == validator.is_valid(json.loads(text)), text
    assert not accepts_text(constraint, '{"k1":1,"k7":2,"k13":3,"k1":4}')  # a repeated key
    assert accepts_text(constraint, '{"k13":3,"k7":2,"k1":1}')


def test_any_order_mask_matches_brute_force(smollm_vocab):
    """Inside a wide any-order object, after every required key: masks agree with fresh
    checks (the closing brace is allowed, a repeated key is not)."""
    schema = _wide_schema(12, [0, 5], False)
    grammar = cn.Grammar.from_json_schema(schema, any_order=True, whitespace="default")
    for prefix in ('{"k5": 1, "k0": 2', '{"k5": 1, "k3": 2, "k', '{"k5": 1'):
        assert_mask_matches_checks(grammar, smollm_vocab, smollm_vocab.encode(prefix))


def test_any_order_counts_properties(smollm_vocab):
    schema = {**_wide_schema(12, [2], True), "minProperties": 2, "maxProperties": 3}
    constraint = _constraint(schema, smollm_vocab, any_order=True)
    validator = jsonschema.Draft202012Validator(schema)
    for keys in ([2], [11, 2], [3, 2, 9], [4, 3, 2, 1], [1, 3]):
        text = "{" + ",".join(f'"k{i}":{i}' for i in keys) + "}"
        assert accepts_text(constraint, text) == validator.is_valid(json.loads(text)), text


def test_word_boundary_in_a_pattern_is_a_clear_error():
    """`\\b` (ECMA-262 word boundary) is not expressible by our automata yet: a clear error
    naming the pattern, never a weaker grammar."""
    with pytest.raises(cn.UnsupportedSchemaError, match=r"pattern '\\\\bkg\\\\b'.*word boundary"):
        cn.Grammar.from_json_schema({"type": "string", "pattern": r"\bkg\b"})
    # `[\b]` is a backspace character
    grammar = cn.Grammar.from_json_schema({"type": "string", "pattern": r"^[\b]$"})
    automaton = grammar.automaton
    state = automaton.step(automaton.start, b'"\\b"')
    assert state is not None and automaton.accepting(state)


# -- 2. invalid schemas are errors, with their JSON pointer ----------------------------------------

_INVALID = [
    ({"type": "object", "required": "name"}, "required", "/required"),
    ({"type": "string", "maxLength": "10"}, "maxLength", "/maxLength"),
    ({"type": "integer", "minimum": "5"}, "minimum", "/minimum"),
    ({"type": "object", "properties": [1]}, "properties", "/properties"),
    (
        {"properties": {"a": {"items": {"minItems": -1}}}},
        "minItems",
        "/properties/a/items/minItems",
    ),
    ({"anyOf": "x"}, "anyOf", "/anyOf"),
    ({"allOf": [{"type": "strin"}]}, "type", "/allOf/0/type"),
    ({"type": "array", "uniqueItems": "yes"}, "uniqueItems", "/uniqueItems"),
    ({"enum": "abc"}, "enum", "/enum"),
    ({"dependentRequired": {"a": "b"}}, "dependentRequired", "/dependentRequired/a"),
    ({"$defs": {"x": {"multipleOf": 0}}, "$ref": "#/$defs/x"}, "multipleOf", "/$defs/x/multipleOf"),
    (
        {"type": "object", "patternProperties": {"^a": 3}},
        "patternProperties",
        "/patternProperties/^a",
    ),
    ({"type": "object", "required": [1]}, "required", "/required/0"),
    ({"type": "string", "minLength": True}, "minLength", "/minLength"),
    ({"exclusiveMaximum": "3"}, "exclusiveMaximum", "/exclusiveMaximum"),
]


@pytest.mark.parametrize(("schema", "keyword", "pointer"), _INVALID, ids=lambda x: str(x)[:40])
def test_invalid_schemas_are_errors_with_a_pointer(schema, keyword, pointer):
    """Each schema is invalid under its metaschema (`jsonschema`'s check_schema agrees), and
    compiling it is a `SchemaError` naming the keyword and where. Before: `required: "name"`
    required the keys n, a, m, e; `maxLength: "10"` was read as 10; others were TypeErrors."""
    with pytest.raises(jsonschema.SchemaError):
        jsonschema.Draft202012Validator.check_schema(schema)
    with pytest.raises(SchemaError) as info:
        cn.Grammar.from_json_schema(schema)
    assert info.value.keyword == keyword
    assert info.value.pointer == pointer
    assert pointer in str(info.value)


def test_draft4_exclusive_bounds_stay_valid():
    """Boolean `exclusiveMaximum` (draft 4's style) is read with `maximum`, in any dialect."""
    grammar = cn.Grammar.from_json_schema({"maximum": 3, "exclusiveMaximum": True})
    assert grammar.matches("2") and not grammar.matches("3")


@pytest.mark.parametrize(
    "schema",
    ['{"type": ', "not json", {"enum": [{1, 2}]}, {"const": float("nan")}, {"enum": [("a", 1)]}],
    ids=str,
)
def test_non_json_schemas_are_schema_errors(schema):
    """Text that is not JSON (before: `JSONDecodeError`) and Python values that are not JSON
    data (before: `TypeError` from deep inside) are `SchemaError`s."""
    with pytest.raises(SchemaError):
        cn.Grammar.from_json_schema(schema)


def test_non_json_schema_through_generate_is_a_schema_error(smollm_vocab):
    """`ConstraintSpec` (what `generate(schema=...)` builds) used to raise `TypeError` from
    its cache key for a schema holding a set or a non-string key."""
    for schema in ({"enum": [{1, 2}]}, {"properties": {1: {}}}, "{not json"):
        with pytest.raises(SchemaError):
            ConstraintSpec(schema=schema).constraint(smollm_vocab)


def test_a_string_of_choices_is_an_error(smollm_vocab):
    """`choices="yes"` used to mean the choices y, e, s."""
    with pytest.raises(GrammarError, match="list of strings"):
        cn.Grammar.from_choices("yes")
    with pytest.raises(cn.ConfigError, match="list of strings"):
        ConstraintSpec(choices="yes").constraint(smollm_vocab)
    assert cn.Grammar.from_choices(["yes"]).automaton is not None


# -- 4. fuzz: mutated schemas raise only ConstrainErrors, in bounded time ----------------------------

_SEEDS = [
    {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 20, "pattern": "^[A-Z]"},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "uniqueItems": True},
            "kind": {"oneOf": [{"const": "x"}, {"type": "number", "multipleOf": 0.5}]},
        },
        "required": ["name"],
        "additionalProperties": False,
    },
    {
        "$defs": {"node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}}}},
        "anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}],
        "if": {"minProperties": 1},
        "then": {"maxProperties": 3},
        "dependentRequired": {"a": ["b"]},
    },
    {"type": "array", "prefixItems": [{"type": "boolean"}], "contains": {"type": "string"},
     "minContains": 1, "items": {"not": {"type": "null"}}},
]  # fmt: skip
_ODD_VALUES = [
    "name", ["name"], 5, -1, 1e308, 10**40, 0.1, True, None, {}, [], {"type": "string"},
    [1, 2], "^(a|b$", "#/nowhere", "integer", {"$ref": "#"}, [[[]]], float(2**53),
]  # fmt: skip
_COMPILE_LIMIT = 1.0  # seconds: the fuzz compiles with this timeout and checks it holds


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*prefix, i))


def _set(node, path, value):
    if not path:
        return value
    node[path[0]] = _set(node[path[0]], path[1:], value)
    return node


@st.composite
def _mutated(draw):
    schema = copy.deepcopy(draw(st.sampled_from(_SEEDS)))
    for _ in range(draw(st.integers(1, 3))):
        paths = list(_paths(schema))
        path = draw(st.sampled_from(paths))
        kind = draw(st.sampled_from(["odd", "listify", "nest", "drop"]))
        if kind == "odd":
            schema = _set(schema, path, copy.deepcopy(draw(st.sampled_from(_ODD_VALUES))))
        elif kind == "listify":
            schema = _set(schema, path, [_get(schema, path)])
        elif kind == "nest":
            depth = draw(st.integers(1, 80))
            inner = _get(schema, path)
            for _ in range(depth):
                inner = {draw(st.sampled_from(["not", "items", "allOf"])): inner}
                if "allOf" in inner:
                    inner["allOf"] = [inner["allOf"]]
            schema = _set(schema, path, inner)
        elif path and isinstance(_get(schema, path[:-1]), dict):
            del _get(schema, path[:-1])[path[-1]]
    return schema


def _get(node, path):
    for p in path:
        node = node[p]
    return node


@settings(
    max_examples=80,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(_mutated(), st.sampled_from([{}, {"any_order": True}, {"spellings": "all"}]))
def test_fuzz_mutated_schemas_raise_only_constrain_errors(schema, options):
    start = time.monotonic()
    try:
        cn.Grammar.from_json_schema(schema, timeout=_COMPILE_LIMIT, **options)
    except ConstrainError:
        pass
    # the limit holds (with room for the last step before a deadline check)
    assert time.monotonic() - start < _COMPILE_LIMIT + 3.0


# -- every_escape against Python's `re` and `json` ------------------------------------------------

_STRING_PATTERNS = ["[a-c]*é?", ".{0,3}", "(ab|\\n)+x?", "[^a]{2,4}", "[\\x00-\\x7f]*", "😀|.b"]


def _spelled(text: str, choices: list[int]) -> str:
    """`text` as a JSON string body, each character spelled by the next choice: raw (where
    JSON allows), a short escape, or ``\\u`` in lower or upper case (a surrogate pair above
    U+FFFF)."""
    out = []
    for i, ch in enumerate(text):
        pick = choices[i % len(choices)]
        cp = ord(ch)
        short = {
            '"': '\\"',
            "\\": "\\\\",
            "/": "\\/",
            "\b": "\\b",
            "\f": "\\f",
            "\n": "\\n",
            "\r": "\\r",
            "\t": "\\t",
        }.get(ch)
        if pick == 0 and cp >= 0x20 and ch not in '"\\':
            out.append(ch)
        elif pick == 1 and short:
            out.append(short)
        else:
            units = (
                [cp]
                if cp < 0x10000
                else [0xD800 + ((cp - 0x10000) >> 10), 0xDC00 + ((cp - 0x10000) & 0x3FF)]
            )
            hexes = "".join(f"\\u{u:04x}" for u in units)
            out.append(hexes.upper().replace("\\U", "\\u") if pick == 2 else hexes)
    return '"' + "".join(out) + '"'


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pattern=st.sampled_from(_STRING_PATTERNS),
    text=st.text(st.sampled_from('abcé😀\n"\\/\x01 x'), max_size=5),
    choices=st.lists(st.integers(0, 3), min_size=1, max_size=4),
)
def test_every_escape_accepts_a_spelling_iff_re_accepts_its_value(pattern, text, choices):
    """The expanded DFA accepts a spelled string exactly when Python's `re` accepts the string
    it decodes to (`json.loads`), for every mix of raw characters and escapes."""
    import re

    from constrain.engine.regex import compile_regex, quoted
    from constrain.jsonschema.spellings import every_escape

    dfa = every_escape(quoted(compile_regex(pattern, encoding="json")))
    # every state reachable from the start (built by reading it) can still reach acceptance
    edges, todo = {}, [dfa.start]
    while todo:
        state = todo.pop()
        if state not in edges:
            edges[state] = [t for _, t in dfa.live_classes(state)]
            todo.extend(edges[state])
    live = {s for s in edges if dfa.accepts(s)}
    while grown := {s for s, ts in edges.items() if s not in live and live.intersection(ts)}:
        live |= grown
    assert live == set(edges), f"states {set(edges) - live} of /{pattern}/ lead nowhere"
    spelled = _spelled(text, choices)
    assert json.loads(spelled) == text
    assert dfa.matches(spelled) == bool(re.fullmatch(pattern, text)), spelled
