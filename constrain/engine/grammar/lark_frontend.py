"""Lark front end: Lark grammar text -> `GrammarIR`, using lark's own grammar loader.

lark expands EBNF (``?``, ``*``, ``+``, ``~``, ranges), templates and ``%import`` into plain
rules and terminal patterns; we translate those. Semantics of the result: the text is split into
terminals by longest match among the terminals the parser allows at that point (ties broken by
terminal priority, then a keyword over its regex, equal priorities all tried), a keyword (a
string a regex terminal also matches) ends only at a word boundary, ``%ignore``d terminals may
appear between any two terminals, and the terminal sequence must be a sentence of the (any,
possibly ambiguous) context-free grammar.

Regex terminals use our regex layer (docs/regex.md); lark's lazy ``common.ESCAPED_STRING`` and
``common.C_COMMENT`` are replaced by exact greedy equivalents. Other lazy quantifiers and regex
flags cannot be honoured under longest match and are reported with the terminal's name.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path

from constrain.engine.grammar.ir import GrammarIR, Lexeme, Rule
from constrain.engine.grammar.keywords import mark_keywords
from constrain.engine.regex import syntax_chars
from constrain.errors import GrammarError

__all__ = ["ir_from_lark"]

# lark's lazy common terminals and exact longest-match equivalents (`.` excludes \n in lark too)
_EXACT_COMMON = {
    "ESCAPED_STRING": r'"([^"\\\n]|\\[^\n])*"',
    "C_COMMENT": r"/\*([^*]|\*+[^*/])*\*+/",
}


@lru_cache(maxsize=1)
def _common_patterns() -> dict[str, str]:
    """lark's compiled regex for each lazy common terminal -> our replacement."""
    from lark.load_grammar import load_grammar

    names = sorted(_EXACT_COMMON)
    text = "start: " + " ".join(names) + "\n" + "".join(f"%import common.{n}\n" for n in names)
    grammar, _ = load_grammar(text, "<common>", None, False)
    terminals, _, _ = grammar.compile(["start"], set())
    return {t.pattern.to_regexp(): _EXACT_COMMON[t.name] for t in terminals}


def _has_lazy_quantifier(regex: str) -> bool:
    return any(
        c in "*+?}" and regex[i + 1 : i + 2] == "?" and not (c == "?" and regex[i - 1 : i] == "(")
        for i, c in syntax_chars(regex)
    )


def _case_insensitive(text: str) -> str:
    out = []
    for c in text:
        lo, up = c.lower(), c.upper()
        if lo != up and len(lo) == len(up) == 1:
            out.append(f"[{lo}{up}]")
        else:
            out.append("\\" + c if c in r".^$*+?{}[]\|()" else c)
    return "".join(out)


_SCOPED_IGNORECASE = re.compile(r"\(\?i:((?:\\.|[^()\\\[\]])*)\)")


_PIECE = re.compile(r"\\.|.", re.DOTALL)  # an escaped character or one character


def _expand_ignorecase(regex: str) -> str:
    """Rewrite ``(?i:...)`` groups of literals (from ``"text"i`` strings, or alternatives of
    literals as in ``/(?i:select|from)/``) into case classes. A group holding any other regex
    syntax is left as it is, for the regex layer to report the flag."""

    def expand(match: re.Match) -> str:
        pieces = _PIECE.findall(match.group(1))
        if any(p in ".^$*+?{}" or (len(p) == 2 and p[1].isalnum()) for p in pieces):
            return match.group(0)  # not literals (\d, ., a*, ...)
        alternatives, current = [], []
        for p in pieces:
            if p == "|":
                alternatives.append(current)
                current = []
            else:
                current.append(p[-1])  # unescaped
        alternatives.append(current)
        return "(?:" + "|".join(_case_insensitive("".join(a)) for a in alternatives) + ")"

    return _SCOPED_IGNORECASE.sub(expand, regex)


def _lexeme(terminal) -> Lexeme:
    from lark.lexer import PatternStr

    name, pattern, priority = terminal.name, terminal.pattern, terminal.priority
    flags = set(pattern.flags)
    if isinstance(pattern, PatternStr):
        if flags - {"i"}:
            raise GrammarError(f"terminal {name}: string flags {sorted(flags)} are not supported")
        if flags and pattern.value.isascii():
            return Lexeme(name, pattern.value, literal=True, ignore_case=True, priority=priority)
        if flags:
            return Lexeme(name, _case_insensitive(pattern.value), priority=priority)
        return Lexeme(name, pattern.value, literal=True, priority=priority)
    regex = pattern.to_regexp()
    regex = _expand_ignorecase(_common_patterns().get(regex, regex))
    if flags:
        raise GrammarError(
            f"terminal {name}: regex flags {sorted(flags)} are not supported; spell the variants "
            f'out (e.g. [Ss][Ee][Ll][Ee][Cc][Tt]) or use a case-insensitive string "select"i'
        )
    if _has_lazy_quantifier(regex):
        raise GrammarError(
            f"terminal {name}: lazy quantifiers (*?, +?, ??) have no meaning under longest-match "
            f"lexing; rewrite /{regex}/ with an exact greedy pattern"
        )
    return Lexeme(name, regex, priority=priority)


def ir_from_lark(
    text: str,
    *,
    start: str = "start",
    import_paths: list[str] | None = None,
    special_tokens: Mapping[str, str] | None = None,
    source: str = "<grammar>",
) -> GrammarIR:
    """Translate Lark grammar text.

    Args:
        text: the grammar.
        start: the start rule.
        import_paths: directories searched by ``%import``.
        special_tokens: ``%declare``d terminal name -> special token text (e.g.
            ``{"EOT": "<|im_end|>"}``); such terminals match that token only.

    Raises:
        GrammarError: lark rejects the grammar (its message, with line and column), a terminal
            uses an unsupported regex feature, or a ``%declare``d terminal has no special token.
    """
    from lark.exceptions import LarkError
    from lark.load_grammar import load_grammar

    try:
        grammar, _ = load_grammar(text, source, import_paths or [], False)
        terminals, rules, ignore = grammar.compile([start], set())
    except LarkError as exc:
        raise GrammarError(f"lark rejects the grammar: {exc}") from None
    lexemes = {t.name: _lexeme(t) for t in terminals}
    for name, special in (special_tokens or {}).items():
        if name in lexemes:
            raise GrammarError(
                f"terminal {name} has a pattern; only %declare'd terminals can be special tokens"
            )
        lexemes[name] = Lexeme(name, special=special)
    ir_rules = []
    for rule in rules:
        rhs = tuple(sym.name for sym in rule.expansion)
        for sym in rule.expansion:
            if sym.is_term and sym.name not in lexemes:
                raise GrammarError(
                    f"terminal {sym.name} (used in rule {rule.origin.name!r}) is declared but has no "
                    f"pattern; map it to a special token with special_tokens={{{sym.name!r}: '<|...|>'}}"
                )
        ir_rules.append(Rule(str(rule.origin.name), rhs))
    return GrammarIR(start, ir_rules, mark_keywords(lexemes), list(ignore), source=text)


def read_lark(path: str | os.PathLike) -> tuple[str, list[str]]:
    """The text of a grammar file and the import path (its directory)."""
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8"), [str(path.parent)]
    except OSError as exc:
        raise GrammarError(f"cannot read grammar file {str(path)!r}: {exc.strerror}") from None
