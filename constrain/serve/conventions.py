"""The constraint on a request's content, read from whichever server's convention it uses.

People bring requests written for the servers they used before, and each names structured
output its own way. All of these are read as ours, so none is silently ignored:

- OpenAI: ``response_format`` ``{"type": "text" | "json_object" | "json_schema",
  "json_schema": {"name", "schema", "strict"}}``.
- ours (extra body fields): ``regex``, ``grammar`` (Lark or GBNF text, or a library grammar's
  name), ``choices``, ``json_whitespace``.
- llama.cpp's server: ``response_format`` ``{"type": "json_object", "schema": {...}}`` (and
  ``{"type": "json_schema", "schema": {...}}``), a top-level ``json_schema``, and ``grammar``
  in GBNF.
- vLLM: ``structured_outputs`` ``{"json", "regex", "choice", "grammar", "json_object",
  "disable_any_whitespace", "whitespace_pattern", "disable_additional_properties"}``, and its
  older top-level ``guided_json``, ``guided_regex``, ``guided_choice``, ``guided_grammar``,
  ``guided_whitespace_pattern`` (``guided_decoding_backend`` is accepted: the backend is
  always this one).

At most one constraint per request: a second is a 400 naming both fields. A grammar is read
as GBNF when it defines its rules with ``::=`` and as Lark otherwise (`grammar_syntax`), and
errors say which. What a convention has and we do not (vLLM's ``structural_tag``) is a 400
that names it and says what to use instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from constrain.constraints import ConstraintSpec
from constrain.engine.grammar.gbnf import grammar_syntax
from constrain.serve.errors import RequestError
from constrain.utf8 import lone_surrogate

__all__ = [
    "DEFAULT_JSON_WHITESPACE",
    "FIELDS",
    "INFORMATIONAL",
    "JSON_WHITESPACE",
    "ContentConstraint",
    "content_constraint",
    "schema_options",
]

JSON_WHITESPACE = ("natural", "compact", "default", "pretty")
DEFAULT_JSON_WHITESPACE = "natural"  # the layouts JSON printers (and models) write

# body fields read here beyond OpenAI's response_format and our extensions
FIELDS = {
    "json_schema", "structured_outputs", "guided_json", "guided_regex", "guided_choice",
    "guided_grammar", "guided_whitespace_pattern",
}  # fmt: skip
INFORMATIONAL = {"guided_decoding_backend"}  # accepted: it changes nothing here

_STRUCTURED_OUTPUTS = {
    "json": "schema", "regex": "regex", "choice": "choices", "grammar": "grammar",
    "json_object": "json_object",
}  # fmt: skip
_STRUCTURED_OPTIONS = {
    "disable_any_whitespace", "whitespace_pattern", "disable_additional_properties",
    "disable_fallback",
}  # fmt: skip
_GUIDED = {
    "guided_json": "schema", "guided_regex": "regex", "guided_choice": "choices",
    "guided_grammar": "grammar",
}  # fmt: skip


@dataclass(frozen=True)
class ContentConstraint:
    """What the content must be: the spec, the field it came from (errors name it), and for a
    grammar the syntax it was read in ("lark" or "gbnf")."""

    spec: ConstraintSpec
    param: str
    syntax: str | None = None


def content_constraint(body: Mapping) -> ContentConstraint:
    """The content's constraint, whichever convention names it (see the module docstring).

    Raises:
        RequestError: two constraints, a malformed one, or a field we cannot honour, each
            naming its field.
    """
    options = schema_options(body)  # checked whatever the constraint
    found: list[tuple[str, str, Any]] = []  # (param, kind, value)
    _response_format(body.get("response_format"), found)
    for name in ("regex", "grammar", "choices"):
        if body.get(name) is not None:
            found.append((name, name, body[name]))
    if body.get("json_schema") is not None:  # llama.cpp
        found.append(("json_schema", "schema", body["json_schema"]))
    for name, kind in _GUIDED.items():
        if body.get(name) is not None:
            found.append((name, kind, body[name]))
    outputs = body.get("structured_outputs")
    if outputs is not None:
        _structured_outputs(outputs, found)
    if len(found) > 1:
        first, second = found[0][0], found[1][0]
        raise RequestError(
            f"at most one constraint per request, got {first} and {second}", second
        )
    if not found:
        return ContentConstraint(ConstraintSpec(), "response_format")
    param, kind, value = found[0]
    if kind == "json_object":
        kind, value = "schema", {"type": "object"}
    if kind == "choices" and not (
        isinstance(value, list) and value and all(isinstance(c, str) for c in value)
    ):
        raise RequestError(f"{param} must be a non-empty list of strings", param)
    if kind in ("regex", "grammar") and not isinstance(value, str):
        raise RequestError(f"{param} must be a string", param)
    found = lone_surrogate(value, param) if kind != "schema" else None
    if found is not None:
        raise RequestError(found[1], found[0])
    syntax = grammar_syntax(value) if kind == "grammar" else None
    if kind != "schema":
        return ContentConstraint(ConstraintSpec(**{kind: value}), param, syntax)
    if _option(body, "disable_additional_properties") is True:
        value = closed(value)
    spec = ConstraintSpec(schema=value, schema_options=options)
    return ContentConstraint(spec, param)


def _response_format(fmt: Any, found: list) -> None:
    if fmt is None:
        return
    kinds = ("text", "json_object", "json_schema")
    if not isinstance(fmt, Mapping) or fmt.get("type") not in kinds:
        raise RequestError(
            f"response_format.type must be one of {', '.join(kinds)}, got "
            f"{fmt.get('type') if isinstance(fmt, Mapping) else fmt!r}",
            "response_format.type",
        )
    if fmt["type"] == "json_object":
        if fmt.get("schema") is not None:  # llama.cpp's form
            found.append(("response_format.schema", "schema", fmt["schema"]))
        else:
            found.append(("response_format", "json_object", True))
    elif fmt["type"] == "json_schema":
        spec = fmt.get("json_schema")
        if isinstance(spec, Mapping) and "schema" in spec:
            found.append(("response_format.json_schema.schema", "schema", spec["schema"]))
        elif fmt.get("schema") is not None:  # llama.cpp's form
            found.append(("response_format.schema", "schema", fmt["schema"]))
        else:
            raise RequestError(
                "response_format json_schema needs json_schema.schema",
                "response_format.json_schema.schema",
            )


def _structured_outputs(outputs: Any, found: list) -> None:
    if not isinstance(outputs, Mapping):
        raise RequestError("structured_outputs must be an object", "structured_outputs")
    for name, value in outputs.items():
        param = f"structured_outputs.{name}"
        if name in _STRUCTURED_OUTPUTS:
            if value is not None and value is not False:
                found.append((param, _STRUCTURED_OUTPUTS[name], value))
        elif name == "structural_tag":
            raise RequestError(
                "structured_outputs.structural_tag is not supported here: tool calls in the "
                "model's own format come with tools and tool_choice, any other text with "
                "regex or grammar",
                param,
            )
        elif name not in _STRUCTURED_OPTIONS and not name.startswith("_"):
            known = ", ".join(sorted({*_STRUCTURED_OUTPUTS, *_STRUCTURED_OPTIONS}))
            raise RequestError(f"unknown field {name!r} of structured_outputs (one of {known})",
                               param)  # fmt: skip


def _option(body: Mapping, name: str) -> Any:
    """A vLLM structured-output option, from `structured_outputs` or its older top-level
    ``guided_`` field."""
    outputs = body.get("structured_outputs")
    if isinstance(outputs, Mapping) and outputs.get(name) is not None:
        return outputs[name]
    return body.get(f"guided_{name}")


def schema_options(body: Mapping) -> dict:
    """`Grammar.from_json_schema` options of the request's JSON (content and tool calls):
    the whitespace from `json_whitespace`, else vLLM's ``disable_any_whitespace`` /
    ``whitespace_pattern``, else the server's default.

    Raises:
        RequestError: an unknown `json_whitespace`, or two whitespace fields.
    """
    given = []
    value = body.get("json_whitespace")
    if value is not None:
        if value not in JSON_WHITESPACE:
            raise RequestError(f"json_whitespace must be one of {', '.join(JSON_WHITESPACE)}, "
                               f"got {value!r}", "json_whitespace")  # fmt: skip
        given.append(("json_whitespace", value))
    if _option(body, "disable_any_whitespace") is True:
        given.append(("structured_outputs.disable_any_whitespace", "compact"))
    pattern = _option(body, "whitespace_pattern")
    if pattern is not None:
        if not isinstance(pattern, str) or not pattern:
            raise RequestError("whitespace_pattern must be a regex", "whitespace_pattern")
        found = lone_surrogate(pattern, "whitespace_pattern")
        if found is not None:
            raise RequestError(found[1], found[0])
        given.append(("whitespace_pattern", pattern))
    if len(given) > 1:
        raise RequestError(f"at most one of the whitespace fields, got {given[0][0]} and "
                           f"{given[1][0]}", given[1][0])  # fmt: skip
    return {"whitespace": given[0][1] if given else DEFAULT_JSON_WHITESPACE}


_SCHEMA_MAPS = {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
_SCHEMA_LISTS = {"allOf", "anyOf", "oneOf", "prefixItems", "items"}  # items: a list in draft-04
_SCHEMAS = {
    "items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames",
    "unevaluatedItems", "unevaluatedProperties", "additionalItems",
}  # fmt: skip


def closed(schema: Any) -> Any:
    """`schema` with ``additionalProperties: false`` in every object schema that says nothing
    about other properties (vLLM's ``disable_additional_properties``)."""
    if not isinstance(schema, Mapping):
        return schema
    out = dict(schema)
    for key, value in schema.items():
        if key in _SCHEMA_MAPS and isinstance(value, Mapping):
            out[key] = {name: closed(sub) for name, sub in value.items()}
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [closed(sub) for sub in value]
        elif key in _SCHEMAS:
            out[key] = closed(value)
    is_object = out.get("type") == "object" or "properties" in out
    if is_object and not {"additionalProperties", "unevaluatedProperties"} & set(out):
        out["additionalProperties"] = False
    return out
