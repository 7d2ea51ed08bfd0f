"""Python type annotations -> JSON Schema, so a return annotation can constrain generation.

Covers what a typed function returns: `str`, `int`, `float`, `bool`, `None`, `Literal`, `Enum`,
`list[X]`, `set[X]` and `frozenset[X]` (arrays with `uniqueItems`: a set holds each value once),
`tuple[X, Y]` / `tuple[X, ...]`, `dict[str, X]`, `Optional` and unions, `Annotated` with
constraints (annotated-types' `Ge`/`Gt`/`Le`/`Lt`/`MultipleOf`/`MinLen`/`MaxLen`/`Len`, a
pydantic `Field`, or a plain dict merged into the schema), dataclasses, `TypedDict` and pydantic
models (through their own `model_json_schema`). Dataclasses and TypedDicts become `$defs`, so
recursive types work. Anything else raises `AnnotationError` (a `TypeError`) naming the annotation.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import types
import typing
from typing import Any

from constrain.errors import AnnotationError

__all__ = ["schema_from_type"]

_SCALARS = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}
# annotated-types attributes of Ge / Gt / Le / Lt / Interval / MultipleOf -> JSON Schema keywords
_BOUNDS = {
    "ge": "minimum",
    "gt": "exclusiveMinimum",
    "le": "maximum",
    "lt": "exclusiveMaximum",
    "multiple_of": "multipleOf",
}


def schema_from_type(annotation: Any) -> dict:
    """The JSON Schema of the values of `annotation`.

    Raises:
        TypeError: an annotation with no JSON Schema counterpart (named in the message).
    """
    defs: dict[str, dict] = {}
    schema = _Converter(defs).convert(annotation)
    if defs:
        schema = {**schema, "$defs": defs}
    return schema


class _Converter:
    def __init__(self, defs: dict[str, dict]):
        self.defs = defs

    def convert(self, tp: Any) -> dict:
        if tp is Any or tp is object:
            return {}
        if tp in _SCALARS:
            return {"type": _SCALARS[tp]}
        if tp is None:
            return {"type": "null"}
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)
        if origin is typing.Annotated:
            return self.annotated(args[0], args[1:])
        if origin is typing.Literal:
            return {"enum": [a.value if isinstance(a, enum.Enum) else a for a in args]}
        if origin in (typing.Union, types.UnionType):
            return {"anyOf": [self.convert(a) for a in args]}
        if origin in (list, typing.List, typing.Sequence):  # noqa: UP006
            item = args[0] if args else Any
            return {"type": "array", "items": self.convert(item)}
        if origin in (set, frozenset, collections.abc.Set):
            item = args[0] if args else Any
            return {"type": "array", "items": self.convert(item), "uniqueItems": True}
        if origin is tuple:
            if len(args) == 2 and args[1] is Ellipsis:
                return {"type": "array", "items": self.convert(args[0])}
            n = len(args)
            items = [self.convert(a) for a in args]
            return {"type": "array", "prefixItems": items, "minItems": n, "maxItems": n}
        if origin in (dict, typing.Dict, typing.Mapping):  # noqa: UP006
            if args and args[0] is not str:
                raise AnnotationError(f"dict keys must be str for JSON, not {args[0]!r}")
            value = args[1] if args else Any
            return {"type": "object", "additionalProperties": self.convert(value)}
        if isinstance(tp, type):
            if issubclass(tp, enum.Enum):
                return {"enum": [member.value for member in tp]}
            if hasattr(tp, "model_json_schema"):  # pydantic v2 model
                return self.pydantic(tp)
            if dataclasses.is_dataclass(tp):
                return self.record(tp, _dataclass_fields(tp))
            if typing.is_typeddict(tp):
                return self.record(tp, _typeddict_fields(tp))
        raise AnnotationError(f"no JSON Schema for the annotation {tp!r}")

    def record(self, tp: type, fields: list[tuple[str, Any, bool]]) -> dict:
        """Dataclasses and TypedDicts: a `$defs` entry (so recursion works) and a ref to it."""
        name = tp.__name__
        ref = {"$ref": f"#/$defs/{name}"}
        if name in self.defs:
            return ref
        self.defs[name] = {}  # reserve: recursive fields refer to it
        properties = {field: self.convert(annotation) for field, annotation, _ in fields}
        body = {
            "type": "object",
            "properties": properties,
            "required": [field for field, _, required in fields if required],
            "additionalProperties": False,
        }
        if tp.__doc__ and not tp.__doc__.startswith(f"{name}("):
            body["description"] = tp.__doc__.strip()
        self.defs[name] = body
        return ref

    def pydantic(self, model: type) -> dict:
        schema = model.model_json_schema(ref_template="#/$defs/{model}")
        subs = schema.pop("$defs", {})
        for sub in (schema, *subs.values()):  # generate declared fields only (pydantic ignores
            if "properties" in sub:  # extra keys on input, but a model should not write them)
                sub.setdefault("additionalProperties", False)
        for name, sub in subs.items():
            self.defs.setdefault(name, sub)
        return schema

    def annotated(self, base: Any, metadata: tuple) -> dict:
        schema = dict(self.convert(base))
        for item in metadata:
            schema.update(self.constraint(item, schema))
        return schema

    def constraint(self, item: Any, schema: dict) -> dict:
        if isinstance(item, dict):
            return item
        kind = type(item).__name__
        if kind in ("Ge", "Gt", "Le", "Lt", "Interval", "MultipleOf"):
            return {
                keyword: getattr(item, attribute)
                for attribute, keyword in _BOUNDS.items()
                if getattr(item, attribute, None) is not None
            }
        lengths = ("minLength", "maxLength") if schema.get("type") == "string" else None
        if schema.get("type") == "array":
            lengths = ("minItems", "maxItems")
        elif schema.get("type") == "object":
            lengths = ("minProperties", "maxProperties")
        if kind in ("MinLen", "MaxLen", "Len") and lengths:
            out = {}
            if getattr(item, "min_length", None) is not None:
                out[lengths[0]] = item.min_length
            if getattr(item, "max_length", None) is not None:
                out[lengths[1]] = item.max_length
            return out
        if kind == "FieldInfo":  # pydantic.Field(...) inside Annotated
            out = {}
            for meta in item.metadata:
                out.update(self.constraint(meta, schema))
            if item.description:
                out["description"] = item.description
            return out
        raise AnnotationError(f"no JSON Schema for the Annotated constraint {item!r}")


def _dataclass_fields(tp: type) -> list[tuple[str, Any, bool]]:
    hints = typing.get_type_hints(tp, include_extras=True)
    out = []
    for f in dataclasses.fields(tp):
        has_default = (
            f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        )
        out.append((f.name, hints[f.name], not has_default))
    return out


def _typeddict_fields(tp: type) -> list[tuple[str, Any, bool]]:
    hints = typing.get_type_hints(tp, include_extras=True)
    required = getattr(tp, "__required_keys__", set(hints))
    out = []
    for name, annotation in hints.items():
        if typing.get_origin(annotation) in (typing.Required, typing.NotRequired):
            annotation = typing.get_args(annotation)[0]
        out.append((name, annotation, name in required))
    return out
