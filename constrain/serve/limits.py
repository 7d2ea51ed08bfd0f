"""`Limits`: what one request may ask of the server, each checked before the work it bounds.

A request is refused as soon as it asks for more than a limit allows, before the server does
the work the limit is there to bound: the body's size before it is read, the number of
messages and tools before they are checked, the prompt's characters before it is tokenized,
``n`` x ``particles`` before any sequence exists, the bytes of a constraint's text (a regex,
a grammar, the choices) before it is read, the preparations under way before another
starts, the compiles of constraints not seen before (`max_compiling` at once, the others
wait for a slot up to `compile_wait` seconds; a compiled one never waits), and every stage
of preparing it (compiling, planning completions, the first masks) under one `Fuel` of
``prepare_fuel`` units. Each limit is a server option (``constrain serve
--max-body-bytes ...``) and each refusal names it: 413 for the body, 429 for the
preparations and compiles (busy: retry), 400 for the rest. docs/serving.md lists the defaults.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, fields

from constrain.serve.errors import RequestError

__all__ = ["CompileSlots", "Limits", "options"]


def _limit(default, help: str):
    """A `Limits` field: its default and the help text of its server option."""
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class Limits:
    """The server's limits on one request (see the module docstring); the defaults serve
    every realistic request with a wide margin. Each field is the option ``--max-body-bytes``
    ... of ``constrain serve`` (`options`)."""

    max_body_bytes: int = _limit(8 * 2**20, "bytes of a request body (413)")
    max_json_depth: int = _limit(128, "levels the body's JSON nests, schemas included")
    max_messages: int = _limit(2048, "messages of a chat request")
    max_tools: int = _limit(256, "tools of a chat request")
    max_prompt_chars: int | None = _limit(
        None, "characters of a prompt (messages and tools) before tokenizing (default: 16 "
        "per token of the model's context, more than any text that fits in it)")  # fmt: skip
    max_constraint_bytes: int = _limit(
        256 * 2**10, "bytes of a regex or grammar text, or of a request's choices together "
        "(UTF-8), checked before any is read")  # fmt: skip
    max_n: int = _limit(8, "choices (n) of a request")
    max_sequences: int = _limit(64, "sequences one request decodes at once: n x particles")
    max_preparing: int = _limit(64, "requests being prepared at once, waiting included "
                                "(then 429)")  # fmt: skip
    max_compiling: int = _limit(4, "constraints not compiled before, compiled at once; one "
                                "more waits for a slot (a compiled one never waits)")  # fmt: skip
    compile_wait: float = _limit(10.0, "seconds a new constraint waits for a compile slot "
                                 "(then 429)")  # fmt: skip
    prepare_fuel: int = _limit(10_000_000, "work units (about 1 us each) to prepare one "
                               "request: parse, compile, plan, first masks")  # fmt: skip
    prepare_seconds: float = _limit(60.0, "wall-clock backstop of one preparation (503)")
    max_cache_bytes: int = _limit(2**30, "bytes the compiled constraints kept across requests "
                                  "may hold, measured as they grow (least recently used "
                                  "out)")  # fmt: skip

    def prompt_chars(self, context_length: int | None) -> int:
        """The limit on a prompt's characters for a model with `context_length` tokens."""
        if self.max_prompt_chars is not None:
            return self.max_prompt_chars
        return 16 * (context_length or 2**16)

    def check_count(self, what: str, count: int, limit: int, option: str) -> None:
        """Refuse `count` `what` beyond `limit` (400 naming `what` and the option)."""
        if count > limit:
            raise RequestError(
                f"{what} has {count:,} entries; this server takes at most {limit:,} ({option})",
                what,
                code="limit_exceeded",
            )

    def check_prompt(self, chars: int, context_length: int | None, param: str) -> None:
        """Refuse a prompt of `chars` characters beyond `prompt_chars`, before tokenizing."""
        limit = self.prompt_chars(context_length)
        if chars > limit:
            raise RequestError(
                f"the prompt has {chars:,} characters; this server takes at most {limit:,} "
                f"before tokenizing (max_prompt_chars)",
                param,
                code="limit_exceeded",
            )


    def check_text(self, param: str, text: str | Sequence[str]) -> None:
        """Refuse constraint text in `param` (a regex, a grammar, a list of choices: UTF-8
        text, see `constrain.serve.conventions`) beyond `max_constraint_bytes` in all, before
        any of it is read."""
        size = 0
        for item in [text] if isinstance(text, str) else text:
            size += len(item.encode("utf-8"))
            if size > self.max_constraint_bytes:
                raise RequestError(
                    f"{param} has more than {self.max_constraint_bytes:,} bytes of text; this "
                    f"server reads at most that much of a regex, grammar or choices "
                    f"(--max-constraint-bytes)",
                    param,
                    code="limit_exceeded",
                )


class CompileSlots:
    """`Limits.max_compiling` slots for compiling constraints not seen before, each held by
    one preparation (its `Fuel`) from the moment it takes it: /health reports those held
    longer than the preparation's backstop (`overdue`), which no preparation should be."""

    def __init__(self, slots: int):
        self.slots = slots
        self._free = threading.Semaphore(slots)
        self._held: dict[object, float] = {}  # holder -> its backstop (time.monotonic())
        self._lock = threading.Lock()

    def take(self, holder, wait: float, backstop: float, give_up) -> bool:
        """Take a slot for `holder` within `wait` seconds (False: none came free);
        `give_up()` is called between looks (it raises when the request is abandoned)."""
        deadline = time.monotonic() + wait
        while not self._free.acquire(timeout=min(0.1, max(deadline - time.monotonic(), 0))):
            give_up()
            if time.monotonic() >= deadline:
                return False
        with self._lock:
            self._held[holder] = backstop
        return True

    def give_back(self, holder) -> None:
        with self._lock:
            del self._held[holder]
        self._free.release()

    @property
    def held(self) -> int:
        return len(self._held)

    def overdue(self) -> int:
        """Slots held past their holder's backstop (its work no longer burns its fuel)."""
        now = time.monotonic()
        with self._lock:
            return sum(now > backstop for backstop in self._held.values())


def options() -> list[tuple[str, type, object, str]]:
    """Each limit as a server option: (flag, value type, default, help)."""
    out = []
    for f in fields(Limits):
        kind = float if isinstance(f.default, float) else int
        out.append((f"--{f.name.replace('_', '-')}", kind, f.default, f.metadata["help"]))
    return out
