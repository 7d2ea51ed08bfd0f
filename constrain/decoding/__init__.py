"""The decoding layer: one `Sequence` per generation, one loop, strategies plugged into it.

`decode(sequences, strategy, ...)` runs every generation; `Sampling` (a token sampler per
step), `SpeculativeSampling` (propose / verify), `SMCSampling` (resample between steps) and
`ASApSampling` (reweight by a trie) are its strategies, chosen by `DecodingConfig.strategy`.
"""

from constrain.decoding.asap import ASAp, ASApSampling
from constrain.decoding.config import DecodingConfig
from constrain.decoding.loop import Deadline, Sampling, Strategy, decode, forward
from constrain.decoding.sequence import Backtracker, Sequence
from constrain.decoding.smc import SMC, SMCSampling
from constrain.decoding.speculative import Speculative, SpeculativeSampling

__all__ = [
    "ASAp",
    "ASApSampling",
    "Backtracker",
    "Deadline",
    "DecodingConfig",
    "SMC",
    "SMCSampling",
    "Sampling",
    "Sequence",
    "Speculative",
    "SpeculativeSampling",
    "Strategy",
    "decode",
    "forward",
]
