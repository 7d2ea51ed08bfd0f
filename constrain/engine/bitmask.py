"""Packed token masks: 32 tokens per int32 word, token i at bit ``i % 32`` of word ``i // 32``.

The layout llguidance and XGrammar use, so a mask is 1/8 of a bool array (a 262k vocabulary's
is 32 KiB), cheap to cache, to OR together and to copy to a device; bits past the vocabulary
are 0. `constrain.constraints.logits` applies one to logits on any torch device.
"""

from __future__ import annotations

import numpy as np

__all__ = ["allowed_among", "allows", "from_ids", "n_words", "pack", "unpack", "without"]


def n_words(size: int) -> int:
    """Words of a bitmask over `size` tokens."""
    return (size + 31) // 32


def pack(mask: np.ndarray) -> np.ndarray:
    """The bitmask of a bool mask (int32, shape ``(n_words(len(mask)),)``)."""
    packed = np.packbits(mask, bitorder="little")
    padded = np.zeros(4 * n_words(len(mask)), dtype=np.uint8)
    padded[: packed.size] = packed
    return padded.view(np.int32)


def unpack(bitmask: np.ndarray, size: int) -> np.ndarray:
    """The bool mask over `size` tokens of a bitmask."""
    return np.unpackbits(bitmask.view(np.uint8), bitorder="little", count=size).view(bool)


def from_ids(ids: np.ndarray, size: int) -> np.ndarray:
    """The bitmask allowing exactly the tokens `ids`."""
    mask = np.zeros(size, dtype=bool)
    mask[ids] = True
    return pack(mask)


def allows(bitmask: np.ndarray, token: int) -> bool:
    """Whether `bitmask` allows `token` (False outside it)."""
    word = token >> 5
    return 0 <= token and word < len(bitmask) and bool((int(bitmask[word]) >> (token & 31)) & 1)


def allowed_among(bitmask: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The tokens of `ids` (int64, inside the vocabulary) that `bitmask` allows."""
    words = bitmask.view(np.uint32)[ids >> 5]
    return ids[((words >> (ids & 31).astype(np.uint32)) & 1).astype(bool)]


def without(bitmask: np.ndarray, ids) -> np.ndarray:
    """A copy of `bitmask` refusing the tokens `ids` too."""
    ids = np.asarray(ids, dtype=np.int64)
    out = bitmask.copy()
    np.bitwise_and.at(
        out.view(np.uint32), ids >> 5, ~(np.uint32(1) << (ids & 31).astype(np.uint32))
    )
    return out
