"""CyclicReflex (Fan et al., ICLR 2026): a triangular wave on the logits of reflection tokens.

At generated position t, with period T and amplitude A, ``c = (t mod T) / T`` and the bias is
``A c / 0.25`` rising to +A at a quarter period, falling to -A at three quarters, and back to 0:
reflection words ("wait", "but", "alternatively", ...) are encouraged, then discouraged, in
cycles. The bias stops after an end-of-thinking marker. It is a pure function of the prefix, so
it needs no state and survives speculation and rollbacks.
"""

from __future__ import annotations

import torch

from constrain.errors import ConfigError
from constrain.processors.base import Processor, Step

__all__ = ["CyclicReflex", "triangle"]

DEFAULT_WORDS = ("wait", "but", "alternatively", "hmm", "however")


def triangle(position: int, amplitude: float, period: int) -> float:
    """The bias at `position`: 0 -> +A (quarter) -> -A (three quarters) -> 0 (period)."""
    c = (position % period) / period
    if c <= 0.25:
        return amplitude * c / 0.25
    if c <= 0.75:
        return amplitude - 2 * amplitude * (c - 0.25) / 0.5
    return -amplitude + amplitude * (c - 0.75) / 0.25


class CyclicReflex(Processor):
    """Add ``triangle(t)`` to the log-probabilities of the reflection tokens.

    Args:
        amplitude / period: the wave (period in generated tokens).
        words: reflection words; each is resolved through the tokenizer with its leading-space
            and capitalised variants, keeping those that are a single token.
        end_marker: after this text appears in the generated text, no more bias
            (``"</think>"``).
    """

    def __init__(
        self,
        amplitude: float = 3.0,
        period: int = 600,
        words=DEFAULT_WORDS,
        *,
        end_marker: str = "</think>",
    ):
        if period < 1:
            raise ConfigError(f"period must be >= 1, got {period}")
        self.amplitude, self.period = float(amplitude), int(period)
        self.words, self.end_marker = tuple(words), end_marker
        self._ids: dict[int, list[int]] = {}

    def token_ids(self, vocab) -> list[int]:
        """The single-token spellings of the words: as given, capitalised, with a leading
        space, both."""
        key = id(vocab)
        if key not in self._ids:
            by_bytes = {}
            for i in vocab.text_token_ids.tolist():
                by_bytes.setdefault(vocab.token_bytes(i), i)
            ids = set()
            for word in self.words:
                for variant in {word, word.capitalize(), " " + word, " " + word.capitalize()}:
                    token = by_bytes.get(variant.encode())
                    if token is not None:
                        ids.add(token)
            self._ids[key] = sorted(ids)
        return self._ids[key]

    def __call__(self, logprobs, term_rows, step: Step):
        if self.end_marker and self.end_marker.encode() in step.vocab.decode_bytes(step.prefix):
            return logprobs
        ids = self.token_ids(step.vocab)
        if not ids:
            return logprobs
        out = logprobs.clone()
        out[torch.tensor(ids, device=logprobs.device)] += triangle(
            step.position, self.amplitude, self.period
        )
        return out

    def __repr__(self) -> str:
        return f"CyclicReflex(amplitude={self.amplitude}, period={self.period})"
