"""`constrain bench serve`: the server's throughput and latency under concurrent clients.

`constrain serve` runs as a child process on 127.0.0.1 (a free port) with the bundled model, as
users run it; client threads here post structured requests (a JSON Schema, sampled with a seed per request) through the loopback.
One run measures, side by side: concurrency 1, 4 and 16 with batching, and 16 with batching
off (`max_running=1`: one request decoded at a time); then another client's inter-token times
while a 4k-token prompt is prefilled, with its prompt fed whole and in chunks of a few sizes
(`--prefill-chunk`); then a soak of many structured requests at concurrency 16 whose
resident memory is sampled as it goes. Every answer is validated with
`jsonschema`; request counts and times are bounded.

    python -m constrain.bench.serve [--requests 32] [--soak 200] [--markdown docs/benchmarks/serve.md]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import statistics
import time
from dataclasses import dataclass

__all__ = ["main"]

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 16},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "city": {"type": "string", "maxLength": 16},
    },
    "required": ["name", "age", "city"],
    "additionalProperties": False,
}


@dataclass
class Level:
    """One concurrency level's measurements."""

    label: str
    concurrency: int
    requests: int
    tokens: int
    seconds: float
    latencies: list[float]
    invalid: int

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _request(url: str, i: int, max_tokens: int) -> tuple[float, int, bool]:
    """One structured request: (seconds, completion tokens, valid)."""
    import httpx
    from jsonschema import Draft202012Validator

    body = {
        "model": "bench",
        "messages": [{"role": "user", "content": f"Invent person number {i} as JSON."}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": PERSON}},
        "max_tokens": max_tokens,
        "temperature": 1.0,
        "seed": i,
    }
    t0 = time.perf_counter()
    r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=600)
    seconds = time.perf_counter() - t0
    if r.status_code != 200:
        return seconds, 0, False
    data = r.json()
    choice = data["choices"][0]
    try:
        valid = choice["finish_reason"] == "stop" and Draft202012Validator(PERSON).is_valid(
            json.loads(choice["message"]["content"])
        )
    except json.JSONDecodeError:
        valid = False
    return seconds, data["usage"]["completion_tokens"], valid


def _level(url: str, label: str, concurrency: int, requests: int, max_tokens: int,
           first: int = 0) -> Level:  # fmt: skip
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(lambda i: _request(url, i, max_tokens),
                                range(first, first + requests)))  # fmt: skip
    seconds = time.perf_counter() - t0
    return Level(label, concurrency, requests, sum(r[1] for r in results), seconds,
                 [r[0] for r in results], sum(not r[2] for r in results))  # fmt: skip


def _gauges(url: str) -> dict[str, float]:
    """The server's gauges from /metrics."""
    import httpx

    text = httpx.get(f"{url}/metrics", timeout=30).text
    return {
        line.split()[0]: float(line.split()[1])
        for line in text.splitlines()
        if line and not line.startswith("#") and "{" not in line
    }


def soak(url: str, total: int, max_tokens: int, every: int = 25) -> list[tuple]:
    """`total` structured requests at concurrency 16: samples of (requests done, the
    server's RSS MiB, its prompt KV cache MiB)."""

    def sample(done: int) -> tuple:
        g = _gauges(url)
        mib = 2**20
        return (
            done,
            g["constrain_resident_memory_bytes"] / mib,
            g["constrain_prompt_cache_bytes"] / mib,
        )

    samples = [sample(0)]
    done = 0
    while done < total:
        n = min(every, total - done)
        level = _level(url, "soak", 16, n, max_tokens, first=10_000 + done)
        if level.invalid:
            raise RuntimeError(f"{level.invalid} invalid answers in the soak")
        done += n
        samples.append(sample(done))
    return samples


LONG_PROMPT = " ".join(f"word{i}" for i in range(1030))  # 4,070 tokens with the chat template
CHUNKS = (100_000, 256, 128, 64)  # prefill chunk sizes compared (100,000: the prompt whole)


def _stream_gaps(url: str, max_tokens: int = 40) -> list[float]:
    """The seconds between the streamed chunks of one request (greedy, free text)."""
    import httpx

    body = {"messages": [{"role": "user", "content": "Count to twenty."}], "stream": True,
            "max_tokens": max_tokens, "temperature": 0}  # fmt: skip
    gaps, last = [], None
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=300) as r:
        for line in r.iter_lines():
            now = time.perf_counter()
            if line.startswith("data:") and last is not None:
                gaps.append(now - last)
            last = now
    return gaps


def long_prompt(model, chunk: int) -> dict:
    """Another client's inter-token times, idle and while a 4k-token prompt is prefilled, on
    a server feeding prompts in chunks of `chunk` tokens; and the long request's seconds."""
    import httpx

    from constrain.serve import spawned

    with spawned(model, name="bench", max_tokens=32, prefill_chunk=chunk) as (url, _):
        _stream_gaps(url)  # warm
        idle = _stream_gaps(url)
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            other = pool.submit(_stream_gaps, url)
            time.sleep(0.5)  # the other client is decoding
            t0 = time.perf_counter()
            body = {"messages": [{"role": "user", "content": LONG_PROMPT}], "max_tokens": 4}
            answer = pool.submit(httpx.post, f"{url}/v1/chat/completions", json=body,
                                 timeout=600)  # fmt: skip
            during = other.result()
            response = answer.result()
            seconds = time.perf_counter() - t0
    usage = response.json()["usage"]
    return {"chunk": chunk, "prompt_tokens": usage["prompt_tokens"], "seconds": seconds,
            "idle_p99": _quantile(idle, 0.99), "p50": _quantile(during, 0.5),
            "p99": _quantile(during, 0.99), "max": max(during)}  # fmt: skip


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def long_prompt_report(rows: list[dict]) -> list[str]:
    lines = [
        f"## Another client while a {rows[0]['prompt_tokens']:,}-token prompt is prefilled", "",
        "One client streams 40 greedy tokens; 0.5 s in, another sends a prompt of "
        f"{rows[0]['prompt_tokens']:,} tokens. The first client's time between streamed chunks "
        "(seconds), and how long the long request took, per prefill chunk size "
        "(`--prefill-chunk`; 100,000: the prompt fed whole, as before chunking).", "",
        "| prefill chunk | inter-token p50 | inter-token p99 | inter-token max | idle p99 "
        "| long request (s) |",
        "|---:|---:|---:|---:|---:|---:|",
    ]  # fmt: skip
    for r in rows:
        lines.append(f"| {r['chunk']:,} | {r['p50']:.3f} | {r['p99']:.3f} | {r['max']:.3f} | "
                     f"{r['idle_p99']:.3f} | {r['seconds']:.1f} |")  # fmt: skip
    return [*lines, ""]


def table(levels: list[Level]) -> str:
    base = levels[0].tokens_per_s
    rows = [
        "| setting | concurrency | requests | tokens | tokens/s | vs 1 at a time | latency p50 (s) | latency p99 (s) | invalid |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]  # fmt: skip
    for lv in levels:
        rows.append(
            f"| {lv.label} | {lv.concurrency} | {lv.requests} | {lv.tokens} | "
            f"{lv.tokens_per_s:.1f} | {lv.tokens_per_s / base:.2f}x | "
            f"{statistics.median(lv.latencies):.2f} | {lv.percentile(0.99):.2f} | {lv.invalid} |"
        )
    return "\n".join(rows)


def soak_report(samples: list[tuple]) -> list[str]:
    """The soak's table and its verdict on the second half (the prompt KV cache's growth,
    bounded, taken out)."""
    half, last = samples[len(samples) // 2], samples[-1]
    growth = (last[1] - half[1]) - (last[2] - half[2])
    share = growth / half[1] * 100
    return [
        f"## Soak: {last[0]} structured requests at concurrency 16", "",
        "| requests done | " + " | ".join(str(s[0]) for s in samples) + " |",
        "|---|" + "---:|" * len(samples),
        "| server RSS (MiB) | " + " | ".join(f"{s[1]:.0f}" for s in samples) + " |",
        "| prompt KV cache (MiB) | " + " | ".join(f"{s[2]:.0f}" for s in samples) + " |", "",
        f"Server RSS over the second half (requests {half[0]} to {last[0]}), without the "
        f"prompt KV cache's growth: {growth:+.1f} MiB ({share:+.1f}%). The prompt KV cache "
        f"fills to its bound (`prompt_cache_bytes`, 256 MiB; every soak prompt differs), "
        f"then stays.", "",
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="constrain bench serve", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--model", default=None, help="bundled name or directory")
    parser.add_argument("--requests", type=int, default=32, help="requests at concurrency 16")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--soak", type=int, default=200, help="requests in the soak (0: none)")
    parser.add_argument("--markdown", default=None, help="write the report here too")
    args = parser.parse_args(argv)

    from constrain.serve import spawned

    n = args.requests
    levels = []
    server = dict(name="bench", max_queue=64, max_tokens=args.max_tokens)
    with spawned(args.model, max_running=16, **server) as (url, _):
        _request(url, -1, args.max_tokens)  # warm-up: compile and first masks
        for c, k in ((1, max(4, n // 4)), (4, max(8, n // 2)), (16, n)):
            levels.append(_level(url, "batched", c, k, args.max_tokens))
            print(table(levels), flush=True)
    with spawned(args.model, max_running=1, **server) as (url, _):
        _request(url, -1, args.max_tokens)
        levels.append(_level(url, "batching off", 16, n, args.max_tokens))
    report = ["## Throughput and latency", "", table(levels), ""]
    print(table(levels))
    rows = [long_prompt(args.model, chunk) for chunk in CHUNKS]
    report += long_prompt_report(rows)
    print("\n".join(report[-len(rows) - 6 :]), flush=True)
    if args.soak:
        with spawned(args.model, max_running=16, **server) as (url, _):
            samples = soak(url, args.soak, args.max_tokens)
        report += soak_report(samples)
        print("\n".join(report[-7:]))
    text = "\n".join(report)
    if args.markdown:
        from pathlib import Path

        header = (
            "# Serving benchmark\n\nGenerated by `constrain bench serve"
            f"{' --requests ' + str(n) if n != 32 else ''}` (python -m constrain.bench.serve): "
            "the bundled model served by `constrain serve` in a child process on 127.0.0.1, "
            "16 client threads here posting structured "
            f"requests (a JSON Schema, max_tokens={args.max_tokens}, temperature 1, a seed "
            "each), every answer validated with jsonschema. 2 CPU cores, no GPU.\n\n"
        )
        Path(args.markdown).write_text(header + text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
