"""constrain: constrained and controlled generation with language models.

import constrain as cn
model = cn.load_model()                       # bundled SmolLM2-135M-Instruct
out = cn.generate(model, "Today's date?", regex=r"\\d{4}-\\d{2}-\\d{2}")

Names are imported on first use, so ``import constrain.engine`` (the token-level automata)
loads neither torch nor the decoding layers.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# public name -> the module that defines it
_EXPORTS = {
    "Abandoned": "constrain.errors",
    "AnnotationError": "constrain.errors",
    "ArgumentTypeError": "constrain.errors",
    "ConfigError": "constrain.errors",
    "ConstrainError": "constrain.errors",
    "ContextLengthError": "constrain.errors",
    "EmptyLanguageError": "constrain.errors",
    "GrammarError": "constrain.errors",
    "InvalidTokenError": "constrain.errors",
    "ModelLoadError": "constrain.errors",
    "RegexError": "constrain.errors",
    "SchemaError": "constrain.errors",
    "UnsupportedSchemaError": "constrain.errors",
    "VocabularyError": "constrain.errors",
    "WorkLimitError": "constrain.errors",
    "Fuel": "constrain.fuel",
    "Vocabulary": "constrain.engine.vocab",
    "Grammar": "constrain.jsonschema.grammar",
    "Constraint": "constrain.constraints",
    "ConstraintSpec": "constrain.constraints",
    "Matcher": "constrain.engine.matcher",
    "load_model": "constrain.models",
    "from_transformers": "constrain.models",
    "CFG": "constrain.processors",
    "USCD": "constrain.processors",
    "AdaCAD": "constrain.processors",
    "Classifier": "constrain.processors",
    "Contrastive": "constrain.processors",
    "CyclicReflex": "constrain.processors",
    "HFProcessor": "constrain.processors",
    "Intersection": "constrain.processors",
    "M": "constrain.processors",
    "MinP": "constrain.processors",
    "Processor": "constrain.processors",
    "RepetitionPenalty": "constrain.processors",
    "Temperature": "constrain.processors",
    "TopH": "constrain.processors",
    "TopK": "constrain.processors",
    "TopP": "constrain.processors",
    "Typical": "constrain.processors",
    "Union": "constrain.processors",
    "AWRS": "constrain.samplers",
    "LCD": "constrain.samplers",
    "ASAp": "constrain.decoding",
    "SMC": "constrain.options",
    "SMCResult": "constrain.results",
    "Speculative": "constrain.options",
    "DecodingConfig": "constrain.options",
    "GenerationResult": "constrain.results",
    "GenerationStats": "constrain.results",
    "Generator": "constrain.api",
    "TextStream": "constrain.api",
    "generate": "constrain.api",
    "smc": "constrain.api",
    "stream": "constrain.api",
    "GenerationCutError": "constrain.function",
    "function": "constrain.function",
}
_SUBMODULES = ("grammars", "hf", "schemas")

__all__ = sorted([*_EXPORTS, *_SUBMODULES])


def __getattr__(name: str):
    """Import a public name (or submodule) on first use and keep it."""
    if name in _SUBMODULES:
        value = importlib.import_module(f"constrain.{name}")
    elif name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    else:
        raise AttributeError(f"module 'constrain' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
