"""Vocabulary slices: the fast path for near-full masks.

Inside a string-like lexeme (JSON string content, a SQL string, free text) almost every token is
allowed, and walking the whole trie to say so is the slowest mask an engine computes. The
vocabulary is therefore partitioned once, by regular languages of plain text, into *slices*
(tokens of whitespace only; tokens of up to 10, up to 30, or more characters that contain no
quote, apostrophe, backslash, control character or line separator) and the *rest*.

For a state, a slice is *admitted* when every string of the slice's language keeps the state
live (`Automaton.admits`, an exact product check of two DFAs, cached by the automaton). An
admitted slice contributes its precomputed bitmask as it is (an OR of words); the other tokens are walked
as before, in a trie without the admitted slices. Only the rest (tokens holding quotes, escapes or newlines, usually a few percent of the
vocabulary) is walked in string states, so those masks cost an array copy, not a walk.

The native core also takes the plain-text slices (the *text family*) together: by length in
characters where a state keeps every text string up to some length live and none longer (a
short bounded string), and whole below a first character after which every text string is
live (native/masks.hpp, native/trie.hpp).

The partition is computed per vocabulary and cached (weakly) by `slices_of`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from constrain.engine.bitmask import from_ids, n_words
from constrain.engine.regex import ByteDFA, compile_regex, is_empty_combination
from constrain.engine.vocab import TokenTrie, Vocabulary

__all__ = ["SLICE_PATTERNS", "Slice", "VocabularySlices", "admits", "slices_of"]

# plain text: no quote, apostrophe, backslash or control character, and no line or paragraph
# separator, which a JSON Schema pattern's `.` refuses (as it refuses \n)
_TEXT = r"""[^"'\\\x00-\x1f\x7f\u2028\u2029]"""
# A token belongs to the first pattern it matches (in full); the containment check uses the
# whole pattern, so later, longer slices are only admitted where long runs are allowed.
SLICE_PATTERNS = (r"[ \t\n\r]+", _TEXT + "{1,10}", _TEXT + "{1,30}", _TEXT + "+")


@dataclass(frozen=True, eq=False)
class Slice:
    """Tokens whose bytes are a string of `language` (and not of an earlier slice)."""

    pattern: str
    language: ByteDFA
    tokens: np.ndarray  # int64 token ids
    bitmask: np.ndarray  # the same tokens packed (`constrain.engine.bitmask`)
    token_bytes: np.ndarray  # uint8 (len(tokens), longest): each token's bytes, zero-padded
    lengths: np.ndarray  # int64: each token's length in bytes


class VocabularySlices:
    """A partition of a vocabulary's text tokens into slices and the rest.

    `trie_without(admitted)` is the trie of every token outside the admitted slices (the full
    trie when none is admitted, the rest when all are), built once per combination that occurs.
    """

    def __init__(self, vocab: Vocabulary, patterns: tuple[str, ...] = SLICE_PATTERNS):
        self._owner = np.full(vocab.size, -1, dtype=np.int64)
        slices = []
        for k, pattern in enumerate(patterns):
            language = compile_regex(pattern)
            matched = vocab.trie.tokens_read_by(
                language.transitions, language.start, language.accepting
            )
            matched = matched[self._owner[matched] < 0]
            self._owner[matched] = k
            tokens = np.sort(matched)
            texts = [vocab.texts[t] for t in tokens.tolist()]
            lengths = np.array([len(t) for t in texts], dtype=np.int64)
            matrix = np.zeros((len(texts), int(lengths.max(initial=0))), dtype=np.uint8)
            for row, text in enumerate(texts):
                matrix[row, : len(text)] = np.frombuffer(text, dtype=np.uint8)
            slices.append(Slice(pattern, language, tokens, from_ids(tokens, vocab.size),
                                matrix, lengths))  # fmt: skip
        self.slices: tuple[Slice, ...] = tuple(slices)
        # _within[i]: the slices whose language holds slice i's (a state admitting a language
        # admits its subsets)
        self._within = [
            [
                j
                for j, b in enumerate(slices)
                if j != i and is_empty_combination(a.language, b.language, "minus")
            ]
            for i, a in enumerate(slices)
        ]
        self._tries: dict[tuple[bool, ...], TokenTrie] = {(False,) * len(slices): vocab.trie}
        self.n_words = n_words(vocab.size)  # of a bitmask over the vocabulary
        self._native = None

    @property
    def native(self):
        """The slices copied into the native core (`native.Slices`, once per vocabulary) with the
        full trie, which its walks read through a per-node filter of the admitted slices."""
        if self._native is None:
            from constrain.engine.native import Slices

            languages = [
                (s.language.native_table(), s.language.start, s.language.longest() is None)
                for s in self.slices
            ]
            bitmasks = [s.bitmask for s in self.slices]
            full = self._tries[(False,) * len(self.slices)].native
            # the text family: slices of plain text, decided together by length where they can
            text = [i for i, s in enumerate(self.slices) if s.pattern.startswith(_TEXT)]
            self._native = Slices(languages, bitmasks, self._within, self.n_words, full, text)
        return self._native

    def admitted(self, admits) -> tuple[bool, ...]:
        """Which slices a state admits, given `admits(language) -> bool`; larger languages are
        asked first, so a language inside an admitted one is not asked at all (nor one
        containing a refused one)."""
        known: dict[int, bool] = {}
        for i in sorted(range(len(self.slices)), key=lambda i: len(self._within[i])):
            if i in known:
                continue
            known[i] = ok = admits(self.slices[i].language)
            for j in range(len(self.slices)):
                if ok and i in self._within[j]:  # j's language lies inside i's
                    known.setdefault(j, True)
                elif not ok and j in self._within[i]:  # j's language holds i's
                    known.setdefault(j, False)
        return tuple(known[i] for i in range(len(self.slices)))

    def trie_without(self, admitted: tuple[bool, ...]) -> TokenTrie:
        trie = self._tries.get(admitted)
        if trie is None:
            walked = np.array([not a for a in admitted] + [True])  # index -1: the rest
            full = self._tries[(False,) * len(self.slices)]
            trie = self._tries[admitted] = full.restricted(walked[self._owner])
        return trie


def admits(table, state: int, language: ByteDFA, max_pairs: int | None = None) -> bool:
    """Whether every string of `language` (and each prefix) read from `state` in the DFA with
    transition `table` (0 = dead; an array, or a function from states to their rows) stays in
    a non-dead state: a breadth-first search of the product, one level of pairs at a time.
    Past `max_pairs` pairs the answer is False, "not shown": the slice's tokens are then walked
    one by one, which is exact, only slower."""
    rows = table if callable(table) else table.__getitem__
    width = np.int64(2**32)
    frontier = np.array([language.start * width + state], dtype=np.int64)
    seen = set(frontier.tolist())
    while frontier.size:
        r, q = np.divmod(frontier, width)
        lang_next, next_state = language.rows(r), rows(q)
        read = lang_next != 0
        if (read & (next_state == 0)).any():
            return False
        pairs = np.unique(lang_next[read].astype(np.int64) * width + next_state[read])
        fresh = [p for p in pairs.tolist() if p not in seen]
        seen.update(fresh)
        if max_pairs is not None and len(seen) > max_pairs:
            return False
        frontier = np.array(fresh, dtype=np.int64)
    return True


def slices_of(vocab: Vocabulary) -> VocabularySlices:
    """The slices of `vocab` (built once, kept by the vocabulary)."""
    return vocab.derived.get_or_build(("slices",), lambda: VocabularySlices(vocab))
