"""Keywords: string terminals that a regex terminal also matches, lexed as whole words.

lark's lexers call a string terminal such as ``"select"i`` a keyword of a regex terminal of the
same priority that matches its text (``NAME: /[a-z_]+/``). Its basic lexer then reads the
longest NAME-shaped word and retypes it SELECT only when the whole word spells the keyword;
its contextual lexer keeps the retyping but, where the parser expects SELECT and not NAME,
lets SELECT end inside a word ("selection" as SELECT + "ion", "FROMusers" as FROM + "users").
The engine lexes keywords as the basic lexer does, whatever the parser expects:

* where a keyword and its regex match the same text, the keyword alone is kept (the tag of the
  lexer state drops the regex);
* a keyword ends only at a word boundary: not before a byte that one of its regexes could read
  after the keyword's text (`word_continuations`), so it is never the start of a longer word.

Regexes stay free to match a keyword's text where the parser does not expect the keyword (as in
lark's contextual lexer); a grammar reserves words (SQL's, Python's) in its identifier regex.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from constrain.engine.grammar.ir import Lexeme
from constrain.engine.regex import ByteDFA

__all__ = ["mark_keywords", "word_continuations"]


def mark_keywords(lexemes: Mapping[str, Lexeme]) -> dict[str, Lexeme]:
    """`lexemes` with `Lexeme.keyword_of` set on every string lexeme that a regex lexeme of
    the same priority matches (the pairs lark's lexers treat as keyword and word)."""
    words = [lx for lx in lexemes.values() if not lx.literal and lx.special is None]
    out = dict(lexemes)
    for name, lexeme in lexemes.items():
        if not lexeme.literal or not words:
            continue
        owners = tuple(
            w.name for w in words if w.priority == lexeme.priority and w.dfa.matches(lexeme.pattern)
        )
        if owners:
            out[name] = dataclasses.replace(lexeme, keyword_of=owners)
    return out


def word_continuations(keyword: ByteDFA, words: Sequence[ByteDFA]) -> np.ndarray:
    """The bytes (bool array of 256) that some DFA of `words` can read right after a spelling
    of `keyword` it has read whole: the keyword may not end before them. For a case-insensitive
    keyword these are the bytes after any of its spellings."""
    out = np.zeros(256, dtype=bool)
    for word in words:
        seen: set[tuple[int, int]] = set()
        stack = [(keyword.start, word.start)]
        while stack:
            pair = stack.pop()
            if pair in seen:
                continue
            seen.add(pair)
            k, w = pair
            word_row = word.row(w)
            if keyword.accepting[k]:
                out |= word_row != 0
            keyword_row = keyword.row(k)
            for b in np.flatnonzero(keyword_row).tolist():
                w2 = int(word_row[b])
                if w2:
                    stack.append((int(keyword_row[b]), w2))
    return out
