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
from constrain.fuel import burn

__all__ = ["check_lexeme_ends"]

# what may come next, as the bits of an int: the first bytes (0-255) of the lexemes that may,
# a special token among them, or the end of the text
_BYTES = (1 << 256) - 1
_SPECIAL = 1 << 256
_END = 1 << 257


def _first_follow(ir: GrammarIR) -> tuple[dict[str, int], set[str], dict[str, int]]:
    """FIRST and FOLLOW sets (as `_BYTES` / `_SPECIAL` / `_END` bits) and the nullable
    symbols: inclusions between sets (FIRST(sym) <= FIRST(lhs) where sym may start lhs;
    FOLLOW along the rules), solved by propagating along those edges from a worklist. Bits
    keep each union a few machine words, so a chain of n rules costs n, not n^2."""
    pairs = ir.rules
    nullable = derivable(pairs, ()) - set(ir.lexemes)
    first: dict[str, int] = {name: _first_bits(lexeme) for name, lexeme in ir.lexemes.items()}
    starts: dict[str, set[str]] = {}  # sym -> the left-hand sides it may start
    for lhs, rhs in pairs:
        burn(1 + len(rhs) // 4)
        first.setdefault(lhs, 0)
        for sym in rhs:
            starts.setdefault(sym, set()).add(lhs)
            if sym not in nullable:
                break
    _propagate(first, starts)
    follow: dict[str, int] = dict.fromkeys(first, 0)
    follow[ir.start] |= _END
    tails: dict[str, set[str]] = {}  # lhs -> symbols that may end its rules
    for lhs, rhs in pairs:
        burn(1 + len(rhs) // 4)
        trailer, ends = 0, True  # the rest of the rule after `sym` may be empty
        for sym in reversed(rhs):
            follow[sym] |= trailer
            if ends:
                tails.setdefault(lhs, set()).add(sym)
            ends = ends and sym in nullable
            trailer = (trailer | first[sym]) if sym in nullable else first[sym]
    _propagate(follow, tails)
    return first, nullable, follow


def _first_bits(lexeme) -> int:
    if lexeme.special is not None:
        return _SPECIAL
    row = lexeme.dfa.row(lexeme.dfa.start) != 0
    return int.from_bytes(np.packbits(row, bitorder="little").tobytes(), "little")


def _propagate(sets: dict[str, int], edges: dict[str, set[str]]) -> None:
    """Grow `sets` until ``sets[a] <= sets[b]`` for every edge a -> b."""
    todo = list(sets)
    queued = set(todo)
    while todo:
        a = todo.pop()
        queued.discard(a)
        targets = edges.get(a, ())
        burn(1 + len(targets) // 4)
        for b in targets:
            if sets[a] & ~sets[b]:
                sets[b] |= sets[a]
                if b not in queued:
                    queued.add(b)
                    todo.append(b)


def check_lexeme_ends(ir: GrammarIR) -> None:
    """Raise GrammarError naming a terminal that longest-match lexing can never end."""
    first, nullable, follow = _first_follow(ir)
    ignored = 0
    for name in ir.ignore:
        ignored |= first[name]
    checked: set[tuple[str, int]] = set()
    for lhs, rhs in ir.rules:
        burn(1 + len(rhs) // 4)
        for i, name in enumerate(rhs):
            if name not in ir.lexemes:
                continue
            after = ignored  # what may come right after this occurrence
            for sym in rhs[i + 1 :]:
                after |= first[sym]
                if sym not in nullable:
                    break
            else:
                after |= follow[lhs]
            if (name, after) not in checked:
                checked.add((name, after))
                _check_occurrence(ir, name, after)


def _check_occurrence(ir: GrammarIR, name: str, after: int) -> None:
    lexeme = ir.lexemes[name]
    if lexeme.special is not None or after & (_END | _SPECIAL) or not after:
        return
    # per state where the lexeme could end: the bytes that keep it going (for a keyword, also
    # those that would continue a word of its regexes: it cannot end before them either)
    goes_on = lexeme.dfa.rows(np.flatnonzero(lexeme.dfa.accepting)) != 0
    words = [ir.lexemes[n].dfa for n in lexeme.keyword_of if n in ir.lexemes]
    if words:
        goes_on |= word_continuations(lexeme.dfa, words)
    always = goes_on.all(axis=0)  # bytes the lexeme reads on wherever it could end
    next_bytes = np.array([after >> b & 1 for b in range(256)], dtype=bool)
    if not (next_bytes & ~always).any():
        following = [n for n, lx in ir.lexemes.items() if _first_bits(lx) & after]
        nxt = ", ".join(sorted(following)[:8]) + (", ..." if len(following) > 8 else "")
        raise GrammarError(
            f"terminal {name} can never end: everything that may follow it ({nxt}) starts with a "
            f"character {name} itself can consume{' (or that continues its word)' if words else ''}, "
            f"so longest-match lexing never splits them; add "
            f"a separator or an %ignore'd whitespace terminal between them"
        )
