"""Drafters: cheap guesses of the next tokens, pruned by the constraint before verification.

A draft is a chain of tokens, each with the distribution it was drawn from: a point mass for
deterministic guesses (tokens the grammar forces, n-grams copied from the prompt or the text so
far), or a draft model's processed, masked distribution. Every drafted token is checked by a
forked Matcher as it is proposed, so no token the grammar forbids reaches verification, and
the forked matchers give the mask of every drafted position for free.

Deterministic guesses may also branch: where the text so far occurs several times in the
context, each occurrence's continuation is a branch, all verified in the same forward.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from constrain.engine.matcher import TokenMatcher
from constrain.samplers.base import categorical

__all__ = ["Draft", "ModelDrafter", "lookup_continuations"]


@dataclass
class Draft:
    """Drafted tokens after a sequence, each with the matcher *before* it and the
    log-distribution it was drawn from (None: a deterministic guess, a point mass)."""

    final: TokenMatcher  # the matcher after the last drafted token
    # an unmasked draft model's last token when the constraint forbids it: not verified, but
    # its distribution makes the replacement at that position come from norm((p~ - q~)+)
    refused: tuple[int, torch.Tensor] | None = None
    tokens: list[int] = field(default_factory=list)
    matchers: list[TokenMatcher] = field(default_factory=list)
    proposals: list[torch.Tensor | None] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)  # "forced", "lookup", "model"
    forced: list[bytes] = field(default_factory=list)  # what the grammar forced there (or b"")

    def add(self, token: int, proposal: torch.Tensor | None, source: str, forced=b"") -> None:
        """Append `token`, which the constraint allows after the draft so far."""
        self.tokens.append(token)
        self.matchers.append(self.final)
        self.proposals.append(proposal)
        self.sources.append(source)
        self.forced.append(forced)
        self.final = self.final.fork()
        self.final.advance(token)

    def prefix(self, n: int) -> Draft:
        """A copy of the first n drafted tokens (a branch point)."""
        final = self.matchers[n] if n < len(self) else self.final
        lists = ("tokens", "matchers", "proposals", "sources", "forced")
        return Draft(final, **{name: getattr(self, name)[:n] for name in lists})

    def __len__(self) -> int:
        return len(self.tokens)


def lookup_continuations(
    context: list[int], max_ngram: int, length: int, branches: int
) -> list[list[int]]:
    """Prompt lookup: continuations of the most recent earlier occurrences of the context's
    last n tokens (the longest n <= `max_ngram` that occurs), distinct, most recent first."""
    found: list[list[int]] = []
    for n in range(min(max_ngram, len(context) - 1), 0, -1):
        tail = context[-n:]
        for start in range(len(context) - n - 1, -1, -1):
            if context[start : start + n] == tail:
                follow = context[start + n : start + n + length]
                if follow and all(follow[:1] != f[:1] for f in found):
                    found.append(follow)
                    if len(found) == branches:
                        return found
        if found:
            return found
    return found


class ModelDrafter:
    """Drafts with a small model that shares the tokenizer (or the target's own first layers,
    `model.with_layers(...)`): its stream follows the sequence; each drafted token is drawn from
    its masked, tempered distribution, which verification needs as q."""

    def __init__(self, model, prompt_ids: list[int], temperature: float = 1.0):
        self.model, self.temperature = model, temperature
        self.stream = model.start(prompt_ids)

    def sync(self, tokens: list[int]) -> None:
        """Make the draft stream's text the prompt followed by `tokens`."""
        have = self.stream.generated
        common = 0
        while common < min(len(have), len(tokens)) and have[common] == tokens[common]:
            common += 1
        self.model.rollback(self.stream, len(have) - common)
        for t in tokens[common:]:
            self.model.append(self.stream, t)

    def propose(self, mask: torch.Tensor | None, generator, greedy: bool):
        """(token, its log-distribution) from the draft model, among the allowed tokens
        (among all tokens when `mask` is None: an unmasked draft)."""
        row = torch.log_softmax(
            self.model.logprobs([self.stream])[0].double() / self.temperature, -1
        )
        masked = row
        if mask is not None:
            masked = row.masked_fill(~mask[: row.shape[-1]].to(row.device), -math.inf)
        token, log_z = categorical(masked, generator)
        if token < 0:
            return None, None
        if greedy:
            token = int(torch.argmax(masked))
        return token, masked - log_z
