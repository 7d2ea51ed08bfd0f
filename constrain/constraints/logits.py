"""Packed token masks applied to logits, in place, on any torch device.

A bitmask (`constrain.engine.bitmask`: 32 tokens per int32 word) is unpacked on the logits'
device with one shift and one AND per word, so a GPU never waits for a bool mask to be copied
from the host: the copy is the packed form, 1/8 of the size (cached per state by
`Constraint.device_bitmask` where a constraint is at hand).
"""

from __future__ import annotations

import math

import torch

from constrain.engine.matcher import TokenMatcher

__all__ = ["apply_bitmask_", "unpack_bitmask"]


def unpack_bitmask(bitmask: torch.Tensor, size: int) -> torch.Tensor:
    """The bool mask over `size` tokens of `bitmask` (shape (..., words)), on its device;
    tokens past the bitmask's words are refused."""
    shifts = torch.arange(32, device=bitmask.device, dtype=torch.int32)
    bits = ((bitmask.unsqueeze(-1) >> shifts) & 1).flatten(-2).bool()
    if bits.shape[-1] >= size:
        return bits[..., :size]
    refused = bits.new_zeros((*bits.shape[:-1], size - bits.shape[-1]))
    return torch.cat([bits, refused], dim=-1)


def device_bitmask(matcher: TokenMatcher, device) -> torch.Tensor:
    """`matcher.bitmask()` as an int32 tensor on `device` (a copy: the mask is read-only; a
    few KiB, so a copy per draw is cheap beside the forward)."""
    return torch.from_numpy(matcher.bitmask().copy()).to(device)


def apply_bitmask_(logits: torch.Tensor, bitmask: torch.Tensor) -> torch.Tensor:
    """Set the logits of the tokens `bitmask` refuses to -inf, in place (logits (..., vocab),
    bitmask (..., words) on the same device); returns `logits`."""
    allowed = unpack_bitmask(bitmask, logits.shape[-1])
    return logits.masked_fill_(~allowed, -math.inf)
