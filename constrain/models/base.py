"""The model interface samplers decode through: `LanguageModel`s of `Stream`s (typing only).

Samplers, processors and speculative decoding never see weights or KV caches; they hold
streams and ask the model for distributions. `TransformersLM` (a Hugging Face model with KV
caches) and `ToyLM` (an explicit table, for exactness tests) implement this interface; any
object with these members works (the protocols are structural: no base class to inherit).

    stream = model.start(model.encode_prompt("Hi"))
    lp = model.logprobs([stream])              # (1, V)
    model.append(stream, int(lp[0].argmax()))
    rows = model.score_many([stream], [[5, 6]])[0]   # (3, V) from one forward
    model.rollback(stream, 2); twin = model.fork(stream)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    import torch

    from constrain.engine.vocab import Vocabulary

__all__ = ["LanguageModel", "PromptIds", "Stream"]


@dataclass(frozen=True)
class PromptIds:
    """A prompt already encoded as token ids (by a server that renders tools into the chat
    template, say): generation starts after `ids` as they are."""

    ids: tuple[int, ...]


@runtime_checkable
class Stream(Protocol):
    """One sequence being decoded: an opaque handle owned by the model that started it.

    Attributes:
        tokens: the whole sequence, prompt first. Read it; change it only through the model
            (`append`, `score_many`, `rollback`): the model keeps its state (a KV cache) in
            step with it.
        prompt_len: how many leading tokens are the prompt.
    """

    tokens: list[int]
    prompt_len: int

    @property
    def generated(self) -> list[int]:
        """The tokens after the prompt (a copy)."""
        ...


S = TypeVar("S", bound=Stream)


@runtime_checkable
class LanguageModel(Protocol[S]):
    """A causal language model as streams of tokens and next-token log-probabilities.

    Contract, for every implementation:

    * A stream always holds at least one token. Its distribution is the model's next-token
      distribution after all of its tokens; `logprobs` and `score_many` return it as
      log-probabilities over ``vocab.size`` ids, on ``device``, in a floating dtype
      (float32 for `TransformersLM`, float64 for `ToyLM`).
    * `append` is cheap: tokens are fed lazily, at the next `logprobs` or `score_many`, so
      tokens appended one by one cost one forward when the distribution is next asked for.
    * Streams passed together are computed together (one batched forward for
      `TransformersLM`; rows equal separate calls up to float rounding). Passing the same
      streams in the same order at every step lets `TransformersLM` keep their KV caches
      stacked: no copying between steps.
    * `fork` gives an independent stream: appending to or rolling back either never changes
      the other's distribution.
    * Only streams started by this model may be passed to it.
    """

    @property
    def name(self) -> str:
        """A display name."""
        ...

    @property
    def device(self) -> torch.device:
        """Where the returned log-probabilities live."""
        ...

    @property
    def vocab(self) -> Vocabulary:
        """The vocabulary: token id -> bytes, EOS ids; ``vocab.size`` is the width V."""
        ...

    @property
    def has_chat_template(self) -> bool:
        """Whether `encode_prompt` applies a chat template by default."""
        ...

    @property
    def context_length(self) -> int | None:
        """The most tokens a stream may hold (prompt and generated), or None if unbounded or
        unknown. Generation checks prompt + ``max_tokens`` against it before any forward."""
        ...

    def encode_prompt(
        self,
        prompt: str | Sequence[dict],
        *,
        chat: bool | None = None,
        system: str | None = None,
        special_tokens: bool = False,
    ) -> list[int]:
        """The token ids of a prompt (a user message or a list of ``{"role", "content"}``
        messages); `chat` forces (True) or skips (False) the chat template, None applies it
        when there is one; `system` is an optional system message. The prompt's text is
        text: special-token text in it becomes special tokens only with `special_tokens`."""
        ...

    def start(self, prompt_ids: Sequence[int], *, prefill: bool = True) -> S:
        """A new stream over `prompt_ids` (non-empty, else ValueError). `TransformersLM`
        prefills it here, so the first `logprobs` call costs no forward; with `prefill`
        False it computes nothing yet: `prefill` feeds the prompt in chunks (a server
        interleaves them with other requests' steps)."""
        ...

    def prefill(self, stream: S, max_tokens: int | None = None) -> int:
        """Feed at most `max_tokens` (None: all; 0: none, to ask) of the prompt tokens
        `stream` has not fed yet, in one forward; returns how many are still not fed (0: the
        prompt is in)."""
        ...

    def append(self, stream: S, token: int) -> None:
        """Add `token` to the stream; it is fed at the next `logprobs` or `score_many`."""
        ...

    def logprobs(self, streams: Sequence[S]) -> torch.Tensor:
        """(len(streams), V) next-token log-probabilities, row i for ``streams[i]``.
        Feeds every pending token; does not change the streams' tokens."""
        ...

    def score_many(
        self, streams: Sequence[S], token_lists: Sequence[Sequence[int]]
    ) -> list[torch.Tensor]:
        """Append ``token_lists[i]`` (k_i tokens) to ``streams[i]`` and return, per stream,
        (k_i + 1, V) log-probabilities from one forward: row 0 is the distribution before
        the first new token, row j the one after the first j (speculative verification).
        Pending appended tokens are fed in the same forward. The tokens stay appended:
        `rollback` the rejected ones."""
        ...

    def fork(self, stream: S) -> S:
        """An independent copy of `stream` (cheap: `TransformersLM` shares or copies the
        KV cache, never recomputes it)."""
        ...

    def rollback(self, stream: S, n: int) -> None:
        """Drop the last `n` tokens (0 <= n <= len(stream.generated); 0 does nothing); the
        distribution is then again the one after the remaining tokens."""
        ...
