"""Random texts of a grammar: derivations expanded at random (for tests and benchmarks).

`random_text` expands the start rule choosing alternatives uniformly until a depth limit, then
along the shortest derivations; lexemes are random walks of their byte DFAs (preferring
printable ASCII) that head for acceptance once long enough. With ``%ignore``d lexemes, a sample of
one separates every two lexemes, so longest-match lexing splits the text as it was derived.
"""

from __future__ import annotations

import numpy as np

from constrain.engine.grammar.ir import GrammarIR, LexemeDFA
from constrain.engine.regex import ByteDFA
from constrain.engine.regex.counted import CountedDFA
from constrain.engine.regex.escapes import EscapedDFA

__all__ = ["random_lexeme", "random_text"]

_PRINTABLE = np.array([0x20 <= b < 0x7F for b in range(256)])


def _distance_to_accept(dfa: ByteDFA) -> np.ndarray:
    n = dfa.n_states
    dist = np.full(n, np.iinfo(np.int64).max // 2, dtype=np.int64)
    dist[dfa.accepting] = 0
    table = dfa.table  # per byte class: the same minimum
    for _ in range(n):
        best = dist[table].min(axis=1) + 1
        best[0] = dist[0]
        new = np.minimum(dist, best)
        if (new == dist).all():
            break
        dist = new
    return dist


def random_lexeme(dfa: LexemeDFA, rng: np.random.Generator, soft_max: int = 12) -> bytes:
    """A random string of the DFA's language (length about `soft_max` at most, when possible;
    of an `EscapedDFA`, a text in the canonical encoding)."""
    if isinstance(dfa, EscapedDFA):
        dfa = dfa.base
    if isinstance(dfa, CountedDFA):
        return _random_counted(dfa, rng, soft_max)
    dist = _distance_to_accept(dfa)
    state, out = dfa.start, bytearray()
    while True:
        row = dfa.row(state)
        live = np.flatnonzero(row)
        if dfa.accepting[state] and (not len(live) or len(out) >= soft_max or rng.random() < 0.25):
            return bytes(out)
        if len(out) >= soft_max:  # head for acceptance
            live = live[dist[row[live]] < dist[state]]
        else:
            printable = live[_PRINTABLE[live]]
            if len(printable) and rng.random() < 0.9:
                live = printable
        byte = int(rng.choice(live))
        out.append(byte)
        state = int(row[byte])


def _random_counted(dfa: CountedDFA, rng: np.random.Generator, soft_max: int) -> bytes:
    """A random string of a `CountedDFA`: random classes for `soft_max` bytes, then the
    shortest completion (every state it builds is live)."""
    classes = dfa.byte_classes()
    state, out = dfa.start, bytearray()
    while len(out) < soft_max and not (dfa.accepts(state) and rng.random() < 0.25):
        live = dfa.live_classes(state)
        if not live:
            break
        c, state = live[int(rng.integers(len(live)))]
        out.append(int(rng.choice(np.flatnonzero(classes == c))))
    return bytes(out) + dfa.shortest_from(state)


def random_text(ir: GrammarIR, rng: np.random.Generator, max_depth: int = 8) -> str:
    """A random sentence of the grammar (a validated IR: every rule is productive)."""
    by_lhs: dict[str, list[tuple[str, ...]]] = {}
    for rule in ir.rules:
        by_lhs.setdefault(rule[0], []).append(rule[1])
    height = {name: 0 for name in ir.lexemes}
    changed = True
    while changed:
        changed = False
        for lhs, alts in by_lhs.items():
            h = min(
                (
                    1 + max((height[s] for s in rhs), default=0)
                    for rhs in alts
                    if all(s in height for s in rhs)
                ),
                default=None,
            )
            if h is not None and height.get(lhs, h + 1) > h:
                height[lhs] = h
                changed = True
    lexemes: list[bytes] = []

    def expand(symbol: str, depth: int) -> None:
        if symbol in ir.lexemes:
            lexemes.append(random_lexeme(ir.lexemes[symbol].dfa, rng))
            return
        alts = by_lhs[symbol]
        if depth >= max_depth:
            best = min(max((height[s] for s in rhs), default=0) for rhs in alts)
            alts = [rhs for rhs in alts if max((height[s] for s in rhs), default=0) == best]
        for s in alts[int(rng.integers(len(alts)))]:
            expand(s, depth + 1)

    expand(ir.start, 0)
    separator = b""
    if ir.ignore:
        separator = random_lexeme(ir.lexemes[ir.ignore[0]].dfa, rng, soft_max=1)
    return separator.join(lexemes).decode("utf-8")
