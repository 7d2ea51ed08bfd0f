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

Grammar text may come from an untrusted source, so nothing here reads a file it was not told
to: ``%import`` resolves only in the directories the caller lists, then the grammar library
(grammars/) and lark's own grammars (``common`` ...), never against the current directory, and
an import found nowhere is a `GrammarError` naming it and its line. The regex terminals are
compiled here, within the compilation's deadline.

lark's loading can take time and memory exponential in the text (terminals that double:
``T1: T0 T0``, ``T2: T1 T1``, ...), and lark checks no limit, so it is metered by its Python
calls (`constrain.fuel.Fuel.metering_calls`) against `LARK_MAX_CALLS`, and against the active
fuel when there is one (`LARK_UNITS_PER_CALL` each).
"""

from __future__ import annotations

import dataclasses
import os
import re
import time
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path

from constrain import datadirs
from constrain.engine.grammar.ir import GrammarIR, Lexeme
from constrain.engine.grammar.keywords import mark_keywords
from constrain.engine.regex import compile_regex, syntax_chars
from constrain.errors import Abandoned, GrammarError, RegexError, WorkLimitError
from constrain.fuel import Fuel, deadline_after, stage

__all__ = ["LARK_MAX_CALLS", "LARK_UNITS_PER_CALL", "ImportResolver", "ir_from_lark", "read_lark"]

# Python calls lark's loading may make without an active fuel. lark's own python.lark takes
# 235k, the grammar library at most 85k (docs/limits.md); a grammar of doubling terminals
# takes twice as many per level (20 levels would take 280 s and 6 GB): it fails after about
# 6 s instead. Imports found by `ImportResolver` are read within the count.
LARK_MAX_CALLS = 2_000_000
LARK_UNITS_PER_CALL = 3  # of the active fuel: a metered call takes about 3 us (docs/limits.md)

# loaded once per process before any grammar is metered: lark builds its own parser on its
# first load (~400k calls) and Python fills per-class caches on first use, which would
# otherwise be counted against the first grammar only
_WARM_UP = """
start: item+ | "[" item ("," item)* "]"
?item: WORD -> word
    | NUMBER
WORD: /[a-z]+/
%import common.NUMBER
%import common.WS
%ignore WS
"""

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


@lru_cache(maxsize=1)
def _warm_lark() -> None:
    """Make lark's one-time work (see `_WARM_UP`) outside any meter."""
    from lark.load_grammar import load_grammar

    _common_patterns()
    grammar, _ = load_grammar(_WARM_UP, "<warm-up>", None, False)
    grammar.compile(["start"], set())


def _load(text: str, source: str, resolver: ImportResolver, start: str):
    """lark's loading of `text`: (terminals, rules, ignored names), metered (see the module
    docstring)."""
    from lark.load_grammar import load_grammar

    _warm_lark()
    with stage("loading the Lark grammar") as active:
        meter = Fuel(LARK_MAX_CALLS, limit="LARK_MAX_CALLS")
        try:
            with meter.metering_calls(active, LARK_UNITS_PER_CALL):
                grammar, _ = load_grammar(text, source, [resolver], False)
                return grammar.compile([start], set())
        except Exception:
            # lark may wrap the meter's error (a transformer's VisitError) or fail on the
            # state it left: the meters say first whether they stopped the loading
            if active is not None:
                active.burn(0)
            try:
                meter.burn(0)
            except WorkLimitError:
                raise GrammarError(
                    f"lark's loading of the grammar needs more than {LARK_MAX_CALLS:,} Python "
                    f"calls (LARK_MAX_CALLS): {_why_large(text)}"
                ) from None
            raise


def _why_large(text: str) -> str:
    """What most likely makes lark's loading of `text` too costly, in words."""
    lines = [line.strip() for line in text.splitlines()]
    definitions = sum(1 for line in lines if line and not line.startswith(("//", "%", "|")))
    if definitions > 2_000:
        return (f"the grammar has {definitions:,} rules and terminals, more than lark's loader "
                f"reads in that many calls: split it, or write it in GBNF")  # fmt: skip
    return ("terminals built from copies of other terminals (T1: T0 T0, T2: T1 T1, ...) grow "
            "exponentially: simplify the grammar")  # fmt: skip


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


class ImportResolver:
    """Where ``%import`` finds grammars: the directories `paths` (in order), then the grammar
    library, then lark's own grammars. Called by lark as ``(base_path, grammar_path) ->
    (joined_path, text)`` for every import, nested ones included; a relative import
    (``%import .x``) looks first in the directory of the grammar that makes it, when that
    directory is one of those (or below one). An import found nowhere raises `GrammarError`.
    """

    def __init__(self, paths: Sequence[str | os.PathLike] = (), *, text: str = ""):
        self.roots = [Path(p).resolve() for p in (*paths, datadirs.path("grammars"))]
        self.text = text  # the top grammar, for the line of a missing import

    def __call__(self, base_path, grammar_path: str):
        from lark.load_grammar import PackageResource, stdlib_loader

        try:
            if isinstance(base_path, PackageResource):  # an import inside one of lark's grammars
                return stdlib_loader(base_path, grammar_path)
            for directory in self._directories(base_path):
                found = directory / grammar_path  # dotted names only: it stays in `directory`
                if found.is_file():
                    return str(found), read_lark(found)
            return stdlib_loader(None, grammar_path)
        except OSError:  # never back to lark, whose last resort is the current directory
            raise self._not_found(grammar_path) from None

    def _directories(self, base_path) -> list[Path]:
        dirs = list(self.roots)
        if isinstance(base_path, str) and base_path:
            base = Path(base_path).resolve()
            if any(base.is_relative_to(r) for r in self.roots):
                dirs.insert(0, base)
        return dirs

    def _not_found(self, grammar_path: str) -> GrammarError:
        dotted = grammar_path.removesuffix(".lark").replace(os.sep, ".")
        where = "the grammar library (" + ", ".join(datadirs.names("grammars", ".lark"))
        where += ") or lark's grammars (common, unicode, python, lark)"
        if len(self.roots) > 1:
            paths = ", ".join(repr(str(r)) for r in self.roots[:-1])
            where = f"the import paths ({paths}), {where}"
        line = next(
            (
                f" (line {i})"
                for i, text in enumerate(self.text.splitlines(), 1)
                if re.match(rf"\s*%import\s+\.?{re.escape(dotted)}\b", text)
            ),
            "",
        )
        return GrammarError(
            f"%import {dotted}: not found in {where}{line}; grammar text imports only from "
            f"there unless import_paths=[directory, ...] names more"
        )


def ir_from_lark(
    text: str,
    *,
    start: str = "start",
    import_paths: Sequence[str | os.PathLike] = (),
    special_tokens: Mapping[str, str] | None = None,
    source: str = "<grammar>",
    timeout: float = 10.0,
) -> GrammarIR:
    """Translate Lark grammar text (text only: this reads no file but the imports').

    Args:
        text: the grammar.
        start: the start rule.
        import_paths: directories searched by ``%import`` before the grammar library and
            lark's grammars (see `ImportResolver`).
        special_tokens: ``%declare``d terminal name -> special token text (e.g.
            ``{"EOT": "<|im_end|>"}``); such terminals match that token only.
        source: the grammar's name in messages (and, for a file, its path).
        timeout: seconds the translation may take (lark's loading, then the terminals'
            regexes, each compiled within what is left).

    Raises:
        GrammarError: lark rejects the grammar (its message, with line and column), an
            ``%import`` is found nowhere it may look, a terminal uses an unsupported regex
            feature or exceeds a compile limit, the deadline passes, or a ``%declare``d
            terminal has no special token.
    """
    from lark.exceptions import LarkError

    deadline = deadline_after(timeout)  # none under a fuel: it bounds the work
    resolver = ImportResolver(import_paths, text=text)
    try:
        terminals, rules, ignore = _load(text, source, resolver, start)
    except (GrammarError, WorkLimitError, Abandoned):  # an import found nowhere, the fuel
        raise
    except (LarkError, AssertionError) as exc:  # lark asserts some conditions on imports
        raise GrammarError(f"lark rejects the grammar: {exc}") from None
    except Exception as exc:  # lark crashing on input it does not diagnose (a %declare'd rule)
        raise GrammarError(
            f"lark fails on the grammar ({type(exc).__name__}: {exc}); look for a malformed "
            f"%declare, %import or template"
        ) from exc
    if time.monotonic() > deadline:
        raise _time_limit(timeout, "in lark's loading")
    lexemes = {t.name: _compiled(_lexeme(t), deadline, timeout) for t in terminals}
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
        ir_rules.append((str(rule.origin.name), rhs))
    return GrammarIR(start, ir_rules, mark_keywords(lexemes), list(ignore), source=text)


def _compiled(lexeme: Lexeme, deadline: float, timeout: float) -> Lexeme:
    """`lexeme` with its DFA compiled now when it is a regex, within what is left of the
    deadline (literals build in linear time; they stay lazy)."""
    if lexeme.literal or lexeme.special is not None:
        return lexeme
    left = deadline - time.monotonic()
    try:
        dfa = compile_regex(lexeme.pattern, timeout=max(left, 0.0))
    except RegexError as exc:
        if time.monotonic() > deadline:
            raise _time_limit(timeout, f"at terminal {lexeme.name}") from None
        raise GrammarError(f"terminal {lexeme.name}: {exc}") from exc
    return dataclasses.replace(lexeme, automaton=dfa)


def _time_limit(timeout: float, where: str) -> GrammarError:
    return GrammarError(
        f"compiling the grammar took longer than its time limit of {timeout:g} s (timeout=), "
        f"{where}"
    )


def read_lark(path: str | os.PathLike) -> str:
    """The text of the grammar file `path`.

    Raises:
        GrammarError: the file cannot be read (named, with the reason) or is not UTF-8 text.
    """
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise GrammarError(f"cannot read grammar file {str(path)!r}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise GrammarError(
            f"grammar file {str(path)!r} is not UTF-8 text (byte {exc.start})"
        ) from None
