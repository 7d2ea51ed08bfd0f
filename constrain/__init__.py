"""constrain: constrained and controlled generation with language models.

import constrain as cn
model = cn.load_model()                       # bundled SmolLM2-135M-Instruct
out = cn.generate(model, "Today's date?", regex=r"\\d{4}-\\d{2}-\\d{2}")
"""

from constrain import grammars, hf
from constrain.api import (
    GenerationResult,
    GenerationStats,
    Generator,
    TextStream,
    generate,
    smc,
    stream,
)
from constrain.errors import (
    ConstrainError,
    GrammarError,
    InvalidTokenError,
    ModelLoadError,
    RegexError,
    UnsupportedSchemaError,
    VocabularyError,
)
from constrain.function import GenerationCutError, function
from constrain.grammar import Grammar
from constrain.matcher import Constraint, Matcher
from constrain.processors import (
    CFG,
    USCD,
    AdaCAD,
    Classifier,
    Contrastive,
    CyclicReflex,
    HFProcessor,
    Intersection,
    M,
    MinP,
    Processor,
    RepetitionPenalty,
    Temperature,
    TopH,
    TopK,
    TopP,
    Typical,
    Union,
)
from constrain.samplers import AWRS, LCD
from constrain.samplers.asap import ASAp
from constrain.samplers.smc import SMC, SMCResult
from constrain.speculative import Speculative
from constrain.vocab import Vocabulary

__version__ = "0.1.0"


def load_model(name_or_path: str | None = None, *, device: str = "auto", dtype=None):
    """Load a language model: the bundled SmolLM2-135M-Instruct by default.

    Args:
        name_or_path: None or "smollm2-135m-instruct" (bundled default), "gemma-3-270m"
            (bundled), a local directory, or a Hugging Face Hub id (needs network or a cache).
        device: "auto" (CUDA, then MPS, then CPU), or any torch device string.
    """
    from constrain.models import load_model as _load

    return _load(name_or_path, device=device, dtype=dtype)


__all__ = [
    "ASAp",
    "AWRS",
    "AdaCAD",
    "CFG",
    "Classifier",
    "ConstrainError",
    "Constraint",
    "Contrastive",
    "CyclicReflex",
    "GenerationCutError",
    "GenerationResult",
    "GenerationStats",
    "Generator",
    "Grammar",
    "GrammarError",
    "HFProcessor",
    "Intersection",
    "InvalidTokenError",
    "LCD",
    "M",
    "Matcher",
    "MinP",
    "ModelLoadError",
    "Processor",
    "RegexError",
    "RepetitionPenalty",
    "SMC",
    "SMCResult",
    "Speculative",
    "Temperature",
    "TextStream",
    "TopH",
    "TopK",
    "TopP",
    "Typical",
    "USCD",
    "Union",
    "UnsupportedSchemaError",
    "Vocabulary",
    "VocabularyError",
    "function",
    "generate",
    "grammars",
    "hf",
    "load_model",
    "smc",
    "stream",
]
