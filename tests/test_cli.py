"""The command line, end to end, with a tiny random model saved to a local directory."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

import constrain as cn
from constrain.cli import main

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def model_dir(tiny_model, tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-model")
    tiny_model.hf_model.save_pretrained(path)
    tiny_model.tokenizer.save_pretrained(path)
    return str(path)


def test_generate_with_each_constraint_kind(model_dir, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)  # the documented example: --schema schemas/person.json
    person = cn.schemas.load("person")
    cases = [
        (
            ["--schema", "schemas/person.json", "--max-tokens", "48"],
            lambda t: jsonschema.validate(json.loads(t), person) is None,
        ),
        (["--regex", r"\d{3}"], lambda t: t.isdigit() and len(t) == 3),
        (["--choices", "red", "blue"], lambda t: t in ("red", "blue")),
        (["--grammar", 'start: "a" "b"+', "--max-tokens", "8"], lambda t: t.startswith("ab")),
    ]
    for flags, ok in cases:
        code = main(["generate", "hi", "--model", model_dir, "--greedy", *flags])
        text = capsys.readouterr().out.strip()
        assert code in (0, 3) and ok(text), (flags, text)


def test_stream_verbose_and_smc(model_dir, capsys):
    code = main(["generate", "--model", model_dir, "--regex", "[ab]{4}", "--stream", "-v", "x"])
    captured = capsys.readouterr()
    assert code == 0 and len(captured.out.strip()) == 4
    assert json.loads(captured.err.strip().splitlines()[-1])["finish_reason"] == "stop"
    code = main(
        [
            "generate",
            "--model",
            model_dir,
            "--regex",
            "[ab]{2}",
            "--sampler",
            "smc:3",
            "--seed",
            "1",
            "x",
        ]
    )
    assert code == 0 and len(capsys.readouterr().out.strip()) == 2


def test_every_decoding_option_reaches_the_config(model_dir, capsys):
    """The decoding options are DecodingConfig's fields: speculation, a timeout, processors,
    the budget switch, backtracks, and an inline schema."""
    from dataclasses import fields

    from constrain.cli import build_parser
    from constrain.options import DecodingConfig

    generate = build_parser()._subparsers._group_actions[0].choices["generate"]
    flags = {a.dest for a in generate._actions}
    assert {f.name for f in fields(DecodingConfig)} <= flags
    schema = '{"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}'
    argv = ["generate", "x", "--model", model_dir, "--schema", schema, "--greedy"]
    argv += ["--speculative", "forced+lookup", "--timeout", "30", "--max-tokens", "16"]
    argv += ["--processor", "top_k=5", "--no-fit-max-tokens", "--backtracks", "4", "-v"]
    code = main(argv)
    captured = capsys.readouterr()
    report = json.loads(captured.err.strip().splitlines()[-1])
    if code == 0:
        assert isinstance(json.loads(captured.out)["n"], int)
    else:  # cut by max_tokens: the budget was switched off
        assert code == 3 and report["finish_reason"] == "length"


def test_bad_options_are_usage_errors(model_dir, capsys):
    for flags, needle in (
        (["--sampler", "beam"], "unknown sampler"),
        (["--speculative", "draft"], "unknown draft sources"),
        (["--processor", "top_q=3"], "NAME=VALUE"),
    ):
        with pytest.raises(SystemExit) as exc:
            main(["generate", "x", "--model", model_dir, *flags])
        assert exc.value.code == 2 and needle in capsys.readouterr().err, flags
    assert main(["generate", "x", "--model", model_dir, "--schema", "{not json"]) == 2
    assert "not JSON" in capsys.readouterr().err
    assert main(["generate", "x", "--model", model_dir, "--schema", "missing.json"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_errors_are_reported_not_raised(model_dir, capsys):
    assert main(["generate", "--model", model_dir, "--regex", "(?<=a)b", "x"]) == 2
    assert "lookbehind" in capsys.readouterr().err.lower()


def test_help_everywhere(capsys):
    for argv in (
        ["--help"],
        ["generate", "--help"],
        ["bench", "jsonschemabench", "--help"],
        ["conformance", "maskbench", "--help"],
        ["models", "--help"],
    ):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 0 and "usage" in capsys.readouterr().out


def test_user_errors_are_one_line_and_exit_2(model_dir, capsys, tmp_path):
    """Each user mistake: exit status 2, one line on stderr naming the problem, no
    traceback."""
    folder = tmp_path / "a-folder"
    folder.mkdir()
    cases = [
        (["--schema", str(tmp_path / "missing.json")], "missing.json"),
        (["--schema", str(folder)], "a-folder"),
        (["--schema", '{"type": "object",'], "not JSON"),
        (["--grammar", "no_such_grammar"], ""),
        (["--regex", "a", "--temperature", "-1"], "temperature"),
        (["--regex", "a", "--temperature", "nan"], "temperature"),
        (["--regex", "a", "--max-tokens", "0"], "max_tokens"),
    ]
    for flags, needle in cases:
        code = main(["generate", "x", "--model", model_dir, *flags])
        err = capsys.readouterr().err
        assert code == 2 and needle in err, (flags, err)
        assert err.count("\n") == 1 and err.startswith("constrain: error: "), (flags, err)
        assert "Traceback" not in err
    missing = tmp_path / "no-such-model"
    for model in (str(missing), f"./{missing.name}/sub"):
        code = main(["generate", "x", "--model", model, "--regex", "a"])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and "no model directory at" in err, err
        assert missing.name in err
    code = main(["generate", "x", "--model", str(folder), "--regex", "a"])
    err = capsys.readouterr().err
    assert code == 2 and "no config.json" in err and str(folder) in err


def test_a_prompt_beyond_the_context_is_a_user_error(model_dir, capsys):
    code = main(["generate", "word " * 600, "--model", model_dir, "--regex", "a", "--no-chat"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "context holds 512" in err, err
