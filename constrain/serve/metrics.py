"""`Metrics`: the server's counters, written out in Prometheus' text format at ``/metrics``."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Histogram", "Metrics", "resident_bytes"]

_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


def resident_bytes() -> int:
    """This process's resident set size (Linux; elsewhere its peak)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@dataclass
class Histogram:
    """Observations counted into cumulative buckets (upper bounds in seconds)."""

    bounds: tuple[float, ...] = _SECONDS
    counts: list[int] = field(default_factory=lambda: [0] * len(_SECONDS))
    total: float = 0.0
    n: int = 0

    def observe(self, value: float) -> None:
        self.total += value
        self.n += 1
        for i, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[i] += 1

    def lines(self, name: str, help_text: str) -> list[str]:
        out = [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
        out += [f'{name}_bucket{{le="{b:g}"}} {c}' for b, c in zip(self.bounds, self.counts)]
        out += [f'{name}_bucket{{le="+Inf"}} {self.n}', f"{name}_sum {self.total:.6f}",
                f"{name}_count {self.n}"]  # fmt: skip
        return out


@dataclass
class Metrics:
    """Requests, queue, tokens and times (written by the scheduler thread; read anywhere)."""

    requests: int = 0  # accepted into the queue
    completed: int = 0
    rejected: int = 0  # queue full (429)
    failed: int = 0  # answered with an error after being accepted
    queue_depth: int = 0
    running: int = 0
    completion_tokens: int = 0
    constraint_seconds: float = 0.0
    ttft: Histogram = field(default_factory=Histogram)
    tpot: Histogram = field(default_factory=Histogram)  # time per output token
    latency: Histogram = field(default_factory=Histogram)
    queue_wait: Histogram = field(default_factory=Histogram)
    step: Histogram = field(default_factory=Histogram)

    def observe_wait(self, seconds: float) -> None:
        self.queue_wait.observe(seconds)

    def observe_ttft(self, seconds: float) -> None:
        self.ttft.observe(seconds)

    def observe_step(self, seconds: float, running: int) -> None:
        self.step.observe(seconds)
        self.running = running

    def observe_request(self, seconds: float, tokens: int, constraint_s: float) -> None:
        self.latency.observe(seconds)
        self.completion_tokens += tokens
        self.constraint_seconds += constraint_s
        if tokens:
            self.tpot.observe(seconds / tokens)

    def text(self, cache_hits: int, cache_misses: int, prompt_cache_bytes: int,
             compiled: tuple[int, int, int]) -> str:  # fmt: skip
        """The Prometheus exposition of every metric; `compiled`: the compiled constraints
        kept, the bytes they hold and their bound."""
        kept, held, bound = compiled
        p = "constrain_"
        lines = []
        for name, value, kind, help_text in (
            ("requests_total", self.requests, "counter", "requests accepted"),
            ("requests_completed_total", self.completed, "counter", "requests answered"),
            ("requests_rejected_total", self.rejected, "counter", "requests refused: queue full"),
            ("requests_failed_total", self.failed, "counter", "requests failed after acceptance"),
            ("queue_depth", self.queue_depth, "gauge", "requests waiting"),
            ("running_requests", self.running, "gauge", "requests in the batch"),
            ("completion_tokens_total", self.completion_tokens, "counter", "tokens generated"),
            ("constraint_seconds_total", round(self.constraint_seconds, 6), "counter",
             "time spent in constraints (masks, checks)"),
            ("compile_cache_hits_total", cache_hits, "counter", "compiled constraints reused"),
            ("compile_cache_misses_total", cache_misses, "counter", "constraints compiled"),
            ("prompt_cache_bytes", prompt_cache_bytes, "gauge", "KV cache kept for prompts"),
            ("compiled_constraints", kept, "gauge", "compiled constraints kept"),
            ("compiled_constraints_bytes", held, "gauge",
             "memory the compiled constraints hold (their automata, masks, plans, states)"),
            ("compiled_constraints_max_bytes", bound, "gauge",
             "their bound (--max-cache-bytes)"),
            ("resident_memory_bytes", resident_bytes(), "gauge", "the process's resident set"),
        ):  # fmt: skip
            lines += [f"# HELP {p}{name} {help_text}", f"# TYPE {p}{name} {kind}",
                      f"{p}{name} {value}"]  # fmt: skip
        lines += self.ttft.lines(p + "time_to_first_token_seconds", "time to first token")
        lines += self.tpot.lines(p + "time_per_output_token_seconds", "latency per token")
        lines += self.latency.lines(p + "request_latency_seconds", "request latency")
        lines += self.queue_wait.lines(p + "queue_wait_seconds", "time waiting in the queue")
        lines += self.step.lines(p + "step_seconds", "decoding step time")
        return "\n".join(lines) + "\n"
