"""`constrain bench vllm`: constrain as vLLM's backend against xgrammar, llguidance and our server.

One run starts four servers one after another, each as a child process on 127.0.0.1 with the
bundled SmolLM2, and drives the same structured requests against each: vLLM's OpenAI server with
``--structured-outputs-config.backend constrain``, ``xgrammar`` and ``guidance`` (the same flags,
run by the interpreter of vLLM's own environment, ``--vllm-python``), then ``constrain serve``.

A request is a streamed chat completion through the official ``openai`` client: the prompt of
the project's JSONSchemaBench harness (its system prompt, two worked examples, the schema),
``response_format`` json_schema with ``strict: true``, temperature 1, a seed of its own, and
``max_tokens`` 48. The schemas are real ones from the shared JSONSchemaBench data, drawn with a
seed (the same for every system), kept when all three vLLM backends accept them (checked in a
process of vLLM's environment before any server starts: `refusals`). Two regimes, each at
concurrency 1, 16 and 64: a new schema on every request (no schema is sent twice to a server),
and 4 repeated schemas (each sent once as a warm-up first). Every answer is validated with
``jsonschema`` (Draft 2020-12, formats checked); after each level the server must still run
and answer ``/health``. The report computes the goals' ratios, vLLM+constrain over
vLLM+xgrammar, from the same run.

    python -m constrain.bench.vllm [--requests 8 32 64] [--markdown docs/benchmarks/vllm.md]

Each server's log is kept under ``bench-results/vllm-<time>/`` with every answer
(``answers.json``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import random
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from constrain.vllm.server import ChildServer, VLLMServer, free_port

__all__ = ["main"]

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data" / "jsonschemabench"
MODEL_NAME = "smollm2"
# the systems, in the order they run: vLLM's backend names, then our own server
VLLM_BACKENDS = ("constrain", "xgrammar", "guidance")
SERVE = "constrain-serve"
SYSTEMS = (*VLLM_BACKENDS, SERVE)
LABELS = {"constrain": "vLLM+constrain", "xgrammar": "vLLM+xgrammar",
          "guidance": "vLLM+llguidance", SERVE: "constrain serve"}  # fmt: skip
REGIMES = {"new": "a new schema on every request", "repeated": "repeated schemas"}
MAX_SCHEMA_CHARS = 2000  # the schema's compact JSON: its prompt fits the 2048-token context
# every vLLM server's flags: vLLM 0.32 on CPU crashes the engine (all backends) when it chunks
# the prefill of a seeded request: it rewinds the request's generator for the discarded token,
# which a CPU generator refuses ("CPU Generator does not use offset", gpu_model_runner.py
# _bookkeeping_sync); whole prompts only (each fits the 2048 tokens of a step)
VLLM_FLAGS = ("--no-enable-chunked-prefill",)
# vLLM's servers run with --enforce-eager or not, whichever decoded faster at concurrency 16 here
EAGER = False
EAGER_MEASURED = (
    "measured on this machine with vLLM+xgrammar and these flags, 32 requests at concurrency 16 "
    "on the 4 repeated schemas (`--systems xgrammar --regimes repeated --concurrency 16 "
    "--requests 32`, with and without `--enforce-eager`), compiled decoded 53.0 tokens/s "
    "against 52.0 eager (two earlier pairs, one with chunked prefill on: 56.0 against 55.4, and "
    "55.7 against 49.9), a small margin; a compiled server starts in ~2 min instead of ~40 s"
)


@dataclass(frozen=True)
class Job:
    """One request to send: a schema of the data (its prompt follows from it) and a seed."""

    schema_id: str  # <subset>/<file stem>
    schema: dict
    seed: int


@dataclass
class Answer:
    """What one request got back: its times, tokens, finish reason, and whether it validates."""

    schema_id: str
    seed: int
    latency: float
    ttft: float | None = None  # to the first content token; None when none came
    tokens: int = 0  # completion tokens, from the stream's usage chunk
    finish: str | None = None
    text: str = ""
    status: int | None = None  # the HTTP status of a failed request (None: a stream error)
    error: str | None = None
    valid: bool = False


@dataclass
class Level:
    """One system's measurements at one regime and concurrency."""

    system: str
    regime: str
    concurrency: int
    seconds: float
    answers: list[Answer]
    crashed: bool = False  # the server died or stopped answering /health after this level
    # the machine's 1-minute load average as the level ends: the server and this client make
    # about 2 on 2 cores; more is other work sharing the machine
    load: float | None = None

    @property
    def answered(self) -> list[Answer]:
        return [a for a in self.answers if a.error is None]

    @property
    def tokens(self) -> int:
        return sum(a.tokens for a in self.answers)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0

    @property
    def valid(self) -> int:
        return sum(a.valid for a in self.answered)

    @property
    def invalid(self) -> int:
        """Answers (HTTP 200) whose text does not validate, whatever their finish reason."""
        return sum(not a.valid for a in self.answered)

    @property
    def invalid_stopped(self) -> int:
        """Invalid answers that the engine finished itself (``stop``): a broken constraint,
        not a text cut by ``max_tokens``."""
        return sum(not a.valid and a.finish == "stop" for a in self.answered)

    @property
    def finishes(self) -> Counter:
        """Finish reasons of the answers: stop, length, other."""
        return Counter(a.finish if a.finish in ("stop", "length") else "other"
                       for a in self.answered)  # fmt: skip

    @property
    def errors(self) -> Counter:
        """Failed requests by HTTP status (``stream`` for an error without one)."""
        return Counter(str(a.status or "stream") for a in self.answers if a.error is not None)

    def ttft(self, q: float) -> float | None:
        return percentile([a.ttft for a in self.answered if a.ttft is not None], q)

    def latency(self, q: float) -> float | None:
        return percentile([a.latency for a in self.answered], q)


@dataclass
class Run:
    """A whole run: what was measured, and how (the header of the report)."""

    command: str
    started: str
    machine: str
    versions: dict[str, str]
    vllm_flags: list[str]
    vllm_command: str  # a vLLM server's command line, its backend as <backend>
    kv_cache_gib: float
    max_tokens: int
    seed: int
    repeated: list[str]  # the repeated regime's schema ids
    refused: dict[str, list[str]]  # backend: the schemas drawn that it refused, left out
    levels: list[Level] = field(default_factory=list)
    not_started: dict[str, str] = field(default_factory=dict)  # system: why
    # the fewest tokens of a valid answer, for the schemas our two systems answered invalid
    shortest: dict[str, int] = field(default_factory=dict)
    minutes: float = 0.0

    def unfit(self, answer: Answer) -> bool:
        """Whether `answer` was cut on a schema whose every valid answer is longer than
        ``max_tokens``: no engine could have answered it validly."""
        return (
            answer.finish == "length" and self.shortest.get(answer.schema_id, 0) > self.max_tokens
        )

    def level(self, system: str, regime: str, concurrency: int) -> Level | None:
        for lv in self.levels:
            if (lv.system, lv.regime, lv.concurrency) == (system, regime, concurrency):
                return lv
        return None


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank `q` percentile (0 < q <= 1) of `values`: the smallest value with at
    least a share `q` of them at or below it; None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


# --- the schemas and requests -------------------------------------------------------------


def pick_schemas(data: Path, count: int, seed: int) -> list[tuple[str, dict]]:
    """`count` schemas of the shared JSONSchemaBench data, the same for a seed: each subset's
    files shuffled by the seed, taken round-robin over the subsets; only schemas whose compact
    JSON is at most MAX_SCHEMA_CHARS and that are valid Draft 2020-12 schemas (with formats,
    so the validator can judge every answer)."""
    import jsonschema

    rng = random.Random(seed)
    queues = []
    for subset in sorted(p for p in data.iterdir() if p.is_dir()):
        files = sorted(subset.glob("*.json"))
        rng.shuffle(files)
        queues.append(files)
    picked: list[tuple[str, dict]] = []
    while len(picked) < count and any(queues):
        for files in queues:
            while files and len(picked) < count:
                path = files.pop()
                schema = json.loads(path.read_text())
                if not isinstance(schema, dict) or len(json.dumps(schema)) > MAX_SCHEMA_CHARS:
                    continue
                try:
                    jsonschema.Draft202012Validator.check_schema(schema)
                except jsonschema.SchemaError:
                    continue
                picked.append((f"{path.parent.name}/{path.stem}", schema))
                break
    if len(picked) < count:
        raise SystemExit(f"only {len(picked)} usable schemas in {data}, {count} needed")
    return picked


def refusals(texts: list[str], model_dir: str) -> dict[str, dict[int, str]]:
    """Which schemas each vLLM backend refuses (index: why), checked as vLLM checks them: its
    front end's validation for xgrammar and llguidance, then the engine's compile (XGrammar's
    compiler, llguidance's matcher with the model's tokenizer); for constrain, the front end's
    compile under the backend's work budget (as `constrain.vllm.patches` checks a request).
    Runs in vLLM's environment (`_refusals_in`), in a process of its own: no server's cache
    sees the schemas."""
    import llguidance
    import llguidance.hf
    import xgrammar as xgr
    from transformers import AutoTokenizer
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams
    from vllm.v1.structured_output.backend_guidance import (
        serialize_guidance_grammar,
        validate_guidance_grammar,
    )
    from vllm.v1.structured_output.backend_types import StructuredOutputOptions
    from vllm.v1.structured_output.backend_xgrammar import validate_xgrammar_grammar

    from constrain.fuel import Fuel
    from constrain.vllm.requests import COMPILE_FUEL, StructuredRequest, compile_fuel

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    config = json.loads((Path(model_dir) / "config.json").read_text())
    size = max(config["vocab_size"], len(tokenizer))
    compiler = xgr.GrammarCompiler(xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=size))
    ll_tokenizer = llguidance.hf.from_tokenizer(tokenizer, size)

    def xgrammar(text: str) -> None:
        validate_xgrammar_grammar(SamplingParams(
            structured_outputs=StructuredOutputsParams(json=text)))  # fmt: skip
        compiler.compile_json_schema(text, any_whitespace=True)

    def guidance(text: str) -> None:
        validate_guidance_grammar(SamplingParams(
            structured_outputs=StructuredOutputsParams(json=text)), ll_tokenizer)  # fmt: skip
        grammar = serialize_guidance_grammar(StructuredOutputOptions.JSON, text)
        matcher = llguidance.LLMatcher(ll_tokenizer, grammar)
        if matcher.is_error():
            raise ValueError(matcher.get_error())

    def constrain(text: str) -> None:
        StructuredRequest("json", text).compile(Fuel(compile_fuel(), limit=COMPILE_FUEL))

    out: dict[str, dict[int, str]] = {"xgrammar": {}, "guidance": {}, "constrain": {}}
    for i, text in enumerate(texts):
        for name, check in (("xgrammar", xgrammar), ("guidance", guidance),
                            ("constrain", constrain)):  # fmt: skip
            try:
                check(text)
            except Exception as exc:
                out[name][i] = f"{type(exc).__name__}: {exc}"[:300]
    return out


def _refusals_in(vllm_python: str, texts: list[str], model_dir: str) -> dict[str, dict[int, str]]:
    """`refusals`, run by vLLM's interpreter (the schemas through its stdin)."""
    code = ("import json, sys; from constrain.bench.vllm import refusals; "
            "print(json.dumps(refusals(json.load(sys.stdin), sys.argv[1])))")  # fmt: skip
    done = subprocess.run([vllm_python, "-c", code, model_dir], input=json.dumps(texts),
                          capture_output=True, text=True, check=False)  # fmt: skip
    if done.returncode:
        raise RuntimeError(f"the schema check failed in vLLM's environment: {done.stderr[-2000:]}")
    lines = done.stdout.strip().splitlines()
    return {name: {int(i): why for i, why in refused.items()}
            for name, refused in json.loads(lines[-1]).items()}  # fmt: skip


def _messages(job: Job) -> list[dict]:
    """The JSONSchemaBench harness's prompt for the job's schema."""
    from constrain.bench.jsonschemabench import messages

    return messages(job.schema_id.split("/")[0], json.dumps(job.schema))


def validates(text: str, schema: dict) -> bool:
    """Whether `text` is JSON valid under `schema` (Draft 2020-12, formats checked)."""
    import jsonschema

    try:
        value = json.loads(text)
        validator = jsonschema.Draft202012Validator(
            schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
        )
        return validator.is_valid(value)
    except Exception:  # not JSON, or a schema the validator cannot apply
        return False


async def _request(client, job: Job, max_tokens: int) -> Answer:
    """One streamed structured chat completion."""
    import httpx
    import openai

    answer = Answer(job.schema_id, job.seed, latency=0.0)
    text: list[str] = []
    t0 = time.perf_counter()
    try:
        stream = await client.chat.completions.create(
            model=MODEL_NAME, messages=_messages(job), temperature=1.0, seed=job.seed,
            max_tokens=max_tokens, stream=True, stream_options={"include_usage": True},
            response_format={"type": "json_schema", "json_schema": {
                "name": "answer", "schema": job.schema, "strict": True}},
        )  # fmt: skip
        async for chunk in stream:
            if chunk.usage is not None:
                answer.tokens = chunk.usage.completion_tokens
            for choice in chunk.choices:
                if choice.delta is not None and choice.delta.content:
                    if answer.ttft is None:
                        answer.ttft = time.perf_counter() - t0
                    text.append(choice.delta.content)
                if choice.finish_reason:
                    answer.finish = choice.finish_reason
    except openai.APIStatusError as exc:
        answer.status, answer.error = exc.status_code, str(exc.message)[:500]
    except (openai.APIError, httpx.HTTPError, ValueError) as exc:  # a broken stream, a drop
        answer.error = f"{type(exc).__name__}: {exc}"[:500]
    answer.latency = time.perf_counter() - t0
    answer.text = "".join(text)
    return answer


async def _drive(url: str, jobs: list[Job], concurrency: int, max_tokens: int,
                 timeout: float) -> tuple[float, list[Answer]]:  # fmt: skip
    """`concurrency` clients sending `jobs` back to back: (wall seconds, answers in order)."""
    import openai

    client = openai.AsyncOpenAI(base_url=url, api_key="unused", max_retries=0, timeout=timeout)
    answers: list[Answer | None] = [None] * len(jobs)
    todo = iter(enumerate(jobs))

    async def client_loop() -> None:
        for i, job in todo:
            answers[i] = await _request(client, job, max_tokens)

    t0 = time.perf_counter()
    await asyncio.gather(*(client_loop() for _ in range(concurrency)))
    seconds = time.perf_counter() - t0
    await client.close()
    return seconds, [a for a in answers if a is not None]


# --- the servers --------------------------------------------------------------------------


class ConstrainServe(ChildServer):
    """``constrain serve`` with the bundled model as a child process on a free loopback port,
    its output kept in `log`."""

    def __init__(self, log: Path, timeout: float = 600):
        port = free_port()
        # as bench/serve.py runs it; a request waiting in the queue must not time out
        argv = [sys.executable, "-m", "constrain.cli", "serve", "--name", MODEL_NAME,
                "--port", str(port), "--log-level", "warning", "--max-running", "16",
                "--max-queue", "64", "--timeout", "600"]  # fmt: skip
        super().__init__(argv, port, log=log, timeout=timeout)


def _healthy(server) -> bool:
    """Whether the server still runs and answers /health (three tries over a few seconds)."""
    for _ in range(3):
        if server.alive() and server.answers():
            return True
        time.sleep(2)
    return False


@dataclass(frozen=True)
class Plan:
    """The requests of a run, the same for every system: per regime, a warm-up and the jobs of
    each concurrency level."""

    warmup: dict[str, list[Job]]  # regime: jobs sent first, one at a time, not measured
    levels: list[tuple[str, int, list[Job]]]  # (regime, concurrency, jobs)


def usable_schemas(data: Path, count: int, seed: int, vllm_python: str,
                   model_dir: str) -> tuple[list[tuple[str, dict]], dict[str, list[str]]]:  # fmt: skip
    """The first `count` schemas drawn with `seed` that all three vLLM backends accept (see
    `refusals`), and the ids of those each refused on the way, left out."""
    candidates = pick_schemas(data, 2 * count, seed)
    refused = _refusals_in(vllm_python, [json.dumps(s) for _, s in candidates], model_dir)
    usable: list[tuple[str, dict]] = []
    seen = 0
    for i, candidate in enumerate(candidates):
        if len(usable) == count:
            break
        seen = i + 1
        if not any(i in why for why in refused.values()):
            usable.append(candidate)
    if len(usable) < count:
        raise SystemExit(f"only {len(usable)} of {len(candidates)} schemas usable, {count} needed")
    return usable, {name: [candidates[i][0] for i in sorted(why) if i < seen]
                    for name, why in refused.items()}  # fmt: skip


def make_plan(schemas: list[tuple[str, dict]], concurrency: Sequence[int],
              requests: Sequence[int], seed: int, repeated: int = 4) -> Plan:  # fmt: skip
    """The run's requests from `schemas` (at least 1 + `repeated` + the requests): the first
    for the new-schema regime's warm-up, the next `repeated` cycled through the repeated regime
    (each sent once first), then a schema of its own for every request of the new-schema
    regime. Seeds follow from `seed`."""
    total = sum(requests)
    warm, kept, new = schemas[0], schemas[1 : 1 + repeated], schemas[1 + repeated :]
    if len(new) < total:
        raise ValueError(f"{1 + repeated + total} schemas needed, {len(schemas)} given")
    seeds = iter(range(seed * 1_000_000, seed * 1_000_000 + 2 * total + repeated + 1))
    levels: list[tuple[str, int, list[Job]]] = []
    start = 0
    for c, n in zip(concurrency, requests, strict=True):
        levels.append(("new", c, [Job(i, s, next(seeds)) for i, s in new[start : start + n]]))
        start += n
    for c, n in zip(concurrency, requests, strict=True):
        levels.append(("repeated", c, [Job(*kept[k % repeated], next(seeds)) for k in range(n)]))
    warmup = {"new": [Job(*warm, next(seeds))],
              "repeated": [Job(i, s, next(seeds)) for i, s in kept]}  # fmt: skip
    return Plan(warmup, levels)


def run_system(system: str, server, plan: Plan, max_tokens: int,
               timeout: float) -> list[Level]:  # fmt: skip
    """Every level of the plan against one started server, in order; stops after a crash."""
    levels: list[Level] = []
    warmed: set[str] = set()
    for regime, concurrency, jobs in plan.levels:
        if regime not in warmed:
            _, answers = asyncio.run(_drive(server.url, plan.warmup[regime], 1, max_tokens,
                                            timeout))  # fmt: skip
            for a in answers:
                if a.error:
                    print(f"  warm-up {a.schema_id}: {a.status} {a.error}", flush=True)
            warmed.add(regime)
        seconds, answers = asyncio.run(_drive(server.url, jobs, concurrency, max_tokens,
                                              timeout))  # fmt: skip
        for a, job in zip(answers, jobs, strict=True):
            a.valid = a.error is None and validates(a.text, job.schema)
        load = os.getloadavg()[0]
        level = Level(system, regime, concurrency, seconds, answers, crashed=not _healthy(server),
                      load=load)  # fmt: skip
        levels.append(level)
        print(row(level), flush=True)
        if level.crashed:
            break
    return levels


# --- the report ---------------------------------------------------------------------------


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _counts(counter: Counter) -> str:
    return ", ".join(f"{k} x{v}" for k, v in sorted(counter.items())) or "0"


HEADER = (
    "| system | concurrency | requests | tokens | tokens/s | TTFT p50 (s) | TTFT p99 (s) | "
    "latency p50 (s) | latency p99 (s) | valid | invalid (finished) | stop / length / other "
    "| HTTP errors | crashed | load |\n"
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|---:|"
)


def row(lv: Level) -> str:
    """One level as a row of the markdown table."""
    f = lv.finishes
    return (
        f"| {LABELS.get(lv.system, lv.system)} | {lv.concurrency} | {len(lv.answers)} | "
        f"{lv.tokens} | {lv.tokens_per_s:.1f} | {_s(lv.ttft(0.5))} | {_s(lv.ttft(0.99))} | "
        f"{_s(lv.latency(0.5))} | {_s(lv.latency(0.99))} | {lv.valid}/{len(lv.answers)} | "
        f"{lv.invalid} ({lv.invalid_stopped}) | {f['stop']} / {f['length']} / {f['other']} | "
        f"{_counts(lv.errors)} | {'yes' if lv.crashed else 'no'} | "
        f"{'-' if lv.load is None else f'{lv.load:.1f}'} |"
    )


def tables(run: Run) -> str:
    """A table per regime, systems grouped, in the order they ran."""
    out = []
    for regime, title in REGIMES.items():
        rows = [row(lv) for lv in run.levels if lv.regime == regime]
        if not rows:
            continue
        extra = f" ({len(run.repeated)}, each sent once first)" if regime == "repeated" else ""
        out += [f"## {title[0].upper()}{title[1:]}{extra}", "", HEADER, *rows, ""]
    unfit = {i: n for i, n in run.shortest.items() if n > run.max_tokens}
    if unfit:
        out += [f"{len(unfit)} schemas have no valid answer of at most {run.max_tokens} tokens "
                "(their shortest, by constrain's compiler, compact JSON): "
                + ", ".join(f"{i} {n}" for i, n in unfit.items())
                + ". Every system's answers to them are cut (finish `length`).", ""]  # fmt: skip
    for system, why in run.not_started.items():
        out += [f"{LABELS[system]} did not start: {why}", ""]
    return "\n".join(out)


@dataclass(frozen=True)
class Goal:
    """One goal of vLLM+constrain against vLLM+xgrammar, as measured in the run."""

    name: str
    measured: str
    met: bool | None  # None: not measured


def goals(run: Run) -> list[Goal]:
    """The goals, computed from the run: tokens/s at concurrency 16 and 64 at least 0.95 of
    xgrammar's, TTFT p99 at most 1.1 times xgrammar's, no invalid answer, no engine crash."""
    out: list[Goal] = []
    for regime in REGIMES:
        for c in sorted({lv.concurrency for lv in run.levels}):
            ours, theirs = run.level("constrain", regime, c), run.level("xgrammar", regime, c)
            where = f"{REGIMES[regime]}, concurrency {c}"
            if ours is None or theirs is None:
                continue
            if c >= 16:
                ratio = ours.tokens_per_s / theirs.tokens_per_s if theirs.tokens_per_s else None
                out.append(Goal(
                    f"tokens/s constrain / xgrammar >= 0.95 ({where})",
                    f"{_s(ratio)} ({ours.tokens_per_s:.1f} / {theirs.tokens_per_s:.1f})",
                    None if ratio is None else ratio >= 0.95))  # fmt: skip
            a, b = ours.ttft(0.99), theirs.ttft(0.99)
            ratio = a / b if a is not None and b else None
            out.append(Goal(f"TTFT p99 constrain / xgrammar <= 1.1 ({where})",
                            f"{_s(ratio)} ({_s(a)} s / {_s(b)} s)",
                            None if ratio is None else ratio <= 1.1))  # fmt: skip
    ours = [lv for lv in run.levels if lv.system == "constrain"]
    if ours:
        invalid = [a for lv in ours for a in lv.answered if not a.valid]
        stopped = sum(a.finish == "stop" for a in invalid)
        unfit = [a for a in invalid if run.unfit(a)]
        lengths = sorted(run.shortest[a.schema_id] for a in unfit)
        answered = sum(len(lv.answered) for lv in ours)
        measured = (f"{len(invalid)} of {answered} answers invalid: {stopped} finished `stop`, "
                    f"{len(invalid) - stopped} cut by max_tokens")  # fmt: skip
        if unfit:
            measured += (f", of which {len(unfit)} on schemas whose shortest valid answer is "
                         f"{lengths[0]} to {lengths[-1]} tokens, over max_tokens "
                         f"{run.max_tokens} (no engine can answer them validly); "
                         f"{len(invalid) - len(unfit)} avoidable")  # fmt: skip
        out.append(Goal("0 invalid answers (vLLM+constrain) where a valid answer fits "
                        "max_tokens", measured, len(invalid) == len(unfit)))  # fmt: skip
        errors = sum((lv.errors for lv in ours), Counter())
        out.append(Goal("0 failed requests (vLLM+constrain)", _counts(errors), not errors))
    if ours or "constrain" in run.not_started:
        crashes = sum(lv.crashed for lv in ours) + ("constrain" in run.not_started)
        out.append(Goal("0 engine crashes (vLLM+constrain)", str(crashes), crashes == 0))
    return out


def shortest_tokens(schemas: dict[str, dict]) -> dict[str, int]:
    """The fewest tokens of a valid answer to each schema, with the bundled model's tokenizer
    (constrain's compiler, compact JSON: a lower bound for any whitespace): tells an answer
    cut because no valid answer fits ``max_tokens`` from one an engine failed to close."""
    import warnings

    import constrain as cn

    model = cn.load_model()
    out = {}
    for schema_id, schema in schemas.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            generator = cn.Generator(model, schema=schema, max_tokens=1,
                                     schema_options={"whitespace": "compact", "draft": "2020-12"})  # fmt: skip
        out[schema_id] = generator.constraint.shortest_tokens()
    return out


def _verdict(met: bool | None) -> str:
    return "-" if met is None else "yes" if met else "**no**"


def refusal_note(run: Run) -> str:
    """Which schemas drawn were left out, refused by which backend."""
    drawn = sorted({i for ids in run.refused.values() for i in ids})
    parts = [f"{LABELS[name]} {len(ids)}" + (f" ({', '.join(ids)})" if ids else "")
             for name, ids in run.refused.items()]  # fmt: skip
    return (f"{len(drawn)} of the schemas drawn were left out, refused by at least one vLLM "
            f"backend when checked before the servers start: {'; '.join(parts)}.")  # fmt: skip


def render(run: Run) -> str:
    """The markdown report: how it was produced, the goals met and not, the tables."""
    results = goals(run)
    met = [g for g in results if g.met]
    missed = [g for g in results if g.met is False]
    versions = ", ".join(f"{k} {v}" for k, v in run.versions.items())
    if missed:
        verdict = "Not met: " + "; ".join(f"{g.name}: {g.measured}" for g in missed) + "."
    else:
        verdict = "All goals met."
    lines = [
        "# vLLM structured outputs: constrain against xgrammar and llguidance",
        "",
        f"Generated by `{run.command}` (`constrain/bench/vllm.py`), started {run.started}, "
        f"{run.minutes:.0f} min in all, on {run.machine}. Versions: {versions}.",
        "",
        "Four servers, one after another, each a child process on 127.0.0.1 serving the bundled "
        "SmolLM2-135M-Instruct (float32): vLLM's OpenAI server with the structured-output "
        "backends `constrain`, `xgrammar` and `guidance` (llguidance), all with the same flags "
        f"(`{run.vllm_command}`, a free port for 0, `VLLM_CPU_KVCACHE_SPACE="
        f"{run.kv_cache_gib:g}`), then "
        "`constrain serve` (`--max-running 16 --max-queue 64 --timeout 600`). vLLM runs "
        + ("with" if "--enforce-eager" in run.vllm_flags else "without")
        + f" `--enforce-eager`, the faster at concurrency 16: {EAGER_MEASURED}. "
        + (
            "Chunked prefill is off: vLLM 0.32 on CPU crashes its engine, whatever the backend, "
            "when it chunks the prefill of a seeded request (it rewinds the request's generator, "
            "which a CPU generator refuses: `RuntimeError: CPU Generator does not use offset`); "
            "a first run here lost vLLM+constrain and vLLM+xgrammar alike at concurrency 16."
            if "--no-enable-chunked-prefill" in run.vllm_flags
            else ""
        ),
        "",
        "Every request is a streamed chat completion through the official `openai` client: "
        "the JSONSchemaBench harness's prompt (system prompt, two worked examples, the schema), "
        "`response_format` json_schema with `strict: true`, temperature 1, a seed of its own, "
        f"`max_tokens` {run.max_tokens}. The schemas are real JSONSchemaBench schemas (all "
        f"subsets round-robin, compact JSON at most {MAX_SCHEMA_CHARS} characters, valid Draft "
        f"2020-12), drawn with seed {run.seed}, kept when all three vLLM backends accept "
        "them (vLLM's own front-end check, then the engine's compile: XGrammar's compiler, "
        "llguidance's matcher, constrain's compile under its work budget; in a process of its "
        "own, so no server has seen them): every system gets the same requests. "
        + refusal_note(run)
        + " "
        "*A new schema on every request*: no schema is sent twice to a server (one warm-up "
        f"request with another schema first). *Repeated schemas*: {len(run.repeated)} schemas "
        f"({', '.join(run.repeated)}), each sent once as a warm-up, then cycled.",
        "",
        "tokens/s: completion tokens (the stream's usage) over the level's wall time. TTFT: to "
        "the first content token. Latency: to the end of the stream. p99 is the nearest rank "
        "(with fewer than 100 requests, the slowest). valid: answers that parse and validate "
        "with `jsonschema` (Draft 2020-12, format checker). invalid: answers (HTTP 200) that do "
        "not; in parentheses those the engine finished itself (`stop`), a broken constraint; "
        "the others were cut by `max_tokens` (finish `length`). crashed: the server process "
        "died or `/health` failed after the level. load: the machine's 1-minute load average as "
        "the level ends (the server and the client make about 2 on these 2 cores; more is "
        "other work on this shared machine, which slows that level).",
        "",
        "## Goals: vLLM+constrain against vLLM+xgrammar, in this run",
        "",
        "| goal | measured | met |",
        "|---|---|---|",
        *(f"| {g.name} | {g.measured} | {_verdict(g.met)} |" for g in results),
        "",
        f"Met: {len(met)} of {len(results)}. " + verdict,
        "",
        tables(run),
    ]
    return "\n".join(lines)


# --- the command --------------------------------------------------------------------------


def _versions(vllm_python: str) -> dict[str, str]:
    """The versions the report names: vLLM's environment's, then this one's."""
    from importlib.metadata import version

    code = ("import importlib.metadata as m, json; print(json.dumps({d: m.version(d) for d in "
            "['vllm-cpu', 'torch', 'transformers', 'xgrammar', 'llguidance']}))")  # fmt: skip
    try:
        out = subprocess.run([vllm_python, "-c", code], capture_output=True, text=True,
                             timeout=120, check=True).stdout  # fmt: skip
        theirs = json.loads(out)
    except (OSError, subprocess.SubprocessError, ValueError):
        theirs = {}
    theirs.update({"constrain": version("constrain"), "openai (client)": version("openai")})
    return theirs


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        kib = int(Path("/proc/meminfo").read_text().split()[1])
        ram = f", {kib / 2**20:.0f} GiB RAM"
    except OSError:
        ram = ""
    return f"{cpu}, {os.cpu_count()} cores{ram}, no GPU"


def _start(system: str, log: Path, vllm_python: str, flags: list[str]) -> ChildServer:
    if system == SERVE:
        return ConstrainServe(log)
    return VLLMServer(system, extra=flags, log=log, python=vllm_python)


def main(argv: list[str] | None = None) -> int:
    default_python = ROOT / ".venv-vllm" / "bin" / "python"
    parser = argparse.ArgumentParser(prog="constrain bench vllm", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--vllm-python", default=str(default_python) if default_python.exists()
                        else sys.executable, help="the interpreter of vLLM's environment")  # fmt: skip
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    parser.add_argument("--regimes", nargs="+", choices=list(REGIMES), default=list(REGIMES))
    parser.add_argument("--concurrency", nargs="+", type=int, default=[1, 16, 64])
    parser.add_argument("--requests", nargs="+", type=int, default=[8, 32, 64],
                        help="requests at each concurrency level")  # fmt: skip
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0, help="draws the schemas and seeds")
    parser.add_argument("--data", type=Path, default=DATA, help="folder of <Subset>/<id>.json")
    parser.add_argument("--enforce-eager", action=argparse.BooleanOptionalAction,
                        default=EAGER, help="vLLM without torch.compile")  # fmt: skip
    parser.add_argument("--kv-cache-gib", type=float, default=2.0,
                        help="VLLM_CPU_KVCACHE_SPACE: 64 prompts of up to ~900 tokens fit")  # fmt: skip
    parser.add_argument("--timeout", type=float, default=600, help="seconds per request")
    parser.add_argument("--out", type=Path, default=None,
                        help="logs and answers (default: bench-results/vllm-<time>)")  # fmt: skip
    parser.add_argument("--markdown", type=Path, default=None, help="write the report here")
    args = parser.parse_args(argv)
    if len(args.concurrency) != len(args.requests):
        parser.error("--concurrency and --requests need as many values")

    started = datetime.now(timezone.utc)
    out = args.out or ROOT / "bench-results" / f"vllm-{started:%Y%m%d-%H%M%S}"
    out.mkdir(parents=True, exist_ok=True)
    os.environ["VLLM_CPU_KVCACHE_SPACE"] = f"{args.kv_cache_gib:g}"
    from constrain.vllm.server import bundled_model_dir, command

    schemas, refused = usable_schemas(args.data, 1 + 4 + sum(args.requests), args.seed,
                                      args.vllm_python, str(bundled_model_dir()))  # fmt: skip
    plan = make_plan(schemas, args.concurrency, args.requests, args.seed)
    if set(args.regimes) != set(REGIMES):
        plan = Plan(plan.warmup, [lv for lv in plan.levels if lv[0] in args.regimes])
    flags = [*VLLM_FLAGS, *(["--enforce-eager"] if args.enforce_eager else [])]
    run = Run(
        command=" ".join(["constrain bench vllm", *(argv if argv is not None else sys.argv[1:])]),
        started=f"{started:%Y-%m-%d %H:%M} UTC", machine=_machine(),
        versions=_versions(args.vllm_python), vllm_flags=flags, kv_cache_gib=args.kv_cache_gib,
        vllm_command=" ".join(command("<bundled SmolLM2 directory>", backend="<backend>",
                                      port=0, extra=flags, python="python")),
        max_tokens=args.max_tokens, seed=args.seed,
        repeated=[j.schema_id for j in plan.warmup["repeated"]], refused=refused,
    )  # fmt: skip
    print(f"logs and answers: {out}", flush=True)
    print(refusal_note(run), flush=True)
    print(HEADER, flush=True)
    for system in args.systems:
        t0 = time.monotonic()
        server = _start(system, out / f"{system}.log", args.vllm_python, flags)
        try:
            with server:
                print(f"{LABELS[system]}: up in {time.monotonic() - t0:.0f} s", flush=True)
                run.levels += run_system(system, server, plan, args.max_tokens, args.timeout)
        except (RuntimeError, TimeoutError) as exc:
            run.not_started[system] = str(exc)
            print(f"{LABELS[system]} did not start: {exc}", flush=True)
        finally:
            server.__exit__(None, None, None)  # also when interrupted while it starts
        print(f"{LABELS[system]}: {time.monotonic() - t0:.0f} s", flush=True)
        (out / "answers.json").write_text(json.dumps([asdict(lv) for lv in run.levels], indent=1))
    ours = {a.schema_id for lv in run.levels if lv.system in ("constrain", SERVE)
            for a in lv.answered if not a.valid}  # fmt: skip
    schema_of = {j.schema_id: j.schema for _, _, jobs in plan.levels for j in jobs}
    run.shortest = shortest_tokens({i: schema_of[i] for i in sorted(ours)})
    run.minutes = (datetime.now(timezone.utc) - started).total_seconds() / 60
    text = render(run)
    print("\n" + tables(run))
    for g in goals(run):
        print(f"{'met' if g.met else 'NOT MET' if g.met is False else '-'}: {g.name}: {g.measured}")
    if args.markdown:
        args.markdown.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
