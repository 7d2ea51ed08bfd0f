"""Fixtures of the vLLM suite (`make test-vllm`, run in vLLM's own environment, .venv-vllm).

`vllm_server` is one vLLM OpenAI server for the module, started as users start it, with the
bundled SmolLM2 and ``--structured-outputs-config.backend constrain`` on 127.0.0.1 (a free
port); `backend` is the engine-side backend built on that model's tokenizer, no server.
"""

from __future__ import annotations

import os
import types

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

LOG_DIR = os.environ.get("CONSTRAIN_VLLM_LOGS", "bench-results")


@pytest.fixture(scope="session")
def model_dir():
    from constrain.vllm.server import bundled_model_dir

    return bundled_model_dir()


@pytest.fixture(scope="session")
def tokenizer(model_dir):
    from vllm.tokenizers import get_tokenizer

    return get_tokenizer(str(model_dir))


@pytest.fixture(scope="session")
def backend(tokenizer):
    """The engine's backend on SmolLM2's tokenizer (the config is what it reads of vLLM's)."""
    from constrain.vllm import patches
    from constrain.vllm.backend import ConstrainBackend

    patches.apply()
    model_config = types.SimpleNamespace(
        hf_config=types.SimpleNamespace(eos_token_id=2), max_model_len=2048
    )
    return ConstrainBackend(types.SimpleNamespace(model_config=model_config), tokenizer, 49152)


@pytest.fixture(scope="module")
def vllm_server(model_dir):
    """vLLM's OpenAI server with the constrain backend; the module's tests share it."""
    from constrain.vllm.server import VLLMServer

    os.makedirs(LOG_DIR, exist_ok=True)
    log = os.path.join(LOG_DIR, "vllm-test-server.log")
    # a small compile budget, so a schema that needs more fails in a second
    env_fuel = os.environ.get("CONSTRAIN_VLLM_COMPILE_FUEL")
    os.environ["CONSTRAIN_VLLM_COMPILE_FUEL"] = "2000000"
    try:
        with VLLMServer(model=model_dir, extra=["--enforce-eager"], log=log, timeout=400) as s:
            yield s
    finally:
        if env_fuel is None:
            os.environ.pop("CONSTRAIN_VLLM_COMPILE_FUEL", None)
        else:
            os.environ["CONSTRAIN_VLLM_COMPILE_FUEL"] = env_fuel
