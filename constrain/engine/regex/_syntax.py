"""Regex front end: reject what we cannot express, then parse with interegular.

interegular's parser gives the syntax tree (alternation, concatenation, repetition, character
groups). Before it runs, a scan over the pattern (aware of escapes and character classes) finds
the constructs a finite automaton cannot express exactly and reports each with its position,
strips anchors at the very start or end (no-ops under full-match semantics) and rewrites
``\\uXXXX`` / ``\\UXXXXXXXX`` escapes (and UTF-16 surrogate pairs) into the characters they name.
Anchors inside the pattern stay: ``$`` becomes the lookahead "the rest of the text is empty" (in
Python's dialect, "is at most one newline"), ``^`` the marker `START_MARKER`, an edge the NFA
crosses only before the first character.

Lookaheads ``(?=X)`` / ``(?!X)`` are cut out and parsed on their own; in the pattern each
becomes a marker character (a private-use code point, `lookahead_index`) that the NFA builder
turns into an assertion on the rest of the text (see `constrain.engine.regex.subsets`). ``X`` ending in
``$`` must match the whole rest of the text, otherwise a prefix of it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from interegular.patterns import InvalidSyntax, Pattern, Unsupported, _ParsePattern
from interegular.utils.simple_parser import NoMatch, SimpleParser

from constrain.errors import RegexError

MARKER_BASE = 0x10F000  # lookahead k is written as chr(MARKER_BASE + k) (plane 16, private use)
_MAX_LOOKAHEADS = 64
MAX_GROUP_DEPTH = 50  # groups nested in one another (the parser recurses on them)
PARSE_STEPS_PER_CHAR = 24  # work steps of parsing one character (about 6 us: 6 fuel units)


@dataclass(frozen=True)
class Lookahead:
    """``(?=body)`` (or ``(?!body)`` when `negative`): the rest of the text starts with a match
    of `body`, or with `whole`, the rest of the text is one."""

    negative: bool
    body: Pattern
    whole: bool


START_MARKER = chr(MARKER_BASE + _MAX_LOOKAHEADS)  # ``^`` inside a pattern (not at its start)


def _check_room(lookaheads: list, pattern: str, i: int) -> None:
    if len(lookaheads) == _MAX_LOOKAHEADS:
        raise RegexError(f"more than {_MAX_LOOKAHEADS} lookaheads and inner $", pattern, i)


def lookahead_index(char: str) -> int | None:
    """The lookahead a marker character stands for (None: an ordinary character)."""
    k = ord(char) - MARKER_BASE
    return k if 0 <= k < _MAX_LOOKAHEADS else None


_HEX = set("0123456789abcdefABCDEF")
# characters interegular treats as syntax outside / inside a character class
_SPECIAL_OUTSIDE = set("+?*.$^\\()[]|{}")
_SPECIAL_INSIDE = set("\\]^-[")


def _escape_char(c: str, inside_class: bool) -> str:
    special = _SPECIAL_INSIDE if inside_class else _SPECIAL_OUTSIDE
    if c in special:
        return "\\" + c
    if c == "\n":
        return "\\n"
    return c


def _read_hex(pattern: str, start: int, n: int) -> int | None:
    digits = pattern[start : start + n]
    if len(digits) == n and set(digits) <= _HEX:
        return int(digits, 16)
    return None


# ECMA-262 meanings that differ from interegular's (which follows Python's ASCII-ish classes)
_ECMA_SPACE = (
    " \t\n\x0b\x0c\r\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)
_ECMA_LINE_END = "\n\r\u2028\u2029"


def _class_of(chars: str, negated: bool = False) -> str:
    body = "".join(_escape_char(c, True) for c in chars)
    return f"[{'^' if negated else ''}{body}]"


def prepare(
    pattern: str, ecma: bool = False, lookaheads: list[tuple[bool, str, int]] | None = None
) -> str:
    """Check `pattern` for unsupported constructs and rewrite it for interegular.

    With `ecma`, ``.``, ``\\s`` and ``\\S`` get their ECMA-262 meanings (``.`` excludes every
    line terminator, ``\\s`` includes the Unicode spaces). With a `lookaheads` list, each
    lookahead is replaced by its marker and appended as ``(negative, body text, position)``;
    without one (inside a lookahead), a lookahead is an error.

    Raises:
        RegexError: naming the construct and its position.
    """
    out: list[str] = []
    i, n = 0, len(pattern)
    in_class = False
    class_start = -1
    out_start = -1  # where the current class begins in `out`
    non_space = False  # the current class holds \S: written as an alternation when it closes
    while i < n:
        c = pattern[i]
        if c == "\\":
            if i + 1 >= n:
                raise RegexError("trailing backslash", pattern, i)
            e = pattern[i + 1]
            if e in "uU":
                width = 4 if e == "u" else 8
                code = _read_hex(pattern, i + 2, width)
                if code is None:
                    raise RegexError(f"\\{e} needs {width} hex digits", pattern, i)
                consumed = 2 + width
                if 0xD800 <= code <= 0xDBFF and pattern[i + consumed : i + consumed + 2] == "\\u":
                    low = _read_hex(pattern, i + consumed + 2, 4)
                    if low is not None and 0xDC00 <= low <= 0xDFFF:
                        code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                        consumed += 6
                if 0xD800 <= code <= 0xDFFF:
                    raise RegexError(
                        "a lone UTF-16 surrogate cannot appear in UTF-8 text", pattern, i
                    )
                if code > 0x10FFFF:
                    raise RegexError("code point beyond U+10FFFF", pattern, i)
                out.append(_escape_char(chr(code), in_class))
                i += consumed
                continue
            if not in_class:
                if e.isdigit() and e != "0":
                    raise RegexError(f"backreference \\{e} is not supported", pattern, i)
                if e in "bB":
                    raise RegexError(f"word boundary \\{e} is not supported", pattern, i)
                if e in "AZz":
                    at_edge = (e == "A" and i == 0) or (e in "Zz" and i + 2 == n)
                    if not at_edge:
                        raise RegexError(
                            f"anchor \\{e} is only supported at the pattern's edge", pattern, i
                        )
                    i += 2
                    continue
            if ecma and e in "sS":
                if in_class and e == "S":
                    if pattern[class_start + 1] == "^":
                        raise RegexError(
                            "\\S inside a negated character class is not supported", pattern, i
                        )
                    non_space = True
                    i += 2
                    continue
                spaces = "".join(_escape_char(c, True) for c in _ECMA_SPACE)
                out.append(spaces if in_class else _class_of(_ECMA_SPACE, e == "S"))
                i += 2
                continue
            if e in "pPN":
                raise RegexError(f"Unicode property escape \\{e} is not supported", pattern, i)
            if e == "x" and _read_hex(pattern, i + 2, 2) is not None:
                out.append(_escape_char(chr(int(pattern[i + 2 : i + 4], 16)), in_class))
                i += 4
                continue
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            if (
                c == "]"
                and i > class_start + 1
                and not (i == class_start + 2 and pattern[class_start + 1] == "^")
            ):
                in_class = False
                if non_space:  # [a\S] = (?:[a]|\S)
                    body = "".join(out[out_start + 1 :])
                    del out[out_start:]
                    rest = f"[{body}]|" if body else ""
                    out.append(f"(?:{rest}{_class_of(_ECMA_SPACE, negated=True)})")
                    non_space = False
                    i += 1
                    continue
            elif c == "[" and pattern[i + 1 : i + 2] == ":":
                raise RegexError(
                    "POSIX character classes like [:alpha:] are not supported", pattern, i
                )
            out.append(c)
            i += 1
            continue
        if c == "[":
            in_class, class_start, out_start = True, i, len(out)
        elif c == "(" and pattern[i + 1 : i + 2] == "?":
            ext = pattern[i + 2 : i + 4]
            if ext[:1] in ("=", "!"):
                kind = "lookahead" if ext[0] == "=" else "negative lookahead"
                if lookaheads is None:
                    raise RegexError(f"{kind} (?{ext[0]}...) inside a lookahead", pattern, i)
                _check_room(lookaheads, pattern, i)
                end = _group_end(pattern, i)
                lookaheads.append((ext[0] == "!", pattern[i + 3 : end], i))
                out.append(chr(MARKER_BASE + len(lookaheads) - 1))
                i = end + 1
                continue
            if ext in ("<=", "<!"):
                kind = "lookbehind" if ext[1] == "=" else "negative lookbehind"
                raise RegexError(f"{kind} (?{ext}...) is not supported", pattern, i)
            if ext == "P=":
                raise RegexError("named backreference (?P=...) is not supported", pattern, i)
            if ext[:1] == "(":
                raise RegexError("conditional group (?(...)...) is not supported", pattern, i)
            if ext[:1] == ">":
                raise RegexError("atomic group (?>...) is not supported", pattern, i)
            if ext[:1] and ext[0] in "aiLmsux-":
                raise RegexError(f"inline flags (?{ext[0]}...) are not supported", pattern, i)
        elif c == "." and ecma:
            out.append(_class_of(_ECMA_LINE_END, negated=True))
            i += 1
            continue
        elif c == "^" or c == "$":
            if i != (0 if c == "^" else n - 1):  # at the pattern's edge: a no-op
                if lookaheads is None:
                    raise RegexError(f"anchor {c} inside a lookahead", pattern, i)
                if c == "^":  # position 0 only: an edge the NFA crosses before any character
                    out.append(START_MARKER)
                else:  # the rest of the text is empty (Python: or one newline)
                    _check_room(lookaheads, pattern, i)
                    lookaheads.append((False, "$" if ecma else "\n?$", i))
                    out.append(chr(MARKER_BASE + len(lookaheads) - 1))
            i += 1
            continue
        out.append(c)
        i += 1
    if in_class:
        raise RegexError("unterminated character class", pattern, class_start)
    return "".join(out)


def syntax_chars(pattern: str) -> Iterator[tuple[int, str]]:
    """``(index, character)`` of each character of `pattern` that is regex syntax: outside
    character classes (a ``]`` right after ``[`` or ``[^`` is a member) and not escaped."""
    i, in_class = 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            if pattern[i + 1 : i + 2] == "^":
                i += 1
            if pattern[i + 1 : i + 2] == "]":
                i += 1
        else:
            yield i, c
        i += 1


def escaped(text: str, i: int) -> bool:
    """Whether text[i] is preceded by an odd number of backslashes."""
    n = 0
    while i - n - 1 >= 0 and text[i - n - 1] == "\\":
        n += 1
    return n % 2 == 1


def _group_end(pattern: str, start: int) -> int:
    """The index of the parenthesis closing the group that opens at `start`."""
    depth = 0
    for i, c in syntax_chars(pattern[start:]):
        depth += {"(": 1, ")": -1}.get(c, 0)
        if depth == 0:
            return start + i
    raise RegexError("unterminated group", pattern, start)


def parse(pattern: str, ecma: bool = False) -> tuple[Pattern, list[Lookahead]]:
    """Parse `pattern` into interegular's syntax tree (after `prepare`), with the lookaheads
    its marker characters stand for."""
    if any(lookahead_index(c) is not None or c == START_MARKER for c in pattern):
        raise RegexError("private-use characters U+10F000.. are reserved", pattern, None)
    lone = next((i for i, c in enumerate(pattern) if 0xD800 <= ord(c) <= 0xDFFF), None)
    if lone is not None:
        raise RegexError("a lone UTF-16 surrogate cannot appear in UTF-8 text", pattern, lone)
    _check_nesting(pattern)
    found: list[tuple[bool, str, int]] = []
    tree = _parse_text(prepare(pattern, ecma, found), pattern)
    lookaheads = []
    for negative, body, at in found:
        whole = body.endswith("$") and not escaped(body, len(body) - 1)
        try:
            text = prepare(body[:-1] if whole else body, ecma)
        except RegexError as exc:  # positions in the whole pattern
            raise RegexError(exc.reason, pattern, at + 3 + (exc.position or 0)) from None
        lookaheads.append(Lookahead(negative, _parse_text(text, pattern), whole))
    return tree, lookaheads


def _check_nesting(pattern: str) -> None:
    """Groups nest at most `MAX_GROUP_DEPTH` deep (the parser and the NFA recurse on them)."""
    depth = 0
    for i, c in syntax_chars(pattern):
        depth += {"(": 1, ")": -1}.get(c, 0)
        if depth > MAX_GROUP_DEPTH:
            raise RegexError(
                f"groups nested deeper than {MAX_GROUP_DEPTH} (MAX_GROUP_DEPTH)", pattern, i
            )


def _parse_text(text: str, pattern: str) -> Pattern:
    parser = _ParsePattern(text)
    try:
        tree = SimpleParser.parse(parser)
    except NoMatch as exc:
        raise RegexError(f"malformed regex (interegular: {exc})", pattern, exc.index) from None
    except (Unsupported, InvalidSyntax) as exc:
        raise RegexError(f"unsupported or malformed regex: {exc}", pattern, parser.index) from None
    if parser.flags is not None:
        raise RegexError("inline flags are not supported", pattern, None)
    return tree.simplify()
