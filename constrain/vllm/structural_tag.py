"""XGrammar's structural tags, read into one constrain grammar.

vLLM writes tool calling as a structural tag: a tree of formats (text, tags around JSON
arguments, alternatives, repetitions) in XGrammar's JSON format. Each format becomes rules of
one `GrammarIR`; a JSON Schema inside is compiled by constrain's schema compiler and its rules
and lexemes are renamed into the whole, so every keyword of the tool's parameters is enforced.

Free text becomes lexemes that cannot run past what ends them: the content of a tag is one
lexeme "any text up to and including the first end string"; the text between triggered tags
is "text in which no trigger starts" (a negative lookahead before each character). So the
longest-match lexer splits text exactly where the format does.

A JSON Schema inside has its objects closed where it leaves them open (every output stays
valid; an open object would need a check of duplicate keys over the whole output). Objects
that stay open (the schema ``true`` of a non-strict tool's arguments, additionalProperties
with a schema) may repeat a key inside a tag: the one rule of the JSON compiler not enforced
here. Schemas whose values need a check of the text (uniqueItems) are refused.

Formats read: const_string, json_schema (style "json"), regex, grammar (Lark or GBNF), sequence,
or, optional, plus, star, repeat, tag, tags_with_separator, triggered_tags, and any_text as a
tag's content or at the end of the output. Others (token formats, dispatch, Qwen's XML
parameters, any_text elsewhere) are refused with an error naming the format and where it is.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from constrain.engine.grammar import Grammar
from constrain.engine.grammar.ir import GrammarIR, Lexeme, Rule, repeat
from constrain.engine.regex import compile_regex
from constrain.errors import ConstrainError, GrammarError
from constrain.jsonschema.compiler import compile_schema
from constrain.serve.conventions import closed
from constrain.serve.sections import regex_literal

__all__ = ["StructuralTagError", "grammar_from_structural_tag"]

_ANY_CHAR = r"[\s\S]"


class StructuralTagError(ConstrainError, ValueError):
    """A structural tag that is malformed or uses a format this reader does not support;
    `where` is the path to it (``format.tags[0].content``)."""

    def __init__(self, message: str, where: str):
        super().__init__(f"{message} (at {where})")
        self.where = where


def grammar_from_structural_tag(text: str, *, whitespace: str = "natural") -> Grammar:
    """The grammar of a structural tag (XGrammar's JSON: ``{"type": "structural_tag",
    "format": ...}``), JSON inside laid out by `whitespace`.

    Raises:
        StructuralTagError: malformed, or a format not read here (named, with its path).
        UnsupportedSchemaError, GrammarError: from a JSON Schema or grammar inside.
    """
    try:
        tag = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise StructuralTagError(f"not JSON: {exc}", "structural_tag") from None
    if not isinstance(tag, Mapping) or tag.get("type") != "structural_tag":
        raise StructuralTagError('expected {"type": "structural_tag", "format": ...}',
                                 "structural_tag")  # fmt: skip
    builder = _Builder(whitespace)
    start = builder.format(tag.get("format"), "format", at_end=True)
    ir = GrammarIR("start", [("start", (start,)), *builder.rules], builder.lexemes,
                   source="<structural tag>")  # fmt: skip
    return Grammar.from_ir(ir, kind="structural_tag")


def _none_of(strings: list[str]) -> str:
    """A regex lookahead: none of `strings` starts here."""
    return "(?!" + "|".join(regex_literal(s) for s in strings) + ")"


class _Builder:
    """The rules and lexemes of one structural tag, built format by format."""

    def __init__(self, whitespace: str):
        self.whitespace = whitespace
        self.rules: list[Rule] = []
        self.lexemes: dict[str, Lexeme] = {}
        self.literals: dict[str, str] = {}  # text -> its lexeme's name
        self.count = 0

    def fresh(self, stem: str) -> str:
        self.count += 1
        return f"{stem}_{self.count}"

    def rule(self, *alternatives: tuple[str, ...]) -> str:
        name = self.fresh("f")
        self.rules.extend((name, tuple(rhs)) for rhs in alternatives)
        return name

    def literal(self, text: str) -> tuple[str, ...]:
        """The symbols spelling `text` (none for "")."""
        if not text:
            return ()
        name = self.literals.get(text)
        if name is None:
            name = self.literals[text] = self.fresh("LIT").upper()
            self.lexemes[name] = Lexeme(name, text, literal=True)
        return (name,)

    def pattern(self, regex: str, stem: str) -> str:
        name = self.fresh(stem).upper()
        self.lexemes[name] = Lexeme(name, regex)
        return name

    # -- formats ----------------------------------------------------------------------------------

    def format(self, node: Any, where: str, *, at_end: bool = False) -> str:
        """A nonterminal deriving `node`'s language; `at_end`: nothing follows it."""
        if not isinstance(node, Mapping) or not isinstance(node.get("type"), str):
            raise StructuralTagError("a format must be an object with a type", where)
        kind = node["type"]
        read = getattr(self, "_" + kind, None)
        if read is None or kind.startswith("_"):
            raise StructuralTagError(f"the {kind!r} format is not supported", where)
        return read(node, where, at_end)

    def _const_string(self, node, where, at_end):
        return self.rule(self.literal(_string(node, "value", where)))

    def _regex(self, node, where, at_end):
        regex = _string(node, "pattern", where)
        if not compile_regex(regex).matches(b""):
            return self.rule((self.pattern(regex, "RE"),))
        # a lexeme never matches "": the pattern's other texts, or nothing
        return self.rule((self.pattern(f"(?=[\\s\\S])(?:{regex})", "RE"),), ())

    def _json_schema(self, node, where, at_end):
        if node.get("style", "json") != "json":
            raise StructuralTagError(f"json_schema style {node.get('style')!r} is not supported",
                                     where)  # fmt: skip
        # objects are closed where the schema leaves them open (narrower, never invalid): an
        # open object needs the text check against duplicate keys, and a check reads the
        # whole output, not the part of it a tag holds
        schema = closed(node.get("json_schema", True))
        ir, check = compile_schema(schema, whitespace=self.whitespace,
                                   any_order=bool(node.get("any_order", False)))  # fmt: skip
        if check is not None and (check.root is not None or check.validates):
            raise StructuralTagError("a JSON Schema inside a structural tag cannot need a check "
                                     "of its values (uniqueItems, formats checked on the text)",
                                     where)  # fmt: skip
        # what is left is the duplicate-key rule of objects that stay open (`true`, or
        # additionalProperties with a schema): not enforced inside a tag (documented)
        return self.embed(ir, "J")

    def _grammar(self, node, where, at_end):
        from constrain.constraints.spec import grammar_from

        text = _string(node, "grammar", where)
        if not text.strip() or ":" not in text:
            raise StructuralTagError("grammar must be Lark or GBNF text", where)
        return self.embed(grammar_from(text).ir, "G")

    def embed(self, ir: GrammarIR, stem: str) -> str:
        """`ir`'s rules and lexemes under fresh names; its start symbol's new name."""
        if ir.ignore:
            raise GrammarError("a grammar with %ignore cannot be part of a structural tag")
        prefix = self.fresh(stem) + "_"
        renamed = {name: (prefix + name).upper() for name in ir.lexemes}
        for name, lexeme in ir.lexemes.items():
            keywords = tuple(renamed.get(k, k) for k in lexeme.keyword_of)
            self.lexemes[renamed[name]] = dataclasses.replace(lexeme, name=renamed[name],
                                                              keyword_of=keywords)  # fmt: skip
        symbol = lambda s: renamed.get(s) or prefix + s  # noqa: E731
        self.rules.extend((symbol(lhs), tuple(map(symbol, rhs))) for lhs, rhs in ir.rules)
        return symbol(ir.start)

    def _sequence(self, node, where, at_end):
        elements = _list(node, "elements", where)
        last = len(elements) - 1
        return self.rule(tuple(self.format(e, f"{where}.elements[{i}]", at_end=at_end and i == last)
                               for i, e in enumerate(elements)))  # fmt: skip

    def _or(self, node, where, at_end):
        elements = _list(node, "elements", where)
        return self.rule(*((self.format(e, f"{where}.elements[{i}]", at_end=at_end),)
                           for i, e in enumerate(elements)))  # fmt: skip

    def _optional(self, node, where, at_end):
        return self.rule((self.format(node.get("content"), f"{where}.content"),), ())

    def _star(self, node, where, at_end):
        return self.repeated(node, where, 0, None)

    def _plus(self, node, where, at_end):
        return self.repeated(node, where, 1, None)

    def _repeat(self, node, where, at_end):
        low, high = node.get("min", 0), node.get("max", -1)
        if not isinstance(low, int) or not isinstance(high, int) or low < 0:
            raise StructuralTagError("repeat needs whole min >= 0 and max", where)
        return self.repeated(node, where, low, None if high < 0 else high)

    def repeated(self, node, where, low: int, high: int | None) -> str:
        item = self.format(node.get("content"), f"{where}.content")
        name = self.fresh("rep")
        return repeat(self.rules, name, (item,), low, high)

    def _tag(self, node, where, at_end):
        begin = node.get("begin")
        if not isinstance(begin, str):
            raise StructuralTagError("a tag's begin must be a string (token begins are not "
                                     "supported)", where)  # fmt: skip
        ends = node.get("end")
        ends = [ends] if isinstance(ends, str) else ends
        if not isinstance(ends, list) or not all(isinstance(e, str) for e in ends):
            raise StructuralTagError("a tag's end must be a string or a list of strings", where)
        content = node.get("content")
        if isinstance(content, Mapping) and content.get("type") == "any_text":
            return self.rule(self.literal(begin) + self.text_until(content, ends, where))
        body = self.format(content, f"{where}.content")
        return self.rule(*(self.literal(begin) + (body,) + self.literal(end) for end in ends))

    def text_until(self, node: Mapping, ends: list[str], where: str) -> tuple[str, ...]:
        """Any text (without `node`'s excludes) up to and including the first of `ends`."""
        _check_text_limits(node, where)
        if not any(ends):
            return (self.free_text(node, [], where),)
        banned = [*ends, *node.get("excludes", [])]
        alternatives = "|".join(regex_literal(e) for e in ends if e)
        regex = f"(?:{_none_of(banned)}{_ANY_CHAR})*(?:{alternatives})"
        return (self.pattern(regex, "TEXT"),)

    def free_text(self, node: Mapping, triggers: list[str], where: str) -> str:
        """A nonterminal for text in which none of `triggers` or `node`'s excludes starts."""
        banned = [*triggers, *node.get("excludes", [])]
        char = f"{_none_of(banned)}{_ANY_CHAR}" if banned else _ANY_CHAR
        return self.rule((self.pattern(f"(?:{char})+", "TEXT"),), ())

    def _any_text(self, node, where, at_end):
        if not at_end:
            raise StructuralTagError("any_text is supported as a tag's content or at the end "
                                     "of the output", where)  # fmt: skip
        _check_text_limits(node, where)
        return self.free_text(node, [], where)

    def tag_list(self, node: Mapping, where: str) -> list[str]:
        return [self.format(t, f"{where}.tags[{i}]")
                for i, t in enumerate(_list(node, "tags", where))]  # fmt: skip

    def _tags_with_separator(self, node, where, at_end):
        tags = self.rule(*((t,) for t in self.tag_list(node, where)))
        least = 1 if node.get("at_least_one") else 0
        if node.get("stop_after_first"):
            return self.rule((tags,), *([()] if not least else []))
        separator = _string(node, "separator", where, default="")
        more = self.fresh("more")
        tail = repeat(self.rules, more, (*self.literal(separator), tags), 0, None)
        return self.rule((tags, tail), *([()] if not least else []))

    def _triggered_tags(self, node, where, at_end):
        """Text with tags in it, each begun by one of the triggers. The text before a tag and
        its trigger are one lexeme ("text in which no trigger starts, then trigger i"), so the
        lexer never has to take back text it read as free text."""
        triggers = _list(node, "triggers", where)
        if not all(isinstance(t, str) and t for t in triggers):
            raise StructuralTagError("triggers must be non-empty strings", where)
        banned = [*triggers, *node.get("excludes", [])]
        text_char = f"{_none_of(banned)}{_ANY_CHAR}"
        calls = []
        for i, tag in enumerate(_list(node, "tags", where)):
            at = f"{where}.tags[{i}]"
            begin = tag.get("begin") if isinstance(tag, Mapping) else None
            trigger = next((t for t in triggers if isinstance(begin, str)
                            and begin.startswith(t)), None)  # fmt: skip
            if trigger is None:
                raise StructuralTagError("a triggered tag's begin must start with a trigger", at)
            lead = self.pattern(f"(?:{text_char})*{regex_literal(trigger)}", "TRIGGERED")
            rest = self._tag({**tag, "begin": begin[len(trigger):]}, at, False)
            calls.append((lead, rest))
        call = self.rule(*calls)
        text = self.free_text(node, triggers, where)  # after the last tag
        least = 1 if node.get("at_least_one") else 0
        if node.get("stop_after_first"):
            return self.rule((call, text), *([(text,)] if not least else []))
        return self.rule((repeat(self.rules, self.fresh("calls"), (call,), least, None), text))

def _string(node: Mapping, key: str, where: str, default: str | None = None) -> str:
    value = node.get(key, default)
    if not isinstance(value, str):
        raise StructuralTagError(f"{key} must be a string", where)
    return value


def _list(node: Mapping, key: str, where: str) -> list:
    value = node.get(key)
    if not isinstance(value, list) or not value:
        raise StructuralTagError(f"{key} must be a non-empty list", where)
    return value


def _check_text_limits(node: Mapping, where: str) -> None:
    if node.get("max_tokens") is not None or node.get("max_chars") is not None:
        raise StructuralTagError("any_text with max_tokens or max_chars is not supported", where)
