"""Speculative decoding with constraint-aware drafts: `cn.Speculative`, `choose_layers`."""

from constrain.speculative.engine import Speculative, SpeculativeStats, decode_speculative
from constrain.speculative.layers import choose_layers, expected_speedup

__all__ = [
    "Speculative",
    "SpeculativeStats",
    "choose_layers",
    "decode_speculative",
    "expected_speedup",
]
