"""What a choice has said, as its client reads it: texts, tool calls, and what is new.

`Readout` follows one sequence of a request through its `Answer`'s sections and tells the
client, after each step, what it may already show (`delta`): the new reasoning and content
text, the tool calls as they are written (a call's id and name once its name is complete,
then its arguments text as it grows, as OpenAI and vLLM stream them), and, for structured
content when asked, the value so far with only its complete parts. At the end, `choice` is the
whole answer; the deltas join to exactly its texts and arguments (ids included), as both come
from the same reading. Each step reads only the text added since the last one.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

from constrain.decoding import Sequence as Generation
from constrain.serve.partial import PartialJSON
from constrain.serve.sections import Answer

__all__ = ["CallDelta", "Choice", "ChoiceDelta", "Readout", "ToolCall", "new_call_id"]


def new_call_id() -> str:
    """A fresh OpenAI-style tool call id: "call_" and 24 random hex digits."""
    return "call_" + secrets.token_hex(12)


@dataclass
class ToolCall:
    """A call the model wrote: `arguments` is its JSON text as written (for a call the answer
    was cut inside, as far as it got; `name` "" if it was cut before its name ended)."""

    id: str
    name: str
    arguments: str


@dataclass
class CallDelta:
    """New text of call `index`: its first delta carries the id and name."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass
class ChoiceDelta:
    """What one choice added since the last update."""

    reasoning: str = ""
    content: str = ""
    calls: list[CallDelta] = field(default_factory=list)
    partial: Any = None  # the content's value so far (`has_partial`: sent with this delta)
    has_partial: bool = False

    def __bool__(self) -> bool:
        return bool(self.reasoning or self.content or self.calls or self.has_partial)


@dataclass
class Choice:
    """One finished answer."""

    index: int
    reasoning: str | None
    content: str | None
    calls: list[ToolCall]
    finish_reason: str
    logprobs: list  # `TokenLogprob`s of the content's tokens
    tokens: int  # completion tokens
    reasoning_tokens: int = 0  # of which the thinking's
    incomplete_reason: str = ""  # why an unfinished answer ended where it did


@dataclass
class _CallRead:
    id: str
    name: str | None = None
    sent: int = 0  # characters of the arguments sent


class Readout:
    """One choice of a request, read for its client (see the module docstring).

    Args:
        answer: the sequence's sections.
        partial: follow the content as JSON and send its value so far with each delta.
    """

    def __init__(self, answer: Answer, *, partial: bool = False):
        self.answer = answer
        self.reasoning: list[str] = []  # the deltas sent
        self.content: list[str] = []
        self.sent_reasoning = 0  # characters of the thought (markers excluded) read
        self.reasoning_started = False
        self.sent_content = 0  # characters of the content sent
        self.calls: list[_CallRead] = []
        self.bodies: list[PartialJSON] = []
        self.content_json = PartialJSON() if partial else None
        self.partial_sent: Any = None

    # -- the deltas ---------------------------------------------------------------------

    def delta(self, s: Generation, final: bool = False) -> ChoiceDelta:
        """What the client may show now that it has not seen (while running, the tail that
        may still change is held back: a stop string's start, a thinking marker's start,
        the thought's trailing whitespace)."""
        out = ChoiceDelta(reasoning=self._reasoning(s, final), content=self._content(s, final))
        self.reasoning.append(out.reasoning)
        self.content.append(out.content)
        out.calls = self._call_deltas(s, final)
        if self.content_json is not None:
            self.content_json.feed(out.content)
            if final:
                self.content_json.finish()  # a number at the root ends with the text
            value = self.content_json.value()
            if value != self.partial_sent:
                out.partial, out.has_partial = value, True
                self.partial_sent = _copy(value)
        return out

    def _reasoning(self, s: Generation, final: bool) -> str:
        span = self._thought_span(s, final)
        if span is None:
            return ""
        start, end = span
        text = s.text.between(start + self.sent_reasoning, end)
        if not self.reasoning_started:
            stripped = text.lstrip()
            self.sent_reasoning += len(text) - len(stripped)
            text = stripped
            self.reasoning_started = bool(text)
        text = text.rstrip()  # trailing whitespace waits for what follows it
        self.sent_reasoning += len(text)
        return text

    def _thought_span(self, s: Generation, final: bool) -> tuple[int, int] | None:
        """(start, end) characters of the thought that may be sent, markers excluded."""
        a = self.answer
        thinking = a.plan.thinking
        if thinking is None:
            return None
        if a.thinking_span is not None:
            begin, stop = a.thinking_span
            start, end = s.text.offset(begin), s.text.offset(stop)
            text_end = s.text.between(max(start, end - len(thinking.close)), end)
            return start, end - len(thinking.close) if text_end == thinking.close else end
        if a.section != "thinking" and not (a.section == "done" and final):
            return None
        start = s.text.offset(a.section_start)
        hold = 0 if final else len(thinking.close)
        return start, max(start, s.text.chars - hold)

    def _content(self, s: Generation, final: bool) -> str:
        a = self.answer
        if a.content_start is None:
            return ""
        start = s.text.offset(a.content_start)
        if a.stopped_at is not None:
            end = start + a.stopped_at
        elif final:
            end = s.text.chars
        else:  # a stop string may be beginning
            end = s.text.chars - max((len(x) for x in a.plan.stops), default=1) + 1
        text = s.text.between(start + self.sent_content, max(end, start + self.sent_content))
        self.sent_content += len(text)
        return text

    def _call_deltas(self, s: Generation, final: bool) -> list[CallDelta]:
        """What the calls added. A call whose body follows another is held back until that
        body is finished: the answer drops a body that repeats an earlier one (the same work
        again), and a streamed call must be one the whole answer has."""
        out = []
        for k, (name, raw, held) in enumerate(self._read_calls(s, final)):
            if held:
                break
            if k == len(self.calls):
                if name is None and not final:
                    break  # announced once its name is complete
                self.calls.append(_CallRead(new_call_id()))
            call = self.calls[k]
            delta = CallDelta(k)
            if call.name is None:
                call.name = name or ""
                delta.id, delta.name = call.id, call.name
            text, ended = raw if raw is not None else ("", False)
            if ended or final or text[:1] in ("{", "[", '"'):  # a number waits for its end
                delta.arguments = text[call.sent :]
                call.sent = len(text)
            if delta.id is not None or delta.arguments:
                out.append(delta)
        return out

    def _read_calls(self, s: Generation, final: bool) -> list[tuple[str | None, Any, bool]]:
        """Each call so far: (its name, None until complete; `PartialJSON.raw` of its
        arguments; whether it is held back: a body after the first, not finished yet)."""
        plan = self.answer.plan.calls
        if plan is None:
            return []
        fmt = plan.format
        calls = []
        for k, (start, end, done) in enumerate(self.answer.bodies(s)):
            held = k > 0 and not (done or final)
            body = self._body(k, s, start, end, done or final)
            value = body.value()
            if fmt.list_body:
                items = value if isinstance(value, list) else []
                paths = [(i,) for i in range(len(items))]
            else:
                items, paths = [value], [()]
            for item, path in zip(items, paths):
                if not isinstance(item, dict):
                    if final:  # cut before the call object began
                        calls.append((None, None, False))
                    continue
                name = item.get(fmt.name_key)
                raw = body.raw((*path, fmt.args_key))
                calls.append((name if isinstance(name, str) else None, raw, held))
        return calls

    def _body(self, k: int, s: Generation, start: int, end: int, ended: bool) -> PartialJSON:
        """The reading of call body `k` (tokens `start` to `end`), fed what it has not read."""
        if k < len(self.bodies) and self.bodies[k].complete:
            return self.bodies[k]  # read to its end already
        first, last = s.text.offset(start), s.text.offset(end)
        if k == len(self.bodies) or not self._still_reads(self.bodies[k], s, first, last):
            self.bodies[k:] = [PartialJSON()]  # new, or rolled back: read again
        body = self.bodies[k]
        body.feed(s.text.between(first + len(body.text), last))
        if ended:
            body.finish()
        return body

    @staticmethod
    def _still_reads(body: PartialJSON, s: Generation, first: int, last: int) -> bool:
        """Whether the text still holds what `body` has read (a backtrack undoes at most
        64 tokens, so its tail tells)."""
        read = first + len(body.text)
        tail = body.text[-256:]
        return read <= last and s.text.between(read - len(tail), read) == tail

    # -- the whole answer ---------------------------------------------------------------

    def choice(self, s: Generation, index: int, finish_reason: str, why: str = "") -> Choice:
        """The whole answer (after the last `delta`, which it takes if not taken yet): the
        texts the deltas sent, joined, and the calls with the ids their deltas carried."""
        self.delta(s, final=True)
        a = self.answer
        raws = self._read_calls(s, final=True)
        calls = [
            ToolCall(call.id, call.name or "", raw[0] if raw is not None else "")
            for call, (_, raw, _) in zip(self.calls, raws)
        ]
        logprobs = [
            lp for k, lp in enumerate(s.token_logprobs())
            if a.content_start is not None and k >= a.content_start
        ]  # fmt: skip
        return Choice(
            index,
            "".join(self.reasoning) if a.plan.thinking is not None else None,
            "".join(self.content) if a.content_start is not None else None,
            calls,
            finish_reason,
            logprobs,
            len(s.tokens),
            a.thinking_span[1] - a.thinking_span[0] if a.thinking_span else 0,
            why,
        )


def _copy(value: Any) -> Any:
    """A deep copy of a JSON value (the partial value keeps growing in place)."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value
