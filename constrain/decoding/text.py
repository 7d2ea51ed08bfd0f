"""`DecodedText`: a sequence's text, decoded once per token as the tokens arrive.

Streaming, stop strings and the sections of a served answer read a generation's text after
every step. Decoding all its tokens each time costs O(n) per step, O(n^2) per answer; here each
token is decoded once, with an incremental UTF-8 decoder (a token that ends inside a character
adds nothing, and the token that completes it adds the whole character), so the text only ever
grows by whole characters. `Sequence` appends and rolls back its tokens here, in the same places
as its matcher and streams.
"""

from __future__ import annotations

import bisect
import codecs

from constrain.engine.vocab import Vocabulary

__all__ = ["DecodedText"]

_Decoder = codecs.getincrementaldecoder("utf-8")


class DecodedText:
    """The text of a token sequence: `pieces[i]` is what token i adds (whole characters),
    `ends[i]` the characters up to and including it."""

    __slots__ = ("vocab", "pieces", "ends", "_decoder", "_states")

    def __init__(self, vocab: Vocabulary):
        self.vocab = vocab
        self.pieces: list[str] = []
        self.ends: list[int] = []
        self._decoder = _Decoder(errors="replace")
        self._states: list[tuple[bytes, int]] = []  # the decoder's state after each token

    def append(self, token: int) -> None:
        piece = self._decoder.decode(self.vocab.token_bytes(token) or b"")
        self.pieces.append(piece)
        self.ends.append((self.ends[-1] if self.ends else 0) + len(piece))
        self._states.append(self._decoder.getstate())

    def truncate(self, n_tokens: int) -> None:
        """Keep the text of the first `n_tokens` tokens."""
        del self.pieces[n_tokens:], self.ends[n_tokens:], self._states[n_tokens:]
        self._decoder.setstate(self._states[-1] if self._states else (b"", 0))

    def copy(self) -> DecodedText:
        twin = DecodedText(self.vocab)
        twin.pieces, twin.ends, twin._states = list(self.pieces), list(self.ends), list(self._states)
        twin._decoder.setstate(self._decoder.getstate())
        return twin

    @property
    def chars(self) -> int:
        """Characters so far."""
        return self.ends[-1] if self.ends else 0

    def offset(self, token: int) -> int:
        """Characters before token index `token` (0 <= token <= number of tokens)."""
        return self.ends[token - 1] if token > 0 else 0

    def text(self, start: int = 0, end: int | None = None) -> str:
        """The text of tokens `start` to `end` (indices, as a slice)."""
        return "".join(self.pieces[start:end])

    def between(self, start: int, end: int | None = None) -> str:
        """The text from character `start` to character `end` (None: to the end)."""
        first = bisect.bisect_right(self.ends, start)  # the token holding character `start`
        text = "".join(self.pieces[first:])
        base = self.offset(first)
        return text[start - base : None if end is None else end - base]

    def find(self, needle: str, start: int) -> int:
        """The character offset of `needle`'s first occurrence at or after `start`, or -1."""
        at = self.between(start).find(needle)
        return -1 if at < 0 else start + at
