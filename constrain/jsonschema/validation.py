"""Validation with `jsonschema`: the validator of each draft, and check sites.

The shape algebra (`constrain.jsonschema.shapes`) is exact, but some combinations have no normal
form: `oneOf` branches whose overlap is "some key matching a pattern has a bad value", `not`
of such schemas, more than 256 alternatives. Rather than refuse the schema, the compiler makes
such a schema object a *check site*: its strings, arrays and objects are relaxed to a superset
the algebra can express (`oneOf` becomes the union of its branches, `not` admits all of them,
`if` becomes `then` or `else`), and the value found there is validated against the schema
object itself (`Validation`) as soon as it is complete: at its closing quote or bracket. The
text check (`constrain.jsonschema.checks`) refuses the token that completes an invalid value.
A number, null or boolean has no such end (``1`` may go on as ``12``): one that ends the
document is never seen complete, so a site keeps those exact in its shape (the algebra is exact
on them: `ShapeAlgebra.unquoted`, `ShapeAlgebra.relaxed`). So the language is exactly the
schema's.

A check decides only where the value's schema is known. Inside an alternative (`anyOf`,
`oneOf`, `not`, `if`/`then`/`else`, `dependentSchemas`, `contains`, `unevaluated*`) a value may be
following another branch, so every schema object with such an applicator whose subschemas can
reach a site is a site too (`sites_reaching`): the checks deeper down then only refuse values
that no branch can accept, and the site's own check decides.

The price: the grammar does not look ahead past a check, so a generation can write a value
whose every completion fails it (a dead end, which `generate` backtracks out of).

Numbers are validated as the compiler reads them, exactly (`exact_validator`): an instance's
numbers are the `Decimal` of their JSON text (`load_exact`), a schema's floats the `Decimal` of
their shortest text (`exact_numbers`), and `multipleOf` divides exactly. With floats, 0.3 is
not a multiple of 0.1 (0.3 / 0.1 is 2.9999999999999996), though the grammar admits it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from decimal import Decimal
from fractions import Fraction
from functools import cache
from typing import Any

import jsonschema

from constrain.errors import UnsupportedSchemaError
from constrain.jsonschema.refs import DOCUMENT_BASE, Resources

__all__ = [
    "DRAFTS",
    "Validation",
    "Validators",
    "draft_validator",
    "exact_numbers",
    "exact_validator",
    "load_exact",
    "sites_reaching",
]

DRAFTS = {
    "2020-12": "Draft202012Validator",
    "2019-09": "Draft201909Validator",
    "draft-07": "Draft7Validator",
    "draft-06": "Draft6Validator",
    "draft-04": "Draft4Validator",
}

# applicators whose subschemas hold alternatives (a value there may follow another branch)
_ALTERNATIVES = (
    "anyOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "dependentSchemas",
    "dependencies",
    "contains",
    "unevaluatedProperties",
    "unevaluatedItems",
)
_SINGLE = (
    "additionalProperties",
    "additionalItems",
    "unevaluatedProperties",
    "unevaluatedItems",
    "contains",
    "propertyNames",
    "not",
    "if",
    "then",
    "else",
)
_LISTS = ("prefixItems", "allOf", "anyOf", "oneOf")
_MAPS = ("properties", "patternProperties", "dependentSchemas", "dependencies")
_REFS = ("$ref", "$recursiveRef", "$dynamicRef")


def draft_validator(draft: str):
    """The `jsonschema` validator class of a dialect named as in `DRAFTS` (None if unknown)."""
    name = DRAFTS.get(draft)
    return getattr(jsonschema, name) if name else None


def exact_numbers(value: Any) -> Any:
    """JSON data with every float replaced by the `Decimal` of its shortest text (``0.1`` is
    exactly 1/10), the value the compiler reads; other values as they are."""
    if isinstance(value, float):
        return Decimal(repr(value))
    if isinstance(value, list):
        return [exact_numbers(item) for item in value]
    if isinstance(value, Mapping):
        return {key: exact_numbers(item) for key, item in value.items()}
    return value


def load_exact(text: str | bytes) -> Any:
    """JSON text parsed with each number exact: an integer an `int`, any other a `Decimal`."""
    return json.loads(text, parse_float=Decimal)


def _multiple_of(validator, step, instance, schema):
    """`multipleOf`, divided exactly (`Decimal`'s own remainder fails past 28 digits)."""
    if not validator.is_type(instance, "number"):
        return
    if (Fraction(instance) / Fraction(step)).denominator != 1:
        yield jsonschema.ValidationError(f"{instance} is not a multiple of {step}")


@cache
def exact_validator(cls):
    """The validator class `cls` over exact numbers (`load_exact`, `exact_numbers`): an
    integral `Decimal` is an integer where `cls` counts ``1.0`` as one (not draft 4), and
    `multipleOf` divides exactly."""
    checker = cls.TYPE_CHECKER
    if checker.is_type(1.0, "integer"):
        checker = checker.redefine(
            "integer",
            lambda c, x: (
                cls.TYPE_CHECKER.is_type(x, "integer")
                or (isinstance(x, Decimal) and x == x.to_integral_value())
            ),
        )
    return jsonschema.validators.extend(
        cls, validators={"multipleOf": _multiple_of}, type_checker=checker
    )


class Validation:
    """The check "the value validates against the schema object at `pointer`"."""

    __slots__ = ("pointer", "_validator")

    def __init__(self, validator, pointer: str):
        self.pointer = pointer
        self._validator = validator

    def __call__(self, value: Any) -> bool:
        """Whether `value` (JSON data with exact numbers: `load_exact`) validates."""
        return self._validator.is_valid(value)

    def __repr__(self) -> str:
        return f"Validation({self.pointer or '#'})"


class Validators:
    """Validators for the schema objects of one document: its draft, its references resolved
    in the document, formats checked, numbers exact (`exact_validator`)."""

    def __init__(self, root: Any, draft: str | None):
        cls = draft_validator(draft) if draft else None
        if cls is None:
            cls = jsonschema.validators.validator_for(root, default=jsonschema.Draft202012Validator)
        cls = exact_validator(cls)
        self._root = cls(exact_numbers(root), format_checker=jsonschema.FormatChecker())

    def validation(self, schema: Mapping, base: str, pointer: str) -> Validation:
        """The check for `schema`, a schema object of the document whose base URI is `base`."""
        resolver = self._root._resolver
        if base != DOCUMENT_BASE:  # inside a resource with its own $id
            resolver = resolver.lookup(base).resolver
        exact = exact_numbers(schema)
        return Validation(self._root.evolve(schema=exact, _resolver=resolver), pointer)


def sites_reaching(resources: Resources, targets: set, key) -> frozenset:
    """`targets` and the schema objects with an applicator of alternatives whose subschemas
    can reach one of them (through any subschema or reference). Schema objects are named by
    `key` (equal subtrees share a key, so every copy of a target counts)."""
    edges: dict[int, list[int]] = {}
    alternatives: dict[int, list[int]] = {}
    nodes: dict[int, Mapping] = {}
    stack = [resources.root]
    while stack:
        node = stack.pop()
        if not isinstance(node, Mapping) or id(node) in nodes:
            continue
        nodes[id(node)] = node
        subs = _subschemas(node, resources)
        edges[id(node)] = [id(sub) for _, sub in subs]
        alternatives[id(node)] = [id(sub) for keyword, sub in subs if keyword in _ALTERNATIVES]
        stack.extend(sub for _, sub in subs)
    callers: dict[int, list[int]] = {}
    for node, subs in edges.items():
        for sub in subs:
            callers.setdefault(sub, []).append(node)
    reaching = {node for node in nodes if key(nodes[node]) in targets}
    todo = list(reaching)
    while todo:
        for caller in callers.get(todo.pop(), ()):
            if caller not in reaching:
                reaching.add(caller)
                todo.append(caller)
    found = set(targets)
    for node, subs in alternatives.items():
        if any(sub in reaching for sub in subs):
            found.add(key(nodes[node]))
    return frozenset(found)


def _subschemas(node: Mapping, resources: Resources) -> list[tuple[str, Mapping]]:
    """The schema objects `node` applies, with the keyword applying each (references
    resolved; `$defs` are reached only through references)."""
    out: list[tuple[str, Any]] = []
    for keyword in _SINGLE:
        if keyword in node:
            out.append((keyword, node[keyword]))
    for keyword in _LISTS:
        if isinstance(node.get(keyword), list):
            out.extend((keyword, sub) for sub in node[keyword])
    for keyword in _MAPS:
        if isinstance(node.get(keyword), Mapping):
            out.extend((keyword, sub) for sub in node[keyword].values())
    items = node.get("items")
    if isinstance(items, list):
        out.extend(("items", sub) for sub in items)
    elif items is not None:
        out.append(("items", items))
    base = resources.base(node)
    for keyword in _REFS:
        ref = node.get(keyword)
        if isinstance(ref, str):
            target = "#" if keyword == "$recursiveRef" else ref
            try:
                out.append((keyword, resources.resolve(target, base, keyword, "")[0]))
            except UnsupportedSchemaError:  # the compiler reports it where it is used
                pass
    return [(keyword, sub) for keyword, sub in out if isinstance(sub, Mapping)]
