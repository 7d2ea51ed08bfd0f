"""The logits-processor stack: control (model arithmetic, CFG, contrastive, reflection,
penalties) -> constraint -> temperature -> truncation. See `constrain.processors.base`."""

from constrain.processors.arithmetic import Classifier, Formula, Intersection, M, Union
from constrain.processors.base import STAGES, Processor, ProcessorStack, Step, Term
from constrain.processors.guidance import CFG, USCD, AdaCAD, Contrastive
from constrain.processors.interop import HFProcessor
from constrain.processors.reflection import CyclicReflex
from constrain.processors.warpers import (
    MinP,
    RepetitionPenalty,
    Temperature,
    TopH,
    TopK,
    TopP,
    Typical,
)

__all__ = [
    "CFG",
    "STAGES",
    "USCD",
    "AdaCAD",
    "Classifier",
    "Contrastive",
    "CyclicReflex",
    "Formula",
    "HFProcessor",
    "Intersection",
    "M",
    "MinP",
    "Processor",
    "ProcessorStack",
    "RepetitionPenalty",
    "Step",
    "Temperature",
    "Term",
    "TopH",
    "TopK",
    "TopP",
    "Typical",
    "Union",
]
