"""The grammar IR: the single target of every front end (Lark, JSON Schema, regexes, choices).

A `GrammarIR` is a context-free grammar whose terminals are *lexemes*:

* a `Lexeme` is a regex or a literal string, compiled lazily to a byte DFA by the regex layer,
  with a priority used when two lexemes match the same text; or a special token (such as
  ``<|im_end|>``) that only a token id of the vocabulary can produce;
* a `Rule` rewrites a nonterminal into a sequence of symbols (nonterminal or lexeme names);
  several rules with one left-hand side are its alternatives;
* `ignore` lists lexemes that may appear between any two lexemes (Lark's ``%ignore``).

`GrammarIR.validated()` is where bad grammars are stopped: unknown symbols are named, lexemes
that match the empty string are rejected, rules that can never derive text are pruned, and an
empty language is an error, so a sampler never starts on a grammar it cannot finish.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

import numpy as np

from constrain.engine.regex import compile_regex, dfa_from_byte_classes, dfa_from_strings
from constrain.errors import GrammarError, RegexError
from constrain.fuel import burn

__all__ = ["GrammarIR", "Lexeme", "LexemeDFA", "Rule", "repeat", "token_id_reference"]


class LexemeDFA(Protocol):
    """What the engine reads of a lexeme's automaton: a dense `ByteDFA`, or an `EscapedDFA`
    (`constrain.engine.regex.escapes`) whose states are built as they are read. State 0 is
    dead and every other state live. The Lark and GBNF front ends, whose lexemes are always
    `ByteDFA`s, also read their dense tables."""

    start: int
    pattern: str

    def is_empty(self) -> bool: ...

    def accepts(self, state: int) -> bool: ...

    def byte_classes(self) -> np.ndarray: ...

    def live_classes(self, state: int) -> list[tuple[int, int]]: ...

    def rows(self, states: np.ndarray) -> np.ndarray: ...

    def walk(self, state: int, data: bytes) -> int: ...

    def matches(self, data: bytes | str) -> bool: ...

    def shortest_from(self, state: int, max_bytes: int | None = None) -> bytes | None: ...

    @property
    def nbytes(self) -> int: ...


@dataclass(frozen=True)
class Lexeme:
    """A terminal of the grammar.

    Attributes:
        name: unique name (Lark's terminal name).
        pattern: the regex (full-match semantics), or the literal text when `literal` is set.
        literal: `pattern` is plain text, not a regex.
        priority: among lexemes matching the same longest text, only the highest-priority ones
            are kept.
        special: the text of a special token (e.g. ``<|im_end|>``) this terminal stands for, or
            ``<[id]>`` for the token with that id (see `token_id_reference`); such a lexeme
            matches no bytes, only that token id, which must be a special token of the
            vocabulary it is bound to.
        keyword_of: for a literal, the regex lexemes it is a keyword of (they match its text
            too): it wins over them on that text and ends only at a word boundary, where none of
            them could read on (see `constrain.engine.grammar.keywords`).
    """

    name: str
    pattern: str = ""
    literal: bool = False
    ignore_case: bool = False  # for ASCII literals: match any case
    priority: int = 0
    special: str | None = None
    keyword_of: tuple[str, ...] = ()
    automaton: LexemeDFA | None = field(default=None, compare=False, repr=False)  # prebuilt

    @cached_property
    def dfa(self) -> LexemeDFA:
        if self.automaton is not None:
            return self.automaton
        if self.special is not None:
            raise GrammarError(f"special-token terminal {self.name} has no byte automaton")
        try:
            if self.literal and self.ignore_case:
                return dfa_from_byte_classes(
                    [{ord(c.lower()), ord(c.upper())} for c in self.pattern], self.pattern
                )
            return dfa_from_strings([self.pattern]) if self.literal else compile_regex(self.pattern)
        except RegexError as exc:
            raise GrammarError(f"terminal {self.name}: {exc}") from exc

    @property
    def built_dfa(self) -> LexemeDFA | None:
        """The automaton if it was built already (None: not built; asking does not build)."""
        return self.__dict__.get("dfa", self.automaton)


_TOKEN_ID_REFERENCE = re.compile(r"<\[([0-9]{1,12})\]>")


def token_id_reference(special: str) -> int | None:
    """The token id a special lexeme names as ``<[id]>`` (GBNF's ``<[1000]>``), else None: the
    text is a special token's own text, looked up in the vocabulary by that text."""
    found = _TOKEN_ID_REFERENCE.fullmatch(special)
    return int(found.group(1)) if found else None


# ``(lhs, rhs)``: one alternative of the nonterminal `lhs` (an empty rhs derives ""). A plain
# tuple: grammars compiled from large schemas hold hundreds of thousands of rules, and the
# collector untracks a plain tuple of strings (never a named one), so they cost no full
# collection any time (tens of milliseconds inside whichever mask it interrupts)
Rule = tuple[str, tuple[str, ...]]


@dataclass
class GrammarIR:
    """A context-free grammar over lexemes (see the module docstring)."""

    start: str
    rules: Sequence[Rule]  # kept as a tuple (see `Rule`)
    lexemes: dict[str, Lexeme]
    ignore: list[str] = field(default_factory=list)
    source: str = ""

    def __post_init__(self):
        # a tuple of untracked tuples is untracked too: a list of 40k rules would be walked
        # by every full collection
        self.rules = tuple(self.rules)

    def nonterminals(self) -> set[str]:
        return {lhs for lhs, _ in self.rules}

    def validated(self) -> GrammarIR:
        """A copy with unknown symbols reported, useless rules pruned and emptiness checked.

        Raises:
            GrammarError: an unknown symbol (named, with the rule using it), a lexeme matching
                the empty string or nothing at all, or an empty language.
        """
        nonterminals = self.nonterminals()
        if self.start not in nonterminals:
            raise GrammarError(f"the start rule {self.start!r} is not defined")
        used = set()
        for _, rhs in self.rules:  # the active fuel: a unit per rule and symbol, as they go
            burn(1 + len(rhs))  # (so a long pass still gives way, see `Fuel.pause`)
            used.update(rhs)
        unknown = used - nonterminals - self.lexemes.keys()
        if unknown:
            for lhs, rhs in self.rules:
                for sym in rhs:
                    if sym in unknown:
                        kind = "terminal" if sym.isupper() else "rule"
                        raise GrammarError(f"unknown {kind} {sym!r} used in rule {lhs!r}")
        for name in self.ignore:
            if name not in self.lexemes:
                raise GrammarError(f"%ignore names unknown terminal {name!r}")
        used |= set(self.ignore)
        live_lexemes = set()
        for name in used & set(self.lexemes):
            lexeme = self.lexemes[name]
            if lexeme.special is not None:
                live_lexemes.add(name)
                continue
            dfa = lexeme.dfa
            if dfa.is_empty():
                continue  # matches nothing: rules using it are pruned below
            if dfa.accepts(dfa.start):
                raise GrammarError(
                    f"terminal {name} matches the empty string; make it optional in the rules "
                    f"that use it instead (e.g. X? or X*)"
                )
            live_lexemes.add(name)
        productive = derivable(self.rules, live_lexemes)
        if self.start not in productive:
            raise GrammarError(
                f"the grammar's language is empty: rule {self.start!r} derives no finite text"
            )
        rules: list[Rule] = []
        by_lhs: dict[str, list[Rule]] = {}
        for r in self.rules:
            if r[0] in productive and productive.issuperset(r[1]):
                rules.append(r)
                by_lhs.setdefault(r[0], []).append(r)
        reachable, stack = {self.start}, [self.start]
        while stack:
            burn(1)
            for _, rhs in by_lhs.get(stack.pop(), []):
                for s in rhs:
                    if s not in reachable:
                        reachable.add(s)
                        stack.append(s)
        rules = [r for r in rules if r[0] in reachable]
        ignore = [i for i in self.ignore if i in live_lexemes]
        lexemes = {n: lx for n, lx in self.lexemes.items() if n in reachable or n in ignore}
        return GrammarIR(self.start, rules, lexemes, ignore, self.source)


def derivable(rules: Iterable[tuple[str, Sequence[str]]], given: Iterable[str]) -> set[str]:
    """The symbols of `given` and every left-hand side with a rule whose right-hand symbols
    are all derivable (productive symbols from the live lexemes; nullable ones from nothing).
    Linear in the size of the grammar: each rule counts its symbols not derived yet."""
    done = set(given)
    rules = list(rules)
    missing = []
    users: dict[str, list[int]] = {}
    ready = []
    for i, (lhs, rhs) in enumerate(rules):
        burn(1)  # the active fuel: a unit per rule (and per symbol derived, below)
        count = 0
        for sym in rhs:
            if sym not in done:
                count += 1
                users.setdefault(sym, []).append(i)
        missing.append(count)
        if not count and lhs not in done:
            done.add(lhs)
            ready.append(lhs)
    while ready:
        burn(1)
        for i in users.pop(ready.pop(), ()):
            missing[i] -= 1
            lhs = rules[i][0]
            if not missing[i] and lhs not in done:
                done.add(lhs)
                ready.append(lhs)
    return done


def repeat(rules: list[Rule], name: str, item: Sequence[str], low: int, high: int | None) -> str:
    """Add rules for `name` deriving `item` repeated low..high times (high None: unbounded).

    Unbounded repetition is a left-recursive list. Bounded repetition is `low` copies, then
    any count j of 0..high-low more, each j its own left-nested chain ``exactly_j ->
    exactly_j-1 item`` (size linear in `high - low`): reading the copies one by one, an Earley
    parser holds one live item per count rather than a nesting as deep as the count (a
    right-nested chain of optional tails completes its whole depth after every copy, which is
    quadratic in the count). Returns `name`.
    """
    item = tuple(item)
    if high is not None and high < low:
        raise GrammarError(f"repetition of {name} has minimum {low} above maximum {high}")
    if high is None:
        tail = f"{name}__more"
        rules.append((tail, ()))
        rules.append((tail, (tail, *item)))
        rules.append((name, item * low + (tail,)))
        return name
    if high == low:
        rules.append((name, item * low))
        return name
    more = f"{name}__upto{high - low}"  # 0..high-low copies
    rules.append((more, ()))
    prev: tuple[str, ...] = ()
    for j in range(1, high - low + 1):
        exactly = f"{name}__exactly{j}"
        rules.append((exactly, prev + item))
        rules.append((more, (exactly,)))
        prev = (exactly,)
    rules.append((name, item * low + (more,)))
    return name
