"""JSON values -> instances of Python types: the inverse of `schema_from_type`.

A generation under ``type=T`` is JSON valid under ``schema_from_type(T)``; `value_from_json`
turns it into what a function annotated ``-> T`` should return: dataclass and pydantic
instances, `Enum` members, tuples, sets, floats where the JSON has an integer, recursively.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from typing import Any

import jsonschema

from constrain.errors import AnnotationError
from constrain.jsonschema.types import schema_from_type

__all__ = ["value_from_json"]


def value_from_json(annotation: Any, data: Any) -> Any:
    """An instance of `annotation` built from `data`, JSON valid under its schema.

    Raises:
        TypeError: `annotation` has no JSON Schema counterpart.
        ValueError: `data` does not fit `annotation`.
    """
    if annotation is Any or annotation is object:
        return data
    if annotation in (str, bool) or annotation is type(None) or annotation is None:
        return data
    if annotation is int:
        return int(data)  # 1.0 is an integer in JSON Schema
    if annotation is float:
        return float(data)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return value_from_json(args[0], data)
    if origin is typing.Literal:
        for arg in args:  # the Enum member when the literal is one
            if (arg.value if isinstance(arg, enum.Enum) else arg) == data:
                return arg
        raise ValueError(f"{data!r} is none of {args}")
    if origin in (typing.Union, types.UnionType):
        return _union(args, data)
    if origin in (list, typing.List, typing.Sequence, set, frozenset):  # noqa: UP006
        item = args[0] if args else Any
        items = [value_from_json(item, v) for v in data]
        return origin(items) if origin in (set, frozenset) else items
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(value_from_json(args[0], v) for v in data)
        return tuple(value_from_json(a, v) for a, v in zip(args, data))
    if origin in (dict, typing.Dict, typing.Mapping):  # noqa: UP006
        value = args[1] if args else Any
        return {k: value_from_json(value, v) for k, v in data.items()}
    if isinstance(annotation, type):
        return _class(annotation, data)
    raise AnnotationError(f"no JSON Schema for {annotation!r}")


def _union(options: tuple, data: Any) -> Any:
    """The first option whose schema the data validates against."""
    for option in options:
        if jsonschema.Draft202012Validator(schema_from_type(option)).is_valid(data):
            return value_from_json(option, data)
    raise ValueError(f"{data!r} fits none of {options}")


def _class(cls: type, data: Any) -> Any:
    if issubclass(cls, enum.Enum):
        return cls(data)
    if hasattr(cls, "model_validate"):  # pydantic v2
        return cls.model_validate(data)
    hints = typing.get_type_hints(cls, include_extras=True)
    if dataclasses.is_dataclass(cls):
        return cls(**{name: value_from_json(hints[name], v) for name, v in data.items()})
    if typing.is_typeddict(cls):
        return {name: value_from_json(hints.get(name, Any), v) for name, v in data.items()}
    raise AnnotationError(f"no JSON Schema for {cls!r}")
