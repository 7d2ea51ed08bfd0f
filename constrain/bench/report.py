"""What the harnesses report with: percentiles, number formatting, a vocabulary load timed.

Shared by the JSONSchemaBench and conformance harnesses (and the micro-benchmarks in bench/).
"""

from __future__ import annotations

import sys
import time

import numpy as np

import constrain as cn

__all__ = ["fmt", "load_vocab", "percentile"]


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile of `values`, NaN when there are none."""
    return float(np.percentile(values, q)) if values else float("nan")


def fmt(x: float, digits: int = 1) -> str:
    """`x` with thousands separators and `digits` decimals; "-" for NaN."""
    if x != x:  # NaN
        return "-"
    return f"{x:,.{digits}f}"


def load_vocab(name: str) -> cn.Vocabulary:
    """A bundled model's vocabulary with its trie built (timed on stderr)."""
    from constrain.models import load_tokenizer

    t0 = time.perf_counter()
    vocab = cn.Vocabulary.from_tokenizer(load_tokenizer(name))
    vocab.trie  # noqa: B018 (built once per tokenizer; reported separately)
    print(
        f"# {name}: {vocab.size} ids, vocabulary + trie built in {time.perf_counter() - t0:.2f} s",
        file=sys.stderr,
    )
    return vocab
