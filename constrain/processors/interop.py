"""Any `transformers` LogitsProcessor as a processor of our stack.

transformers' processors take ``(input_ids, scores)`` for a batch; `HFProcessor` gives them the
prompt and the generated tokens as ``input_ids`` (one row) and the log-probabilities as
``scores``. A wrapped processor must be a function of its inputs (most are: repetition
penalties, bad words, warpers); one that counts its calls would drift under speculation.
"""

from __future__ import annotations

import torch

from constrain.errors import ConfigError
from constrain.processors.base import STAGES, Processor, Step

__all__ = ["HFProcessor"]


class HFProcessor(Processor):
    """Wrap a transformers `LogitsProcessor` (or any ``(input_ids, scores) -> scores``).

    Args:
        processor: the transformers processor.
        stage: "control" (default), "temperature" or "truncation" (for warpers, which must see
            only allowed tokens).
    """

    def __init__(self, processor, stage: str = "control"):
        if stage not in STAGES:
            raise ConfigError(f"stage must be one of {STAGES}, got {stage!r}")
        self.processor = processor
        self.stage = stage

    def __call__(self, logprobs, term_rows, step: Step):
        ids = torch.tensor([[*step.prompt_ids, *step.prefix]], device=logprobs.device)
        out = self.processor(ids, logprobs.unsqueeze(0).clone())[0]
        return torch.log_softmax(out, dim=-1) if self.stage != "control" else out

    def __repr__(self) -> str:
        return f"HFProcessor({type(self.processor).__name__}, stage={self.stage!r})"
