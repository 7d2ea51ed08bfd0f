"""Exact toy language models over small vocabularies, for tests that enumerate distributions.

A `ToyLM` is a `LanguageModel` like `TransformersLM` (start / append / logprobs / score /
fork / rollback), but its next-token distribution is an explicit function of the tokens
generated so far, so every probability a sampler should produce can be computed exactly:

    lm = ToyLM(["a", "b", "ab"], lambda ctx: [0.3, 0.3, 0.2, 0.2])   # last entry: EOS
    lm.sequence_logprob([0, 1])   # log P(a b EOS)

Token ids: the text tokens in the order given, then EOS, then a BOS that starts every prompt
(it has no text and probability 0).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import torch

from constrain.engine.vocab import Vocabulary

if TYPE_CHECKING:
    from constrain.models.base import LanguageModel

__all__ = ["ToyLM", "ToyStream"]

NextProbs = Callable[[tuple[int, ...]], Sequence[float]]


class ToyStream:
    """One sequence of a `ToyLM`: its tokens (the prompt first)."""

    __slots__ = ("tokens", "prompt_len")

    def __init__(self, tokens: list[int]):
        self.tokens = tokens
        self.prompt_len = len(tokens)

    @property
    def generated(self) -> list[int]:
        """Tokens appended after the prompt."""
        return self.tokens[self.prompt_len :]

    def __len__(self) -> int:
        return len(self.tokens)


class ToyLM:
    """A language model given by an explicit next-token table.

    Args:
        tokens: the text tokens (str or bytes), ids 0..n-1.
        next_probs: the distribution over the n text tokens and EOS (n + 1 probabilities,
            summing to 1) after a tuple of generated token ids; or a mapping from such tuples
            to distributions, with `default` for the contexts it does not list.
        default: the distribution for contexts a mapping does not list.
        name: a display name.
        conditional: `next_probs` also receives the prompt's ids (second argument); a
            prompt text is encoded as one BOS per character plus one, so prompts of
            different lengths condition differently (enough for CFG-style tests).
    """

    device = torch.device("cpu")
    has_chat_template = False
    context_length = None  # streams of any length

    def __init__(
        self,
        tokens: Sequence[str | bytes],
        next_probs: NextProbs | Mapping[tuple[int, ...], Sequence[float]],
        *,
        default: Sequence[float] | None = None,
        name: str = "toy",
        conditional: bool = False,
    ):
        self.conditional = conditional
        if isinstance(next_probs, Mapping):
            table = {tuple(k): v for k, v in next_probs.items()}
            if default is None:
                missing = "every context must be listed when no default is given"
                self._next = lambda ctx: table[ctx] if ctx in table else _raise(missing, ctx)
            else:
                self._next = lambda ctx: table.get(ctx, default)
        else:
            self._next = next_probs
        data = [t.encode() if isinstance(t, str) else bytes(t) for t in tokens]
        self.n_text = len(data)
        self.eos_id = self.n_text
        self.bos_id = self.n_text + 1
        self.vocab = Vocabulary([*data, None, None], [self.eos_id], name=name)
        self.name = name
        self.n_forwards = 0  # calls that computed at least one distribution (like a forward)

    @classmethod
    def uniform(cls, tokens: Sequence[str | bytes], p_eos: float, **kw) -> ToyLM:
        """Every text token equally likely, EOS with probability `p_eos`, at every step."""
        n = len(tokens)
        row = [(1 - p_eos) / n] * n + [p_eos]
        return cls(tokens, lambda ctx: row, **kw)

    # -- the exact distribution ------------------------------------------------------------------

    def next_logprobs(self, context: Sequence[int], prompt_ids: Sequence[int] = ()) -> torch.Tensor:
        """Log-probabilities over the whole vocabulary (BOS gets -inf) after `context`."""
        raw = (
            self._next(tuple(context), tuple(prompt_ids))
            if self.conditional
            else self._next(tuple(context))
        )
        probs = [float(p) for p in raw]
        if len(probs) != self.n_text + 1:
            raise ValueError(
                f"next_probs gave {len(probs)} probabilities after {tuple(context)}; "
                f"expected {self.n_text + 1} (the text tokens and EOS)"
            )
        if abs(sum(probs) - 1.0) > 1e-6 or min(probs) < 0:
            raise ValueError(f"next_probs after {tuple(context)} is not a distribution: {probs}")
        row = [math.log(p) if p > 0 else -math.inf for p in probs] + [-math.inf]
        return torch.tensor(row, dtype=torch.float64)

    def sequence_logprob(self, tokens: Sequence[int], eos: bool = True) -> float:
        """log P(tokens [EOS]) under the model, from an empty context."""
        total = 0.0
        for i, t in enumerate([*tokens, self.eos_id] if eos else tokens):
            total += float(self.next_logprobs(tokens[:i])[t])
        return total

    # -- the stream interface --------------------------------------------------------------------

    def encode_prompt(
        self,
        prompt,
        *,
        chat: bool | None = None,
        system: str | None = None,
        special_tokens: bool = False,
    ):
        """A single BOS (a conditional toy: one BOS per character of the prompt, plus one)."""
        if self.conditional and isinstance(prompt, str):
            return [self.bos_id] * (1 + len(prompt))
        return [self.bos_id]

    def start(self, prompt_ids: Sequence[int], *, prefill: bool = True) -> ToyStream:
        if len(prompt_ids) == 0:
            raise ValueError("a stream needs at least one prompt token")
        return ToyStream(list(prompt_ids))

    def prefill(self, stream: ToyStream, max_tokens: int | None = None) -> int:
        return 0  # a table has nothing to feed

    def append(self, stream: ToyStream, token: int) -> None:
        stream.tokens.append(int(token))

    def logprobs(self, streams: Sequence[ToyStream]) -> torch.Tensor:
        self.n_forwards += 1
        return torch.stack(
            [self.next_logprobs(s.generated, s.tokens[: s.prompt_len]) for s in streams]
        )

    def score(self, stream: ToyStream, tokens: Sequence[int]) -> torch.Tensor:
        self.n_forwards += 1
        start, prompt = stream.generated, stream.tokens[: stream.prompt_len]
        rows = [
            self.next_logprobs(start + list(tokens[:i]), prompt) for i in range(len(tokens) + 1)
        ]
        stream.tokens.extend(int(t) for t in tokens)
        return torch.stack(rows)

    def score_many(self, streams: Sequence[ToyStream], token_lists) -> list[torch.Tensor]:
        self.n_forwards -= len(streams) - 1  # one batched forward
        return [self.score(s, tokens) for s, tokens in zip(streams, token_lists)]

    def fork(self, stream: ToyStream) -> ToyStream:
        twin = ToyStream(list(stream.tokens))
        twin.prompt_len = stream.prompt_len
        return twin

    def rollback(self, stream: ToyStream, n: int) -> None:
        if not 0 <= n <= len(stream.tokens) - stream.prompt_len:
            raise ValueError(f"cannot roll back {n} tokens of {stream.generated}")
        if n:
            del stream.tokens[-n:]

    def __repr__(self) -> str:
        return f"ToyLM({self.name!r}, {self.n_text} text tokens)"


def _raise(message: str, context) -> Sequence[float]:
    raise KeyError(f"{message}: {context}")


if TYPE_CHECKING:  # a static check that the class implements the protocol
    _conforms: type[LanguageModel[ToyStream]] = ToyLM
