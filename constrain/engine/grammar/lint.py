"""Compile-time detection of terminals that longest-match lexing can never end.

Under longest match a lexeme ends only at a byte no allowed lexeme can consume (and a keyword
only at a word boundary: not before a byte that continues a word). If terminal A is always
followed by terminals whose first bytes A itself can consume at every point where A could
end (``NAME NAME`` without a separator: the second NAME's letters extend the first), then once A
has started the text can never be completed, yet every byte keeps the lexer alive: a sampler
would run to its token limit. `check_lexeme_ends` rejects such grammars.

The check looks at every occurrence of a terminal in a rule: what may follow it there is the
FIRST set of the rest of the rule, plus the FOLLOW set of the rule when the rest is nullable,
plus the ignored terminals. A trap that exists only through a particular chain of rules whose
FOLLOW set also holds a harmless terminal is not detected (FOLLOW sets merge contexts).
"""

from __future__ import annotations

import numpy as np

from constrain.engine.grammar.ir import GrammarIR, derivable
from constrain.engine.grammar.keywords import word_continuations
from constrain.errors import GrammarError

__all__ = ["check_lexeme_ends"]

_END = "$end"


def _first_follow(ir: GrammarIR) -> tuple[dict[str, set[str]], set[str], dict[str, set[str]]]:
    """FIRST sets, nullable symbols and FOLLOW sets (`_END`: the text may end there).

    Both are inclusions between sets (FIRST(sym) <= FIRST(lhs) where sym may start lhs; FOLLOW
    along the rules), solved by propagating along those edges from a worklist."""
    pairs = ir.rules
    nullable = derivable(pairs, ()) - set(ir.lexemes)
    first: dict[str, set[str]] = {t: {t} for t in ir.lexemes}
    starts: dict[str, set[str]] = {}  # sym -> the left-hand sides it may start
    for lhs, rhs in pairs:
        first.setdefault(lhs, set())
        for sym in rhs:
            starts.setdefault(sym, set()).add(lhs)
            if sym not in nullable:
                break
    _propagate(first, starts)
    follow: dict[str, set[str]] = {sym: set() for sym in first}
    follow[ir.start].add(_END)
    tails: dict[str, set[str]] = {}  # lhs -> symbols that may end its rules
    for lhs, rhs in pairs:
        trailer: set[str] = set()
        ends = True  # the rest of the rule after `sym` may be empty
        for sym in reversed(rhs):
            follow[sym] |= trailer
            if ends:
                tails.setdefault(lhs, set()).add(sym)
            ends = ends and sym in nullable
            trailer = (trailer | first[sym]) if sym in nullable else set(first[sym])
    _propagate(follow, tails)
    return first, nullable, follow


def _propagate(sets: dict[str, set[str]], edges: dict[str, set[str]]) -> None:
    """Grow `sets` until ``sets[a] <= sets[b]`` for every edge a -> b."""
    todo = list(sets)
    queued = set(todo)
    while todo:
        a = todo.pop()
        queued.discard(a)
        for b in edges.get(a, ()):
            if not sets[a] <= sets[b]:
                sets[b] |= sets[a]
                if b not in queued:
                    queued.add(b)
                    todo.append(b)


def check_lexeme_ends(ir: GrammarIR) -> None:
    """Raise GrammarError naming a terminal that longest-match lexing can never end."""
    first, nullable, follow = _first_follow(ir)
    checked: set[tuple[str, frozenset[str]]] = set()
    for lhs, rhs in ir.rules:
        for i, name in enumerate(rhs):
            if name not in ir.lexemes:
                continue
            after = set(ir.ignore)  # what may come right after this occurrence
            for sym in rhs[i + 1 :]:
                after |= first[sym]
                if sym not in nullable:
                    break
            else:
                after |= follow[lhs]
            key = (name, frozenset(after))
            if key not in checked:
                checked.add(key)
                _check_occurrence(ir, name, after)


def _check_occurrence(ir: GrammarIR, name: str, after: set[str]) -> None:
    lexeme = ir.lexemes[name]
    if lexeme.special is not None or _END in after or not after:
        return
    if any(ir.lexemes[b].special is not None for b in after):
        return
    # per state where the lexeme could end: the bytes that keep it going (for a keyword, also
    # those that would continue a word of its regexes: it cannot end before them either)
    goes_on = lexeme.dfa.rows(np.flatnonzero(lexeme.dfa.accepting)) != 0
    words = [ir.lexemes[n].dfa for n in lexeme.keyword_of if n in ir.lexemes]
    if words:
        goes_on |= word_continuations(lexeme.dfa, words)
    if all(goes_on[:, _first_bytes(ir.lexemes[b].dfa)].all() for b in after):
        nxt = ", ".join(sorted(after))
        raise GrammarError(
            f"terminal {name} can never end: everything that may follow it ({nxt}) starts with a "
            f"character {name} itself can consume{' (or that continues its word)' if words else ''}, "
            f"so longest-match lexing never splits them; add "
            f"a separator or an %ignore'd whitespace terminal between them"
        )


def _first_bytes(dfa) -> np.ndarray:
    return np.flatnonzero(dfa.row(dfa.start))
