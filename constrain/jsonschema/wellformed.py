"""Is a schema object well formed? The value of every keyword the compiler reads has its type.

The compiler reads keywords by their meaning; a value of the wrong type would be misread
(``"required": "name"`` iterated as the keys ``n``, ``a``, ``m``, ``e``) or crash deep inside.
So each schema object is checked before it is read, against the types the specification's
metaschemas give those keywords, and a wrong one raises `SchemaError` with its JSON pointer.
Keywords the compiler does not read (annotations, unknown names) are not checked: they cannot
be misread.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from constrain.errors import SchemaError

__all__ = ["TYPE_NAMES", "check_json_value", "check_schema_object", "parse_schema_text"]

TYPE_NAMES = ("null", "boolean", "integer", "number", "string", "array", "object")
_MAX_DEPTH = 256  # nesting of a schema's values

# keyword -> the kind of value it takes
_COUNTS = (
    "minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties",
    "minContains", "maxContains",
)  # fmt: skip
_SCHEMAS = (
    "additionalProperties", "additionalItems", "unevaluatedProperties", "unevaluatedItems",
    "contains", "propertyNames", "not", "if", "then", "else",
)  # fmt: skip
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_STRINGS = (
    "pattern", "format", "$ref", "$recursiveRef", "$dynamicRef", "$anchor", "$dynamicAnchor",
    "$schema", "$id",
)  # fmt: skip
_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


def _escape(key: str) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")


def _kind(value: Any) -> str:
    """The JSON name of a value's type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, Mapping):
        return "an object"
    return f"a Python {type(value).__name__} (not JSON)"


def _wrong(keyword: str, pointer: str, expected: str, value: Any) -> SchemaError:
    shown = json.dumps(value)[:60] if _is_json(value) else repr(value)[:60]
    return SchemaError(
        f"invalid schema: {keyword} must be {expected}, not {_kind(value)} ({shown})",
        keyword,
        pointer,
    )


def _is_json(value: Any) -> bool:
    try:
        check_json_value(value, "", "")
    except SchemaError:
        return False
    return True


def _is_schema(value: Any) -> bool:
    return isinstance(value, (bool, Mapping))


def _is_count(value: Any) -> bool:
    """A non-negative integer (``5.0`` is one: JSON Schema counts integer values)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return value >= 0 and (isinstance(value, int) or (math.isfinite(value) and value == int(value)))


def _is_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return isinstance(value, int) or math.isfinite(value)


def check_json_value(value: Any, keyword: str | None, pointer: str, depth: int = 0) -> None:
    """`value` is a JSON value (for `enum`, `const`): objects with string keys, arrays (lists),
    strings, finite numbers, booleans and null."""
    if depth > _MAX_DEPTH:
        raise SchemaError(
            f"invalid schema: a value nested deeper than {_MAX_DEPTH} levels",
            keyword or _last(pointer),
            pointer,
        )
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        limit = sys.get_int_max_str_digits()
        if limit and value.bit_length() > 3 * limit and abs(value) >= 10**limit:
            raise SchemaError(  # no text of it could be read back: json, str() refuse it
                f"invalid schema: an integer of more than {limit} digits (Python's limit, "
                "sys.set_int_max_str_digits)",
                keyword or _last(pointer),
                pointer,
            )
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise SchemaError(f"invalid schema: {value!r} is not a JSON number", keyword, pointer)
        return
    if isinstance(value, str):
        _check_text(value, keyword, pointer)
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            check_json_value(item, keyword, f"{pointer}/{i}", depth + 1)
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise SchemaError(
                    f"invalid schema: an object key must be a string, not {key!r}", keyword, pointer
                )
            _check_text(key, keyword, pointer)
            check_json_value(item, keyword, f"{pointer}/{_escape(key)}", depth + 1)
        return
    raise SchemaError(
        f"invalid schema: {_kind(value)} is not a JSON value ({value!r:.60})", keyword, pointer
    )


def _last(pointer: str) -> str | None:
    """The last key of a JSON pointer that is no array index: the keyword holding the value,
    in a schema."""
    keys = [k for k in pointer.split("/")[1:] if not k.isdigit()]
    return keys[-1].replace("~1", "/").replace("~0", "~") if keys else None


def _check_text(text: str, keyword: str | None, pointer: str) -> None:
    """A string with no lone surrogate (it has no UTF-8 encoding, so no text can match it)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise SchemaError(
            f"invalid schema: the string {text!r:.60} holds a lone surrogate", keyword, pointer
        ) from None


def check_schema_object(s: Mapping, pointer: str) -> None:
    """Raise `SchemaError` (naming keyword and JSON pointer) if a keyword of the schema object
    `s` that the compiler reads has a value of the wrong type. Subschemas are checked when
    they are read (each is a schema object of its own)."""
    for key in s:
        if not isinstance(key, str):
            raise SchemaError(
                f"invalid schema: a keyword must be a string, not {key!r}", None, pointer
            )
    for keyword, value in s.items():
        where = f"{pointer}/{_escape(keyword)}"
        _check_keyword(keyword, value, where)


def _check_keyword(keyword: str, value: Any, where: str) -> None:
    if keyword == "type":
        names = [value] if isinstance(value, str) else value
        if not isinstance(names, list) or not names:
            raise _wrong(keyword, where, "a type name or an array of them", value)
        for name in names:
            if name not in TYPE_NAMES:
                shown = json.dumps(name) if _is_json(name) else repr(name)
                raise SchemaError(
                    f"invalid schema: unknown type {shown[:60]} (one of {', '.join(TYPE_NAMES)})",
                    keyword,
                    where,
                )
        if len(set(names)) != len(names):
            raise SchemaError("invalid schema: type names repeat", keyword, where)
    elif keyword == "enum":
        if not isinstance(value, list):
            raise _wrong(keyword, where, "an array of values", value)
        check_json_value(value, keyword, where)
    elif keyword == "const":
        check_json_value(value, keyword, where)
    elif keyword == "required":
        _check_strings(keyword, value, where)
    elif keyword == "dependentRequired":
        if not isinstance(value, Mapping):
            raise _wrong(keyword, where, "an object of arrays of property names", value)
        for name, need in value.items():
            _check_strings(keyword, need, f"{where}/{_escape(name)}")
    elif keyword == "dependencies":
        if not isinstance(value, Mapping):
            raise _wrong(keyword, where, "an object of schemas or arrays of names", value)
        for name, need in value.items():
            at = f"{where}/{_escape(name)}"
            if isinstance(need, list):
                _check_strings(keyword, need, at)
            elif not _is_schema(need):
                raise _wrong(keyword, at, "a schema or an array of property names", need)
    elif keyword in _COUNTS:
        if not _is_count(value):
            raise _wrong(keyword, where, "a non-negative integer", value)
    elif keyword in _BOUNDS:
        if keyword.startswith("exclusive") and isinstance(value, bool):
            pass  # draft 4's style, read with its minimum / maximum in any dialect
        elif not _is_number(value):
            raise _wrong(keyword, where, "a finite number", value)
    elif keyword == "multipleOf":
        if not _is_number(value) or value <= 0:
            raise _wrong(keyword, where, "a number greater than 0", value)
    elif keyword == "uniqueItems":
        if not isinstance(value, bool):
            raise _wrong(keyword, where, "a boolean", value)
    elif keyword in _STRINGS:
        if not isinstance(value, str):
            raise _wrong(keyword, where, "a string", value)
    elif keyword in _SCHEMAS:
        if not _is_schema(value):
            raise _wrong(keyword, where, "a schema (an object or a boolean)", value)
    elif keyword in _SCHEMA_LISTS:
        if not isinstance(value, list) or not value:
            raise _wrong(keyword, where, "a non-empty array of schemas", value)
        for i, sub in enumerate(value):
            if not _is_schema(sub):
                raise _wrong(keyword, f"{where}/{i}", "a schema (an object or a boolean)", sub)
    elif keyword == "items":
        subs = value if isinstance(value, list) else [value]
        for i, sub in enumerate(subs):
            if not _is_schema(sub):
                at = f"{where}/{i}" if isinstance(value, list) else where
                raise _wrong(keyword, at, "a schema or an array of schemas", sub)
    elif keyword in _SCHEMA_MAPS:
        if not isinstance(value, Mapping):
            raise _wrong(keyword, where, "an object of schemas", value)
        for name, sub in value.items():
            if not isinstance(name, str):
                raise SchemaError(
                    f"invalid schema: a property name must be a string, not {name!r}",
                    keyword,
                    where,
                )
            _check_text(name, keyword, where)
            if not _is_schema(sub):
                raise _wrong(
                    keyword, f"{where}/{_escape(name)}", "a schema (an object or a boolean)", sub
                )


def _check_strings(keyword: str, value: Any, where: str) -> None:
    """An array of strings (property names)."""
    if not isinstance(value, list):
        raise _wrong(keyword, where, "an array of property names", value)
    for i, name in enumerate(value):
        if not isinstance(name, str):
            raise _wrong(keyword, f"{where}/{i}", "a property name (a string)", name)
        _check_text(name, keyword, f"{where}/{i}")


def _integer(text: str) -> int:
    """An integer literal, exactly, however long (`int` refuses more than
    `sys.get_int_max_str_digits` digits; `check_json_value` then says where it stands)."""
    return int(text) if len(text) < 4000 else int(Decimal(text))


def _too_deep(text: str) -> tuple[str | None, str]:
    """(keyword, pointer) of the first value of the JSON `text` nested deeper than
    `_MAX_DEPTH` levels, read without recursion."""
    path: list[list] = []  # per open container: [is object, key or index]
    last = ""
    for token in re.finditer(r'"(?:[^"\\]|\\.)*"|[\[\]{},:]', text):
        t = token.group()
        if t[0] == '"':
            last = t
        elif t == ":" and path:
            path[-1][1] = json.loads(last)
        elif t == "," and path and not path[-1][0]:
            path[-1][1] += 1
        elif t in "[{":
            if len(path) > _MAX_DEPTH:
                break
            path.append([t == "{", None if t == "{" else 0])
        elif path:
            path.pop()
    pointer = "".join(f"/{_escape(key)}" for _, key in path)
    return _last(pointer), pointer


def parse_schema_text(text: str) -> Any:
    """A schema given as JSON text, parsed; text that is not JSON is a `SchemaError` saying
    where the parse failed."""
    try:
        return json.loads(text, parse_int=_integer)
    except RecursionError:
        raise SchemaError(
            f"invalid schema: a value nested deeper than {_MAX_DEPTH} levels",
            *_too_deep(text),
        ) from None
    except json.JSONDecodeError as exc:
        raise SchemaError(
            f"the schema is not JSON text: {exc.msg} at line {exc.lineno} column {exc.colno} "
            f"(character {exc.pos})",
            None,
            "",
        ) from None
