"""JSON Schema conformance: the official JSON Schema Test Suite and MaskBench-style instances.

Both run the real token path: an instance, serialised with ``json.dumps(..., ensure_ascii=False)``
(separators to match the whitespace option), is tokenized with the bundled SmolLM2 tokenizer
and fed token by token to a `Matcher`; it is *accepted* iff every token checks and the matcher
accepts at the end.

* ``test-suite``: for each group of ``tests/<draft>/*.json`` compile the schema; the group
  passes iff every instance is accepted exactly when it is valid. A schema whose language is
  empty (a compile-time `GrammarError`) rejects every instance. Reported per file, with totals
  for the core files (all but format, refRemote, vocabulary) and for ``optional/format``.
* ``maskbench``: schemas from ``jsonschemabench/<Subset>/<id>.json`` with the instances of
  ``maskbench/<Subset>.jsonl``; a schema passes when it compiles, every valid instance is
  accepted and every invalid one rejected. Per subset: passing, compile errors (and by keyword
  overall), valid-rejected, invalid-accepted, timeouts, compile time (schema -> Grammar ->
  Constraint), mask time at every step of every valid instance, `check` time (without masks).

A per-group / per-schema timeout (default 10 s, SIGALRM) turns hangs into reported timeouts.

Run: ``python -m constrain.bench.conformance test-suite [--markdown PATH]`` or
``python -m constrain.bench.conformance maskbench [--subset S] [--limit N] [--jobs 2]``;
``--option any_order=true`` (repeatable) passes compiler options.
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import signal
import sys
import time
import warnings
from pathlib import Path

import numpy as np

import constrain as cn
from constrain.bench._common import fmt, load_vocab, percentile
from constrain.errors import GrammarError
from constrain.matcher import _tokenize

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
_EXCLUDED_CORE = {"format.json", "refRemote.json", "vocabulary.json"}


class _Timeout(Exception):
    pass


def _alarm(*_):
    raise _Timeout


def serialise(value, options: dict) -> str:
    compact = options.get("whitespace", "compact") == "compact"
    separators = (",", ":") if compact else None
    indent = options.get("indent", 2) if options.get("whitespace") == "pretty" else None
    return json.dumps(value, separators=separators, indent=indent, ensure_ascii=False)


def compile_constraint(schema, vocab: cn.Vocabulary, options: dict) -> cn.Constraint | None:
    """The schema's constraint, or None when its language is empty (nothing is valid)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            grammar = cn.Grammar.from_json_schema(schema, **options)
        except GrammarError as exc:
            if "empty" in str(exc):
                return None
            raise
    return cn.Constraint(grammar, vocab)


def run_instance(
    constraint: cn.Constraint | None, text: str, timings: dict | None = None, timed: str = ""
) -> bool:
    """Feed `text` token by token; with `timings`, time `timed` ("mask" or "check") per step.

    A check is timed on its own constraint whose masks are never computed, so it measures the
    walk of the token's bytes, not a lookup in a cached mask.
    """
    if constraint is None:
        return False
    matcher = constraint.start()
    for token in _tokenize(constraint.vocab, text.encode()):
        t0 = time.perf_counter()
        if timed == "mask":
            matcher.mask()
        ok = matcher.check(token)
        if timed:
            timings[timed].append(time.perf_counter() - t0)
        if not ok:
            return False
        matcher.advance(token)
    return matcher.accepting()


def _error_keyword(exc: Exception) -> str:
    return getattr(exc, "keyword", None) or type(exc).__name__


# -- the JSON Schema Test Suite -------------------------------------------------------------------


def run_test_suite(
    root: Path, vocab: cn.Vocabulary, options: dict, timeout: float = 10.0, only=()
) -> list[dict]:
    """One record per group: file, description, passed, reason, invalid_accepted."""
    signal.signal(signal.SIGALRM, _alarm)
    files = sorted(root.glob("*.json")) + sorted((root / "optional" / "format").glob("*.json"))
    records = []
    for path in files:
        if only and path.name not in only:
            continue
        category = ("format/" if path.parent.name == "format" else "") + path.name
        for group in json.loads(path.read_text()):
            record = {"file": category, "group": group["description"], "passed": False}
            record["invalid_accepted"] = 0
            signal.setitimer(signal.ITIMER_REAL, timeout)
            try:
                constraint = compile_constraint(group["schema"], vocab, options)
                failures = []
                for test in group["tests"]:
                    accepted = run_instance(constraint, serialise(test["data"], options))
                    if accepted != test["valid"]:
                        kind = "INVALID ACCEPTED" if accepted else "valid rejected"
                        failures.append(f"{kind}: {test['description']}")
                        record["invalid_accepted"] += accepted
                record["passed"] = not failures
                record["reason"] = "; ".join(failures)
            except _Timeout:
                record["reason"] = f"timeout ({timeout} s)"
            except Exception as exc:  # a compile error fails the group, with its keyword
                record["reason"] = f"compile error [{_error_keyword(exc)}]: {exc}"[:300]
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            records.append(record)
    return records


def test_suite_table(records: list[dict]) -> str:
    by_file: dict[str, list[dict]] = collections.defaultdict(list)
    for r in records:
        by_file[r["file"]].append(r)
    rows = ["| category | groups passed | % | invalid accepted |", "|---|---|---|---|"]
    totals = {"core": [0, 0, 0], "optional/format": [0, 0, 0]}
    for name, group in by_file.items():
        passed = sum(r["passed"] for r in group)
        bad = sum(r["invalid_accepted"] for r in group)
        rows.append(f"| {name} | {passed}/{len(group)} | {100 * passed / len(group):.0f} | {bad} |")
        bucket = "optional/format" if name.startswith("format/") else "core"
        if name in _EXCLUDED_CORE:
            continue
        totals[bucket][0] += passed
        totals[bucket][1] += len(group)
        totals[bucket][2] += bad
    for bucket, (passed, n, bad) in totals.items():
        if n:
            rows.append(
                f"| **total {bucket}** | **{passed}/{n}** | **{100 * passed / n:.1f}** | **{bad}** |"
            )
    return "\n".join(rows)


# -- MaskBench ------------------------------------------------------------------------------------

_WORKER: dict = {}


def _init_worker(vocab_name: str, options: dict, timeout: float) -> None:
    _WORKER["vocab"] = load_vocab(vocab_name) if vocab_name else None
    _WORKER["options"] = options
    _WORKER["timeout"] = timeout
    signal.signal(signal.SIGALRM, _alarm)


def run_schema(job: tuple) -> dict:
    """Compile one schema and run its instances (in a worker process)."""
    subset, ident, schema_path, valid, invalid = job
    vocab, options, timeout = _WORKER["vocab"], _WORKER["options"], _WORKER["timeout"]
    record = {"subset": subset, "id": ident, "status": "ok", "valid": len(valid)}
    record.update(invalid=len(invalid), valid_rejected=0, invalid_accepted=0, mask=[], check=[])
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        schema = json.loads(Path(schema_path).read_text())
        t0 = time.perf_counter()
        constraint = compile_constraint(schema, vocab, options)
        record["compile_ms"] = (time.perf_counter() - t0) * 1e3
        timings = {"mask": [], "check": []}
        texts = [serialise(value, options) for value in valid]
        if constraint is not None:  # checks first, on a twin whose masks stay uncomputed
            twin = cn.Constraint(constraint.grammar, constraint.vocab)
            for text in texts:
                run_instance(twin, text, timings, "check")
        for text in texts:
            record["valid_rejected"] += not run_instance(constraint, text, timings, "mask")
        for value in invalid:
            record["invalid_accepted"] += run_instance(constraint, serialise(value, options))
        record["mask"], record["check"] = timings["mask"], timings["check"]
        passed = record["valid_rejected"] == 0 and record["invalid_accepted"] == 0
        record["status"] = "pass" if passed else "fail"
    except _Timeout:
        record["status"] = "timeout"
    except Exception as exc:
        record["status"] = "error"
        record["keyword"] = _error_keyword(exc)
        record["error"] = str(exc)[:300]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return record


def maskbench_jobs(data: Path, subsets: list[str], limit: int | None) -> list[tuple]:
    jobs = []
    for subset in subsets:
        text = (data / "maskbench" / f"{subset}.jsonl").read_text(encoding="utf-8")
        lines = [line for line in text.split("\n") if line.strip()]  # not splitlines: U+2028
        for line in lines[:limit]:
            rec = json.loads(line)
            path = data / "jsonschemabench" / subset / f"{rec['id']}.json"
            jobs.append((subset, rec["id"], str(path), rec["valid"], rec["invalid"]))
    return jobs


def run_maskbench(jobs: list[tuple], vocab_name: str, options: dict, n_jobs: int, timeout: float):
    args = (vocab_name, options, timeout)
    if n_jobs <= 1:
        _init_worker(*args)
        return [run_schema(job) for job in jobs]
    context = multiprocessing.get_context("fork")
    out = []
    with context.Pool(n_jobs, initializer=_init_worker, initargs=args) as pool:
        for i, record in enumerate(pool.imap_unordered(run_schema, jobs, chunksize=4), 1):
            out.append(record)
            if i % 200 == 0:
                print(f"# {i}/{len(jobs)} schemas", file=sys.stderr, flush=True)
    return sorted(out, key=lambda r: (r["subset"], r["id"]))


def maskbench_table(records: list[dict]) -> tuple[str, str]:
    """The per-subset table and the compile errors by keyword."""
    head = (
        "| subset | schemas | passing | % | compile errors | timeouts | valid rejected | "
        "invalid accepted | compile p50 / p99 / max ms | mask mean / p50 / p99 / max µs | "
        "check p50 µs |"
    )
    rows = [head, "|---" * 11 + "|"]
    groups = collections.defaultdict(list)
    for r in records:
        groups[r["subset"]].append(r)
    groups["**total**"] = records
    for subset, rs in groups.items():
        n = len(rs)
        passing = sum(r["status"] == "pass" for r in rs)
        errors = sum(r["status"] == "error" for r in rs)
        timeouts = sum(r["status"] == "timeout" for r in rs)
        compile_ms = [r["compile_ms"] for r in rs if "compile_ms" in r]
        masks = np.array([t for r in rs for t in r["mask"]]) * 1e6
        checks = [t * 1e6 for r in rs for t in r["check"]]
        mask_cell = "-"
        if masks.size:
            mask_cell = " / ".join(
                fmt(x, 0) for x in (masks.mean(), *np.percentile(masks, [50, 99]), masks.max())
            )
        compile_cell = " / ".join(fmt(percentile(compile_ms, q), 1) for q in (50, 99, 100))
        rows.append(
            f"| {subset} | {n} | {passing} | {100 * passing / n:.1f} | {errors} | {timeouts} | "
            f"{sum(r['valid_rejected'] for r in rs)} | {sum(r['invalid_accepted'] for r in rs)} | "
            f"{compile_cell} | {mask_cell} | {fmt(percentile(checks, 50), 1)} |"
        )
    keywords = collections.Counter(r.get("keyword") for r in records if r["status"] == "error")
    by_keyword = "compile errors by keyword: " + ", ".join(
        f"`{k}` {v}" for k, v in keywords.most_common()
    )
    return "\n".join(rows), by_keyword


# -- command line ---------------------------------------------------------------------------------


def _options(pairs: list[str]) -> dict:
    out = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("harness", choices=["test-suite", "maskbench"])
    parser.add_argument("--data", type=Path, default=DATA, help="the shared data directory")
    parser.add_argument("--draft", default="draft2020-12")
    parser.add_argument("--only", nargs="*", default=(), help="test-suite files to run")
    parser.add_argument("--subset", nargs="*", help="maskbench subsets (default: all)")
    parser.add_argument("--limit", type=int, help="maskbench schemas per subset")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=10.0)
    parser.add_argument("--option", action="append", default=[], help="compiler option k=v")
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    options = {"whitespace": "default", **_options(args.option)}
    settings = f"options {json.dumps(options)}, tokenizer {args.model}, timeout {args.timeout} s"
    if args.harness == "test-suite":
        root = args.data / "json-schema-test-suite" / "tests" / args.draft
        records = run_test_suite(root, load_vocab(args.model), options, args.timeout, args.only)
        table = test_suite_table(records)
        text = f"JSON Schema Test Suite, {args.draft} ({settings})\n\n{table}\n"
        if args.verbose:
            for r in records:
                if not r["passed"]:
                    print(f"  FAIL {r['file']} | {r['group']} | {r['reason']}")
    else:
        subsets = args.subset or sorted(p.name for p in (args.data / "jsonschemabench").iterdir())
        jobs = maskbench_jobs(args.data, subsets, args.limit)
        t0 = time.perf_counter()
        records = run_maskbench(jobs, args.model, options, args.jobs, args.timeout)
        table, by_keyword = maskbench_table(records)
        elapsed = time.perf_counter() - t0
        text = (
            f"MaskBench-style run on {len(records)} schemas ({settings}, "
            f"{args.jobs} processes, {elapsed:.0f} s)\n\n{table}\n\n{by_keyword}\n"
        )
        if args.verbose:
            for r in records:
                if r["status"] != "pass":
                    print(f"  {r['status']} {r['subset']}/{r['id']}: {r.get('error', '')}")
    print(text)
    if args.markdown:
        args.markdown.write_text(text)
    if args.json:
        for r in records:
            r.pop("mask", None), r.pop("check", None)
        args.json.write_text(json.dumps(records, indent=1))


if __name__ == "__main__":
    main()
