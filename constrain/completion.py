"""Shortest completions: the fewest bytes that turn a prefix into a sentence of the language.

A token budget (``max_tokens``) cuts a generation wherever it happens to be, and a cut JSON
document is invalid. Knowing, for an automaton state, the shortest text that completes it lets a
`Matcher` with a budget allow only tokens after which a completion still fits in the tokens
left, so the text is complete when the budget runs out (see `Matcher`).

The search is a breadth-first walk over bytes through the `Automaton` interface, so it works
for every grammar; states are hashable and position-free, so results are cached per state.
"""

from __future__ import annotations

from collections.abc import Hashable

from constrain.automaton import Automaton

__all__ = ["shortest_completion"]

MAX_SEARCH_STATES = 20_000  # states one search may visit before it gives up (answers None)


def shortest_completion(automaton: Automaton, state: Hashable, limit: int) -> bytes | None:
    """The shortest bytes taking `state` to an accepting state, if some have at most `limit`
    bytes (the smallest byte first among equally short ones); None if none does, or when the
    search visits more than `MAX_SEARCH_STATES` states (deep grammars, huge `limit`)."""
    if automaton.accepting(state):
        return b""
    parents: dict[Hashable, tuple[Hashable, int] | None] = {state: None}
    frontier = [state]
    for _ in range(limit):
        following = []
        for here in frontier:
            for byte in automaton.expected_bytes(here):
                nxt = automaton.step(here, bytes((byte,)))
                if nxt is None or nxt in parents:
                    continue
                parents[nxt] = (here, byte)
                if automaton.accepting(nxt):
                    return _path(parents, nxt)
                following.append(nxt)
                if len(parents) > MAX_SEARCH_STATES:
                    return None
        if not following:
            return None
        frontier = following
    return None


def _path(parents: dict, end: Hashable) -> bytes:
    out = bytearray()
    link = parents[end]
    while link is not None:
        here, byte = link
        out.append(byte)
        link = parents[here]
    return bytes(reversed(out))
