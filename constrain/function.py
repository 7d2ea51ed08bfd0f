"""`@cn.function(model)`: a typed Python function whose body is a language model.

    @cn.function(model)
    def extract(text: str) -> Person:
        \"\"\"Extract the person mentioned in: {text}\"\"\"

    person = extract("Ada Lovelace, 36, lives in London.")   # a validated Person

The docstring is the prompt, a `str.format` template over the function's parameters; the
return annotation (pydantic model, dataclass, TypedDict, primitives, lists, `Literal`, `Enum`,
...) is compiled once into a JSON Schema constraint, and each call returns an instance of it.
"""

from __future__ import annotations

import functools
import inspect
import json
import string
import typing
from collections.abc import Callable
from typing import Any

from constrain.api import Generator
from constrain.errors import AnnotationError, ConfigError, ConstrainError
from constrain.jsonschema.types import schema_from_type
from constrain.models.base import LanguageModel

__all__ = ["GenerationCutError", "function"]


class GenerationCutError(ConstrainError):
    """`max_tokens` ran out before the output was complete (raise max_tokens or shorten it).

    Attributes:
        result: the incomplete `GenerationResult`.
    """

    def __init__(self, message: str, result):
        super().__init__(message)
        self.result = result


def function(
    model,
    *,
    max_tokens: int = 512,
    greedy: bool = True,
    temperature: float = 1.0,
    sampler: Any = "awrs",
    system: str | None = None,
    schema_in_prompt: bool = True,
    schema_options: dict | None = None,
) -> Callable[[Callable], Callable]:
    """Turn a typed function with a docstring template into a constrained LM call.

    Args:
        model: the model that answers.
        max_tokens: a call whose output is not complete by then raises `GenerationCutError`.
        greedy: deterministic answers (default); `greedy=False` samples at `temperature`.
        sampler / schema_options: as `cn.generate`.
        system: a system message.
        schema_in_prompt: append the JSON Schema to the prompt, so the model knows the shape
            it is asked for (the constraint enforces it either way).

    The decorated function has `.generator` (the `cn.Generator`), `.schema` and
    `.prompt(*args, **kwargs)` (the prompt a call would send).

    Raises:
        TypeError: no return annotation, one with no JSON Schema counterpart, no docstring, or
            a template field that is not a parameter.
    """

    if not isinstance(model, LanguageModel):
        where = (f"above def {model.__qualname__}" if hasattr(model, "__qualname__")
                 else f"(got {type(model).__name__})")  # fmt: skip
        raise ConfigError(f"@cn.function needs the model that answers: write "
                          f"@cn.function(model) {where}")  # fmt: skip

    def decorate(fn: Callable) -> Callable:
        name = getattr(fn, "__qualname__", repr(fn))
        hints = typing.get_type_hints(fn, include_extras=True)
        if "return" not in hints:
            raise AnnotationError(
                f"@cn.function {name} needs a return annotation (the output type)"
            )
        returns = hints["return"]
        try:
            schema = schema_from_type(returns)
        except AnnotationError as exc:
            raise AnnotationError(
                f"@cn.function {name}: unsupported return annotation: {exc}"
            ) from exc
        template = inspect.getdoc(fn)
        if not template:
            raise AnnotationError(
                f"@cn.function {name} needs a docstring: it is the prompt template"
            )
        signature = inspect.signature(fn)
        fields = {f for _, f, _, _ in string.Formatter().parse(template) if f}
        unknown = {f.split(".")[0].split("[")[0] for f in fields} - set(signature.parameters)
        if unknown:
            raise AnnotationError(
                f"@cn.function {name}: the docstring names {sorted(unknown)}, which are not "
                f"parameters of the function ({list(signature.parameters)})"
            )
        generator = Generator(
            model,
            type=returns,
            schema_options=schema_options,
            sampler=sampler,
            max_tokens=max_tokens,
            greedy=greedy,
            temperature=temperature,
            system=system,
        )
        suffix = (
            f"\n\nAnswer with JSON valid under this JSON Schema:\n{json.dumps(schema)}"
            if schema_in_prompt
            else ""
        )

        def prompt(*args, **kwargs) -> str:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            return template.format(**bound.arguments) + suffix

        @functools.wraps(fn)
        def call(*args, **kwargs):
            out = generator(prompt(*args, **kwargs))
            if not out.complete:
                raise GenerationCutError(
                    f"{name}: the answer was cut at max_tokens={max_tokens} before it was "
                    f"complete JSON ({len(out.tokens)} tokens: {out.text[:80]!r}...)",
                    out,
                )
            return out.value

        call.generator = generator
        call.schema = schema
        call.prompt = prompt
        return call

    return decorate
