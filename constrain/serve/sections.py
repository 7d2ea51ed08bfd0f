"""An answer in sections: thinking, then content or tool calls, each under its own constraint.

A chat answer may be several texts in a row, each with its own rules: a reasoning model's
thinking (free, up to ``</think>``, bounded by `max_reasoning_tokens`), then the content (the
user's JSON Schema, regex or grammar) or tool calls (the model's own wrapper, each call's body
constrained by the tools' parameter schemas). One `Sequence` writes them all: between steps of
the decoding loop, `Answer.after_step` sees where the text is and swaps the sequence's matcher
for the next section's (`Sequence.force` writes the text the format fixes, such as the call
wrapper), so the model reads its own earlier sections and the KV cache is never rebuilt.

Sections switch only where the text fixes the switch: the thinking's end marker, the wrapper
around a call, the text that starts a call under ``tool_choice="auto"`` (its trigger: the
wrapper's opening, or ``{`` for formats without one). With ``"auto"`` the model first writes
under a regex that admits the trigger or any text not starting with it; the first characters
decide between a call and content.

The whole answer fits in `max_tokens`: each section's matcher gets the tokens left as its
budget, less what must still follow it, so the budget that closes JSON closes the list of
calls too. A call body is written only where it fits (another call is offered only when the
tokens left hold the wrapper and the shortest call), and an answer cut anyway (the shortest
call longer than `max_tokens`) keeps its cut call, reported with finish reason "length". A
call identical to an earlier one of the same answer (the same function with the same
arguments: the same work again) ends the answer instead of joining it.
Stop strings end the content only where the text before them is complete in the content's
constraint, so a stop never returns invalid constrained output.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

from constrain.constraints import Constraint, ConstraintSpec
from constrain.decoding import Sequence as Generation
from constrain.engine.vocab import Vocabulary
from constrain.fuel import stage
from constrain.serve.tools import ToolFormat

__all__ = ["Answer", "AnswerPlan", "Calls", "Thinking", "regex_literal", "not_starting_with"]

Encode = Callable[[str], list[int]]  # plain text to token ids (no special tokens, no BOS)


def regex_literal(text: str) -> str:
    """A regex matching exactly `text`."""
    out = []
    for ch in text:
        if ch.isalnum() or ord(ch) > 127:
            out.append(ch)
        elif ch == "\n":
            out.append(r"\n")
        elif ch == "\t":
            out.append(r"\t")
        elif ch == "\r":
            out.append(r"\r")
        else:
            out.append("\\" + ch)
    return "".join(out)


def not_starting_with(trigger: str) -> str:
    """A regex of every text that does not start with `trigger` (the empty text included)."""
    ways = [
        regex_literal(trigger[:k]) + f"(?:[^{regex_literal(trigger[k])}](?:.|\\n)*)?"
        for k in range(len(trigger))
    ]
    return "|".join(f"(?:{way})" for way in ways)


@dataclass(frozen=True)
class Thinking:
    """A thinking section: `open` (written unless the prompt ends with it), free text, `close`;
    at most `max_tokens` tokens, after which `close` is written for the model."""

    open: str
    close: str
    max_tokens: int
    opened_by_prompt: bool


@dataclass(frozen=True)
class Calls:
    """Tool calls in `format`: `body` constrains one call's JSON (for a list body, all calls);
    `choice` is "auto" (the model chooses text or calls) or "required" (a call is forced)."""

    format: ToolFormat
    body: Constraint
    choice: str
    parallel: bool

    @property
    def trigger(self) -> str:
        """The text that starts a call: the wrapper's opening, else the body's ``{``/``[``."""
        return self.format.open or ("[" if self.format.list_body else "{")

    @cached_property
    def shortest_body(self) -> int:
        """Tokens of the shortest call body (planned once per request)."""
        shortest = self.body.shortest_tokens()
        return shortest if shortest is not None else 1


@dataclass(frozen=True)
class AnswerPlan:
    """What one request's answers consist of (shared by its `n` sequences)."""

    vocab: Vocabulary
    encode: Encode
    content: Constraint  # the content's constraint (free text: any text)
    thinking: Thinking | None = None
    calls: Calls | None = None
    stops: tuple[str, ...] = ()  # stop strings, applied to the content
    budget: bool = True  # matchers plan to close their text within max_tokens
    max_tokens: int = 256

    def constraint(self, regex: str) -> Constraint:
        """The (vocabulary-cached) constraint of a section's regex."""
        return ConstraintSpec(regex=regex).constraint(self.vocab)

    @cached_property
    def shortest_call(self) -> int:
        """Tokens of the shortest call: the wrapper's opening and the shortest body."""
        return len(self.encode(self.calls.format.open)) + self.calls.shortest_body

    @cached_property
    def thinking_close(self) -> list[int]:
        """The tokens of the thinking's end marker, as the server writes it."""
        return self.encode(self.thinking.close)

    @cached_property
    def after_thinking(self) -> int:
        """Tokens the answer needs at least after its thinking: the thinking ends early
        enough to leave them."""
        if self.calls is not None:
            return self.shortest_call if self.calls.choice == "required" else 0
        return self.content.shortest_tokens() or 0

    @cached_property
    def thought(self) -> Constraint:
        """The thinking section's: any text, then the end marker."""
        return self.constraint("(?:.|\\n)*" + regex_literal(self.thinking.close))

    @cached_property
    def deciding(self) -> Constraint:
        """Under ``tool_choice="auto"``, the start of the answer: a call's trigger, or text
        not starting with it."""
        trigger = self.calls.trigger
        return self.constraint(f"{regex_literal(trigger)}|{not_starting_with(trigger)}")

    @cached_property
    def after_call(self) -> Constraint:
        """After a call: the wrapper's close, then perhaps the opening of another call."""
        f = self.calls.format
        return self.constraint(f"{regex_literal(f.close)}(?:{regex_literal(f.separator + f.open)})?")

    @cached_property
    def between_calls(self) -> int:
        """Tokens of the wrapper between two calls."""
        f = self.calls.format
        return self.constraint(regex_literal(f.close + f.separator + f.open)).shortest_tokens() or 0

    def prepare(self) -> None:
        """Plan now what the first steps would otherwise plan on the scheduler's thread: the
        sections' constraints compiled, their shortest completions, their first masks (in the
        thread that prepares the request, under its fuel)."""
        first = [self.content]
        with stage("planning the shortest completions"):
            if self.thinking is not None:
                first.append(self.thought)
                self.after_thinking  # noqa: B018 (cached)
            if self.calls is not None:
                first.append(self.calls.body)
                self.shortest_call  # noqa: B018
                if self.calls.parallel and not self.calls.format.list_body:
                    first.append(self.after_call)
                    self.between_calls  # noqa: B018
                if self.calls.choice == "auto":
                    first.append(self.deciding)
            self.content.shortest_tokens()
        with stage("building the first masks"):
            for constraint in first:
                constraint.start(self.max_tokens if self.budget else None).bitmask()


@dataclass
class Answer:
    """Where one sequence's text is: its section and where each section began (token
    indices), kept up to date by `after_step` between steps of the loop."""

    plan: AnswerPlan
    section: str = "content"  # "thinking", "deciding", "content", "call", "next_call", "done"
    thinking_span: tuple[int, int] | None = None  # the thought, markers excluded
    content_start: int | None = None
    call_spans: list[tuple[int, int]] = field(default_factory=list)  # finished call bodies
    cut_call: tuple[int, int] | None = None  # a call body the answer ended inside
    section_start: int = 0
    stopped_at: int | None = None  # content characters kept before a stop string
    scanned: int = 0  # characters of the section searched for its end marker or a stop

    # -- the sections -----------------------------------------------------------------------

    def begin(self, s: Generation) -> None:
        """Put a fresh sequence into its first section."""
        p = self.plan
        if p.thinking is not None:
            opening = [] if p.thinking.opened_by_prompt else p.encode(p.thinking.open)
            self._enter(s, "thinking", opening, p.thought, budget=False)
            return
        self._after_thinking(s, [])

    def _after_thinking(self, s: Generation, forced: list[int]) -> None:
        calls = self.plan.calls
        if calls is None:
            self._enter(s, "content", forced, self.plan.content)
        elif calls.choice == "required":
            self._enter(s, "call", forced + self.plan.encode(calls.format.open), calls.body)
        elif len(s.tokens) + len(forced) + self.plan.shortest_call > self.plan.max_tokens:
            self._enter(s, "content", forced, self.plan.content)  # no call fits: text
        else:
            self._enter(s, "deciding", forced, self.plan.deciding, budget=False)

    def _enter(
        self,
        s: Generation,
        section: str,
        forced: list[int],
        constraint: Constraint,
        budget: bool = True,
        reserve: int = 0,
    ) -> None:
        """Continue `s` in `section` after the `forced` tokens, under `constraint`: with a
        `budget`, of the tokens left less `reserve` (what must still follow)."""
        left = self.plan.max_tokens - len(s.tokens) - len(forced) - reserve
        matcher = constraint.start(max(left, 0) if budget and self.plan.budget else None)
        s.force(forced, matcher, constraint)
        self._at(s, section, len(s.tokens))

    def _at(self, s: Generation, section: str, start: int) -> None:
        self.section, self.section_start = section, start
        self.scanned = s.text.offset(start)
        if section == "content":
            self.content_start = start

    def after_step(self, s: Generation) -> None:
        """Move `s` on to its next section where its text has reached one."""
        if not s.running:
            if self.section == "call":
                span = (self.section_start, len(s.tokens))
                if s.matcher.accepting():
                    self.call_spans.append(span)
                else:
                    self.cut_call = span
            elif self.section == "deciding":  # ended before a call began: its text is content
                self.content_start = self.section_start
            self.section = "done"
            return
        handler = getattr(self, f"_in_{self.section}")
        handler(s)

    def _in_thinking(self, s: Generation) -> None:
        p, close = self.plan, self.plan.thinking.close
        start = max(self.scanned - len(close) + 1, s.text.offset(self.section_start))
        end = s.text.find(close, start)
        self.scanned = s.text.chars
        thought = len(s.tokens) - self.section_start
        left = p.max_tokens - len(s.tokens) - len(p.thinking_close)
        if end < 0 and thought < p.thinking.max_tokens and left > p.after_thinking:
            return
        if end >= 0 and end + len(close) < s.text.chars:  # the last token ran past the marker
            last = s.text.offset(len(s.tokens) - 1)
            closing = p.encode(s.text.between(last, end + len(close)))
            s.rollback(1)
        elif end >= 0:
            closing = []
        else:  # out of thinking tokens (or of tokens for the answer): the marker is written
            closing = p.thinking_close
        self.thinking_span = (self.section_start, len(s.tokens) + len(closing))
        self._after_thinking(s, closing)

    def _in_deciding(self, s: Generation) -> None:
        calls = self.plan.calls
        text = s.text.text(self.section_start)
        if text == calls.trigger:
            # without a wrapper the trigger is the body's first character: the body has begun
            start = len(s.tokens) if calls.format.open else self.section_start
            left = self.plan.max_tokens - start
            matcher = calls.body.start(max(left, 0) if self.plan.budget else None)
            for token in s.tokens[start:]:
                matcher.advance(token)
            s.force([], matcher, calls.body)
            self._at(s, "call", start)
        elif not calls.trigger.startswith(text):
            self._at(s, "content", self.section_start)
            self._in_content(s)

    def _in_content(self, s: Generation) -> None:
        """End the content at the first stop string after which the text before it is
        complete in the content's constraint (free text always is)."""
        stops = self.plan.stops
        if not stops:
            return
        base, scanned = s.text.offset(self.content_start), self.scanned
        start = max(base, scanned - max(len(stop) for stop in stops) + 1)
        window = s.text.between(start)
        self.scanned = s.text.chars
        hits = sorted(  # the occurrences not seen whole before
            start + i for stop in stops for i in _occurrences(window, stop)
            if start + i + len(stop) > scanned
        )  # fmt: skip
        grammar = self.plan.content.grammar
        for at in hits:
            kept = s.text.between(base, at)
            if grammar.matches(kept):
                self.stopped_at = at - base
                s.finish("stop")
                self.section = "done"
                return

    def _in_call(self, s: Generation) -> None:
        calls = self.plan.calls
        if not s.matcher.done():
            return
        span = (self.section_start, len(s.tokens))
        if self._repeats_a_call(s, span):  # the same work again: the answer ends before it
            s.finish("tool_calls")
            self.section = "done"
            return
        self.call_spans.append(span)
        f = calls.format
        if f.list_body or not calls.parallel or not self._another_call_fits(s):
            s.finish("tool_calls")
            self.section = "done"
            return
        self._enter(s, "next_call", [], self.plan.after_call, reserve=calls.shortest_body)

    def _repeats_a_call(self, s: Generation, span: tuple[int, int]) -> bool:
        """Whether the call body at `span` is, as JSON, one the answer has made already."""
        if not self.call_spans:
            return False
        body = json.loads(s.text.text(*span))
        return any(json.loads(s.text.text(a, b)) == body for a, b in self.call_spans)

    def _another_call_fits(self, s: Generation) -> bool:
        """Whether the tokens left hold the wrapper between two calls and the shortest call."""
        need = self.plan.between_calls + self.plan.calls.shortest_body
        return len(s.tokens) + need <= self.plan.max_tokens

    def _in_next_call(self, s: Generation) -> None:
        f = self.plan.calls.format
        if s.text.text(self.section_start) == f.close + f.separator + f.open:
            self._enter(s, "call", [], self.plan.calls.body)

    # -- the texts --------------------------------------------------------------------------

    def bodies(self, s: Generation) -> list[tuple[int, int, bool]]:
        """The call bodies so far as token spans: (start, end, whether it is finished); a body
        being written or cut comes last."""
        spans = [(a, b, True) for a, b in self.call_spans]
        if self.cut_call is not None:
            spans.append((*self.cut_call, False))
        elif self.section == "call":
            spans.append((self.section_start, len(s.tokens), False))
        return spans


def _occurrences(text: str, needle: str):
    """The start of every occurrence of `needle` in `text` (overlapping ones too)."""
    at = text.find(needle)
    while at >= 0:
        yield at
        at = text.find(needle, at + 1)
