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
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from constrain.constraints import Constraint, ConstraintSpec
from constrain.decoding import Sequence as Generation
from constrain.engine.vocab import Vocabulary
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


@dataclass
class Answer:
    """Where one sequence's text is: its section and where each section began (token
    indices), kept up to date by `after_step` between steps of the loop."""

    plan: AnswerPlan
    section: str = "content"  # "thinking", "deciding", "content", "call", "next_call", "done"
    thinking_span: tuple[int, int] | None = None  # the thought, markers excluded
    content_start: int | None = None
    call_spans: list[tuple[int, int]] = field(default_factory=list)
    section_start: int = 0
    stopped_at: int | None = None  # content characters kept before a stop string

    # -- the sections -----------------------------------------------------------------------

    def begin(self, s: Generation) -> None:
        """Put a fresh sequence into its first section."""
        p = self.plan
        if p.thinking is not None:
            opening = [] if p.thinking.opened_by_prompt else p.encode(p.thinking.open)
            thought = p.constraint("(?:.|\\n)*" + regex_literal(p.thinking.close))
            self._enter(s, "thinking", opening, thought, budget=False)
            return
        self._after_thinking(s, [])

    def _after_thinking(self, s: Generation, forced: list[int]) -> None:
        calls = self.plan.calls
        if calls is None:
            self._enter(s, "content", forced, self.plan.content)
        elif calls.choice == "required":
            self._enter(s, "call", forced + self.plan.encode(calls.format.open), calls.body)
        else:
            trigger = regex_literal(calls.trigger)
            deciding = self.plan.constraint(f"{trigger}|{not_starting_with(calls.trigger)}")
            self._enter(s, "deciding", forced, deciding, budget=False)

    def _enter(
        self, s: Generation, section: str, forced: list[int], constraint, budget: bool = True
    ) -> None:
        left = self.plan.max_tokens - len(s.tokens) - len(forced)
        matcher = constraint.start(max(left, 0) if budget and self.plan.budget else None)
        s.force(forced, matcher)
        self.section, self.section_start = section, len(s.tokens)
        if section == "content":
            self.content_start = len(s.tokens)

    def after_step(self, s: Generation) -> None:
        """Move `s` on to its next section where its text has reached one."""
        if not s.running:
            if self.section == "call" and s.matcher.accepting():
                self.call_spans.append((self.section_start, len(s.tokens)))
            elif self.section == "deciding":  # ended before a call began: its text is content
                self.content_start = self.section_start
            self.section = "done"
            return
        handler = getattr(self, f"_in_{self.section}")
        handler(s)

    def _in_thinking(self, s: Generation) -> None:
        p, thinking = self.plan, self.plan.thinking
        text = self._section_text(s)
        end = text.find(thinking.close)
        if end < 0 and len(s.tokens) - self.section_start < thinking.max_tokens:
            return
        if end >= 0 and not text.endswith(thinking.close):  # the last token ran past it
            s.rollback(1)
            done = self._section_text(s)
            closing = p.encode(text[len(done) : end + len(thinking.close)])
        elif end >= 0:
            closing = []
        else:  # out of thinking tokens: the marker is written for the model
            closing = p.encode(thinking.close)
        start = self.section_start
        self.thinking_span = (start, len(s.tokens) + len(closing))
        self._after_thinking(s, closing)

    def _in_deciding(self, s: Generation) -> None:
        calls = self.plan.calls
        text = self._section_text(s)
        if text == calls.trigger:
            # without a wrapper the trigger is the body's first character: the body has begun
            start = len(s.tokens) if calls.format.open else self.section_start
            left = self.plan.max_tokens - start
            matcher = calls.body.start(max(left, 0) if self.plan.budget else None)
            for token in s.tokens[start:]:
                matcher.advance(token)
            s.force([], matcher)
            self.section, self.section_start = "call", start
        elif not calls.trigger.startswith(text):
            self.section, self.content_start = "content", self.section_start
            self._in_content(s)

    def _in_content(self, s: Generation) -> None:
        if not self.plan.stops:
            return
        text = self.plan.vocab.decode(s.tokens[self.content_start :])
        found = [i for i in (text.find(stop) for stop in self.plan.stops) if i >= 0]
        if found:
            self.stopped_at = min(found)
            s.finish("stop")
            self.section = "done"

    def _in_call(self, s: Generation) -> None:
        calls = self.plan.calls
        if not s.matcher.done():
            return
        self.call_spans.append((self.section_start, len(s.tokens)))
        if calls.format.list_body or not calls.parallel:
            s.finish("tool_calls")
            self.section = "done"
            return
        f = calls.format
        more = self.plan.constraint(
            f"{regex_literal(f.close)}(?:{regex_literal(f.separator + f.open)})?"
        )
        self._enter(s, "next_call", [], more, budget=False)

    def _in_next_call(self, s: Generation) -> None:
        f = self.plan.calls.format
        if self._section_text(s) == f.close + f.separator + f.open:
            self._enter(s, "call", [], self.plan.calls.body)

    def _section_text(self, s: Generation) -> str:
        return self.plan.vocab.decode(s.tokens[self.section_start :])

    # -- the texts --------------------------------------------------------------------------

    def thought(self, tokens: Sequence[int]) -> str | None:
        """The thinking text, without its markers (None: no thinking section)."""
        if self.thinking_span is None:
            if self.section == "thinking" or (self.plan.thinking and self.section == "done"):
                return self._strip_markers(self.plan.vocab.decode(tokens[self.section_start :]))
            return None
        a, b = self.thinking_span
        return self._strip_markers(self.plan.vocab.decode(tokens[a:b]))

    def _strip_markers(self, text: str) -> str:
        t = self.plan.thinking
        if text.startswith(t.open):
            text = text[len(t.open) :]
        if text.endswith(t.close):
            text = text[: -len(t.close)]
        return text.strip()

    def content(self, tokens: Sequence[int]) -> str | None:
        """The content text (None: the answer is tool calls only)."""
        if self.content_start is None:
            return None
        text = self.plan.vocab.decode(tokens[self.content_start :])
        return text[: self.stopped_at] if self.stopped_at is not None else text

    def bodies(self, tokens: Sequence[int]) -> list[str]:
        """The texts of the finished call bodies."""
        return [self.plan.vocab.decode(tokens[a:b]) for a, b in self.call_spans]
