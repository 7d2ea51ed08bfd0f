"""JSON Schema -> grammar IR.

Each schema location becomes a nonterminal whose alternatives are the JSON types the schema
admits (a keyword constrains only instances of its own type, so a schema without ``type``
admits every type its keywords allow). Strings, numbers and property names are lexemes whose
byte DFAs are built exactly (ranges of integers as regexes, intersections and differences of
DFAs); objects and arrays are rules over those lexemes with explicit, bounded whitespace.

Strict by design: a keyword the compiler cannot express exactly raises
`UnsupportedSchemaError` naming the keyword and its JSON pointer; with ``lenient=True`` it is
dropped instead and listed in a warning. A schema is never silently weakened.

Supported so far (see docs/json-schema.md): boolean schemas; type; enum / const; strings with
minLength / maxLength, pattern (ECMA-style search semantics, intersected with the length) and the
formats uuid, ipv4 and date; integers and numbers with integer-valued minimum / maximum /
exclusiveMinimum / exclusiveMaximum (draft 2020-12 and draft 4 styles); arrays with items,
prefixItems, draft-7 array-form items / additionalItems, minItems / maxItems; objects with
properties (schema order), required, additionalProperties (false, true or a schema; extra keys
exclude the declared names exactly), minProperties 0; anyOf; allOf of one schema; $ref to
local JSON pointers, $defs / definitions, recursion.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Mapping
from typing import Any

from constrain.errors import RegexError, UnsupportedSchemaError
from constrain.grammar.ir import GrammarIR, Lexeme, Rule, repeat
from constrain.jsonschema.numbers import integer_range_regex, number_bound_regex
from constrain.regex import ByteDFA, combine, compile_regex, dfa_from_strings

__all__ = ["compile_schema", "WHITESPACE"]

# one JSON-string character as it appears between the quotes (escapes count as one character)
_CHAR = r'(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})'
_PLAIN_CHAR = r'[^"\\\x00-\x1f]'
WHITESPACE = {"compact": None, "default": r"[ \n]{1,40}"}
_FORMATS = {
    "uuid": r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
    "ipv4": r"(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])\.){3}"
    r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])",
    # calendar dates, leap years included
    "date": r"(?:[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
    r"|02-(?:0[1-9]|1[0-9]|2[0-8]))|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)-02-29)",
}
_ANNOTATIONS = {
    "title", "description", "default", "examples", "$comment", "$schema", "$id", "readOnly",
    "writeOnly", "deprecated", "$anchor", "contentEncoding", "contentMediaType", "$vocabulary",
}  # fmt: skip
_TYPES = ("null", "boolean", "integer", "number", "string", "array", "object")
# validation keywords not supported yet (anything else unknown is an annotation, as the spec says)
_NOT_YET = {
    "multipleOf", "patternProperties", "propertyNames", "maxProperties", "dependentRequired",
    "dependentSchemas", "dependencies", "contains", "minContains", "maxContains", "uniqueItems",
    "oneOf", "not", "if", "unevaluatedProperties", "unevaluatedItems", "$dynamicRef",
    "$recursiveRef",
}  # fmt: skip


class _Compiler:
    def __init__(self, root: Any, whitespace: str | None, lenient: bool, max_rules: int):
        self.root = root
        self.ws = WHITESPACE[whitespace] if whitespace in WHITESPACE else whitespace
        self.lenient = lenient
        self.max_rules = max_rules
        self.dropped: list[str] = []
        self.rules: list[Rule] = []
        self.lexemes: dict[str, Lexeme] = {}
        self.done: dict[str, str] = {}  # pointer -> nonterminal

    # -- helpers ------------------------------------------------------------------------------

    def unsupported(self, message: str, keyword: str, pointer: str) -> None:
        if not self.lenient:
            raise UnsupportedSchemaError(message, keyword, pointer)
        self.dropped.append(f"{keyword} at {pointer or '#'}")

    def add(self, lhs: str, rhs: tuple[str, ...]) -> None:
        self.rules.append(Rule(lhs, rhs))
        if len(self.rules) > self.max_rules:
            raise UnsupportedSchemaError(f"the grammar exceeds {self.max_rules} rules", None, "")

    def literal(self, text: str) -> str:
        name = "L_" + re.sub(r"\W", lambda m: f"x{ord(m.group()):x}", text)
        if name not in self.lexemes:
            self.lexemes[name] = Lexeme(name, text, literal=True)
        return name

    def dfa_lexeme(self, hint: str, dfa: ByteDFA) -> str:
        name = f"R{len(self.lexemes)}_{hint}"
        self.lexemes[name] = Lexeme(name, dfa.pattern, automaton=dfa)
        return name

    def sep(self, text: str) -> tuple[str, ...]:
        """A punctuation literal with optional whitespace on both sides."""
        if self.ws is None:
            return (self.literal(text),)
        ws = self.optional_ws()
        return (ws, self.literal(text), ws)

    def optional_ws(self) -> str:
        if "ws?" not in self.done:
            self.done["ws?"] = "ws"
            self.lexemes["WS"] = Lexeme("WS", self.ws)
            self.add("ws", ())
            self.add("ws", ("WS",))
        return "ws"

    def resolve(self, ref: str, pointer: str) -> tuple[Any, str]:
        if not ref.startswith("#"):
            raise UnsupportedSchemaError(
                f"only references inside the document are supported, not {ref!r}", "$ref", pointer
            )
        node: Any = self.root
        for part in ref[1:].split("/")[1:] if ref != "#" else []:
            part = part.replace("~1", "/").replace("~0", "~")
            try:
                node = node[int(part)] if isinstance(node, list) else node[part]
            except (KeyError, IndexError, ValueError, TypeError):
                raise UnsupportedSchemaError(
                    f"reference {ref!r} does not resolve", "$ref", pointer
                ) from None
        return node, ref[1:]

    # -- schemas ------------------------------------------------------------------------------

    def schema(self, schema: Any, pointer: str) -> str:
        """The nonterminal for the schema at `pointer` (compiled once)."""
        found = self.done.get(pointer)
        if found is not None:
            return found
        name = self.done[pointer] = f"s{len(self.done)}"
        if schema is True or schema == {}:
            self.add(name, (self.any_value(),))
        elif schema is False:
            self.add(name, (self.nothing(),))
        elif not isinstance(schema, Mapping):
            raise UnsupportedSchemaError(
                f"a schema must be an object or a boolean, not {type(schema).__name__}",
                None,
                pointer,
            )
        else:
            before = len(self.rules)
            self.object_schema(name, schema, pointer)
            if not any(rule.lhs == name for rule in self.rules[before:]):  # no type is admitted
                self.add(name, (self.nothing(),))
        return name

    def nothing(self) -> str:
        """A lexeme matching no text: rules using it are pruned, an empty start is an error."""
        self.lexemes.setdefault(
            "NOTHING", Lexeme("NOTHING", "(nothing)", automaton=dfa_from_strings([]))
        )
        return "NOTHING"

    def object_schema(self, name: str, schema: Mapping, pointer: str) -> None:
        for key in schema:
            if key in _NOT_YET:
                self.unsupported(f"keyword {key!r} is not supported yet", key, pointer)
        if "$ref" in schema:
            others = set(schema) - {"$ref", "$defs", "definitions"} - _ANNOTATIONS
            if others:
                self.unsupported(
                    f"$ref next to {sorted(others)} is not supported yet", "$ref", pointer
                )
            target, target_pointer = self.resolve(schema["$ref"], pointer)
            self.add(name, (self.schema(target, target_pointer),))
            return
        if "allOf" in schema:
            parts = schema["allOf"]
            rest = {
                k: v
                for k, v in schema.items()
                if k not in ("allOf", *_ANNOTATIONS, "$defs", "definitions")
            }
            if len(parts) == 1 and not rest:
                self.add(name, (self.schema(parts[0], f"{pointer}/allOf/0"),))
                return
            self.unsupported("allOf with several schemas is not supported yet", "allOf", pointer)
        if "anyOf" in schema:
            rest = {
                k: v
                for k, v in schema.items()
                if k not in ("anyOf", *_ANNOTATIONS, "$defs", "definitions")
            }
            if rest:
                self.unsupported(
                    f"anyOf next to {sorted(rest)} is not supported yet", "anyOf", pointer
                )
            for i, sub in enumerate(schema["anyOf"]):
                self.add(name, (self.schema(sub, f"{pointer}/anyOf/{i}"),))
            return
        if "const" in schema or "enum" in schema:
            values = [schema["const"]] if "const" in schema else list(schema["enum"])
            others = set(schema) - {"const", "enum", "type", "$defs", "definitions"} - _ANNOTATIONS
            if others:
                self.unsupported(
                    f"enum/const next to {sorted(others)} is not supported yet", "enum", pointer
                )
            types = _types(schema, pointer)
            for value in values:
                if _json_type(value) in types or (
                    _json_type(value) == "integer" and "number" in types
                ):
                    for ascii_only in (True, False):
                        self.add(name, (self.value_literal(value, ascii_only),))
            return
        for kind in _types(schema, pointer):
            symbol = getattr(self, f"type_{kind}")(schema, pointer)
            if symbol is not None:
                self.add(name, (symbol,))

    def value_literal(self, value: Any, ascii_only: bool = True) -> str:
        """A literal for one JSON value, serialised as `json.dumps` would in this whitespace."""
        separators = (",", ":") if self.ws is None else (", ", ": ")
        return self.literal(json.dumps(value, separators=separators, ensure_ascii=ascii_only))

    def any_value(self) -> str:
        if "any" not in self.done:
            self.done["any"] = "any"
            for kind in _TYPES:
                if kind != "integer":
                    self.add("any", (getattr(self, f"type_{kind}")({}, "#any"),))
        return "any"

    # -- one JSON type each ---------------------------------------------------------------------

    def type_null(self, schema: Mapping, pointer: str) -> str:
        return self.literal("null")

    def type_boolean(self, schema: Mapping, pointer: str) -> str:
        if "bool" not in self.done:
            self.done["bool"] = "bool"
            self.add("bool", (self.literal("true"),))
            self.add("bool", (self.literal("false"),))
        return "bool"

    def type_integer(self, schema: Mapping, pointer: str) -> str:
        lo, hi = self.bounds(schema, pointer)
        pattern = integer_range_regex(lo, hi)
        return None if pattern is None else self.dfa_lexeme("int", compile_regex(pattern))

    def type_number(self, schema: Mapping, pointer: str) -> str:
        lo, lo_strict, hi, hi_strict = self.number_bounds(schema, pointer)
        regexes = [compile_regex(r) for r in number_bound_regex(lo, lo_strict, hi, hi_strict)]
        dfa = regexes[0]
        for other in regexes[1:]:
            dfa = combine(dfa, other, "and", f"{dfa.pattern}&{other.pattern}")
        return None if dfa.is_empty() else self.dfa_lexeme("num", dfa)

    def type_string(self, schema: Mapping, pointer: str) -> str:
        low, high = schema.get("minLength", 0), schema.get("maxLength")
        pattern, fmt = schema.get("pattern"), schema.get("format")
        constrained = pattern is not None or (fmt is not None and fmt in _FORMATS)
        if fmt is not None and fmt not in _FORMATS:
            self.unsupported(f"format {fmt!r} is not supported yet", "format", pointer)
        char = (
            _PLAIN_CHAR if constrained else _CHAR
        )  # with a pattern, characters are written plainly
        body = f"{char}{{{low},{'' if high is None else high}}}"
        dfa = compile_regex(f'"{body}"')
        for keyword, regex in (
            ("pattern", pattern),
            ("format", _FORMATS.get(fmt) if fmt else None),
        ):
            if regex is None:
                continue
            try:
                search = _search_regex(regex) if keyword == "pattern" else regex
                dfa = combine(
                    dfa, compile_regex(f'"(?:{search})"'), "and", f"{dfa.pattern}&{keyword}"
                )
            except RegexError as exc:
                raise UnsupportedSchemaError(
                    f"cannot compile {keyword} {regex!r}: {exc}", keyword, pointer
                ) from None
        return self.dfa_lexeme("str", dfa)

    def type_array(self, schema: Mapping, pointer: str) -> str:
        name = f"arr{len(self.rules)}"
        low, high = schema.get("minItems", 0), schema.get("maxItems")
        items = schema.get("items", True)
        prefix = schema.get("prefixItems", [])
        rest, rest_pointer = items, f"{pointer}/items"
        if isinstance(items, list):  # draft 7: array-form items, then additionalItems
            prefix, rest, rest_pointer = (
                items,
                schema.get("additionalItems", True),
                f"{pointer}/additionalItems",
            )
            prefix_pointer = f"{pointer}/items"
        else:
            prefix_pointer = f"{pointer}/prefixItems"
        heads = [self.schema(s, f"{prefix_pointer}/{i}") for i, s in enumerate(prefix)]
        tail = self.schema(rest, rest_pointer)
        comma = self.sep(",")
        bodies = [
            _joined(heads[:n], comma)
            for n in range(low, len(heads) + 1)
            if high is None or n <= high
        ]
        if high is None or high > len(heads):  # every prefix item, then one or more of the rest
            more_low = max(1, low - len(heads))
            more_high = None if high is None else high - len(heads)
            if heads:
                more = repeat(self.rules, f"{name}_more", (*comma, tail), more_low, more_high)
                bodies.append((*_joined(heads, comma), more))
            else:
                rest_high = None if more_high is None else more_high - 1
                more = repeat(self.rules, f"{name}_more", (*comma, tail), more_low - 1, rest_high)
                bodies.append((tail, more))
        for body in bodies:
            self.add(name, (*self.sep("["), *body, *self.sep("]")))
        return name

    def type_object(self, schema: Mapping, pointer: str) -> str:
        name = f"obj{len(self.rules)}"
        properties = schema.get("properties", {})
        required = set(schema.get("required", []))
        additional = schema.get("additionalProperties", True)
        if schema.get("minProperties", 0) > 0:
            self.unsupported("minProperties is not supported yet", "minProperties", pointer)
        colon, comma = self.sep(":"), self.sep(",")
        members = []
        for key, sub in properties.items():
            value = self.schema(sub, f"{pointer}/properties/{_escape(key)}")
            members.append((key in required, (self.key_literal(key), *colon, value)))
        for key in required - set(properties):
            if additional is False:
                self.add(name, ())  # unsatisfiable: required key that may not appear
                return name
            members.append(
                (
                    True,
                    (
                        self.key_literal(key),
                        *colon,
                        self.schema(additional, f"{pointer}/additionalProperties"),
                    ),
                )
            )
        extra = None
        if additional is not False:
            key = self.extra_key(list(properties) + list(required - set(properties)))
            extra = (key, *colon, self.schema(additional, f"{pointer}/additionalProperties"))
        # chain: m_i = members i.. given whether something was already written (comma needed)
        open_, close = self.sep("{"), self.sep("}")
        after = {}
        for first in (True, False):
            tail = f"{name}_x{int(first)}"
            self.add(tail, ())
            if extra is not None:
                lead = () if first else comma
                more = repeat(self.rules, f"{name}_xm", (*comma, *extra), 0, None)
                self.add(tail, (*lead, *extra, more))
            after[(len(members), first)] = tail
        for i in range(len(members) - 1, -1, -1):
            is_required, member = members[i]
            for first in (True, False):
                chain = f"{name}_{i}_{int(first)}"
                lead = () if first else comma
                self.add(chain, (*lead, *member, after[(i + 1, False)]))
                if not is_required:
                    self.add(chain, (after[(i + 1, first)],))
                after[(i, first)] = chain
        self.add(name, (*open_, after[(0, True)], *close))
        return name

    def key_literal(self, key: str) -> str:
        return self.literal(json.dumps(key))

    def extra_key(self, declared: list[str]) -> str:
        """A lexeme for any property name except the declared ones."""
        any_key = compile_regex(f'"{_CHAR}*"')
        if not declared:
            return self.dfa_lexeme("key", any_key)
        return self.dfa_lexeme(
            "key",
            combine(
                any_key, dfa_from_strings([json.dumps(k) for k in declared]), "minus", "extra key"
            ),
        )

    # -- numeric bounds -------------------------------------------------------------------------

    def bounds(self, schema: Mapping, pointer: str) -> tuple[int | None, int | None]:
        lo, lo_strict, hi, hi_strict = self.number_bounds(schema, pointer)
        if lo is not None:
            lo = lo + 1 if lo_strict else lo
        if hi is not None:
            hi = hi - 1 if hi_strict else hi
        return lo, hi

    def number_bounds(self, schema: Mapping, pointer: str):
        lo = hi = None
        lo_strict = hi_strict = False
        for key in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
            if key not in schema:
                continue
            value = schema[key]
            if isinstance(value, bool):  # draft 4: a flag on minimum / maximum
                continue
            if not isinstance(value, (int, float)) or float(value) != int(value):
                self.unsupported(
                    f"{key} {value!r}: only integer-valued bounds are supported yet", key, pointer
                )
                continue
            value = int(value)
            strict = (
                key.startswith("exclusive")
                or schema.get("exclusive" + key[0].upper() + key[1:]) is True
            )
            if "inimum" in key and (lo is None or value > lo or (value == lo and strict)):
                lo, lo_strict = value, strict
            if "aximum" in key and (hi is None or value < hi or (value == hi and strict)):
                hi, hi_strict = value, strict
        return lo, lo_strict, hi, hi_strict


def _types(schema: Mapping, pointer: str) -> list[str]:
    declared = schema.get("type", list(_TYPES))
    declared = [declared] if isinstance(declared, str) else list(declared)
    for kind in declared:
        if kind not in _TYPES:
            raise UnsupportedSchemaError(f"unknown type {kind!r}", "type", pointer)
    if "integer" in declared and "number" in declared:
        declared.remove("integer")  # every integer is a number
    return [k for k in _TYPES if k in declared]


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _joined(symbols: list[str], comma: tuple[str, ...]) -> tuple[str, ...]:
    out: list[str] = []
    for i, s in enumerate(symbols):
        out.extend((*comma, s) if i else (s,))
    return tuple(out)


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _search_regex(pattern: str) -> str:
    """ECMA-262 `pattern` semantics (search, not full match) as a full-match regex."""
    start = "" if pattern.startswith("^") else f"{_PLAIN_CHAR}*"
    end = "" if pattern.endswith("$") and not pattern.endswith("\\$") else f"{_PLAIN_CHAR}*"
    core = pattern[1:] if pattern.startswith("^") else pattern
    core = core[:-1] if end == "" else core
    return f"{start}(?:{core}){end}"


def compile_schema(
    schema: Any,
    *,
    whitespace: str | None = "compact",
    lenient: bool = False,
    max_rules: int = 50_000,
) -> GrammarIR:
    """Compile a JSON Schema (a dict, a bool or JSON text) to the grammar IR.

    Args:
        whitespace: "compact" (none), "default" (up to 40 spaces/newlines around punctuation,
            which admits `json.dumps` output with or without indentation), or a regex for it.
        lenient: drop what cannot be expressed (with a warning listing it) instead of raising.
        max_rules: limit on the size of the grammar.

    Raises:
        UnsupportedSchemaError: a keyword that cannot be expressed exactly (named, with its
            JSON pointer), in strict mode.
    """
    if isinstance(schema, str):
        schema = json.loads(schema)
    compiler = _Compiler(schema, whitespace, lenient, max_rules)
    start = compiler.schema(schema, "")
    compiler.add("start", (start,))
    if compiler.dropped:
        warnings.warn(
            "lenient JSON Schema compile dropped: " + "; ".join(compiler.dropped), stacklevel=2
        )
    return GrammarIR("start", compiler.rules, compiler.lexemes, [], source=json.dumps(schema)[:200])
