"""The grammar library held to the real languages it names, with whitespace bounded.

* Sound: random derivations of each library grammar (`random_text`) are accepted by the
  language's own parser: `json.loads`; `csv` (one record, which writes back and reads the
  same); `ast.parse(mode="eval")` (Python; arithmetic once ``^`` is written ``**``); SQLite
  preparing the statement against the tables, columns and functions it asks for.
* Complete on realistic input: a hand-written corpus per language, each example first checked
  by the real parser, is accepted by a fresh grammar, byte by byte and token by token.
* Whitespace between tokens follows the bound docs/grammars.md states, written here as a Python
  regex (the oracle), for the library and for JSON Schema generation.
* Keywords (engine semantics): a string terminal a regex terminal also matches never ends
  inside a word, as in lark's basic lexer, and otherwise the engine accepts only what lark's
  contextual lexer accepts.
* Slow: the bundled model, greedy, on 50 prompts: what it writes under each grammar is accepted
  by the real parser, and no output runs out of tokens on whitespace.
"""

from __future__ import annotations

import ast
import csv
import io
import json
import re
import sqlite3
import warnings
from collections.abc import Callable

import lark
import numpy as np
import pytest
from contract import accepts_token_by_token

import constrain as cn
import constrain.grammars as library
from constrain.engine.grammar.sample import random_text
from constrain.engine.vocab import Vocabulary

# -- the real languages ---------------------------------------------------------------------------


def _python(text: str) -> None:
    """Python's own parser, warnings (invalid escapes, ...) as errors."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ast.parse(text, mode="eval")


def _arithmetic(text: str) -> None:
    """Arithmetic read as Python: ``^`` is ``**``; names are prefixed (``in`` is a variable
    in arithmetic, a keyword in Python)."""
    _python(re.sub(r"[a-z][a-z0-9_]*", lambda m: "v_" + m.group(), text).replace("^", "**"))


def _csv(text: str) -> None:
    """One record, read strictly; written back by `csv.writer`, it reads the same."""
    rows = list(csv.reader(io.StringIO(text, newline=""), strict=True))
    if text in ("", "\n", "\r\n"):
        assert rows in ([], [[]]), rows  # csv's spelling of one empty record
        return
    assert len(rows) == 1, rows
    out = io.StringIO()
    csv.writer(out).writerow(rows[0])
    assert list(csv.reader(io.StringIO(out.getvalue(), newline=""), strict=True)) == rows


# errors SQLite reports after parsing a statement: names and their use, not syntax
_SQL_SEMANTIC = (
    "ambiguous column name",
    "misuse of aggregate",
    "term out of range",
    "aggregate functions are not allowed",
    "no such column",
)
_SQL_SYNTAX = ("syntax error", "unrecognized token", "incomplete input")


def _sqlite_prepare(text: str) -> str | None:
    """Prepare `text` in SQLite (``EXPLAIN``), creating the tables, columns and functions it
    names as SQLite asks for them (unqualified columns in the first table). None when it
    prepares; else SQLite's last error, which must be about names (a syntax error fails)."""
    conn = sqlite3.connect(":memory:")
    tables: list[str] = []
    columns: dict[str, set[str]] = {}
    for _ in range(200):
        try:
            conn.execute("EXPLAIN " + text)
            return None
        except sqlite3.OperationalError as exc:
            message = str(exc)
        assert not any(s in message for s in _SQL_SYNTAX), (message, text)
        if m := re.fullmatch(r"no such table: (\w+)", message):
            conn.execute(f'CREATE TABLE "{m[1]}"(_)')
            tables.append(m[1].lower())
            columns[m[1].lower()] = set()
        elif m := re.fullmatch(r"no such column: (?:(\w+)\.)?(\w+)", message):
            owner, column = (m[1] or "").lower(), m[2].lower()
            # a table alias is not a table: the column goes to every table then
            targets = [owner] if owner in columns else tables if owner else tables[:1]
            targets = [t for t in targets if column not in columns[t]]
            if not targets:
                return message
            for t in targets:
                conn.execute(f'ALTER TABLE "{t}" ADD COLUMN "{column}"')
                columns[t].add(column)
        elif m := re.fullmatch(r"no such function: (\w+)", message):
            conn.create_function(m[1], -1, lambda *args: 0)
        else:
            return message
    raise AssertionError(f"SQLite keeps asking for names: {text!r}")


def _sqlite(text: str) -> None:
    error = _sqlite_prepare(text)
    assert error is None or any(s in error for s in _SQL_SEMANTIC), (error, text)


def _json(text: str) -> None:
    json.loads(text)


ORACLES: dict[str, Callable[[str], None]] = {
    "arithmetic": _arithmetic,
    "csv": _csv,
    "json": _json,
    "python_expr": _python,
    "sql": _sqlite,
}


def test_every_library_grammar_has_an_oracle():
    assert sorted(ORACLES) == library.names()


def _fresh(name: str) -> cn.Grammar:
    """The library grammar compiled anew (not `library.load`'s cached one)."""
    return cn.Grammar.from_lark_file(library.path(name))


# -- sound: random derivations are in the real language ---------------------------------------


@pytest.mark.parametrize("name", library.names())
def test_random_derivations_are_accepted_by_the_real_parser(name):
    grammar = _fresh(name)
    rng = np.random.default_rng(23)
    prepared = 0
    for _ in range(100):
        text = random_text(grammar.ir, rng, max_depth=7)
        assert grammar.matches(text), text  # the derivation lexes back as derived
        ORACLES[name](text)
        if name == "sql":
            prepared += _sqlite_prepare(text) is None
    if name == "sql":
        assert prepared >= 60  # most statements prepare outright, not only parse


# -- complete: realistic inputs are in the grammar ----------------------------------------------

_NESTED = {"id": 7, "name": "Ada", "tags": ["math", "code"], "address": {"city": "London"}}

CORPUS: dict[str, list[str]] = {
    "json": [
        "{}",
        "[]",
        "0",
        "-0.5",
        "1e10",
        "6.02E+23",
        '"text"',
        "true",
        "false",
        "null",
        '{"name": "Ada", "age": 36}',
        '{"a":1,"b":[1,2,3],"c":{"d":null}}',
        '[1, 2.5, -3e-2, "x", true, false, null, {}, []]',
        r'{"unicode": "caf\u00e9 \ud83d\ude00", "escapes": "\"\\\/\b\f\n\r\t"}',
        '{"emoji": "😀", "cjk": "漢字"}',
        json.dumps(_NESTED, indent=2),
        json.dumps(_NESTED, indent=4),
        json.dumps(_NESTED, indent="\t"),
        json.dumps(_NESTED, indent=2).replace("\n", "\r\n"),
        json.dumps(_NESTED, indent=2) + "\n",
        '{"line": "ends"}\r\n',
        '{\n  "items": [\n    {"id": 1, "tags": ["a", "b"]},\n    {"id": 2, "tags": []}\n  ]\n}',
        "[[[[[]]]]]",
        '{"k": ""}',
        '"\\u0041"',
        '{"big": 123456789012345678901234567890, "neg": -1.5E-10}',
    ],
    "csv": [
        "a,b,c",
        "a,b,c\n",
        "a,b,c\r\n",
        "1,2,3",
        "name,age\n",
        '"Smith, John",42,"NY"',
        '"He said ""hi""",x',
        "",
        ",",
        ",,",
        "a,,c",
        '"multi\nline",b',
        '"",""',
        "single",
        " spaced , cells ",
        "3.14,-2,1e5",
        "café,naïve",
        "a;b;c",
        "tab\tinside,x",
        "2024-01-31,12:30,ok\n",
    ],
    "arithmetic": [
        "1",
        "1 + 2",
        "3*4",
        "2^10",
        "2 ^ -1",
        "-x",
        "--x",
        "(1 + 2) * 3",
        "a/b/c",
        "x^2 + 2*x + 1",
        "sin(x)^2 + cos(x)^2",
        "max(a, b, c)",
        "f()",
        "1.5 * r^2",
        "-(a - b)",
        "g(h(x), 2)",
        "0.5",
        "100 - 3 * (4 + 5) / 6",
        "a_1 + b2",
        "pi*r^2",
    ],
    "python_expr": [
        "x",
        "x + 1",
        "a * b - c / d",
        "2 ** -1",
        "-x ** 2",
        "a // b % c",
        "~mask & 255",
        "a | b & c",
        "not a",
        "a and b or not c",
        "x if x > 0 else -x",
        "lambda: 0",
        "lambda x, y: x + y",
        "f(x)",
        "f(x, y=2)",
        "f(1, 2, key=value,)",
        "obj.attr.method()",
        "items[0]",
        "items[1:3]",
        "items[:-1]",
        "matrix[i][j]",
        "[1, 2, 3]",
        "[]",
        "(1,)",
        "()",
        "(a, b)",
        "{'a': 1, 'b': 2}",
        "{}",
        "[x * 2 for x in range(10) if x % 3 == 0]",
        "'single' \"double\"",
        r'"escaped \n\t\\ \x41 \u00e9"',
        "a < b <= c != d",
        "x in xs",
        "x not in xs",
        "x is None",
        "x is not None",
        "1.5e-3",
        "True",
        'len(s) >= 3 and s[0] == "a"',
        "max(a, key=lambda p: p.score)",
        "math.sqrt(x ** 2 + y ** 2)",
        "' '.join(words)",
    ],
    "sql": [
        "SELECT * FROM users",
        "SELECT * FROM employees WHERE age > 30",
        "select name, email from users where active = 1;",
        "SELECT DISTINCT city FROM customers ORDER BY city",
        "SELECT COUNT(*) FROM orders",
        "SELECT count(*) AS n FROM orders WHERE status = 'shipped'",
        "SELECT department, AVG(salary) AS avg_salary FROM employees GROUP BY department "
        "HAVING AVG(salary) > 50000",
        "SELECT e.name, d.name AS department FROM employees e JOIN departments d "
        "ON e.department_id = d.id",
        "SELECT u.name, o.total FROM users AS u LEFT JOIN orders AS o ON o.user_id = u.id "
        "WHERE o.total IS NOT NULL",
        "SELECT * FROM products WHERE price BETWEEN 10 AND 20.5",
        "SELECT * FROM products WHERE category IN ('books', 'music') ORDER BY price DESC LIMIT 10",
        "SELECT title FROM books WHERE title LIKE '%SQL%'",
        "SELECT name FROM users WHERE email NOT LIKE '%@example.com'",
        "SELECT id FROM t WHERE deleted_at IS NULL",
        "SELECT * FROM logs ORDER BY created_at DESC, id ASC LIMIT 20 OFFSET 40",
        "SELECT a + b * c - d / 2 % 3 FROM t",
        "SELECT * FROM accounts WHERE balance < -100",
        "SELECT * FROM t WHERE NOT (a = 1 OR b = 2) AND c <> 3",
        "SELECT COUNT(DISTINCT customer_id) FROM orders",
        "SELECT MAX(price), MIN(price) FROM products",
        "SELECT name\nFROM employees\nWHERE salary >= 100000\nORDER BY salary DESC;",
        "SELECT\n    name,\n    age\nFROM\n    people\nWHERE\n    age < 18",
        "SELECT name\r\nFROM people\r\n",
        "SELECT * FROM orders o INNER JOIN customers c ON o.customer_id = c.id",
        "SELECT * FROM a RIGHT OUTER JOIN b ON a.id = b.a_id",
        "SELECT * FROM a LEFT OUTER JOIN b ON a.id = b.a_id",
        "SELECT upper(name) FROM users WHERE length(name) > 3",
        "SELECT * FROM t WHERE x != 0 AND y == 1",
        "SELECT 'it''s' AS quote FROM t",
        "SELECT * FROM items WHERE id NOT IN (1, 2, 3)",
        "SELECT * FROM events WHERE day NOT BETWEEN 1 AND 5",
        "SELECT status, COUNT(*) FROM tickets GROUP BY status",
        "SELECT total * 1.2 AS with_tax FROM invoices",
        "SELECT * FROM t WHERE (a > 1 AND b < 2) OR c IS NULL",
        "SELECT name FROM users ORDER BY name LIMIT 5;",
    ],
}


def test_every_library_grammar_has_a_corpus():
    assert sorted(CORPUS) == library.names()
    assert all(len(examples) >= 20 for examples in CORPUS.values())


@pytest.mark.parametrize("name", library.names())
def test_realistic_inputs_the_real_parser_accepts_are_in_the_grammar(
    smollm_vocab: Vocabulary, name
):
    grammar = _fresh(name)
    constraint = cn.Constraint(_fresh(name), smollm_vocab)
    for text in CORPUS[name]:
        ORACLES[name](text)
        if name == "sql":
            assert _sqlite_prepare(text) is None, text
        assert grammar.matches(text), text
        tokens = smollm_vocab.encode(text)
        assert smollm_vocab.decode_bytes(tokens) == text.encode()
        assert accepts_token_by_token(constraint, tokens), text


# -- keywords glued to names ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("sql", "SELECTION Ascend FROM the"),  # what `--grammar sql --greedy` used to write
        ("sql", "SELECT a FROM t WHERE a=1AND b=2"),
        ("sql", "SELECT order FROM t"),  # a reserved word as a column
        ("sql", "SELECT a FROM t ORDER BY a DESCx"),
        ("python_expr", "a orb"),
        ("python_expr", "not"),
        ("python_expr", "x ify else z"),
        ("python_expr", "1.x"),
        ("python_expr", "f(a=1, b)"),
    ],
)
def test_text_the_real_parser_rejects_is_not_in_the_grammar(name, text):
    with pytest.raises((SyntaxError, AssertionError)):
        ORACLES[name](text)
    assert not _fresh(name).matches(text)


@pytest.mark.parametrize("text", ["SELECT a FROMusers", "SELECT aFROM users"])
def test_keywords_glued_to_names_are_names(text):
    """SQLite reads ``FROMusers`` and ``aFROM`` as words (a column alias, a column: FROM is
    optional in SQLite), never as FROM + users: it asks for no table. The grammar, whose
    subset requires FROM, rejects them."""
    with pytest.raises(sqlite3.OperationalError, match="no such column"):
        sqlite3.connect(":memory:").execute("EXPLAIN " + text)
    assert not _fresh("sql").matches(text)


# A grammar written the usual lark way (keywords as strings, %ignore'd whitespace): the engine's
# keyword semantics checked against lark's own lexers.
KEYWORDS_GRAMMAR = r"""
start: "select"i NAME ("," NAME)* "from"i NAME ["where"i NAME "=" (NAME | NUMBER)]
NAME: /[A-Za-z_][A-Za-z0-9_]*/
NUMBER: /[0-9]+/
%ignore " "
"""
_PIECES = "select SELECT from From where a b ion users x1 1 = ,".split()


def _lark_accepts(parser: lark.Lark, text: str) -> bool:
    try:
        parser.parse(text)
        return True
    except lark.exceptions.LarkError:
        return False


def test_keywords_end_only_at_word_boundaries_as_in_lark():
    """Texts of keywords, names and punctuation, glued or spaced at random: the engine accepts
    exactly what lark's basic lexer (whole words, then keywords) accepts, and only what its
    contextual lexer accepts. (Names here are never keywords; where they are, the engine keeps
    the contextual lexer's freedom.)"""
    grammar = cn.Grammar.from_lark(KEYWORDS_GRAMMAR)
    basic = lark.Lark(KEYWORDS_GRAMMAR, parser="lalr", lexer="basic")
    contextual = lark.Lark(KEYWORDS_GRAMMAR, parser="lalr", lexer="contextual")
    rng = np.random.default_rng(5)
    texts = ["select a from users", "selection a from b", "select a fromusers"]
    texts += ["SELECT a,b FROM x1", "select a from b where a=1", "select a from bwhere a=1"]
    for _ in range(1500):
        pieces = rng.choice(_PIECES, size=int(rng.integers(4, 9)))
        glue = rng.choice(["", " "], size=len(pieces))
        texts.append("".join(p + g for p, g in zip(pieces, glue)).strip())
    texts += [t.replace(" from ", " from") for t in texts[:300]]
    glued = 0
    for text in texts:
        accepted = grammar.matches(text)
        assert accepted == _lark_accepts(basic, text), text
        assert not accepted or _lark_accepts(contextual, text), text
        glued += _lark_accepts(contextual, text) and not accepted
    assert glued >= 10  # the contextual lexer splits words where the engine does not


def test_a_keyword_wins_over_its_regex_on_equal_text():
    """lark's rule where a string terminal and a regex terminal of the same priority match the
    same text: the string. `not` alone is the keyword, not a name."""
    text = 'start: "not" expr | expr\nexpr: NAME\nNAME: /[a-z]+/\n%ignore " "\n'
    grammar = cn.Grammar.from_lark(text)
    contextual = lark.Lark(text, parser="lalr")
    for sample in ["not", "not x", "x", "notx", "nothing"]:
        assert grammar.matches(sample) == _lark_accepts(contextual, sample), sample


def test_a_keyword_that_can_only_be_glued_to_a_word_is_a_grammar_error():
    with pytest.raises(cn.GrammarError, match="terminal NOT can never end"):
        cn.Grammar.from_lark('start: "not" NAME\nNAME: /[a-z]+/\n').automaton  # noqa: B018


def test_scoped_case_insensitive_alternatives_in_a_regex():
    """``(?i:ab|cd)`` is two case-insensitive words (it was read as the literal "ab|cd");
    a group that is not literals is reported, not misread."""
    grammar = cn.Grammar.from_lark("start: A\nA: /(?i:ab|cd)/\n")
    assert [grammar.matches(s) for s in ["ab", "Cd", "AB", "ab|cd"]] == [True, True, True, False]
    with pytest.raises(cn.GrammarError, match="inline flags"):
        cn.Grammar.from_lark("start: A\nA: /(?i:a.b)/\n")


# -- whitespace ---------------------------------------------------------------------------------

# the documented bounds (docs/grammars.md), as oracles
_LINE_BREAK_RUN = re.compile(r"[ \t]{0,40}(\r?\n[ \t]{0,40})?")  # json, sql
_SPACE_RUN = re.compile(r"[ \t]{0,40}")  # python_expr, arithmetic
_AT_THE_END = re.compile(r"(\r?\n)?")  # after a JSON value, an SQL statement
_NONE = re.compile("")  # before them


def _runs(rng: np.random.Generator, n: int) -> list[str]:
    """Whitespace runs around the bounds: spaces and tabs, line breaks, blank lines."""
    runs = ["", " ", "\n", "\r\n", "\n\n", " " * 40, " " * 41, "\t" * 40 + "\n" + " " * 40]
    runs += [" " * 40 + "\n" + " " * 41, "\n" * 250, " \n \n", "\r", "\n\r"]
    for _ in range(n):
        parts = rng.choice(
            [" ", "\t", "\n", "\r\n"], size=int(rng.integers(0, 90)), p=[0.6, 0.3, 0.07, 0.03]
        )
        runs.append("".join(parts))
    return runs


# (grammar, template with {} where the run goes, whether the run may be empty there, bound)
_WHITESPACE_SITES = [
    ("json", "[1,{}2]", True, _LINE_BREAK_RUN),
    ("json", '{{"a"{}: {{}}}}', True, _LINE_BREAK_RUN),
    ("json", "{}-0.9", True, _NONE),
    ("json", "-0.9{}", True, _AT_THE_END),
    ("json", "[1]{}", True, _AT_THE_END),
    ("sql", "SELECT{}a FROM t", False, _LINE_BREAK_RUN),
    ("sql", "SELECT a{},b FROM t", True, _LINE_BREAK_RUN),
    ("sql", "SELECT a FROM t{};", True, _LINE_BREAK_RUN),
    ("sql", "{}SELECT a FROM t;", True, _NONE),
    ("sql", "SELECT a FROM t{}", True, _AT_THE_END),
    ("sql", "SELECT a FROM t;{}", True, _AT_THE_END),
    ("python_expr", "a{}+ b", True, _SPACE_RUN),
    ("python_expr", "a{}and b", False, _SPACE_RUN),
    ("arithmetic", "1{}+2", True, _SPACE_RUN),
    ("arithmetic", "f({}x)", True, _SPACE_RUN),
]


@pytest.mark.parametrize(("name", "template", "empty_ok", "bound"), _WHITESPACE_SITES)
def test_whitespace_runs_between_tokens_are_bounded(name, template, empty_ok, bound):
    grammar = library.load(name)
    for run in _runs(np.random.default_rng(len(template)), 200):
        expected = bool(bound.fullmatch(run)) and (empty_ok or run != "")
        assert grammar.matches(template.format(run)) == expected, (template, run)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("sql", "\n\nSELECT a FROM t"),
        ("sql", "SELECT a FROM t;\n\n"),
        ("python_expr", " a"),
        ("python_expr", "a "),
        ("arithmetic", "1 "),
        ("csv", "a\n\n"),
    ],
)
def test_whitespace_before_and_after_is_bounded_too(name, text):
    assert not library.load(name).matches(text)


SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "integer"}},
    },
    "required": ["name"],
}


_SCHEMA_SITES = [
    '{{{}"name":"a"}}',
    '{{"name":{}"a"}}',
    '{{"name"{}:"a"}}',
    '{{"name":"a"{}}}',
    '{{"name":"a",{}"tags":[1]}}',
    '{{"name":"a","tags":[{}]}}',
    '{{"name":"a","tags":[1{},2]}}',
]


def test_json_schema_whitespace_is_none_by_default_and_bounded_on_request():
    compact = cn.Grammar.from_json_schema(SCHEMA)
    assert compact.matches('{"name":"a","tags":[1,2]}')
    assert not compact.matches('{"name": "a"}') and not compact.matches('{"name":"a"}\n')
    spaced = cn.Grammar.from_json_schema(SCHEMA, whitespace="default")
    for run in _runs(np.random.default_rng(1), 150):
        for template in _SCHEMA_SITES:
            expected = bool(_LINE_BREAK_RUN.fullmatch(run))
            assert spaced.matches(template.format(run)) == expected, (template, run)
    assert spaced.matches(json.dumps({"name": "a", "tags": [1, 2]}, indent=2))
    optional = cn.Grammar.from_json_schema({"properties": {"a": {}}}, whitespace="default")
    for run in _runs(np.random.default_rng(2), 50):
        for template in ["{{{}}}", '{{{}"a":1}}', "[{}]"]:
            expected = bool(_LINE_BREAK_RUN.fullmatch(run))
            assert optional.matches(template.format(run)) == expected, (template, run)


# -- the bundled model (slow) -------------------------------------------------------------------

PROMPTS: dict[str, list[str]] = {
    "json": [
        "Describe a book as JSON.",
        "A JSON array of three prime numbers.",
        "x",
        "Give the weather in Paris as a JSON object.",
        "A user profile in JSON with name, age and email.",
        "JSON for a shopping cart with two items.",
        "Write a JSON config for a web server.",
        "List three colours in JSON.",
    ],
    "sql": [
        "Employees older than 30?",
        "A query listing all users:",
        "How many orders were shipped?",
        "Names of customers in London, alphabetically.",
        "The ten most expensive products.",
        "Average salary per department.",
        "Books whose title mentions SQL.",
        "Users who never logged in.",
    ],
    "python_expr": [
        "A Python expression for the square of x plus one:",
        "Check whether a list is empty:",
        "The largest of three numbers a, b and c:",
        "Python: the last element of a list:",
        "Sum of the squares of the numbers below 10:",
        "Is n even?",
        "A lambda that adds two numbers:",
        "The length of a string s:",
    ],
    "arithmetic": [
        "Compute something:",
        "The area of a circle of radius r:",
        "Two plus two times three:",
        "The quadratic formula's discriminant:",
        "A formula for compound interest:",
        "Convert 100 Fahrenheit to Celsius:",
        "x",
        "The hypotenuse of a right triangle with legs 3 and 4:",
    ],
    "csv": [
        "A CSV row for a person: name, age, city.",
        "CSV header for a product table:",
        "One line of CSV with three numbers:",
        "A CSV record describing a book:",
        "x",
        "CSV: date, amount, description of a payment.",
        "A CSV line with a quoted field containing a comma:",
        "Write a row of CSV.",
    ],
}
SCHEMA_PROMPTS = [
    "Invent a person.",
    "A user called Ada with two tags.",
    "x",
    "Extract the name: Bob is 42 and likes chess.",
    "Describe a cat.",
    "Generate a record.",
    "A JSON object with a name.",
    "Tags for a blog post about Python.",
    "Name a city.",
    "Who wrote Hamlet?",
]
MAX_TOKENS = 32


@pytest.fixture(scope="module")
def generations(smollm) -> dict[str, list[cn.GenerationResult]]:
    """Greedy outputs of the bundled model: per library grammar, and under a JSON Schema with
    the default options (50 prompts in all)."""
    out = {
        name: cn.generate(smollm, prompts=prompts, grammar=name, greedy=True, max_tokens=MAX_TOKENS)
        for name, prompts in PROMPTS.items()
    }
    out["schema"] = cn.generate(
        smollm, prompts=SCHEMA_PROMPTS, schema=SCHEMA, greedy=True, max_tokens=MAX_TOKENS
    )
    assert sum(len(v) for v in out.values()) == 50
    for name, results in out.items():  # shown when a test fails
        for result in results:
            print(f"{name}: {result.finish_reason} {len(result.tokens)} {result.text!r}")
    return out


@pytest.mark.slow
def test_model_outputs_under_each_grammar_are_accepted_by_the_real_parser(generations):
    for name, results in generations.items():
        for result in results:
            assert result.finish_reason in ("stop", "length"), result
            if name == "schema":
                json.loads(result.text)
            else:
                ORACLES[name](result.text)
                assert library.load(name).matches(result.text), result.text


@pytest.mark.slow
def test_no_output_runs_out_of_tokens_on_whitespace(generations):
    for name, results in generations.items():
        bound = _SPACE_RUN if name in ("python_expr", "arithmetic") else _LINE_BREAK_RUN
        for result in results:
            text = result.text
            if name != "csv":  # a quoted CSV cell may hold line breaks: its text
                for run in re.findall(r"[ \t\r\n]+", text):
                    assert bound.fullmatch(run), (name, text)
            if result.finish_reason == "length":  # cut by max_tokens, not in whitespace
                assert not text[-1:].isspace(), (name, text)
