"""GBNF front end: llama.cpp's grammar format (XGrammar's "EBNF") -> `GrammarIR`.

The format, as llama.cpp's grammars/README.md describes it: rules ``name ::= alternatives``
(names of letters, digits, ``-`` and ``_``; ``root`` is the start); a newline ends a rule except
inside parentheses or right after ``|``; ``#`` starts a comment. Terminals are "strings" and
character classes ``[a-z]`` / ``[^...]`` with the escapes ``\\n \\r \\t \\\\ \\" \\[ \\] \\-
\\xHH \\uHHHH \\UHHHHHHHH``, and ``.`` (any character, newline included). Grouping ``( )``,
alternation ``|``, repetition ``* + ? {m} {m,} {m,n} {,n}``. Token references ``<[id]>`` and
``<text>``, and their negations ``!<[id]>`` / ``!<text>``.

Semantics: GBNF is scannerless (a context-free grammar over characters: a text is in the
language when some derivation spells it), whereas the engine splits text into lexemes by
longest match (see `constrain.engine.grammar.lark_frontend`). Longest match can change a
language: with lexemes "ab", "c", "a", "bd" (``root ::= "ab" "c" | "a" "bd"``), the lexer reads
"ab" in "abd" and never tries "a" "bd"; with lexemes /[a-z]+/ and "x" (``[a-z]* "x"``) it reads
all of "abcx" as letters. The translation is exact by construction:

* **Lexemes are regular pieces of the grammar**: a run of consecutive regular items of a
  sequence, a regular group or repetition (regular: no token reference, and rules used only
  inside a repetition, themselves not recursive, so a string's quotes and ``char*`` make one
  lexeme; a rule named directly in a sequence or among alternatives stays a rule, whose body
  gets lexemes of its own), and down to one lexeme per character of a string and per class.
  One lexeme per character everywhere would be exact too, but makes every character a parser
  step: masks walk the parser at every byte of every token of the vocabulary, a hundred times
  slower than with whole strings and numbers as lexemes.
* **A multi-character lexeme is kept only where longest match splits text as the grammar
  does**, checked on the translated grammar: for every lexeme X, string w of X and byte c that
  may start a lexeme of FOLLOW(X), w + c is a prefix of no string of any lexeme Y.
  `ir_from_gbnf` translates, finds the lexemes Y this fails for (taking every two lexemes as
  possibly allowed together, FOLLOW sets over all contexts), splits each one level (a run into
  its items, a group or repetition into rules over its parts, a string into its characters)
  and translates again. One-character lexemes never fail it (UTF-8 is a prefix code: a whole
  character plus a byte is a prefix of no single character), so the rounds end. Both examples
  above are regular as a whole, each one lexeme (/abc|abd/, /[a-z]*x/); ``word ::= [a-z]+``
  followed by ``"x"`` elsewhere becomes [a-z] repeated by rules.
* **Why the condition suffices.** Take a derivation of a text, lexemes X1 X2 ... spelling w1
  w2 .... Reading w_i, the lexer does not end early (X_i can read on) and cannot read on after
  it (the next byte starts w_i+1, of a lexeme in FOLLOW(X_i), so no lexeme has w_i plus that
  byte as a prefix); it ends there with X_i among the lexemes matching (they have equal
  priority and none is a keyword, so all are scanned), and the Earley parser, which takes any
  context-free grammar (ambiguous, left-recursive), follows the derivation. Conversely, what the
  lexer and parser accept is a derivation. And a prefix the automaton keeps is one some
  derivation continues (its parser items complete), so masks are exact as well.

Token references: ``<text>`` is `Lexeme(special=text)`, the special token with that text (e.g.
``<think>``); ``<[id]>`` is `Lexeme(special="<[id]>")`, the token with that id, resolved when the
grammar is bound to a vocabulary (`constrain.engine.matcher`), where it must be a special token:
a text token cannot be required exactly (its text may be written by other tokens), and binding
says so. A negation ``!<...>`` ("any one token but this") constrains the tokenization, which
a grammar over text cannot express: it parses, then is refused with its line and column.

Limits, each a `GrammarError` naming it: repetition bounds at most `MAX_REPEAT`, at most
`MAX_RULES` rules in the translated grammar, groups and repetitions nested at most `MAX_DEPTH`
deep, and the `timeout` of the whole translation (none under a fuel, which bounds the work). A
lexeme whose regex is too large or too deep, or whose DFA exceeds `MAX_LEXEME_STATES` states or
`MAX_LEXEME_WORK` units of work (counted, not timed, so the form is the same on any machine),
is split like one the condition fails for: limits of one lexeme change its form, never the
language.
"""

from __future__ import annotations

import bisect
import json
import re
import time
from dataclasses import dataclass

import numpy as np

from constrain.engine.grammar.ir import GrammarIR, Lexeme, Rule, derivable, repeat
from constrain.engine.regex import combine, compile_regex, dfa_from_code_points, dfa_from_strings
from constrain.errors import GrammarError, RegexError
from constrain.fuel import burn, deadline_after

__all__ = [
    "AnyChar",
    "CharClass",
    "Choice",
    "Concat",
    "GBNFGrammar",
    "Literal",
    "MAX_DEPTH",
    "MAX_REPEAT",
    "MAX_RULES",
    "Repeat",
    "RuleDef",
    "RuleRef",
    "TokenRef",
    "grammar_syntax",
    "ir_from_gbnf",
    "parse_gbnf",
]

MAX_REPEAT = 10_000  # a repetition bound ({m}, {m,n}) above this is an error
MAX_RULES = 100_000  # rules of the translated grammar (bounded repetitions unroll into rules)
MAX_DEPTH = 100  # groups ( ) and repetition operators nested in one another
MAX_LEXEME_REGEX = 4_000  # characters of the regex of one multi-character lexeme
MAX_LEXEME_NESTING = 32  # groups nested in the regex of one multi-character lexeme
MAX_LEXEME_STATES = 20_000  # DFA states of one multi-character lexeme
MAX_LEXEME_WORK = 500_000  # fuel units compiling one multi-character lexeme (~0.3 s)
MAX_CODE_POINT = 0x10FFFF

Where = tuple[int, int]  # (line, column), both from 1


# -- the parsed grammar ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Literal:
    """A "string": its characters in order (empty: the empty text)."""

    text: str
    at: Where


@dataclass(frozen=True)
class CharClass:
    """``[...]`` or ``[^...]``: one character in (or, negated, not in) `ranges`."""

    ranges: tuple[tuple[int, int], ...]  # inclusive code-point ranges as written
    negated: bool
    source: str
    at: Where

    def code_points(self) -> tuple[tuple[int, int], ...]:
        """The characters matched: sorted, disjoint inclusive ranges (negation applied)."""
        merged = _merge(self.ranges)
        return _complement(merged) if self.negated else merged


@dataclass(frozen=True)
class AnyChar:
    """``.``: any one character (newline included, as in llama.cpp)."""

    at: Where


@dataclass(frozen=True)
class RuleRef:
    name: str
    at: Where


@dataclass(frozen=True)
class TokenRef:
    """``<text>`` (`token_id` None) or ``<[id]>``; `negated` for ``!<...>``."""

    text: str  # as written, brackets included: "<think>", "<[1000]>"
    token_id: int | None
    negated: bool
    at: Where


@dataclass(frozen=True)
class Concat:
    """A sequence of items (empty: the empty text)."""

    items: tuple[Node, ...]
    at: Where


@dataclass(frozen=True)
class Choice:
    """Alternatives ``a | b | ...`` (a rule's body, or a parenthesised group)."""

    options: tuple[Concat, ...]
    at: Where


@dataclass(frozen=True)
class Repeat:
    """`item` repeated `low` to `high` times (`high` None: unbounded)."""

    item: Node
    low: int
    high: int | None
    op: str  # as written: "*", "+", "?", "{2,5}"
    at: Where


Node = Literal | CharClass | AnyChar | RuleRef | TokenRef | Concat | Choice | Repeat


@dataclass(frozen=True)
class RuleDef:
    name: str
    body: Choice
    at: Where


@dataclass(frozen=True)
class GBNFGrammar:
    """A parsed GBNF grammar: its rules by name, in the order they are defined."""

    rules: dict[str, RuleDef]
    text: str


# -- code-point sets -------------------------------------------------------------------------------


def _merge(ranges) -> tuple[tuple[int, int], ...]:
    out: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return tuple((a, b) for a, b in out)


def _complement(ranges: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    out, prev = [], 0
    for lo, hi in ranges:
        if lo > prev:
            out.append((prev, lo - 1))
        prev = max(prev, hi + 1)
    if prev <= MAX_CODE_POINT:
        out.append((prev, MAX_CODE_POINT))
    return tuple(out)


_SURROGATES = (0xD800, 0xDFFF)


def _without_surrogates(ranges: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    """The code points UTF-8 can encode: surrogates never occur in text."""
    out = []
    for lo, hi in ranges:
        for a, b in ((lo, min(hi, _SURROGATES[0] - 1)), (max(lo, _SURROGATES[1] + 1), hi)):
            if a <= b:
                out.append((a, b))
    return tuple(out)


# -- syntax ----------------------------------------------------------------------------------------

_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")
_SIMPLE_ESCAPES = {
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "\\": "\\",
    '"': '"',
    "[": "[",
    "]": "]",
    "-": "-",
}
_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}
_HEX = frozenset("0123456789abcdefABCDEF")
_POSTFIX = frozenset("*+?{")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


class _Parser:
    """Recursive descent over the text (three Python frames per level of parentheses, of which
    there are at most `MAX_DEPTH`)."""

    def __init__(self, text: str, deadline: float, timeout: float):
        self.text = text
        self.i = 0
        self.deadline = deadline
        self.timeout = timeout
        self.line_starts = [0] + [m.end() for m in _LINE_BREAK.finditer(text)]

    # positions and errors

    def where(self, index: int) -> Where:
        line = bisect.bisect_right(self.line_starts, index)
        return line, index - self.line_starts[line - 1] + 1

    def error(self, message: str, index: int | None = None) -> GrammarError:
        return _located(message, self.text, self.where(self.i if index is None else index))

    def peek(self, offset: int = 0) -> str:
        j = self.i + offset
        return self.text[j] if j < len(self.text) else ""

    # whitespace and comments

    def skip(self, newlines: bool) -> None:
        """Skip spaces, tabs and comments, and line breaks when `newlines`."""
        text, n = self.text, len(self.text)
        while self.i < n:
            c = text[self.i]
            if c in " \t" or (newlines and c in "\r\n"):
                self.i += 1
            elif c == "#":
                while self.i < n and text[self.i] not in "\r\n":
                    self.i += 1
            else:
                return

    # the grammar

    def grammar(self) -> dict[str, RuleDef]:
        rules: dict[str, RuleDef] = {}
        self.skip(newlines=True)
        while self.i < len(self.text):
            if time.monotonic() > self.deadline:
                raise _time_limit(self.timeout, f"while parsing (line {self.where(self.i)[0]})")
            at = self.i
            rule = self.rule()
            burn(1 + self.i - at)  # the active fuel: a unit per character parsed
            _check_depth(rule, self.text)
            if rule.name in rules:
                first = rules[rule.name].at[0]
                raise _located(
                    f"rule {rule.name!r} is defined twice (first at line {first}); join the "
                    f"definitions with |",
                    self.text,
                    rule.at,
                )
            rules[rule.name] = rule
            self.skip(newlines=True)
        return rules

    def name(self) -> str:
        start = self.i
        while self.peek() and self.peek() in _NAME_CHARS:
            self.i += 1
        return self.text[start : self.i]

    def rule(self) -> RuleDef:
        start = self.i
        name = self.name()
        if not name:
            c = self.peek()
            hint = (
                " (a rule goes on to the next line only inside parentheses or after |)"
                if c in "|*+?{)"
                else ""
            )
            raise self.error(f"expected a rule name, found {c!r}{hint}")
        self.skip(newlines=False)
        if not self.text.startswith("::=", self.i):
            found = self.peek() or "the end of the text"
            raise self.error(f"expected ::= after the rule name {name!r}, found {found!r}")
        self.i += 3
        self.skip(newlines=True)
        body = self.choice(depth=0, nested=False)
        c = self.peek()
        if c == ")":
            raise self.error("unmatched )")
        if c and c not in "\r\n":
            raise self.error(f"unexpected {c!r}")
        return RuleDef(name, body, self.where(start))

    def choice(self, depth: int, nested: bool) -> Choice:
        at = self.where(self.i)
        options = [self.concat(depth, nested)]
        while self.peek() == "|":
            self.i += 1
            self.skip(newlines=True)
            options.append(self.concat(depth, nested))
        return Choice(tuple(options), at)

    def concat(self, depth: int, nested: bool) -> Concat:
        at = self.where(self.i)
        items: list[Node] = []
        while True:
            c = self.peek()
            if not c or c in "|)\r\n":
                return Concat(tuple(items), at)
            if c in _POSTFIX:
                if not items:
                    raise self.error(f"{c} has nothing before it to repeat")
                items[-1] = self.postfix(items[-1])
            else:
                items.append(self.primary(depth, nested))
            self.skip(newlines=nested)

    def primary(self, depth: int, nested: bool) -> Node:
        c = self.peek()
        at = self.where(self.i)
        if c == '"':
            return self.literal()
        if c == "[":
            return self.char_class()
        if c == ".":
            self.i += 1
            return AnyChar(at)
        if c == "(":
            if depth >= MAX_DEPTH:
                raise self.error(
                    f"groups and repetitions nested deeper than {MAX_DEPTH} (MAX_DEPTH)"
                )
            open_at = self.i
            self.i += 1
            self.skip(newlines=True)
            group = self.choice(depth + 1, nested=True)
            if self.peek() != ")":
                raise self.error("unclosed parenthesis", open_at)
            self.i += 1
            return group
        if c == "<" or c == "!":
            return self.token_ref()
        if c in _NAME_CHARS:
            start = self.i
            name = self.name()
            after = self.i
            self.skip(newlines=False)
            if self.text.startswith("::=", self.i):
                hint = (
                    "is a parenthesis left open?"
                    if nested
                    else "a rule ends at the end of its line: is an expression missing before it?"
                )
                raise self.error(
                    f"the definition of rule {name!r} starts inside another rule's body ({hint})",
                    start,
                )
            self.i = after
            return RuleRef(name, at)
        raise self.error(f"unexpected {c!r}")

    def char(self, closing: str) -> str:
        """One character of a string (`closing` is '"') or class (']'), an escape decoded; a
        line break or the end of the text leaves the string or class unterminated."""
        c = self.peek()
        if not c or c in "\r\n":
            what = "string" if closing == '"' else "character class"
            raise self.error(f"unterminated {what} (a line break inside one is written \\n)")
        if c != "\\":
            self.i += 1
            return c
        start = self.i
        e = self.peek(1)
        if e in _SIMPLE_ESCAPES:
            self.i += 2
            return _SIMPLE_ESCAPES[e]
        if e in _HEX_ESCAPES:
            width = _HEX_ESCAPES[e]
            digits = self.text[self.i + 2 : self.i + 2 + width]
            if len(digits) < width or not set(digits) <= _HEX:
                raise self.error(f"bad escape \\{e}: it needs {width} hexadecimal digits", start)
            code = int(digits, 16)
            if code > MAX_CODE_POINT:
                raise self.error(f"bad escape \\{e}{digits}: beyond U+10FFFF", start)
            self.i += 2 + width
            return chr(code)
        shown = e if e and e not in "\r\n" else "at the end of the line"
        raise self.error(
            f'bad escape \\{shown} (the escapes are \\n \\r \\t \\\\ \\" \\[ \\] \\- \\xHH '
            f"\\uHHHH \\UHHHHHHHH)",
            start,
        )

    def literal(self) -> Literal:
        at = self.where(self.i)
        self.i += 1
        out = []
        while self.peek() != '"':
            start = self.i
            c = self.char('"')
            if _SURROGATES[0] <= ord(c) <= _SURROGATES[1]:
                raise self.error(
                    f"the surrogate U+{ord(c):04X} in a string is not a character of UTF-8 text",
                    start,
                )
            out.append(c)
        self.i += 1
        return Literal("".join(out), at)

    def char_class(self) -> CharClass:
        start = self.i
        at = self.where(start)
        self.i += 1
        negated = self.peek() == "^"
        if negated:
            self.i += 1
        ranges = []
        while self.peek() != "]":
            lo_at = self.i
            lo = self.char("]")
            hi = lo
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.i += 1
                hi = self.char("]")
                if ord(hi) < ord(lo):
                    raise self.error(f"reversed range {lo!r}-{hi!r} in a character class", lo_at)
            ranges.append((ord(lo), ord(hi)))
        self.i += 1
        return CharClass(tuple(ranges), negated, self.text[start : self.i], at)

    def token_ref(self) -> TokenRef:
        start = self.i
        at = self.where(start)
        negated = self.peek() == "!"
        if negated:
            self.i += 1
            if self.peek() != "<":
                raise self.error("! must be followed by a token reference <...>")
        open_at = self.i
        if self.peek(1) == "[":
            self.i += 2
            digits = self.name()
            if not digits.isdigit() or len(digits) > 9 or self.text[self.i : self.i + 2] != "]>":
                raise self.error(
                    "a token id reference is written <[id]> (at most 9 digits)", open_at
                )
            self.i += 2
            text = f"<[{int(digits)}]>"
            return TokenRef(text, int(digits), negated, at)
        end = self.i + 1
        while end < len(self.text) and self.text[end] not in ">\r\n":
            end += 1
        if end >= len(self.text) or self.text[end] != ">":
            raise self.error("unterminated token reference (expected > on the same line)", open_at)
        self.i = end + 1
        return TokenRef(self.text[open_at : self.i], None, negated, at)

    def postfix(self, item: Node) -> Repeat:
        at = self.where(self.i)
        c = self.peek()
        self.i += 1
        if c == "*":
            return Repeat(item, 0, None, c, at)
        if c == "+":
            return Repeat(item, 1, None, c, at)
        if c == "?":
            return Repeat(item, 0, 1, c, at)
        start = self.i - 1
        self.skip(newlines=False)
        low = high = self.bound(start)
        self.skip(newlines=False)
        if self.peek() == ",":
            self.i += 1
            self.skip(newlines=False)
            high = self.bound(start)
            self.skip(newlines=False)
        elif low is None:
            raise self.error("bad repetition: expected {m}, {m,}, {m,n} or {,n}", start)
        if self.peek() != "}":
            raise self.error("bad repetition: expected } after the bounds", start)
        self.i += 1
        if low is None and high is None:
            raise self.error("bad repetition {,}: expected {m}, {m,}, {m,n} or {,n}", start)
        op = self.text[start : self.i]
        low = low or 0
        if high is not None and high < low:
            raise self.error(f"bad repetition {op}: the minimum is above the maximum", start)
        return Repeat(item, low, high, op, at)

    def bound(self, start: int) -> int | None:
        begin = self.i
        while self.peek().isdigit() and self.peek().isascii():
            self.i += 1
        digits = self.text[begin : self.i]
        if not digits:
            return None
        if len(digits) > 9 or int(digits) > MAX_REPEAT:
            raise self.error(
                f"repetition bound {digits} is above the limit of {MAX_REPEAT} (MAX_REPEAT); "
                f"write {{m,}} or * for no maximum",
                start,
            )
        return int(digits)


def _check_depth(rule: RuleDef, text: str) -> None:
    """Groups and repetitions nest at most `MAX_DEPTH` deep (what follows recurses on them)."""
    stack: list[tuple[Node, int]] = [(rule.body, -1)]  # the body itself is no group
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (Choice, Repeat)):
            depth += 1
            if depth > MAX_DEPTH:
                raise _located(
                    f"groups and repetitions nested deeper than {MAX_DEPTH} (MAX_DEPTH)",
                    text,
                    node.at,
                )
        if isinstance(node, Choice):
            stack.extend((option, depth) for option in node.options)
        elif isinstance(node, Concat):
            stack.extend((item, depth) for item in node.items)
        elif isinstance(node, Repeat):
            stack.append((node.item, depth))


def _located(message: str, text: str, at: Where) -> GrammarError:
    line, column = at
    lines = _LINE_BREAK.split(text)
    source = lines[line - 1] if line <= len(lines) else ""
    near = source.strip()
    near = near if len(near) <= 60 else near[:57] + "..."
    return GrammarError(f"GBNF grammar: {message}, at line {line}, column {column}: {near!r}")


def _time_limit(timeout: float, where: str) -> GrammarError:
    return GrammarError(
        f"compiling the grammar took longer than its time limit of {timeout:g} s (timeout=), "
        f"{where}"
    )


def parse_gbnf(text: str, *, timeout: float = 10.0) -> GBNFGrammar:
    """Parse GBNF text into its rules (`GBNFGrammar`), checking only the syntax.

    Raises:
        GrammarError: a syntax error (what, with its line and column), a rule defined twice,
            a repetition bound above `MAX_REPEAT`, parentheses nested deeper than
            `MAX_DEPTH`, or the time limit.
    """
    if not isinstance(text, str):
        raise GrammarError(f"GBNF grammar text must be a str, got {type(text).__name__}")
    parser = _Parser(text, deadline_after(timeout), timeout)
    return GBNFGrammar(parser.grammar(), text)


# -- translation -----------------------------------------------------------------------------------


def _walk(node: Node):
    """`node` and every node inside it (not through rule references), in the text's order."""
    stack = [node]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, Choice):
            stack.extend(reversed(node.options))
        elif isinstance(node, Concat):
            stack.extend(reversed(node.items))
        elif isinstance(node, Repeat):
            stack.append(node.item)


def _check_supported(grammar: GBNFGrammar, start: str) -> None:
    """Undefined rules, a missing start rule and token negations, each with its place."""
    for rule in grammar.rules.values():
        for node in _walk(rule.body):
            if isinstance(node, RuleRef) and node.name not in grammar.rules:
                raise _located(
                    f"undefined rule {node.name!r} (used in rule {rule.name!r})",
                    grammar.text,
                    node.at,
                )
            if isinstance(node, TokenRef) and node.negated:
                raise _located(
                    f"token negation !{node.text} is not supported: 'any one token except "
                    f"{node.text}' constrains how the text is split into tokens, which a grammar "
                    f"over text cannot express exactly (the same text can be written with "
                    f"different tokens); describe the text instead, e.g. with a character class",
                    grammar.text,
                    node.at,
                )
    if start not in grammar.rules:
        what = "the start rule 'root'" if start == "root" else f"the start rule {start!r} (start=)"
        raise GrammarError(f"GBNF grammar: {what} is not defined")


# regex text of regular sub-expressions (candidate multi-character lexemes)

# code points the regex layer reserves for its lookahead markers (`regex._syntax.MARKER_BASE`):
# a set holding some of them is not written as a regex (a test pins the range)
_MARKERS = (0x10F000, 0x10F03F)
_REGEX_SPECIAL = frozenset(".^$*+?{}[]\\|()")
_CLASS_SPECIAL = frozenset("\\]^-[")


def _regex_char(cp: int, in_class: bool) -> str:
    c = chr(cp)
    if c in (_CLASS_SPECIAL if in_class else _REGEX_SPECIAL):
        return "\\" + c
    if cp < 0x80:
        return c if c.isprintable() else f"\\x{cp:02x}"
    if c.isprintable():
        return c
    return f"\\u{cp:04x}" if cp < 0x10000 else f"\\U{cp:08x}"


def _set_regex(ranges: tuple[tuple[int, int], ...]) -> str | None:
    """A regex class for one character of `ranges` (merged, no surrogates); None when it
    cannot be written (no character, or only some of the regex layer's reserved code points)."""
    if not ranges:
        return None
    lo_m, hi_m = _MARKERS
    if any(lo <= hi_m and hi >= lo_m for lo, hi in ranges):
        if not any(lo <= lo_m and hi >= hi_m for lo, hi in ranges):
            return None
        negated, ranges = "^", _without_surrogates(_complement(ranges))
        if not ranges:
            return r"[\s\S]"
    else:
        negated = ""
    body = "".join(
        _regex_char(lo, True) if lo == hi else f"{_regex_char(lo, True)}-{_regex_char(hi, True)}"
        for lo, hi in ranges
    )
    return f"[{negated}{body}]"


def _quantifier(low: int, high: int | None) -> str:
    if high is None:
        return "*" if low == 0 else "+" if low == 1 else f"{{{low},}}"
    if (low, high) == (0, 1):
        return "?"
    return f"{{{low}}}" if low == high else f"{{{low},{high}}}"


class _Regexes:
    """The regex of every regular node: one with no token reference, referring only to rules
    that are themselves regular (not recursive, directly or through others), and small enough.
    Rules are done in dependency order (no recursion along chains of rules)."""

    def __init__(self, grammar: GBNFGrammar):
        self._nodes: dict[int, str | None] = {}
        self._depth: dict[int, int] = {}
        self.rules: dict[str, str | None] = {}
        self._rule_depth: dict[str, int] = {}
        deps = {
            name: {n.name for n in _walk(rule.body) if isinstance(n, RuleRef)}
            for name, rule in grammar.rules.items()
        }
        users: dict[str, list[str]] = {}
        for name, used in deps.items():
            for dep in used:
                users.setdefault(dep, []).append(name)
        waiting = {name: len(used) for name, used in deps.items()}
        ready = [name for name, n in waiting.items() if n == 0]
        while ready:
            name = ready.pop()
            body = grammar.rules[name].body
            self.rules[name] = self.of(body)
            self._rule_depth[name] = self._depth.get(id(body), 0)
            for user in users.get(name, ()):
                waiting[user] -= 1
                if waiting[user] == 0:
                    ready.append(user)
        for name in deps:  # on a cycle of rules, or using one: not regular
            self.rules.setdefault(name, None)

    def of(self, node: Node) -> str | None:
        """The regex of `node`, None when it is not regular or too large (memoised)."""
        key = id(node)
        if key not in self._nodes:
            found = self._regex(node)
            too_deep = self._depth.get(key, 0) > MAX_LEXEME_NESTING
            self._nodes[key] = None if too_deep or len(found or "") > MAX_LEXEME_REGEX else found
        return self._nodes[key]

    def inlinable(self, node: Node) -> bool:
        """`node` is regular and refers to no rule directly: only inside a repetition (a rule
        named in a sequence or among alternatives stays a rule of its own)."""
        if self.of(node) is None:
            return False
        stack = [node]
        while stack:
            node = stack.pop()
            if isinstance(node, RuleRef):
                return False
            if isinstance(node, Choice):
                stack.extend(node.options)
            elif isinstance(node, Concat):
                stack.extend(node.items)
        return True

    def _nested(self, node: Node, children) -> None:
        """Record how deeply `node`'s regex nests groups (the regex parser recurses on them)."""
        inner = max((self._depth.get(id(child), 0) for child in children), default=0)
        self._depth[id(node)] = inner + isinstance(node, (Choice, Repeat))

    def _regex(self, node: Node) -> str | None:
        if isinstance(node, Literal):
            if any(_MARKERS[0] <= ord(c) <= _MARKERS[1] for c in node.text):
                return None
            return "".join(_regex_char(ord(c), False) for c in node.text)
        if isinstance(node, CharClass):
            return _set_regex(_without_surrogates(node.code_points()))
        if isinstance(node, AnyChar):
            return r"[\s\S]"
        if isinstance(node, RuleRef):
            self._depth[id(node)] = self._rule_depth.get(node.name, 0)
            return self.rules.get(node.name)
        if isinstance(node, TokenRef):
            return None
        if isinstance(node, Concat):
            parts = [self.of(item) for item in node.items]
            self._nested(node, node.items)
            return None if None in parts else "".join(parts)
        if isinstance(node, Choice):
            parts = [self.of(option) for option in node.options]
            self._nested(node, node.options)
            if None in parts:
                return None
            return parts[0] if len(parts) == 1 else "(?:" + "|".join(parts) + ")"
        item = self.of(node.item)
        self._nested(node, (node.item,))
        if item is None:
            return None
        if item == "" or node.high == 0:
            return ""
        return f"(?:{item}){_quantifier(node.low, node.high)}"


_EMPTY_TEXT = dfa_from_strings([""])


class _Translator:
    """Builds the IR from the parsed grammar, with multi-character lexemes where they are
    regular: a run of consecutive regular items of a sequence becomes one lexeme (its regex),
    and so does a regular group or repetition. Rules referred to directly in a sequence or
    among alternatives stay rules (each rule's body gets its own lexemes, shared by all its
    uses); inside a repetition a regular rule is inlined (a string's ``char*`` is part of one
    lexeme with its quotes).
    A lexeme whose regex is in `split` is translated part by part instead: a run item by item,
    a group or repetition into rules, a string into one lexeme per character, down to the
    one-character lexemes of classes. `ir_from_gbnf` grows `split` until longest match is
    exact."""

    def __init__(self, grammar: GBNFGrammar, regexes: _Regexes, split: set[str], cache: dict):
        self.grammar = grammar
        self.regexes = regexes
        self.split = split
        self.cache = cache  # shared by the rounds: DFAs by code points and by regex
        self.deadline: float = cache["deadline"]
        self.timeout: float = cache["timeout"]
        self.rules: list[Rule] = []
        self.lexemes: dict[str, Lexeme] = {}
        self.units: dict[str, str] = {}  # multi-character lexeme name -> its regex
        self.literals: dict[str, str] = {}  # lexeme name -> its one string, for strings
        self._names: dict[object, str] = {}
        self._fresh: dict[str, int] = {}

    def translate(self, start: str) -> GrammarIR:
        for rule in self.grammar.rules.values():
            if time.monotonic() > self.deadline:
                raise _time_limit(self.timeout, f"at rule {rule.name!r}")
            burn(1 + len(rule.body.options))
            options = self.unit_of(rule.body)
            if options is None:
                options = [self.symbols(option, rule.name) for option in rule.body.options]
            for rhs in options:
                self.add(rule.name, rhs)
        return GrammarIR(start, self.rules, self.lexemes, [], source=self.grammar.text)

    def add(self, lhs: str, rhs: tuple[str, ...]) -> None:
        self.rules.append((lhs, rhs))
        self._check_size()

    def _check_size(self) -> None:
        if len(self.rules) > MAX_RULES:
            raise GrammarError(
                f"GBNF grammar: the translated grammar has more than {MAX_RULES} rules "
                f"(MAX_RULES); bounded repetitions unroll into one rule per repetition"
            )

    def fresh(self, owner: str) -> str:
        k = self._fresh[owner] = self._fresh.get(owner, 0) + 1
        return f"{owner}#{k}"  # '#' never occurs in a GBNF name

    def alternatives(self, options: list[tuple[str, ...]], owner: str) -> tuple[str, ...]:
        if len(options) == 1:
            return options[0]
        name = self.fresh(owner)
        for rhs in options:
            self.add(name, rhs)
        return (name,)

    def symbols(self, node: Node, owner: str) -> tuple[str, ...]:
        """A sequence of IR symbols deriving exactly `node`'s texts."""
        if isinstance(node, CharClass):
            return (self.char_lexeme(node.code_points()),)
        if isinstance(node, AnyChar):
            return (self.char_lexeme(((0, MAX_CODE_POINT),)),)
        if isinstance(node, RuleRef):
            return (node.name,)
        if isinstance(node, TokenRef):
            if node.text not in self.lexemes:
                self.lexemes[node.text] = Lexeme(node.text, special=node.text)
            return (node.text,)
        if isinstance(node, Concat):
            return self.sequence(node.items, owner)
        options = self.unit_of(node)
        if options is not None:
            return self.alternatives(options, owner)
        if isinstance(node, Literal):
            return tuple(self.char_lexeme(((ord(c), ord(c)),)) for c in node.text)
        if isinstance(node, Choice):
            return self.alternatives([self.symbols(o, owner) for o in node.options], owner)
        return self.repetition(node, owner)

    def sequence(self, items: tuple[Node, ...], owner: str) -> tuple[str, ...]:
        """Items in order; each run of regular items that refer to no rule directly (only
        inside a repetition) is tried as one lexeme."""
        out: list[str] = []
        run: list[Node] = []
        for item in (*items, None):
            if item is not None and self.regexes.inlinable(item):
                run.append(item)
                continue
            if len(run) > 1:
                pattern = "".join(self.regexes.of(i) for i in run)
                texts = [i.text for i in run if isinstance(i, Literal)]
                literal = ["".join(texts)] if len(texts) == len(run) else None
                options = self.unit(pattern, literal)
                if options is not None:
                    out.extend(self.alternatives(options, owner))
                    run = []
            for part in run:
                out.extend(self.symbols(part, owner))
            run = []
            if item is not None:
                out.extend(self.symbols(item, owner))
        return tuple(out)

    def repetition(self, node: Repeat, owner: str) -> tuple[str, ...]:
        item = self.symbols(node.item, owner)
        name = self.fresh(owner)
        if (node.low, node.high) == (0, 1):
            self.add(name, ())
            self.add(name, item)
            return (name,)
        if len(item) != 1 and node.high is not None and node.high > 1:
            inner = self.fresh(owner)  # one symbol, so the unrolled rules stay short
            self.add(inner, item)
            item = (inner,)
        repeat(self.rules, name, item, node.low, node.high)
        self._check_size()
        return (name,)

    def unit_of(self, node: Node) -> list[tuple[str, ...]] | None:
        """`node` as one lexeme (see `unit`) when it is regular and refers to no rule
        directly; strings, and alternatives of strings however many (an enumeration), are
        built without a regex. One character stays a character lexeme."""
        strings = _strings_of(node)
        if strings is not None:
            if len(strings) == 1 and len(strings[0]) <= 1:
                return None
            key = self.regexes.of(node) or "\x00" + json.dumps(strings)  # no regex starts so
            return self.unit(key, strings)
        if not self.regexes.inlinable(node):
            return None
        return self.unit(self.regexes.of(node))

    def unit(self, pattern: str, strings: list[str] | None = None) -> list[tuple[str, ...]] | None:
        """The regex `pattern` (the set of `strings`, when it is one) as one lexeme:
        ``[(lexeme,)]``, or ``[(), (lexeme,)]`` when it also matches the empty text (``[()]``
        when only that); None when `pattern` is split or its DFA exceeds the limits of one
        lexeme (then it is split)."""
        if pattern in self.split:
            return None
        dfas = self.cache["regex"]
        if pattern not in dfas:
            dfas[pattern] = dfa_from_strings(strings) if strings else self._compile(pattern)
        dfa = dfas[pattern]
        if dfa is None:
            self.split.add(pattern)
            return None
        if not dfa.accepting[dfa.start]:
            name = self.unit_lexeme(pattern, dfa)
            if strings is not None and len(strings) == 1:
                self.literals[name] = strings[0]
            return [(name,)]
        key = ("nonempty", pattern)  # the lexeme is the non-empty part, made optional
        if key not in dfas:
            dfas[key] = self._compile(pattern, dfa)
        nonempty = dfas[key]
        if nonempty is None:
            self.split.add(pattern)
            return None
        return [()] if nonempty.is_empty() else [(), (self.unit_lexeme(pattern, nonempty),)]

    def _compile(self, pattern: str, with_empty=None):
        """The DFA of `pattern` (or, given its DFA `with_empty`, of its non-empty strings);
        None past the limits of one lexeme."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise _time_limit(self.timeout, "compiling the lexemes")
        limits = {"max_states": MAX_LEXEME_STATES, "timeout": left, "max_work": MAX_LEXEME_WORK}
        try:
            if with_empty is not None:
                return combine(with_empty, _EMPTY_TEXT, "minus", pattern, **limits)
            return compile_regex(pattern, **limits)
        except (RegexError, RecursionError):
            return None  # too large, slow or deep as one lexeme: translated part by part

    def unit_lexeme(self, pattern: str, dfa) -> str:
        name = self._names.get(pattern)
        if name is None:
            shown = pattern.lstrip("\x00")
            shown = shown if len(shown) <= 60 else shown[:56] + "..."
            name = self._names[pattern] = f"/{shown}/#{len(self._names)}"
            self.lexemes[name] = Lexeme(name, pattern, automaton=dfa)
            self.units[name] = pattern
        return name

    def char_lexeme(self, ranges: tuple[tuple[int, int], ...]) -> str:
        """The lexeme matching one character of `ranges` (one per distinct set)."""
        ranges = _without_surrogates(_merge(ranges))
        name = self._names.get(ranges)
        if name is None:
            name = _class_name(ranges)
            if name in self.lexemes:  # a shortened name shared by two sets
                name = f"{name}#{len(self.lexemes)}"
            self._names[ranges] = name
            dfas = self.cache["chars"]
            if ranges not in dfas:
                dfas[ranges] = dfa_from_code_points(ranges, name)
            self.lexemes[name] = Lexeme(name, name, automaton=dfas[ranges])
        return name


def _strings_of(node: Node) -> list[str] | None:
    """The texts of a string, a sequence of strings, or alternatives that are each one, else
    None."""
    if isinstance(node, Literal):
        return [node.text]
    options = (
        [node] if isinstance(node, Concat) else node.options if isinstance(node, Choice) else ()
    )
    if not options or not all(isinstance(i, Literal) for o in options for i in o.items):
        return None
    return ["".join(i.text for i in o.items) for o in options]


def _show(cp: int, in_class: bool) -> str:
    c = chr(cp)
    if c in ("\\", '"') or (in_class and c in "]-^["):
        return "\\" + c
    if c.isprintable() and c != " " or (c == " " and not in_class):
        return c
    return f"\\x{cp:02X}" if cp < 0x100 else f"\\u{cp:04X}" if cp < 0x10000 else f"\\U{cp:08X}"


def _class_name(ranges: tuple[tuple[int, int], ...]) -> str:
    """A readable name for a set of characters: "a", [a-z0-9], [^"\\\\], . (any)."""
    if not ranges:
        return "[]"
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return '"' + _show(ranges[0][0], False) + '"'
    complement = _without_surrogates(_complement(ranges))
    if not complement:
        return "."
    negated = len(complement) < len(ranges) or (
        len(complement) == len(ranges) and ranges[-1][1] == MAX_CODE_POINT
    )
    shown = complement if negated else ranges
    body = "".join(
        _show(lo, True) if lo == hi else f"{_show(lo, True)}-{_show(hi, True)}" for lo, hi in shown
    )
    name = f"[{'^' if negated else ''}{body}]"
    return name if len(name) <= 48 else name[:44] + "...]"


# exactness of longest match


def _ends(x, y, literal: bytes | None) -> frozenset[int]:
    """The states of DFA `y` after reading a whole string of DFA `x` from their starts (each
    a prefix of a string of `y`, since every live state is): a product search, or a walk of
    `y` when `x` is the single string `literal`."""
    if literal is not None:
        state = y.walk(y.start, literal)
        return frozenset((state,)) if state else frozenset()
    start = (x.start, y.start)
    seen, stack, found = {start}, [start], set()
    while stack:
        sx, sy = stack.pop()
        if x.accepting[sx]:
            found.add(sy)
        rx, ry = x.row(sx), y.row(sy)
        both = (rx != 0) & (ry != 0)
        for pair in set(zip(rx[both].tolist(), ry[both].tolist())):
            if pair not in seen:
                seen.add(pair)
                stack.append(pair)
    return frozenset(found)


def _bits(row: np.ndarray) -> int:
    """The bytes where `row` (256 ints) is non-zero, as the bits of an int."""
    return int.from_bytes(np.packbits(row != 0, bitorder="little").tobytes(), "little")


def _mask(bits: int) -> np.ndarray:
    """The bool array (256,) of the bytes in `bits`."""
    data = np.frombuffer(bits.to_bytes(32, "little"), dtype=np.uint8)
    return np.unpackbits(data, bitorder="little").astype(bool)


def _grow(sets: dict[str, int], edges: dict[str, set[str]]) -> None:
    """Grow `sets` (bitsets) until ``sets[a] <= sets[b]`` for every edge a -> b."""
    todo = list(sets)
    while todo:
        a = todo.pop()
        for b in edges.get(a, ()):
            if sets[a] & ~sets[b]:
                sets[b] |= sets[a]
                todo.append(b)


def _bytes_after(ir: GrammarIR, firsts: dict[str, int]) -> dict[str, int]:
    """Per lexeme, the first bytes of the lexemes that may follow it (FOLLOW, as bytes): FIRST
    and FOLLOW sets of bytes propagated along the rules (`firsts`: each lexeme's first bytes;
    a special token has none, and the end of the text adds nothing)."""
    pairs = ir.rules
    nullable = derivable(pairs, ()) - set(ir.lexemes)
    first = {sym: firsts.get(sym, 0) for sym in ir.lexemes}
    starts: dict[str, set[str]] = {}  # sym -> the left-hand sides it may start
    for lhs, rhs in pairs:
        first.setdefault(lhs, 0)
        for sym in rhs:
            starts.setdefault(sym, set()).add(lhs)
            if sym not in nullable:
                break
    _grow(first, starts)
    follow = dict.fromkeys(first, 0)
    tails: dict[str, set[str]] = {}  # lhs -> the symbols that may end it
    for lhs, rhs in pairs:
        trailer, ends = 0, True
        for sym in reversed(rhs):
            follow[sym] |= trailer
            if ends:
                tails.setdefault(lhs, set()).add(sym)
            ends = ends and sym in nullable
            trailer = (trailer | first[sym]) if sym in nullable else first[sym]
    _grow(follow, tails)
    return {x: follow[x] for x in ir.lexemes}


def _overrunning(ir: GrammarIR, translator: _Translator) -> set[str]:
    """The regexes of the multi-character lexemes Y that longest match could read past the end
    of a lexeme X into what follows it: a string w of X and a byte c that may start what
    follows X such that w + c is a prefix of a string of Y. Every two lexemes are taken as
    possibly allowed together, and FOLLOW sets merge all contexts (see the module docstring)."""
    lexemes = {
        n: lx.dfa for n, lx in ir.lexemes.items() if lx.special is None and not lx.dfa.is_empty()
    }
    first_rows = {n: dfa.row(dfa.start) != 0 for n, dfa in lexemes.items()}
    after = {
        x: bits
        for x, bits in _bytes_after(ir, {n: _bits(r) for n, r in first_rows.items()}).items()
        if bits and x in lexemes
    }
    literals = {n: t.encode() for n, t in translator.literals.items() if n in lexemes}
    units = {y: p for y, p in translator.units.items() if y in lexemes}
    found: set[str] = set()
    # a string X and a string Y: Y's text is X's, a byte that may follow X, and more
    by_text: dict[bytes, list[str]] = {}
    for x, text in literals.items():
        if x in after:
            by_text.setdefault(text, []).append(x)
    lengths = sorted({len(text) for text in by_text} - {0})  # of strings X: Y's prefixes to try
    for y, text in literals.items():
        if y not in units:
            continue
        for k in lengths:
            if k >= len(text):
                break
            burn(1 + k // 64)  # the prefix sliced and hashed
            if any(after[x] >> text[k] & 1 for x in by_text.get(text[:k], ())):
                found.add(units[y])
                break
    # every other pair (X, Y) sharing a first byte: a walk or a product search
    by_first: tuple[dict[int, list[str]], dict[int, list[str]]] = ({}, {})  # all, not strings
    for y in units:
        for b in np.flatnonzero(first_rows[y]).tolist():
            by_first[0].setdefault(b, []).append(y)
            if y not in literals:
                by_first[1].setdefault(b, []).append(y)
    ends = translator.cache["ends"]
    for x, bits in after.items():
        if time.monotonic() > translator.deadline:
            raise _time_limit(translator.timeout, "checking the lexemes")
        ys = by_first[x in literals]
        candidates = {y for b in np.flatnonzero(first_rows[x]).tolist() for y in ys.get(b, ())}
        burn(1 + len(candidates))
        bytes_after = _mask(bits) if candidates else None
        for y in candidates:
            if units[y] in found:
                continue
            key = (id(lexemes[x]), id(lexemes[y]))
            if key not in ends:
                ends[key] = _ends(lexemes[x], lexemes[y], literals.get(x))
            states = sorted(ends[key])
            if states and lexemes[y].rows(states)[:, bytes_after].any():
                found.add(units[y])
    return found


def ir_from_gbnf(text: str, *, start: str = "root", timeout: float = 10.0) -> GrammarIR:
    """Translate GBNF text into the grammar IR (see the module docstring for why it is exact).

    Args:
        text: the grammar.
        start: the start rule (``root`` in llama.cpp).
        timeout: seconds the parse and translation may take.

    Raises:
        GrammarError: a syntax error (with its line and column), an undefined rule, no start
            rule, a token negation (refused, with its line and column), or a limit
            (`MAX_REPEAT`, `MAX_RULES`, `MAX_DEPTH`, the timeout).
    """
    deadline = deadline_after(timeout)  # none under a fuel: it bounds the work
    grammar = parse_gbnf(text, timeout=timeout)
    _check_supported(grammar, start)
    regexes = _Regexes(grammar)
    split: set[str] = set()
    cache = {"regex": {}, "chars": {}, "ends": {}, "deadline": deadline, "timeout": timeout}
    while True:
        translator = _Translator(grammar, regexes, split, cache)
        ir = translator.translate(start)
        overrunning = _overrunning(ir, translator)
        if not overrunning:
            return ir
        split |= overrunning  # each round splits at least one regex: at most one per regex


# -- which syntax? ---------------------------------------------------------------------------------

_GBNF_DEFINITION = re.compile(r"[ \t]*[A-Za-z0-9_-]+[ \t]*::=")
_LARK_DEFINITION = re.compile(
    r"[ \t]*(?:[?!]?[A-Za-z_][A-Za-z0-9_]*(?:\{[^}\n]*\})?(?:\.-?[0-9]+)?[ \t]*:(?!:=)"
    r"|%(?:import|ignore|declare|override|extend)\b)"
)


def grammar_syntax(text: str) -> str:
    """Which grammar format `text` is written in: "gbnf" or "lark".

    Decided by the first line that defines something, skipping blank lines and comments (``#``
    in GBNF, ``//`` in Lark): ``name ::= ...`` is GBNF; ``name: ...`` (a Lark rule or terminal,
    with its ``?``/``!`` prefix, template parameters or priority) or a ``%`` directive is Lark.
    Text with neither is GBNF when it holds ``::=`` anywhere, else Lark (whose parser then
    reports what is wrong).
    """
    if not isinstance(text, str):
        raise GrammarError(f"grammar text must be a str, got {type(text).__name__}")
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", "//")):
            continue
        if _GBNF_DEFINITION.match(line):
            return "gbnf"
        if _LARK_DEFINITION.match(line):
            return "lark"
    return "gbnf" if "::=" in text else "lark"
