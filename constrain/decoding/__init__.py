"""The decoding layer: one `Sequence` per generation, one loop, strategies plugged into it.

A `Batch` of `Job`s runs every generation (`decode` runs one job alone); `Sampling` (a token sampler per
step), `SpeculativeSampling` (propose / verify), `SMCSampling` (resample between steps) and
`ASApSampling` (reweight by a trie) are its strategies; `constrain.options` says which.
"""

from constrain.decoding.asap import ASAp, ASApSampling
from constrain.decoding.loop import Batch, Deadline, Job, Sampling, Strategy, decode, forward
from constrain.decoding.sequence import Backtracker, Sequence
from constrain.decoding.smc import SMCSampling
from constrain.decoding.speculative import SpeculativeSampling

__all__ = [
    "ASAp",
    "ASApSampling",
    "Backtracker",
    "Batch",
    "Deadline",
    "Job",
    "SMCSampling",
    "Sampling",
    "Sequence",
    "SpeculativeSampling",
    "Strategy",
    "decode",
    "forward",
]
