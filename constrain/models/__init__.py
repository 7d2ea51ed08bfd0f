"""Model runtime: load models (bundled offline GGUF ones by default) as KV-cache streams.

model = load_model()                      # bundled SmolLM2-135M-Instruct
model = from_transformers(hf_model, tok)  # a model already loaded, left where it is
stream = model.start(model.encode_prompt("Hi"))
lp = model.logprobs([stream])             # (1, V) next-token log-probabilities
model.append(stream, token); model.rollback(stream, 1); twin = model.fork(stream)
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from constrain.errors import ModelLoadError
from constrain.models.base import LanguageModel, Stream
from constrain.models.bundled import (
    BUNDLED,
    DEFAULT_MODEL,
    bundled_models,
    cache_dir,
    load_from_gguf,
    model_dir,
    resolve,
    tokenizer_dir,
)
from constrain.models.kernels import Kernels
from constrain.models.transformers_lm import KVStream, TransformersLM, resolve_device

__all__ = [
    "BUNDLED",
    "DEFAULT_MODEL",
    "KVStream",
    "LanguageModel",
    "Stream",
    "TransformersLM",
    "bundled_models",
    "cache_dir",
    "from_transformers",
    "load_model",
    "load_tokenizer",
    "resolve_device",
]


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes")


def _load_failed(name: str, exc: Exception) -> ModelLoadError:
    hint = (
        " (this machine is offline: HF_HUB_OFFLINE is set and there is no local copy)"
        if _offline()
        else ""
    )
    if "/" not in name:
        hint += f" (not a bundled model either: those are {', '.join(BUNDLED)})"
    elif not Path(name).exists():
        hint += f" (nor a local directory: nothing at {Path(name).resolve()})"
    return ModelLoadError(f"could not load {name!r}{hint}: {exc}")


def _hub_id_shaped(name: str) -> bool:
    """Whether `name` can be a Hub id ("name" or "owner/name", no path syntax)."""
    return re.fullmatch(r"[\w.-]+(/[\w.-]+)?", name) is not None and not name.startswith(".")


def _local_source(name_or_path: str | os.PathLike) -> str:
    """The directory or Hub id to load: a path that exists must be a model directory, and one
    that cannot be a Hub id must exist."""
    path = Path(name_or_path).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ModelLoadError(f"{path.resolve()} is a file, not a model directory")
        if not (path / "config.json").is_file():
            raise ModelLoadError(
                f"{path.resolve()} is not a model directory: it has no config.json"
            )
        return str(path)
    if isinstance(name_or_path, os.PathLike) or not _hub_id_shaped(name_or_path):
        raise ModelLoadError(f"no model directory at {path.resolve()}")
    return name_or_path


def load_tokenizer(name_or_path: str | os.PathLike | None = None):
    """The tokenizer of a bundled model, a local directory or a Hub id (cached for bundled ones)."""
    from transformers import AutoTokenizer

    bundled = resolve(name_or_path)
    try:
        if bundled is not None:
            return AutoTokenizer.from_pretrained(str(tokenizer_dir(bundled)))
        return AutoTokenizer.from_pretrained(_local_source(name_or_path))
    except ModelLoadError:
        raise
    except Exception as exc:  # transformers raises OSError/ValueError/HF errors
        raise _load_failed(str(name_or_path), exc) from exc


def load_model(
    name_or_path: str | os.PathLike | None = None,
    *,
    device: str = "auto",
    dtype=None,
    kernels: Kernels = "measure",
) -> TransformersLM:
    """Load a causal LM as a `TransformersLM`.

    Args:
        name_or_path: None or "smollm2-135m-instruct" (bundled default), "gemma-3-270m"
            (bundled), a local directory (a path that exists, or that cannot be a Hub id:
            ``./x``, ``/x``, ``a/b/c``, a `Path`), or a Hugging Face Hub id.
        device: "auto" (CUDA, then MPS, then CPU) or a torch device.
        dtype: torch dtype of the weights (default float32).
        kernels: "measure" (CPU linear layers take the product timed fastest on this
            machine for few rows) or "torch" (plain ``F.linear``); see `TransformersLM`.

    Raises:
        ModelLoadError: the bundled package is missing, there is no model directory at the
            path given, or the model cannot be found.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    bundled = resolve(name_or_path)
    try:
        source = str(model_dir(bundled)) if bundled is not None else _local_source(name_or_path)
        tokenizer = AutoTokenizer.from_pretrained(source)
        hf_model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype or torch.float32)
    except ModelLoadError:
        raise
    except Exception as exc:
        raise _load_failed(str(name_or_path), exc) from exc
    name = bundled.name if bundled is not None else str(name_or_path)
    return TransformersLM(hf_model, tokenizer, name=name, device=device, kernels=kernels)


def from_transformers(
    hf_model, tokenizer, *, name: str | None = None, kernels: Kernels = "measure"
) -> TransformersLM:
    """Wrap a `transformers` causal LM you already loaded, on its device and in its dtype.

    The model is not moved or converted, only put in eval mode (and on the CPU its linear
    layers may take a faster few-row product, see `TransformersLM`'s `kernels`).

        hf_model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16)
        model = cn.from_transformers(hf_model, AutoTokenizer.from_pretrained(path))
    """
    return TransformersLM(hf_model, tokenizer, name=name or "", device=None, kernels=kernels)


def load_gguf_uncached(name: str | None = None, *, device: str = "auto") -> TransformersLM:
    """A bundled model dequantised straight from its GGUF (slow; used to verify the cache)."""
    bundled = resolve(name)
    if bundled is None:
        raise ModelLoadError(f"{name!r} is not a bundled model")
    hf_model, tokenizer = load_from_gguf(bundled)
    return TransformersLM(hf_model, tokenizer, name=bundled.name, device=device)
