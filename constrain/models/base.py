"""The language-model contract: `LanguageModel` and its `Stream`s (placeholder; see wt-models)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

__all__ = ["LanguageModel", "Stream"]


class Stream(Protocol):
    """One sequence of a model: its tokens (the prompt first) and its cache."""

    tokens: list[int]
    prompt_len: int


class LanguageModel(Protocol):
    """Streams of next-token log-probabilities."""

    name: str
    device: Any
    vocab: Any

    def encode_prompt(
        self, prompt, *, chat: bool | None = None, system: str | None = None
    ) -> list[int]: ...

    def start(self, prompt_ids: Sequence[int]) -> Stream: ...

    def append(self, stream: Stream, token: int) -> None: ...

    def logprobs(self, streams: Sequence[Stream]) -> Any: ...

    def score_many(
        self, streams: Sequence[Stream], token_lists: Sequence[Sequence[int]]
    ) -> list: ...

    def fork(self, stream: Stream) -> Stream: ...

    def rollback(self, stream: Stream, n: int) -> None: ...
