"""Interoperability with Hugging Face `transformers`.

`LogitsProcessor(constraint, processors=[...])` puts any constraint of this library (regex,
grammar, JSON Schema, type) and our processors that need no auxiliary model (warpers,
penalties, CyclicReflex, wrapped transformers processors) inside ``model.generate``, in our
stage order: control -> constraint -> temperature -> truncation. Greedy, sampling, beam search
and batches all work, because each row's matcher is found from the row's generated tokens
rather than from a call counter. (transformers samples with ``top_k=50`` unless told
``top_k=0``; its own warpers then run after ours.)

    from transformers import AutoModelForCausalLM
    c = cn.Constraint(cn.Grammar.from_json_schema(schema), cn.Vocabulary.from_tokenizer(tok))
    ids = hf_model.generate(**inputs, logits_processor=[cn.hf.LogitsProcessor(c)],
                            max_new_tokens=64, do_sample=False)
"""

from __future__ import annotations

import numpy as np
import torch

from constrain.constraints import Constraint
from constrain.constraints.logits import apply_bitmask_
from constrain.engine import bitmask
from constrain.engine.cache import BoundedCache
from constrain.engine.matcher import TokenMatcher
from constrain.errors import ConfigError
from constrain.processors import Processor, ProcessorStack, Step

__all__ = ["LogitsProcessor"]

_MATCHERS_KEPT = 4096  # prefixes whose matcher is remembered (rows x steps of one generate)


class LogitsProcessor:
    """A `transformers` logits processor that masks what the constraint forbids.

    Args:
        constraint: the constraint, bound to the model's vocabulary (`vocab.size` must be the
            logits width).
        processors: our processors to apply around the constraint; those that read an
            auxiliary prompted model (CFG, contrastive, model arithmetic) need their own
            forwards and are refused here: use `cn.generate`.
        prompt_length: the prompt's length in ``input_ids``, for every generation; by default
            the width of ``input_ids`` at the first call of each generation (right for
            ``generate``'s left-padded batches).

    One processor serves any number of ``generate`` calls, one after another: a call whose
    rows do not each extend a row of the generation in progress by one token (as greedy,
    sampling, beam search and assisted decoding extend them) starts a new generation. (So a
    new prompt that is exactly a row of the generation just finished plus one token would
    read as its continuation.) After a row's EOS, the row may only repeat EOS (``generate``
    pads finished rows).
    """

    def __init__(
        self,
        constraint: Constraint,
        processors: list[Processor] = (),
        prompt_length: int | None = None,
    ):
        self.constraint = constraint
        self.stack = ProcessorStack(processors)
        if self.stack.terms:
            raise ConfigError(
                "processors that read an auxiliary prompted model (CFG, contrastive, model "
                "arithmetic) cannot run inside transformers' generate: use cn.generate"
            )
        self.prompt_length = prompt_length
        self._fixed_prompt_length = prompt_length is not None
        self._seen: set[int] = set()  # hashes of the rows of the generation in progress
        self._matchers: BoundedCache[tuple[int, ...], TokenMatcher] = BoundedCache(_MATCHERS_KEPT)
        eos = bitmask.from_ids(np.array(constraint.vocab.eos_ids), constraint.vocab.size)
        self._eos_only = torch.from_numpy(eos)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        rows = input_ids.tolist()
        if not all(hash(tuple(ids[:-1])) in self._seen for ids in rows):  # a new generation
            self._seen.clear()
            if not self._fixed_prompt_length:
                self.prompt_length = input_ids.shape[1]
        self._seen.update(hash(tuple(ids)) for ids in rows)
        if scores.shape[-1] != self.constraint.vocab.size:
            raise ConfigError(
                f"the logits have {scores.shape[-1]} columns but the constraint's vocabulary "
                f"has {self.constraint.vocab.size}: bind the constraint to this model's vocabulary"
            )
        out = torch.empty_like(scores)
        vocab = self.constraint.vocab
        for row, ids in enumerate(rows):
            generated = tuple(ids[self.prompt_length :])
            matcher = self._matcher(generated)
            if matcher is None or matcher.finished():  # padding after EOS
                packed = self._eos_only.to(scores.device)
            else:
                packed = self.constraint.device_bitmask(matcher, scores.device)
            step = Step(generated, tuple(ids[: self.prompt_length]), vocab)
            logprobs = torch.log_softmax(scores[row].float(), dim=-1)
            if self.stack.control:
                logprobs = self.stack.before_constraint(logprobs, [], step)
            apply_bitmask_(logprobs, packed)
            out[row] = self.stack.after(logprobs, step) if self.stack.after_constraint else logprobs
        return out

    def _matcher(self, generated: tuple[int, ...]) -> TokenMatcher | None:
        """The matcher after `generated` (None once the row has ended), advanced from the
        longest remembered prefix."""
        known = len(generated)
        while known > 0 and generated[:known] not in self._matchers:
            known -= 1
        matcher = self._matchers.get(generated[:known])
        if matcher is None:
            matcher = self.constraint.start()
        for i in range(known, len(generated)):
            if matcher.finished():
                return None  # a padded position after EOS
            matcher = matcher.fork()
            matcher.advance(generated[i])
            self._matchers[generated[: i + 1]] = matcher
        self._matchers[generated] = matcher
        return matcher
