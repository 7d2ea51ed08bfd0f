"""Untrusted grammar text: parsed, never read as a file; ``%import`` only from the grammar
library, lark's grammars and the directories the caller names; every failure a `GrammarError`
naming what is wrong and where; compile limits that hold for a whole grammar."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import constrain as cn
from constrain.cli import main
from constrain.constraints import grammar_from
from constrain.errors import GrammarError

SECRET = "TOPSECRET-8f2c"
LIBRARY = ", ".join(cn.grammars.names())


@pytest.fixture
def secrets(tmp_path: Path, monkeypatch) -> Path:
    """The current directory holds a valid grammar file and a file lark cannot parse, both
    holding `SECRET`: untrusted text must reach neither."""
    (tmp_path / "secret.lark").write_text(f'start: "{SECRET}"\nrule: "x"\n')
    (tmp_path / "notes.lark").write_text(f"{SECRET} is not a grammar\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


# -- text is text, a file is a Path ----------------------------------------------------------------


@pytest.mark.parametrize("name", ["secret.lark", "notes.lark", "./notes.lark"])
def test_text_that_looks_like_a_path_is_never_read(secrets, name):
    for text in (name, str(secrets / name)):
        with pytest.raises(GrammarError) as info:
            cn.Grammar.from_lark(text)
        assert SECRET not in str(info.value)
        assert "from_lark_file" in str(info.value)  # the way to read a file is named


def test_generate_arguments_read_a_file_only_from_a_path(secrets):
    grammar = grammar_from(secrets / "secret.lark")  # a Path: explicit
    assert grammar.matches(SECRET) and not grammar.matches("x")
    assert cn.Grammar.from_lark_file("secret.lark").matches(SECRET)
    for text in ("secret.lark", str(secrets / "notes.lark")):
        with pytest.raises(GrammarError, match=r"pass pathlib\.Path\(") as info:
            grammar_from(text)
        assert SECRET not in str(info.value)
    with pytest.raises(GrammarError, match="use Grammar.from_lark_file"):
        cn.Grammar.from_lark(secrets / "secret.lark")


def test_errors_in_a_grammar_file_name_the_file(tmp_path):
    path = tmp_path / "bad.lark"
    path.write_text('start: "a" (\n')
    with pytest.raises(GrammarError, match=rf"grammar file '{path}'.*line 1 column"):
        cn.Grammar.from_lark_file(path)
    with pytest.raises(GrammarError, match=rf"cannot read grammar file '{tmp_path / 'no.lark'}'"):
        cn.Grammar.from_lark_file(tmp_path / "no.lark")


# -- %import ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("statement", ["%import secret.rule", "%import .secret.rule"])
def test_imports_in_text_never_resolve_against_the_current_directory(secrets, statement):
    text = f"start: rule\n\n{statement}\n"
    with pytest.raises(GrammarError) as info:
        cn.Grammar.from_lark(text)
    message = str(info.value)
    assert message.startswith(f"%import secret: not found in the grammar library ({LIBRARY})")
    assert "(line 3)" in message and "import_paths=" in message and SECRET not in message


def test_imports_from_the_library_and_lark_need_no_import_path(secrets):
    grammar = cn.Grammar.from_lark("start: value\n%import json (value)\n")
    for value in ([1, "a", {"b": None}], -2.5e3, "x"):
        assert grammar.matches(json.dumps(value, separators=(",", ":")))
    assert not grammar.matches("[1,]")
    grammar = cn.Grammar.from_lark('start: "a" WS "b"\n%import common.WS\n')
    assert grammar.matches("a \n b") and not grammar.matches("ab")


def test_import_paths_are_named_explicitly(secrets, tmp_path_factory):
    text = "start: rule\n%import secret.rule\n"
    assert cn.Grammar.from_lark(text, import_paths=[secrets]).matches("x")
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    with pytest.raises(GrammarError, match=rf"the import paths \('{elsewhere}'\), the grammar"):
        cn.Grammar.from_lark(text, import_paths=[elsewhere])
    # a grammar file imports from its own directory, by absolute or relative name
    (elsewhere / "main.lark").write_text(
        "start: rule other\n%import .secret.rule\n%import x.y.other\n"
    )
    (elsewhere / "x").mkdir()
    (elsewhere / "x" / "y.lark").write_text('other: "y"\n')
    (elsewhere / "secret.lark").write_text('rule: "z"\n')
    assert cn.Grammar.from_lark_file(elsewhere / "main.lark").matches("zy")


def test_lark_assertions_on_imports_are_grammar_errors():
    text = 'start: "a" WS\n%import common.WS\n%import .common.WS\n'
    with pytest.raises(GrammarError, match="lark rejects the grammar: Inconsistent base_path"):
        cn.Grammar.from_lark(text)


# -- library names ---------------------------------------------------------------------------------


def test_unknown_library_grammar_names_list_the_library():
    with pytest.raises(
        GrammarError, match=f"^unknown library grammar 'sqll'; available: {LIBRARY}$"
    ):
        grammar_from("sqll")
    with pytest.raises(
        GrammarError, match=f"unknown library grammar 'cobol'; available: {LIBRARY}"
    ):
        cn.grammars.load("cobol")


def test_library_names_are_never_paths(tmp_path):
    # a grammar outside grammars/, named by a relative path from it
    (tmp_path / "outside.lark").write_text(f'start: "{SECRET}"\n')
    library = cn.grammars.path("sql").parent
    name = os.path.relpath(tmp_path / "outside", library)
    with pytest.raises(GrammarError, match="unknown library grammar"):
        cn.grammars.load(name)
    with pytest.raises(GrammarError, match="unknown library grammar"):
        grammar_from(name)


# -- the command line ------------------------------------------------------------------------------


def test_cli_reports_an_unknown_grammar_name_before_loading_a_model(capsys):
    code = main(["generate", "x", "--grammar", "sqll", "--model", "/nonexistent/model"])
    err = capsys.readouterr().err.strip()
    assert (
        code == 2
        and err == f"constrain: error: unknown library grammar 'sqll'; available: {LIBRARY}"
    )


def test_cli_grammar_takes_a_name_a_file_or_text(secrets, capsys):
    """On the command line a path that exists is read (its user names their own files): a
    bad file is reported by name; good grammars pass on to the model (which does not exist)."""

    def error(grammar: str) -> str:
        assert main(["generate", "x", "--grammar", grammar, "--model", "/nonexistent"]) == 2
        return capsys.readouterr().err

    assert error("notes.lark").startswith("constrain: error: grammar file 'notes.lark': lark")
    for grammar in ("secret.lark", "sql", 'start: "a"'):
        message = error(grammar)
        assert "/nonexistent" in message and "grammar" not in message  # the model's error


# -- limits ----------------------------------------------------------------------------------------


def test_grammar_compile_time_is_bounded_as_a_whole():
    # five terminals of a few seconds each: each regex had its own 10 s, the grammar none
    terminals = "".join(f"T{i}: /[a-z]{{1,{4000 + i}}}/\n" for i in range(5))
    text = "start: " + " ".join(f"T{i}" for i in range(5)) + "\n" + terminals
    t0 = time.perf_counter()
    with pytest.raises(GrammarError, match=r"time limit of 1 s \(timeout=\), at terminal T"):
        cn.Grammar.from_lark(text, timeout=1.0)
    assert time.perf_counter() - t0 < 1.0 + 1.5


# -- hostile text ----------------------------------------------------------------------------------

_SEEDS = [
    'start: "a" WS\n%import common.WS\n',
    'start: x{"a"}\nx{t}: t t\n',
    "start: value\n%import json (value)\n",
    'start: A+\nA.2: /[a-z]+/\n%ignore " "\n%declare B\n',
]
_PIECES = ["%import", "%ignore", "%declare", "%override", ":", "|", "->", "~", "..", "{", "}"]
_PIECES += ["(", ")", "[", "]", "?", "*", "+", '"', "/", "\\", ".", "\n", " ", "json", "X", "1"]


def test_lark_crashes_are_grammar_errors():
    with pytest.raises(GrammarError, match="lark fails on the grammar"):
        cn.Grammar.from_lark("start: A\nA: /[a-z]+/\n%declare Bjson\n")  # lark: AttributeError


@settings(max_examples=150, deadline=None)
@given(
    seed=st.sampled_from(_SEEDS),
    edits=st.lists(
        st.tuples(st.floats(0, 1), st.sampled_from(_PIECES), st.integers(0, 6)),
        min_size=1,
        max_size=4,
    ),
)
def test_mutated_grammar_text_raises_only_grammar_errors(seed, edits):
    text = seed
    for where, piece, cut in edits:
        i = int(where * len(text))
        text = text[:i] + piece + text[i + cut :]
    try:
        cn.Grammar.from_lark(text, timeout=5.0)
    except GrammarError:
        pass
