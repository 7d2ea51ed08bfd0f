"""JSON Schema conformance: the official JSON Schema Test Suite and MaskBench-style instances.

Both run the real token path: an instance, serialised with ``json.dumps(..., ensure_ascii=False)``
(separators to match the whitespace option), is tokenized with the bundled SmolLM2 tokenizer
and fed token by token to a `Matcher`; it is *accepted* iff every token checks and the matcher
accepts at the end.

Instances are written *canonically* by default: as the grammar writes values, i.e. object
members in the grammar's order (schema order; found by a depth-first search over the
automaton that tries the instance's own order first) and numbers without an exponent. A JSON
value has many texts and the grammar admits one of them per layout by design (see
docs/json-schema.md); accepting the value means accepting that text. An instance counts as
accepted when *some* member order is accepted, which is also the strict reading for invalid
instances. ``--instances as-given`` tests the plain ``json.dumps`` text instead.

* ``test-suite``: for each group of ``tests/<draft>/*.json`` compile the schema; the group
  passes iff every instance is accepted exactly when it is valid. A schema whose language is
  empty (a compile-time `EmptyLanguageError`) rejects every instance. Reported per file, with totals
  for the core files (all but format, refRemote, vocabulary) and for ``optional/format``.
* ``maskbench``: schemas from ``jsonschemabench/<Subset>/<id>.json`` with the instances of
  ``maskbench/<Subset>.jsonl``; a schema passes when it compiles, every valid instance is
  accepted and every invalid one rejected. Per subset: passing, compile errors (and by keyword
  overall), valid-rejected, invalid-accepted, timeouts, compile time (schema -> Grammar ->
  Constraint), mask time at every step of every valid instance and after its last token,
  first-mask time (each worker first runs a warm-up schema, so it times the schema, not the
  vocabulary's one-time structures), `check` time (without masks). llguidance and XGrammar, when installed, run
  beside ours on the same schemas and token ids (`constrain.bench.peers`; ``--peers`` picks
  them), given the instances as ``json.dumps`` writes them; a table compares the engines.
  ``--model`` names one tokenizer or several (a section each).

A per-group / per-schema timeout (default 10 s, SIGALRM) turns hangs into reported timeouts.
For MaskBench the compiler's own limit is half of it (`Grammar.from_json_schema(timeout=)`):
a schema that takes longer to compile is a compile error naming the limit, and its instances
keep the other half.

Run: ``python -m constrain.bench.conformance test-suite [--markdown PATH]`` or
``python -m constrain.bench.conformance maskbench [--subset S] [--limit N] [--jobs 2]``;
``--option any_order=true`` (repeatable) passes compiler options (``spellings`` is "all"
unless given: every valid text, not only generation's canonical one); ``--ids FILE`` runs the
schemas listed as ``Subset/id`` lines.
"""

from __future__ import annotations

import argparse
import collections
import gc
import itertools
import json
import math
import multiprocessing
import signal
import sys
import time
import warnings
from decimal import Decimal
from pathlib import Path

import numpy as np

import constrain as cn
from constrain.bench.peers import PEERS, PeerEngine, load_peers, run_peer_instance
from constrain.bench.report import fmt, load_vocab, percentile
from constrain.errors import EmptyLanguageError

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
_EXCLUDED_CORE = {"format.json", "refRemote.json", "vocabulary.json"}


class _Timeout(Exception):
    pass


def _alarm(*_):
    raise _Timeout


def serialise(value, options: dict) -> str:
    """`value` as ``json.dumps`` writes it in the layout of the whitespace option (keys as given)."""
    compact = options.get("whitespace", "compact") == "compact"
    separators = (",", ":") if compact else None
    indent = options.get("indent", 2) if options.get("whitespace") == "pretty" else None
    return json.dumps(value, separators=separators, indent=indent, ensure_ascii=False)


_ORDER_BUDGET = 5_000  # automaton steps one member-order search may take (valid MaskBench
# instances need at most ~3,500; an invalid one may search every order until it runs out)


class _Layout:
    """The punctuation ``json.dumps`` writes for a whitespace option, by nesting level."""

    def __init__(self, options: dict):
        self.compact = options.get("whitespace", "compact") == "compact"
        pretty = options.get("whitespace") == "pretty"
        self.indent = options.get("indent", 2) if pretty else None

    def _newline(self, level: int) -> str:
        return "\n" + " " * (self.indent * level)

    def open(self, bracket: str, level: int) -> str:
        return bracket + (self._newline(level + 1) if self.indent is not None else "")

    def close(self, bracket: str, level: int) -> str:
        return (self._newline(level) if self.indent is not None else "") + bracket

    def comma(self, level: int) -> str:
        if self.indent is not None:
            return "," + self._newline(level + 1)
        return "," if self.compact else ", "

    @property
    def colon(self) -> str:
        return ":" if self.compact else ": "


def serialise_in_grammar_order(value, options: dict, automaton) -> str | None:
    """`value` serialised like `serialise`, with the members of each object in an order the
    grammar accepts, or None when no order is accepted (within a search budget).

    The grammar writes object members in one order (schema order; see docs/json-schema.md),
    as it writes one whitespace layout: a valid value is *accepted* when its serialisation in
    that order is. The search is depth first over the automaton's live states, trying the
    instance's own order first, so it costs one pass when the instance is already in order.
    """
    layout = _Layout(options)
    budget = [_ORDER_BUDGET]

    def step(state, text: str):
        budget[0] -= 1
        if budget[0] < 0:
            raise _BudgetExceeded
        return automaton.step(state, text.encode())

    dead: set = set()  # (object, state, keys left) from which no order completes

    known: dict[tuple, str] = {}  # (id(container), level) -> a text the grammar accepted once

    def write(state, v, level: int):
        """Yield (state, text) for each way to write `v` from `state`, lazily, best first:
        a container is first tried as the text found for it before (in another context)."""
        if isinstance(v, (dict, list)) and v:
            text = known.get((id(v), level))
            if text is not None:
                after = step(state, text)
                if after is not None:
                    yield after, text
            for after, text in search(state, v, level):
                known.setdefault((id(v), level), text)
                yield after, text
        else:
            text = _scalar_text(v)
            after = step(state, text)
            if after is not None:
                yield after, text

    def search(state, v, level: int):
        if isinstance(v, dict):
            opening = layout.open("{", level)
            after = step(state, opening)
            if after is not None:
                for end, text in members(v, after, list(v), level):
                    yield end, opening + text
        else:
            opening = layout.open("[", level)
            after = step(state, opening)
            if after is not None:
                for end, text in items(after, v, 0, level):
                    yield end, opening + text

    def items(state, values: list, i: int, level: int):
        if i == len(values):
            closing = layout.close("]", level)
            after = step(state, closing)
            if after is not None:
                yield after, closing
            return
        lead = layout.comma(level) if i else ""
        after = step(state, lead) if lead else state
        if after is None:
            return
        for mid, text in write(after, values[i], level + 1):
            for end, tail in items(mid, values, i + 1, level):
                yield end, lead + text + tail

    def head(key: str, first: bool, level: int) -> str:
        lead = "" if first else layout.comma(level)
        return lead + json.dumps(key, ensure_ascii=False) + layout.colon

    def members(obj: dict, state, keys: list, level: int):
        """Members `keys` of `obj` from `state`, depth first. The first candidate tried is
        one after which every other allowed key is still allowed (in schema order: the
        earliest in the schema), found in one pass; then the others in the instance's order."""
        if not keys:
            closing = layout.close("}", level)
            after = step(state, closing)
            if after is not None:
                yield after, closing
            return
        marker = (id(obj), state, tuple(keys))
        if marker in dead:
            return
        first = len(keys) == len(obj)
        written: dict = {}  # key -> the ways to write its member (the first one drawn), or None

        def member(key: str):
            if key not in written:
                text = head(key, first, level)
                after = step(state, text)
                ways = iter(()) if after is None else write(after, obj[key], level + 1)
                found = next(ways, None)
                if found is None:
                    written[key] = None
                else:
                    rest = ((end, text + value) for end, value in ways)
                    all_ways = itertools.chain([(found[0], text + found[1])], rest)
                    written[key] = (found[0], all_ways)
            return written[key]

        best = None
        for key in keys:
            if best is not None and step(written[best][0], head(key, False, level)) is not None:
                continue  # `key` may follow `best`
            if member(key) is not None:
                best = key  # the first allowed key, or one that cannot follow `best`
        order = ([best] if best is not None else []) + [k for k in keys if k != best]
        found = False
        for key in order:
            if member(key) is None:
                continue
            rest = [k for k in keys if k != key]
            for mid, text in written[key][1]:
                for end, tail in members(obj, mid, rest, level):
                    found = True
                    yield end, text + tail
        if not found:
            dead.add(marker)

    try:
        for state, text in write(automaton.start, value, 0):
            if automaton.accepting(state):
                return text
    except (_BudgetExceeded, RecursionError):
        return None
    return None


def _scalar_text(v) -> str:
    """A scalar as ``json.dumps`` writes it, but floats in plain decimal notation (the
    grammar writes numbers without an exponent: 1e-05 as 0.00001)."""
    text = json.dumps(v, ensure_ascii=False)
    if isinstance(v, float) and math.isfinite(v) and "e" in text:
        text = format(Decimal(repr(v)), "f")
    return text


class _BudgetExceeded(Exception):
    pass


WRITINGS = ("canonical", "as-given")


def instance_text(constraint, value, options: dict, writing: str = "canonical") -> str:
    """The text an instance is tested as: ``json.dumps`` in the layout of the whitespace
    option, either "canonical" (written as the grammar writes values: object members in the
    grammar's order when some order is accepted, numbers without exponent) or "as-given"."""
    if writing == "canonical" and constraint is not None:
        text = serialise_in_grammar_order(value, options, constraint.grammar.automaton)
        if text is not None:
            return text
    return serialise(value, options)


def compile_constraint(schema, vocab: cn.Vocabulary, options: dict) -> cn.Constraint | None:
    """The schema's constraint, or None when its language is empty (nothing is valid).

    Compiled with ``spellings="all"`` unless `options` say otherwise: conformance asks whether
    a valid text is accepted, and generation's canonical spelling (no ``1.0`` for an integer,
    no optional escapes) would refuse valid texts by design."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            grammar = cn.Grammar.from_json_schema(schema, **{"spellings": "all", **options})
        except EmptyLanguageError:
            return None
    return cn.Constraint(grammar, vocab)


def run_instance(
    constraint: cn.Constraint | None, text: str, timings: dict | None = None, timed: str = ""
) -> bool:
    """Feed `text` token by token; with `timings`, time `timed` ("mask" or "check") per step.

    A mask is the full packed bitmask (`Matcher.bitmask`), what the peers fill too.

    A check is timed on its own constraint whose masks are never computed, so it measures the
    walk of the token's bytes, not a lookup in a cached mask.
    """
    if constraint is None:
        return False
    matcher = constraint.start()
    for token in constraint.vocab.encode_bytes(text.encode()):
        t0 = time.perf_counter()
        if timed == "mask":
            matcher.bitmask()
        ok = matcher.check(token)
        if timed:
            timings[timed].append(time.perf_counter() - t0)
        if not ok:
            return False
        matcher.advance(token)
    if timed == "mask":  # and after the last token
        t0 = time.perf_counter()
        matcher.bitmask()
        timings[timed].append(time.perf_counter() - t0)
    return matcher.accepting()


def _error_keyword(exc: Exception) -> str:
    return getattr(exc, "keyword", None) or type(exc).__name__


# -- the JSON Schema Test Suite -------------------------------------------------------------------


def run_test_suite(
    root: Path,
    vocab: cn.Vocabulary,
    options: dict,
    timeout: float = 10.0,
    only=(),
    writing: str = "canonical",
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
                    text = instance_text(constraint, test["data"], options, writing)
                    accepted = run_instance(constraint, text)
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


# a schema run once in each worker before any is timed: a first mask times the schema, not the
# vocabulary's one-time structures (the peers build theirs in `load_peers`)
_WARM_UP = {
    "type": "object",
    "properties": {"a": {"type": "string"}, "b": {"type": "array", "uniqueItems": True}},
    "additionalProperties": {"type": "integer"},
}
_WARM_UP_VALUE = {"a": "x\u00e9", "b": [1, "y"], "c": 2}


def _init_worker(
    vocab_name: str, options: dict, timeout: float, writing: str, peers: tuple = ()
) -> None:
    _WORKER["vocab"] = vocab = load_vocab(vocab_name) if vocab_name else None
    _WORKER["options"] = options
    _WORKER["timeout"] = timeout
    _WORKER["writing"] = writing
    _WORKER["peers"] = []
    if vocab is not None:  # what the vocabulary builds once (its slices, the check's byte table)
        warm_up = compile_constraint(_WARM_UP, vocab, options)
        run_instance(warm_up, serialise(_WARM_UP_VALUE, options), {"mask": []}, "mask")
    if peers and vocab is not None:
        from constrain.models import load_tokenizer

        _WORKER["peers"] = load_peers(list(peers), load_tokenizer(vocab_name), vocab.size, options)
    # what a server does after start-up: the objects loaded so far (torch, the tokenizer, the
    # vocabulary) leave the collector's generations, so a full collection no longer walks them
    # (with torch imported, a 100-400 ms pause inside whichever mask triggers it)
    gc.freeze()
    signal.signal(signal.SIGALRM, _alarm)


def run_peer_schema(engine: PeerEngine, schema, texts: list[str], invalid: list[str]) -> dict:
    """One peer on one schema: compile, the valid texts with timed masks, the invalid ones."""
    encode = _WORKER["vocab"].encode_bytes
    result = {"status": "ok", "valid_rejected": 0, "invalid_accepted": 0, "mask": []}
    signal.setitimer(signal.ITIMER_REAL, _WORKER["timeout"])
    try:
        t0 = time.perf_counter()
        compiled = engine.compile(schema)
        result["compile_ms"] = (time.perf_counter() - t0) * 1e3
        for text in texts:
            accepted = run_peer_instance(engine, compiled, encode(text.encode()), result["mask"])
            result["valid_rejected"] += not accepted
        if result["mask"]:
            result["first_mask"] = result["mask"][0]
        for text in invalid:
            result["invalid_accepted"] += run_peer_instance(engine, compiled, encode(text.encode()))
        passed = result["valid_rejected"] == 0 and result["invalid_accepted"] == 0
        result["status"] = "pass" if passed else "fail"
    except _Timeout:
        result["status"] = "timeout"
    except Exception as exc:  # a peer's refusal or failure is its compile error
        result["status"] = "error"
        result["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return result


def run_schema(job: tuple) -> dict:
    """Compile one schema and run its instances (in a worker process)."""
    subset, ident, schema_path, valid, invalid = job
    vocab, options, timeout = _WORKER["vocab"], _WORKER["options"], _WORKER["timeout"]
    record = {"subset": subset, "id": ident, "status": "ok", "valid": len(valid)}
    record.update(invalid=len(invalid), valid_rejected=0, invalid_accepted=0, mask=[], check=[])
    schema = json.loads(Path(schema_path).read_text())
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        t0 = time.perf_counter()
        constraint = compile_constraint(schema, vocab, {"timeout": timeout / 2, **options})
        record["compile_ms"] = (time.perf_counter() - t0) * 1e3
        if constraint is not None:  # the first mask, before anything warms the grammar's caches
            t0 = time.perf_counter()
            constraint.start().bitmask()
            record["first_mask"] = time.perf_counter() - t0
        timings = {"mask": [], "check": []}
        writing = _WORKER["writing"]
        texts = [instance_text(constraint, value, options, writing) for value in valid]
        record["reordered"] = sum(t != serialise(v, options) for t, v in zip(texts, valid))
        if constraint is not None:  # checks next, on a twin whose masks stay uncomputed
            twin = cn.Constraint(constraint.grammar, constraint.vocab)
            for text in texts:
                run_instance(twin, text, timings, "check")
        for text in texts:
            record["valid_rejected"] += not run_instance(constraint, text, timings, "mask")
        for value in invalid:
            text = instance_text(constraint, value, options, writing)
            record["invalid_accepted"] += run_instance(constraint, text)
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
    if _WORKER["peers"]:
        as_given = [serialise(value, options) for value in valid]
        refused = [serialise(value, options) for value in invalid]
        record["peers"] = {
            engine.name: run_peer_schema(engine, schema, as_given, refused)
            for engine in _WORKER["peers"]
        }
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


def run_maskbench(
    jobs: list[tuple],
    vocab_name: str,
    options: dict,
    n_jobs: int,
    timeout: float,
    writing: str = "canonical",
    peers: tuple = (),
):
    """Every job's record (see `run_schema`), with `peers` (names) run beside ours."""
    args = (vocab_name, options, timeout, writing, tuple(peers))
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


def _mask_cell(seconds: list[float]) -> str:
    """Mask times as "mean / p50 / p99 / max" in µs."""
    if not seconds:
        return "-"
    us = np.array(seconds) * 1e6
    return " / ".join(fmt(x, 0) for x in (us.mean(), *np.percentile(us, [50, 99]), us.max()))


def _compile_cell(ms: list[float]) -> str:
    return " / ".join(fmt(percentile(ms, q), 1) for q in (50, 99, 100))


def engines_table(records: list[dict]) -> str:
    """Ours and each peer on the same schemas and instances: one row per engine."""
    results = {"constrain": records}
    for r in records:
        for name, result in r.get("peers", {}).items():
            results.setdefault(name, []).append(result)
    rows = [
        "| engine | schemas | passing | % | compile errors | timeouts | valid rejected | "
        "invalid accepted | compile p50 / p99 / max ms | mask mean / p50 / p99 / max µs | "
        "first mask p50 / p99 µs |",
        "|---" * 11 + "|",
    ]
    for name, rs in results.items():
        n = len(rs)
        status = collections.Counter(r["status"] for r in rs)
        compile_ms = [r["compile_ms"] for r in rs if "compile_ms" in r]
        first = [r["first_mask"] * 1e6 for r in rs if "first_mask" in r]
        mask_cell = _mask_cell([t for r in rs for t in r["mask"]])
        rows.append(
            f"| {name} | {n} | {status['pass']} | {100 * status['pass'] / n:.1f} | "
            f"{status['error']} | {status['timeout']} | "
            f"{sum(r['valid_rejected'] for r in rs)} | {sum(r['invalid_accepted'] for r in rs)} | "
            + _compile_cell(compile_ms)
            + f" | {mask_cell} | "
            + " / ".join(fmt(percentile(first, q), 0) for q in (50, 99))
            + " |"
        )
    return "\n".join(rows)


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
        mask_cell = _mask_cell([t for r in rs for t in r["mask"]])
        checks = [t * 1e6 for r in rs for t in r["check"]]
        compile_cell = _compile_cell(compile_ms)
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
    parser.add_argument(
        "--ids", type=Path, help="maskbench: a file of Subset/id lines, the schemas to run"
    )
    parser.add_argument(
        "--instances",
        dest="writing",
        choices=WRITINGS,
        default="canonical",
        help="write instances as the grammar writes values (member order, numbers without "
        "exponent; the default) or exactly as json.dumps does",
    )
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=10.0)
    parser.add_argument("--option", action="append", default=[], help="compiler option k=v")
    parser.add_argument(
        "--model",
        nargs="+",
        default=["smollm2-135m-instruct"],
        help="tokenizers (maskbench: one table each; test-suite: the first)",
    )
    parser.add_argument(
        "--peers",
        nargs="*",
        choices=sorted(PEERS),
        default=sorted(PEERS),
        help="maskbench: other engines run beside ours when installed (none: `--peers`)",
    )
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    options = {"whitespace": "default", **_options(args.option)}
    settings = (
        f"options {json.dumps(options)}, timeout {args.timeout} s, instances written {args.writing}"
    )
    if args.harness == "test-suite":
        root = args.data / "json-schema-test-suite" / "tests" / args.draft
        vocab = load_vocab(args.model[0])
        records = run_test_suite(root, vocab, options, args.timeout, args.only, args.writing)
        table = test_suite_table(records)
        text = f"JSON Schema Test Suite, {args.draft} ({settings}, tokenizer {args.model[0]})\n\n{table}\n"
        if args.verbose:
            for r in records:
                if not r["passed"]:
                    print(f"  FAIL {r['file']} | {r['group']} | {r['reason']}")
    else:
        subsets = args.subset or sorted(p.name for p in (args.data / "jsonschemabench").iterdir())
        jobs = maskbench_jobs(args.data, subsets, args.limit)
        if args.ids:
            wanted = set(args.ids.read_text().split())
            jobs = [job for job in jobs if f"{job[0]}/{job[1]}" in wanted]
        sections, records = [], []
        for model in args.model:
            t0 = time.perf_counter()
            runs = run_maskbench(
                jobs, model, options, args.jobs, args.timeout, args.writing, args.peers
            )
            table, by_keyword = maskbench_table(runs)
            elapsed = time.perf_counter() - t0
            sections.append(
                f"## Tokenizer {model}\n\nMaskBench-style run on {len(runs)} schemas "
                f"({settings}, {args.jobs} processes, {elapsed:.0f} s); peers are given the "
                f"instances as `json.dumps` writes them\n\n{engines_table(runs)}\n\n"
                f"constrain by subset:\n\n{table}\n\n{by_keyword}\n"
            )
            for r in runs:
                r["tokenizer"] = model
                if args.verbose and r["status"] != "pass":
                    print(f"  {r['status']} {model} {r['subset']}/{r['id']}: {r.get('error', '')}")
            records += runs
        text = "\n".join(sections)
    print(text)
    if args.markdown:
        args.markdown.write_text(text)
    if args.json:
        for r in records:
            r.pop("mask", None), r.pop("check", None)
            for result in r.get("peers", {}).values():
                result.pop("mask", None)
        args.json.write_text(json.dumps(records, indent=1))


if __name__ == "__main__":
    main()
