"""Speculative decoding with constraint-aware drafts: `cn.Speculative`, `choose_layers`."""

from constrain.speculative.engine import Speculative, SpeculativeStats, decode_speculative

__all__ = ["Speculative", "SpeculativeStats", "decode_speculative"]
