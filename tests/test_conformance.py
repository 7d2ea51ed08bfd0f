"""The conformance harnesses count what they claim, on a tiny data directory built here."""

from __future__ import annotations

import json

from constrain.bench import conformance


def test_test_suite_counts_groups_and_invalid_acceptances(tmp_path, smollm_vocab):
    root = tmp_path / "tests" / "draft2020-12"
    (root / "optional" / "format").mkdir(parents=True)
    groups = [
        {
            "description": "integers",
            "schema": {"type": "integer", "maximum": 3},
            "tests": [
                {"description": "small", "data": 2, "valid": True},
                {"description": "big", "data": 9, "valid": False},
            ],
        },
        {
            "description": "nothing",
            "schema": False,
            "tests": [{"description": "any", "data": 1, "valid": False}],
        },
        {
            "description": "unsupported",
            "schema": {"pattern": "(?<=a)b"},
            "tests": [{"description": "b", "data": "b", "valid": False}],
        },
        {
            "description": "wrong expectation",  # the harness must flag an accepted invalid
            "schema": {"type": "string"},
            "tests": [{"description": "string said invalid", "data": "x", "valid": False}],
        },
    ]
    (root / "maximum.json").write_text(json.dumps(groups))
    records = conformance.run_test_suite(root, smollm_vocab, {"whitespace": "default"})
    passed = {r["group"]: r["passed"] for r in records}
    assert passed == {
        "integers": True,
        "nothing": True,
        "unsupported": False,
        "wrong expectation": False,
    }
    reasons = {r["group"]: r.get("reason", "") for r in records}
    assert "[pattern]" in reasons["unsupported"]
    assert sum(r["invalid_accepted"] for r in records) == 1
    assert "**2/4**" in conformance.test_suite_table(records)


def test_maskbench_passes_fails_and_errors(tmp_path):
    schemas = tmp_path / "jsonschemabench" / "Tiny"
    schemas.mkdir(parents=True)
    (tmp_path / "maskbench").mkdir()
    (schemas / "a.json").write_text(json.dumps({"type": "object", "required": ["x"]}))
    (schemas / "b.json").write_text(json.dumps({"type": "string", "pattern": "(?<=a)b"}))
    (schemas / "c.json").write_text(json.dumps({"type": "array", "uniqueItems": True}))
    lines = [
        {"id": "a", "valid": [{"x": 1}], "invalid": [{}, [1]]},
        {"id": "b", "valid": ["b"], "invalid": ["a"]},
        {"id": "c", "valid": [[1, [1]]], "invalid": [[1, 1.0], [[1], [1]]]},
    ]
    (tmp_path / "maskbench" / "Tiny.jsonl").write_text("\n".join(map(json.dumps, lines)))
    jobs = conformance.maskbench_jobs(tmp_path, ["Tiny"], None)
    records = conformance.run_maskbench(
        jobs, "smollm2-135m-instruct", {"whitespace": "default"}, 1, 10.0
    )
    status = {r["id"]: r["status"] for r in records}
    assert status == {"a": "pass", "b": "error", "c": "pass"}
    assert records[1]["keyword"] == "pattern"
    assert records[0]["mask"] and records[0]["check"]  # timed at every step
    table, by_keyword = conformance.maskbench_table(records)
    assert "| Tiny | 3 | 2 | 66.7 | 1 |" in table
    assert "`pattern` 1" in by_keyword


def test_harness_checks_every_spelling(tmp_path, smollm_vocab):
    """The harness compiles with ``spellings="all"``: `1.0` is a valid integer and an escaped
    string a valid enum member (`jsonschema` says so), though generation writes neither."""
    root = tmp_path / "tests" / "draft2020-12"
    (root / "optional" / "format").mkdir(parents=True)
    groups = [
        {
            "description": "spellings",
            "schema": {"type": "integer"},
            "tests": [{"description": "1.0", "data": 1.0, "valid": True}],
        },
    ]
    (root / "type.json").write_text(json.dumps(groups))
    records = conformance.run_test_suite(root, smollm_vocab, {"whitespace": "default"})
    assert records[0]["passed"], records[0]
    canonical = {"whitespace": "default", "spellings": "canonical"}
    records = conformance.run_test_suite(root, smollm_vocab, canonical)
    assert not records[0]["passed"]
