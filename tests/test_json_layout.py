"""JSON whitespace layouts (`constrain.jsonschema.layout`): "natural" admits what JSON printers
write and nothing odd; "default", "compact" and a user's regex keep their languages.

Oracles independent of the compiler: `json.dumps` in the styles printers use, a hand-written
list of odd layouts, and a regex of the natural layout written here from its specification
(per gap between two JSON tokens), compared with `Grammar.matches` on random whitespace
insertions and with masks token by token.
"""

from __future__ import annotations

import json
import random
import re

import pytest
from contract import assert_mask_matches_checks, assert_mask_matches_regex

import constrain as cn
from constrain.jsonschema import WHITESPACE, Layout

# -- the natural layout, written from its specification ----------------------------------------

BREAK = r"\n(?: {0,40}|\t{0,10})"  # a line break, then spaces or tabs up to 40 columns
GAPS = {  # the whitespace allowed between two JSON tokens, by what is on either side
    "open": f"(?:{BREAK})?",  # after { or [ of a non-empty container
    "close": f"(?:{BREAK})?",  # before } or ] of a non-empty container
    "empty": "",  # inside {} and []
    "before_colon": "",
    "after_colon": " ?",
    "before_comma": "",
    "after_comma": f"(?: |{BREAK})?",
    "edge": "",  # before and after the document's value
}
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\]:,]|[^{}\[\]:,"\s]+')


def json_tokens(compact: str) -> list[str]:
    """The tokens of a compact JSON text: strings, scalars and punctuation."""
    tokens = _TOKEN.findall(compact)
    assert "".join(tokens) == compact
    return tokens


def gap_kind(left: str | None, right: str | None) -> str:
    """Which gap of the natural layout lies between two tokens (None: the document's edge)."""
    if left is None or right is None:
        return "edge"
    if left in "{[" and right in "}]":
        return "empty"
    if left in "{[":
        return "open"
    if right in "}]":
        return "close"
    if right == ":":
        return "before_colon"
    if left == ":":
        return "after_colon"
    if right == ",":
        return "before_comma"
    if left == ",":
        return "after_comma"
    raise AssertionError(f"two tokens without punctuation between them: {left!r} {right!r}")


def natural_pattern(value) -> str:
    """The regex of every natural layout of `value`'s canonical text (members as given)."""
    tokens = json_tokens(json.dumps(value, separators=(",", ":"), ensure_ascii=False))
    parts = [GAPS["edge"]]
    for i, token in enumerate(tokens):
        parts.append(re.escape(token))
        right = tokens[i + 1] if i + 1 < len(tokens) else None
        parts.append(GAPS[gap_kind(token, right)])
    return "".join(parts)


# -- schemas and random instances (members in schema order, canonical spellings) ---------------

_WORDS = ["Ada", "Lovelace", "café", "naïve", "a b", 'quote"d', "tab\there", "line\nbreak", ""]

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "pattern": "^[A-Z][a-z]+ [A-Z][a-z]+$"},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "city": {"type": "string", "maxLength": 20},
    },
    "required": ["name", "age", "city"],
    "additionalProperties": False,
}
RECORD = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "meta": {
            "type": "object",
            "properties": {
                "ok": {"type": "boolean"},
                "score": {"type": "number"},
                "grid": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}},
            },
            "additionalProperties": False,
        },
        "note": {"type": ["string", "null"]},
    },
    "required": ["id"],
    "additionalProperties": False,
}
ROWS = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {
            "k": {"enum": ["a", "b", 1, None]},
            "v": {"type": "array", "items": {"type": "number"}},
        },
        "required": ["k"],
        "additionalProperties": False,
    },
}
ANY = {}  # every JSON value


def _number(rng: random.Random):
    if rng.random() < 0.5:
        return rng.randint(-1000, 1000)
    value = rng.choice([-1, 1]) * rng.randint(1, 99999) / 100  # never -0.0, never an exponent
    # a whole float is written 694.0, which the one spelling per number refuses (694)
    return int(value) if value.is_integer() else value


def _person(rng):
    first, last = rng.choice(["Ada", "Alan", "Grace"]), rng.choice(["Byron", "Turing", "Hopper"])
    return {"name": f"{first} {last}", "age": rng.randint(0, 120), "city": rng.choice(_WORDS)}


def _record(rng):
    value = {"id": rng.randint(-50, 10**6)}
    if rng.random() < 0.7:
        value["tags"] = [rng.choice(_WORDS) for _ in range(rng.randint(0, 3))]
    if rng.random() < 0.7:
        meta = {}
        if rng.random() < 0.6:
            meta["ok"] = rng.random() < 0.5
        if rng.random() < 0.6:
            meta["score"] = _number(rng)
        if rng.random() < 0.6:
            n = rng.randint(0, 3)
            meta["grid"] = [[rng.randint(0, 9) for _ in range(rng.randint(0, 3))] for _ in range(n)]
        value["meta"] = meta
    if rng.random() < 0.5:
        value["note"] = rng.choice([None, *_WORDS])
    return value


def _rows(rng):
    rows = []
    for _ in range(rng.randint(0, 3)):
        row = {"k": rng.choice(["a", "b", 1, None])}
        if rng.random() < 0.6:
            row["v"] = [_number(rng) for _ in range(rng.randint(0, 3))]
        rows.append(row)
    return rows


def _any(rng, depth=0):
    kinds = ["null", "bool", "number", "string"] + (["array", "object"] * 2 if depth < 4 else [])
    kind = rng.choice(kinds)
    if kind == "null":
        return None
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "number":
        return _number(rng)
    if kind == "string":
        return rng.choice(_WORDS)
    if kind == "array":
        return [_any(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    keys = rng.sample(["a", "b", "name", "é", "x y", ""], rng.randint(0, 3))
    return {k: _any(rng, depth + 1) for k in keys}


CASES = [("person", PERSON, _person), ("record", RECORD, _record), ("rows", ROWS, _rows)]
CASES += [("any", ANY, _any)]


def instances(make, n: int, seed: int = 0) -> list:
    rng = random.Random(seed)
    return [make(rng) for _ in range(n)]


def printed(value) -> dict[str, str]:
    """`value` as JSON printers write it."""
    dumps = {"ensure_ascii": False}
    return {
        "json.dumps": json.dumps(value, **dumps),
        "indent=2": json.dumps(value, indent=2, **dumps),
        "indent=4": json.dumps(value, indent=4, **dumps),
        "compact separators": json.dumps(value, separators=(",", ":"), **dumps),
        "indent=tab": json.dumps(value, indent="\t", **dumps),
        "indent=0": json.dumps(value, indent=0, **dumps),
        "JSON.stringify(v, null, 2)": json.dumps(value, indent=2, separators=(",", ": "), **dumps),
    }


@pytest.fixture(scope="module")
def natural():
    return {name: cn.Grammar.from_json_schema(s, whitespace="natural") for name, s, _ in CASES}


# -- natural: what printers write is admitted ------------------------------------------------


@pytest.mark.parametrize(("name", "schema", "make"), CASES, ids=[c[0] for c in CASES])
def test_natural_admits_what_json_printers_write(natural, name, schema, make):
    for value in instances(make, 40):
        for style, text in printed(value).items():
            assert natural[name].matches(text), f"{style}: {text!r}"
            assert re.fullmatch(natural_pattern(value), text), f"the oracle itself: {text!r}"


def test_natural_admits_empty_containers_and_scalars_alone():
    grammar = cn.Grammar.from_json_schema(ANY, whitespace="natural")
    for text in ["{}", "[]", '{"a": {}}', '{\n  "a": []\n}', "[[], {}]", "1", '"x"', "null"]:
        assert grammar.matches(text), text


# -- natural: odd layouts are refused -----------------------------------------------------------

ODD = [
    '{"name" : "x"}',  # space before a colon
    '{"name":"x"\n,"id":1}',  # a line break before a comma
    '{"name":"x" ,"id":1}',  # a space before a comma
    '{"name":"x", \n  "id":1}',  # a trailing space before a line break
    '{"name":"x",\n  \n  "id":1}',  # a blank line
    '{"name":"x",\n\n"id":1}',  # two line breaks
    '{"name":"x",\r\n  "id":1}',  # \r\n
    ' {"name":"x"}',  # whitespace before the value
    '\n{"name":"x"}',
    '{"name":"x"}\n',  # whitespace after the value
    '{"name":"x"} ',
    '{ "name":"x"}',  # a space inside the braces
    '{"name":"x" }',
    "[ 1]",
    "[1 ]",
    "{ }",  # an empty container is {} or []
    "[ ]",
    "{\n}",
    "[\n]",
    '{"name":  "x"}',  # two spaces after a colon
    '{"name":\t"x"}',  # a tab after a colon
    '{"name":\n  "x"}',  # a line break after a colon
    '{"name":"x",  "id":1}',  # two spaces after a comma
    '{"name":"x",\t"id":1}',  # a tab (without a line break) after a comma
    '{\n \t"name":"x"}',  # spaces and tabs mixed
    "{\n" + " " * 41 + '"name":"x"}',  # deeper than 40 columns
    "{\n" + "\t" * 11 + '"name":"x"}',
]


@pytest.mark.parametrize("text", ODD, ids=[repr(t)[:30] for t in ODD])
def test_natural_refuses_odd_layouts(text):
    compact = re.sub(r"\s+(?=(?:[^\"]*\"[^\"]*\")*[^\"]*$)", "", text)  # outside strings
    grammar = cn.Grammar.from_json_schema(ANY, whitespace="natural")
    assert grammar.matches(compact), compact  # the value itself is fine
    assert not grammar.matches(text)
    value = json.loads(compact)
    assert not re.fullmatch(natural_pattern(value), text)  # the oracle agrees


def test_default_still_admits_the_odd_layouts_that_natural_refuses():
    grammar = cn.Grammar.from_json_schema(ANY, whitespace="default")
    for text in ['{"name" : "x"}', '{"name":"x"\n,"id":1}', '{ "name":"x" }', "{ }", "[\n]"]:
        assert grammar.matches(text), text


# -- natural: a regex oracle agrees on random whitespace insertions ------------------------------

_PIECES = [" ", "  ", "\t", "\n", "\n  ", "\n    ", "\n\t", "\n\t\t", " \n", "\n ", "\r\n",
           "\n\n", "\n" + " " * 40, "\n" + " " * 41, "\n" + "\t" * 10, "\n \t", "\t\n"]  # fmt: skip


def scatter(value, rng: random.Random, rate: float) -> str:
    """`value`'s compact text with a random piece of whitespace in some gaps (edges included)."""
    tokens = json_tokens(json.dumps(value, separators=(",", ":"), ensure_ascii=False))
    out = []
    for token in ["", *tokens]:
        out.append(token)
        if rng.random() < rate:
            out.append(rng.choice(_PIECES))
    return "".join(out)


@pytest.mark.parametrize(("name", "schema", "make"), CASES, ids=[c[0] for c in CASES])
def test_natural_agrees_with_a_regex_oracle_on_random_whitespace(natural, name, schema, make):
    rng = random.Random(1)
    outcomes = set()
    for value in instances(make, 60, seed=2):
        pattern = natural_pattern(value)
        for rate in (0.05, 0.2, 0.5):
            text = scatter(value, rng, rate)
            expected = re.fullmatch(pattern, text) is not None
            assert natural[name].matches(text) == expected, repr(text)
            outcomes.add(expected)
    assert outcomes == {True, False}  # both verdicts were exercised


# the language of arrays of integers in the natural layout, as one regex
_INT = r"-?(?:0|[1-9][0-9]*)"
_INTS = rf"\[\]|\[(?:{BREAK})?{_INT}(?:,(?: |{BREAK})?{_INT})*(?:{BREAK})?\]"


@pytest.mark.parametrize(
    "prefix", ["", "[", "[\n", "[\n  ", "[1", "[1,", "[1, ", "[1,\n", "[1,\n\t", "[1,\n  2\n"]
)
def test_natural_masks_match_a_regex_of_the_language(smollm_vocab, prefix):
    grammar = cn.Grammar.from_json_schema(
        {"type": "array", "items": {"type": "integer"}}, whitespace="natural"
    )
    constraint = cn.Constraint(grammar, smollm_vocab)
    tokens = smollm_vocab.encode(prefix)
    matcher = constraint.start()
    matcher.advance_many(tokens)
    judged = assert_mask_matches_regex(_INTS, smollm_vocab, tokens, matcher.mask(), sample=300)
    assert judged > 300


def test_natural_masks_match_checks_beside_the_text_check(smollm_vocab):
    """Whitespace inside an open object under the duplicate-key check: mask == fresh checks."""
    grammar = cn.Grammar.from_json_schema({"type": "object"}, whitespace="natural")
    prefix = smollm_vocab.encode('{\n  "name": 1,\n  "na')
    assert_mask_matches_checks(grammar, smollm_vocab, prefix, sample=400)


# -- the text check reads natural whitespace ----------------------------------------------------


def test_text_checks_see_through_line_breaks():
    keys = cn.Grammar.from_json_schema({"type": "object"}, whitespace="natural")
    assert keys.matches('{\n  "a": 1,\n  "b": 2\n}')
    assert not keys.matches('{\n  "a": 1,\n  "a": 2\n}')  # a repeated key
    unique = cn.Grammar.from_json_schema(
        {"type": "array", "uniqueItems": True}, whitespace="natural", spellings="all"
    )
    assert unique.matches("[\n  1,\n  2\n]")
    assert not unique.matches("[\n  1,\n  1.0\n]")  # items compare as values
    assert not unique.matches('[\n  {"a": 1, "b": 2},\n  {"b": 2,\n"a": 1}\n]')
    one_of = {  # a check site: the value is validated when complete, here at a line break
        "type": "object",
        "maxProperties": 1,
        "oneOf": [
            {"properties": {"a": {"type": "integer"}}},
            {"properties": {"b": {"type": "string"}}},
        ],
    }
    site = cn.Grammar.from_json_schema(one_of, whitespace="natural")
    assert not site.matches('{\n  "a": 1\n}')  # valid under both branches
    assert site.matches('{\n  "a": "x"\n}')


# -- the layout type: the modes are values of it; default, compact and regexes unchanged ---------


def test_modes_are_layouts():
    assert WHITESPACE["compact"] == Layout()
    assert WHITESPACE["default"] == Layout.uniform(WHITESPACE["default"].after_comma)
    natural = WHITESPACE["natural"]
    assert natural.before_colon is None and natural.before_comma is None
    assert natural.inside_empty is None and natural.after_colon == " "
    assert natural.sites(",") == (None, natural.after_comma)
    assert natural.sites("}") == (natural.before_close, None)


def test_a_layout_value_is_a_whitespace_option():
    one_line = Layout(after_colon=" ", after_comma=" ")  # json.dumps without indent
    grammar = cn.Grammar.from_json_schema(RECORD, whitespace=one_line)
    value = {"id": 1, "tags": ["a", "b"], "meta": {"ok": True}}
    assert grammar.matches(json.dumps(value))
    assert grammar.matches(json.dumps(value, separators=(",", ":")))  # whitespace is optional
    assert not grammar.matches(json.dumps(value, indent=2))
    assert not grammar.matches('{"id": 1, "tags": ["a" , "b"]}')


@pytest.mark.parametrize(("name", "schema", "make"), CASES, ids=[c[0] for c in CASES])
def test_compact_and_default_languages_are_unchanged(name, schema, make):
    compact = cn.Grammar.from_json_schema(schema, whitespace="compact")
    default = cn.Grammar.from_json_schema(schema, whitespace="default")
    old_default = r"[ \t]{0,40}\r?\n[ \t]{0,40}|[ \t]{1,40}"  # before layouts: any gap
    gap = f"(?:{old_default})?"
    rng = random.Random(3)
    for value in instances(make, 30, seed=4):
        tokens = json_tokens(json.dumps(value, separators=(",", ":"), ensure_ascii=False))
        assert compact.matches("".join(tokens))
        pattern = "".join(re.escape(t) + (gap if i + 1 < len(tokens) else "")
                          for i, t in enumerate(tokens))  # fmt: skip
        for rate in (0.1, 0.5):
            text = scatter(value, rng, rate)
            assert compact.matches(text) == (text == "".join(tokens)), repr(text)
            assert default.matches(text) == (re.fullmatch(pattern, text) is not None), repr(text)


def test_a_regex_is_allowed_on_either_side_of_every_punctuation():
    grammar = cn.Grammar.from_json_schema(ROWS, whitespace=r"[ ]{1,2}")
    assert grammar.matches('[ { "k" : 1 , "v" : [ ] } ]')  # [] is an empty container: "[ ]"
    assert grammar.matches('[{"k":"a"},  {"k":null}]')
    assert not grammar.matches('[{"k":"a"},   {"k":null}]')
    assert not grammar.matches('[{"k":"a"},\n{"k":null}]')
    # the same grammar as before layouts: one optional WS nonterminal
    ir, _ = cn.jsonschema.compile_schema(ROWS, whitespace=r"[ ]{1,2}")
    assert [n for n in ir.lexemes if n.startswith("WS")] == ["WS"]


def test_natural_generation_writes_a_natural_layout(tiny_model):
    """A random model takes whatever the mask offers: every layout it writes is natural."""
    complete = 0
    for seed in range(4):
        out = cn.generate(tiny_model, "x", schema=RECORD, schema_options={"whitespace": "natural"},
                          max_tokens=48, seed=seed, chat=False)  # fmt: skip
        if out.complete:
            complete += 1
            assert re.fullmatch(natural_pattern(out.value), out.text), repr(out.text)
    assert complete >= 2
