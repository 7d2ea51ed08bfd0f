"""The conformance harnesses count what they claim, on a tiny data directory built here."""

from __future__ import annotations

import json

import pytest

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


def _tiny_maskbench(root):
    """Three schemas: one passing, one with an unsupported pattern, one with unique items."""
    schemas = root / "jsonschemabench" / "Tiny"
    schemas.mkdir(parents=True)
    (root / "maskbench").mkdir()
    (schemas / "a.json").write_text(json.dumps({"type": "object", "required": ["x"]}))
    (schemas / "b.json").write_text(json.dumps({"type": "string", "pattern": "(?<=a)b"}))
    (schemas / "c.json").write_text(json.dumps({"type": "array", "uniqueItems": True}))
    lines = [
        {"id": "a", "valid": [{"x": 1}], "invalid": [{}, [1]]},
        {"id": "b", "valid": ["b"], "invalid": ["a"]},
        {"id": "c", "valid": [[1, [1]]], "invalid": [[1, 1.0], [[1], [1]]]},
    ]
    (root / "maskbench" / "Tiny.jsonl").write_text("\n".join(map(json.dumps, lines)))
    return conformance.maskbench_jobs(root, ["Tiny"], None)


def test_maskbench_passes_fails_and_errors(tmp_path):
    jobs = _tiny_maskbench(tmp_path)
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
    assert all("peers" not in r for r in records)  # none asked for


def test_maskbench_runs_peers_beside_ours(tmp_path, smollm_vocab):
    """llguidance gets the same instances as `json.dumps` writes them, a mask before every
    token and after the last, and a row of its own in the engines table."""
    pytest.importorskip("llguidance")
    jobs = _tiny_maskbench(tmp_path)
    options = {"whitespace": "default"}
    records = conformance.run_maskbench(
        jobs, "smollm2-135m-instruct", options, 1, 10.0, "as-given", ("llguidance",)
    )
    peer = {r["id"]: r["peers"]["llguidance"] for r in records}
    assert peer["a"]["status"] == "pass"
    assert peer["b"]["status"] == "error"  # no lookbehind in llguidance either
    tokens = smollm_vocab.encode_bytes(conformance.serialise({"x": 1}, options).encode())
    assert len(peer["a"]["mask"]) == len(tokens) + 1
    assert peer["a"]["first_mask"] == peer["a"]["mask"][0]
    assert records[0]["first_mask"] > 0  # ours, timed on its own
    rows = conformance.engines_table(records).splitlines()
    assert rows[2].startswith("| constrain | 3 | 2 |")
    assert rows[3].startswith("| llguidance | 3 |")


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


def test_memory_bench_measures_every_kept_schema(tmp_path, smollm_vocab):
    """The memory bench compiles every schema but the warm-up (the one it cannot compile is
    left out of the count), runs them, and holds matchers halfway through an instance."""
    from constrain.bench import memory

    jobs = _tiny_maskbench(tmp_path)
    row = memory.measure_in_process("constrain", "smollm2-135m-instruct", jobs)
    assert row["schemas"] == 1  # "a" warms up, "b" does not compile, "c" is measured
    options = {"whitespace": "default", "any_order": True}
    tokens = smollm_vocab.encode(conformance.serialise({"x": 1}, options))
    assert row["matcher_tokens"] == len(tokens) // 2
    row["compiled_median"] = memory.median_compile_in_process(
        "constrain", "smollm2-135m-instruct", jobs
    )
    assert row["compiled_median"] > 0  # "c" keeps its tables on the C heap
    assert memory.table([row]).splitlines()[2].startswith("| constrain | 1 |")
