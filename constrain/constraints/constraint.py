"""`Constraint`: what a sequence must satisfy, bound to a vocabulary, and its matchers.

``Constraint = Grammar + Vocabulary``. It assembles the matcher of a sequence as a product of
constraints with one interface (`TokenMatcher`): the grammar's token automaton (`Matcher`,
automaton state only), times the grammar's text check when it has one (`TextChecked`), times
a token budget when the generation has one (`Budgeted`). It owns what every sequence shares:
the automaton's masks and steps, the shortest completions budgets plan with, the masks already
copied to a device, and the tokens a model chose for forced text (speculative drafts).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING

import numpy as np

from constrain.constraints.budget import Budgeted, CompletionPlans
from constrain.constraints.text_check import TextChecked
from constrain.engine.cache import BoundedCache
from constrain.engine.grammar import Grammar
from constrain.engine.matcher import TokenAutomaton, TokenMatcher
from constrain.engine.vocab import Vocabulary

if TYPE_CHECKING:
    import torch

__all__ = ["Constraint"]

_DEVICE_MASKS_KEPT = 256  # masks kept on devices (least recently used out)
_CHECKED_MASKS_KEPT = 2**16  # masks narrowed by a text check
_CHECK_REFUSALS_KEPT = 2**12  # a text check's refused tokens, by its state key
_FORCED_CHOICES_KEPT = 4096  # forced texts whose tokenization by a model is remembered


class Constraint:
    """A grammar bound to a vocabulary: the matchers of its sequences and their shared caches.

    Args:
        grammar: what the text must be.
        vocab: the model's vocabulary (token bytes, EOS ids, logits size).
        max_cache_bytes: bound on the mask cache; the least recently used masks are evicted
            (context-free grammars have unboundedly many parser states).
    """

    def __init__(self, grammar: Grammar, vocab: Vocabulary, *, max_cache_bytes: int = 256 * 2**20):
        self.grammar = grammar
        self.vocab = vocab
        self.token_automaton = TokenAutomaton(grammar, vocab, max_cache_bytes=max_cache_bytes)
        self.plans = CompletionPlans(self.token_automaton)
        self.device_masks: BoundedCache[tuple[Hashable, str], torch.Tensor] = BoundedCache(
            _DEVICE_MASKS_KEPT
        )
        if grammar.check is not None:
            grammar.check.prepare(vocab)
        # bitmasks narrowed by the grammar's text check, by `TextChecked.mask_key`
        self.checked_masks: BoundedCache[Hashable, np.ndarray] = BoundedCache(
            _CHECKED_MASKS_KEPT, max_bytes=max_cache_bytes // 4, size=lambda mask: mask.nbytes
        )
        # the tokens a text check refuses, by its state key (`TextChecked`)
        self.check_refusals: BoundedCache[bytes, np.ndarray] = BoundedCache(_CHECK_REFUSALS_KEPT)
        # (model name, forced text) -> the token the model chose for it (speculative drafts
        # follow the model's own tokenization of forced text, learnt across generations)
        self.forced_choices: BoundedCache[tuple[str, bytes], int] = BoundedCache(
            _FORCED_CHOICES_KEPT
        )

    def start(self, max_tokens: int | None = None) -> TokenMatcher:
        """A matcher at the start of the text.

        Args:
            max_tokens: a token budget (EOS not counted): the matcher then allows only tokens
                after which the text can still be completed within it (see `Budgeted`).
        """
        matcher: TokenMatcher = self.token_automaton.start()
        if self.grammar.check is not None:
            matcher = TextChecked(
                matcher, self.grammar.check, self.vocab, self.checked_masks, self.check_refusals
            )
        if max_tokens is not None:
            matcher = Budgeted(matcher, self.plans, max_tokens)
        return matcher

    def shortest_tokens(self) -> int | None:
        """Tokens of the shortest whole text the automaton finds (None: none found)."""
        return self.plans.shortest_tokens()

    def device_bitmask(self, matcher: TokenMatcher, device) -> torch.Tensor:
        """`matcher.bitmask()` as an int32 tensor on `device`, kept by its `mask_key` when it
        has one (so a state's mask is copied to a device once, packed)."""
        import torch

        def build():
            return torch.from_numpy(matcher.bitmask().copy()).to(device)

        key = matcher.mask_key()
        if key is None:
            return build()
        return self.device_masks.get_or_build((key, str(device)), build)

    def device_mask(self, matcher: TokenMatcher, device) -> torch.Tensor:
        """`device_bitmask` unpacked: a bool tensor of shape (vocab.size,) on `device`."""
        from constrain.constraints.logits import unpack_bitmask

        return unpack_bitmask(self.device_bitmask(matcher, device), self.vocab.size)

    def nbytes(self) -> int:
        """The memory this constraint holds now, in bytes (an estimate, for the byte-bounded
        cache of compiled constraints): its grammar's automaton over the vocabulary, the
        plans, and every cache it owns. It grows as sequences visit new states."""
        refusals = sum(64 + ids.nbytes for ids in self.check_refusals.values())
        device = sum(mask.element_size() * mask.nelement() for mask in self.device_masks.values())
        return (
            self.token_automaton.nbytes() + self.plans.nbytes() + self.checked_masks.bytes
            + refusals + device + 160 * len(self.forced_choices)
        )  # fmt: skip

    @property
    def cached_states(self) -> int:
        """Number of automaton states whose mask is cached."""
        return self.token_automaton.cached_states

    @property
    def cache_bytes(self) -> int:
        """Memory held by the mask cache, in bytes."""
        return self.token_automaton.cache_bytes

    def __repr__(self) -> str:
        return f"Constraint({self.grammar!r}, {self.vocab!r})"
