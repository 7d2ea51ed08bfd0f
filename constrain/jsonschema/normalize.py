"""JSON Schema documents -> `Shape` graphs (the normal form the grammar is emitted from).

Each schema object becomes the intersection of its parts: the shape its type-specific keywords
give (a keyword constrains only instances of its own type), `enum`/`const`, references, and the
applicators (`allOf`, `anyOf`, `oneOf`, `not`, `if`/`then`/`else`, dependencies). Then
`unevaluatedProperties` / `unevaluatedItems` apply to what no successful part annotated.

Every keyword is listed in `constrain.jsonschema.keywords.KEYWORDS`. A schema object whose
applicators the algebra cannot combine exactly becomes a *check site* (see
`constrain.jsonschema.validation`): `shape` raises `InexactSchema` naming it, and the compiler
normalizes again with it (and the objects whose alternatives reach it) among `sites`. What even
a site cannot express raises `UnsupportedSchemaError` with its JSON pointer (or, when lenient, is
dropped and reported). Unknown keywords are annotations, as the specification says.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from constrain.engine.regex import (
    ByteDFA,
    compile_regex,
    dfa_from_strings,
    escaped,
    quoted,
    syntax_chars,
)
from constrain.errors import Abandoned, RegexError, UnsupportedSchemaError, WorkLimitError
from constrain.jsonschema.algebra import ShapeAlgebra
from constrain.jsonschema.formats import FORMATS, format_dfa
from constrain.jsonschema.keywords import SPEC_FORMATS
from constrain.jsonschema.numbers import (
    INTEGER,
    INTEGER_LITERAL,
    NUMBER,
    bound_regex,
    multiple_of_dfa,
)
from constrain.jsonschema.refs import Resources
from constrain.jsonschema.shapes import (
    ANY,
    ANY_CHAR,
    NOTHING,
    STRINGS,
    ArrayShape,
    KeySet,
    Lengths,
    ObjectShape,
    Prop,
    Region,
    Shape,
    ShapeUnsupported,
    key_text,
    only,
)
from constrain.jsonschema.validation import Validators
from constrain.jsonschema.wellformed import TYPE_NAMES, check_schema_object

__all__ = ["Contents", "InexactSchema", "Normalizer"]


class Contents:
    """Keys of a document's schema objects by content: equal subtrees get equal keys (small
    ints, so keys hash in constant time). One per compilation (its passes share the keys)."""

    def __init__(self):
        # id(node) -> (node, key): the entry holds the node, so its id is never reused while
        # the entry lives (nodes are dicts and lists: they cannot be keys themselves)
        self._of: dict[int, tuple[Any, int]] = {}
        self._keys: dict[tuple, int] = {}

    def of(self, node: Any) -> int:
        found = self._of.get(id(node))
        if found is not None:
            return found[1]
        if isinstance(node, Mapping):
            shape = ("o", *sorted((str(k), self.of(v)) for k, v in node.items()))
        elif isinstance(node, list):
            shape = ("a", *(self.of(v) for v in node))
        else:  # the type name keeps 1, 1.0 and True apart
            shape = ("v", type(node).__name__, node)
        key = self._keys.setdefault(shape, len(self._keys))
        self._of[id(node)] = (node, key)
        return key


class InexactSchema(Exception):
    """The algebra cannot combine the applicators of `schema` exactly: it should be a check
    site (not an error: the compiler normalizes again with it among the sites)."""

    def __init__(self, schema: Mapping, message: str, keyword: str | None, pointer: str):
        super().__init__(message)
        self.schema, self.message, self.keyword, self.pointer = schema, message, keyword, pointer


_MAX_BOUND_DIGITS = 50  # of a minimum / maximum, either side of the point (float32 max: 39)
_LONG = 256  # longer length bounds stay symbolic (counted in the grammar), unless combined
_LEGACY = ("draft-04", "draft-06", "draft-07", "draft4", "draft6", "draft7")
_DRAFT4 = ("draft-04", "draft4")
# keywords a declared older dialect does not have: its validators ignore them (annotations)
_SINCE_2019 = frozenset(
    {
        "dependentRequired", "dependentSchemas", "unevaluatedProperties", "unevaluatedItems",
        "minContains", "maxContains", "prefixItems", "$recursiveRef", "$dynamicRef",
    }
)  # fmt: skip
_NEWER_THAN = {
    ("draft-04", "draft4"): _SINCE_2019
    | {"const", "contains", "propertyNames", "if", "then", "else"},
    ("draft-06", "draft6"): _SINCE_2019 | {"if", "then", "else"},
    ("draft-07", "draft7"): _SINCE_2019,
}


class Normalizer:
    """Turns the schemas of one document into shapes, memoised per content (equal subtrees,
    as in documents with their definitions inlined, are normalised once).

    `algebra` is the compilation's `ShapeAlgebra` (its operations, memos and deadline); `sites`
    holds the `contents` keys of the schema objects validated on the value (check sites)."""

    def __init__(
        self,
        root: Any,
        *,
        algebra: ShapeAlgebra,
        lenient: bool = False,
        max_depth: int = 64,
        draft: str | None = None,
        sites: frozenset[int] = frozenset(),
        contents: Contents | None = None,
    ):
        dialect = draft or (root.get("$schema", "") if isinstance(root, Mapping) else "")
        self.legacy = isinstance(dialect, str) and any(d in dialect for d in _LEGACY)
        # draft 4 counts only integer literals as integers (6 and later also accept 1.0)
        self.draft4 = isinstance(dialect, str) and any(d in dialect for d in _DRAFT4)
        self.not_keywords: frozenset[str] = frozenset()
        for names, newer in _NEWER_THAN.items():
            if isinstance(dialect, str) and any(d in dialect for d in names):
                self.not_keywords = newer
        self.resources = Resources(root, legacy_ids=self.legacy)
        self.algebra = algebra
        self.lenient = lenient
        self.sites = sites
        self.contents = contents or Contents()
        self._validators: Validators | None = None
        self._draft = draft
        self.max_depth = max_depth
        self.dropped: list[str] = []
        self.memo: dict[tuple, Shape] = {}  # (content key, base, scope) -> shape
        self.pending: dict[tuple, Shape] = {}
        self.used: set[tuple] = set()  # pending placeholders handed out through a cycle
        self.depth = 0

    # -- entry points -------------------------------------------------------------------------

    def unsupported(self, message: str, keyword: str, pointer: str) -> None:
        if not self.lenient:
            raise UnsupportedSchemaError(message, keyword, pointer)
        self.dropped.append(f"{keyword} at {pointer or '#'} ({message})")

    def _regex(self, pattern: str, **options) -> ByteDFA:
        """`pattern` compiled within the compilation's deadline."""
        return compile_regex(pattern, timeout=self.algebra.time_left(), **options)

    def shape(self, schema: Any, pointer: str, scope: tuple[str, ...] = ()) -> Shape:
        """The shape of the schema at `pointer` seen through the dynamic `scope`."""
        if schema is True:
            return ANY
        if schema is False:
            return NOTHING
        self.algebra.time_left()  # raises CompileTimeout past the compilation's deadline
        if not isinstance(schema, Mapping):
            raise UnsupportedSchemaError(
                f"a schema must be an object or a boolean, not {type(schema).__name__}",
                None,
                pointer,
            )
        base = self.resources.base(schema)
        if self.resources.has_dynamic and (not scope or scope[-1] != base) and base not in scope:
            scope = (*scope, base)
        key = (self.contents.of(schema), base, scope if self.resources.has_dynamic else ())
        done = self.memo.get(key)
        if done is not None:
            return done
        waiting = self.pending.get(key)
        if waiting is not None:  # a cycle: the placeholder is filled when the schema is done
            self.used.add(key)
            return waiting
        if self.depth >= self.max_depth:
            raise UnsupportedSchemaError(  # named by the keyword holding the deepest schema
                f"schema nesting deeper than {self.max_depth}",
                pointer.rsplit("/", 1)[-1] or None,
                pointer,
            )
        self.algebra.time_left(8 * len(schema))  # its keywords read: several units each
        placeholder = self.pending[key] = Shape(pointer or "#")
        self.depth += 1
        try:
            result = self._schema(schema, pointer, base, scope)
        except ShapeUnsupported as exc:
            if key[0] not in self.sites and not self.resources.has_dynamic:
                raise InexactSchema(schema, str(exc), _culprit(schema), pointer) from None
            self.unsupported(str(exc), _culprit(schema), pointer)
            result = ANY
        except RegexError as exc:
            self.unsupported(f"an automaton limit was reached: {exc}", _culprit(schema), pointer)
            result = ANY
        finally:
            self.depth -= 1
            del self.pending[key]
        if key not in self.used:
            self.memo[key] = result
            return result
        self.memo[key] = placeholder
        return self.algebra.later([result], placeholder, result.parts)

    # -- one schema object ----------------------------------------------------------------------

    def _schema(self, s: Mapping, ptr: str, base: str, scope: tuple[str, ...]) -> Shape:
        algebra = self.algebra
        if not self.not_keywords.isdisjoint(s):  # keywords of later drafts are annotations
            s = {k: v for k, v in s.items() if k not in self.not_keywords}
        if self.legacy and "$ref" in s:  # before 2019-09, $ref replaces its siblings
            return self._ref(s["$ref"], base, scope, "$ref", ptr)
        check_schema_object(s, ptr)
        site = self.contents.of(s) in self.sites  # alternatives relaxed, value validated
        parts: list[Shape] = [self._own(s, ptr, scope)]
        if "enum" in s:  # enum and const both apply when both are given
            if not isinstance(s["enum"], list):
                raise UnsupportedSchemaError("enum must be an array", "enum", ptr)
            parts.append(self.values(s["enum"]))
        if "const" in s:
            parts.append(self.value(s["const"]))
        for keyword in ("$ref", "$recursiveRef"):
            if keyword in s:
                parts.append(self._ref(s[keyword], base, scope, keyword, ptr))
        if "$dynamicRef" in s:
            target = self.resources.dynamic_target(s["$dynamicRef"], base, scope, ptr)
            parts.append(self.shape(target[0], target[2], scope))
        for i, sub in enumerate(s.get("allOf", [])):
            parts.append(self.shape(sub, f"{ptr}/allOf/{i}", scope))
        if "anyOf" in s:
            parts.append(algebra.union(self._each(s, "anyOf", ptr, scope), drop_checks=site))
        if "oneOf" in s:
            branches = self._each(s, "oneOf", ptr, scope)
            if site:  # numbers, null, booleans exactly; the rest as in any branch
                exact = self._one_of([algebra.unquoted(b) for b in branches], ptr)
                parts.append(algebra.relaxed(exact, algebra.union(branches, drop_checks=True)))
            else:
                parts.append(self._one_of(branches, ptr))
        if "not" in s:
            negated = self.shape(s["not"], f"{ptr}/not", scope)
            # at a site: numbers, null, booleans negated exactly; every string, array, object
            parts.append(algebra.complement(algebra.unquoted(negated) if site else negated))
        if "if" in s:
            parts.append(self._if_then_else(s, ptr, scope, site))
        parts.extend(self._dependencies(s, ptr, scope, site))
        result = ANY
        for part in sorted(parts, key=lambda p: p is not ANY):
            result = algebra.intersect(result, part)
        if "unevaluatedProperties" in s or "unevaluatedItems" in s:
            result = self._unevaluated(s, result, ptr, scope)
        if site:
            if self._validators is None:
                self._validators = Validators(self.resources.root, self._draft)
            result = algebra.with_check(result, self._validators.validation(s, base, ptr))
        return result

    def _ref(self, ref: Any, base: str, scope, keyword: str, ptr: str) -> Shape:
        if not isinstance(ref, str):
            raise UnsupportedSchemaError(f"{keyword} must be a string", keyword, ptr)
        if keyword == "$recursiveRef":
            ref = "#"
        target = self.resources.resolve(ref, base, keyword, ptr)
        return self.shape(target[0], target[2], scope)

    def _each(self, s: Mapping, keyword: str, ptr: str, scope) -> list[Shape]:
        subs = s[keyword]
        if not isinstance(subs, list) or not subs:
            raise UnsupportedSchemaError(f"{keyword} must be a non-empty array", keyword, ptr)
        return [self.shape(sub, f"{ptr}/{keyword}/{i}", scope) for i, sub in enumerate(subs)]

    def _one_of(self, branches: list[Shape], ptr: str) -> Shape:
        """Exactly one branch: each branch minus the others it may overlap."""
        algebra = self.algebra
        exclusive = []
        for i, branch in enumerate(branches):
            part = branch
            for j, other in enumerate(branches):
                if i != j and not algebra.disjoint(branch, other):
                    try:
                        part = algebra.difference(part, other)
                    except ShapeUnsupported as exc:
                        raise ShapeUnsupported(
                            f"oneOf branches {i} and {j} may overlap and the overlap cannot be "
                            f"excluded exactly ({exc})"
                        ) from None
            exclusive.append(part)
        return algebra.union(exclusive)

    def _if_then_else(self, s: Mapping, ptr: str, scope, site: bool) -> Shape:
        """`then` where `if` holds, `else` elsewhere; at a check site, numbers, null and booleans
        exactly, strings, arrays and objects as in either branch (the site's check decides)."""
        algebra = self.algebra
        condition = self.shape(s["if"], f"{ptr}/if", scope)
        then = self.shape(s.get("then", True), f"{ptr}/then", scope)
        other = self.shape(s.get("else", True), f"{ptr}/else", scope)
        if not site:
            otherwise = algebra.difference(other, condition)
            return algebra.union([algebra.intersect(condition, then), otherwise])
        wider = algebra.union([algebra.intersect(condition, then), other], drop_checks=True)
        condition, then, other = (algebra.unquoted(x) for x in (condition, then, other))
        exact = algebra.union(
            [algebra.intersect(condition, then), algebra.difference(other, condition)]
        )
        return algebra.relaxed(exact, wider)

    def _dependencies(self, s: Mapping, ptr: str, scope, site: bool) -> list[Shape]:
        """dependentRequired / dependentSchemas / draft-7 dependencies: per trigger key, objects
        without it, or with it and what it demands (non-objects are unaffected)."""
        algebra = self.algebra
        out = []
        pairs: list[tuple[str, str, Any]] = []
        for keyword in ("dependentRequired", "dependentSchemas", "dependencies"):
            for key, need in (s.get(keyword) or {}).items():
                pairs.append((keyword, key, need))
        for keyword, key, need in pairs:
            where = f"{ptr}/{keyword}/{_escape(key)}"
            if isinstance(need, list):
                demand = _object_only(
                    ObjectShape(
                        {k: Prop(ANY) for k in [key, *need]},
                        (Region(KeySet(excluded=frozenset([key, *need])), ANY),),
                        frozenset([key, *need]),
                    )
                )
            else:
                demand = algebra.intersect(_with_required(key), self.shape(need, where, scope))
            without = _object_only(
                ObjectShape({key: Prop(NOTHING)}, (Region(KeySet(excluded=frozenset([key])), ANY),))
            )
            out.append(algebra.union([_non_objects(), without, demand], drop_checks=site))
        return out

    def _unevaluated(self, s: Mapping, shape: Shape, ptr: str, scope) -> Shape:
        """unevaluatedProperties / unevaluatedItems constrain what no part annotated."""
        props = items = ANY
        if "unevaluatedProperties" in s:
            props = self.shape(s["unevaluatedProperties"], f"{ptr}/unevaluatedProperties", scope)
        if "unevaluatedItems" in s:
            items = self.shape(s["unevaluatedItems"], f"{ptr}/unevaluatedItems", scope)
        return self.algebra.later(
            [shape],
            Shape(),
            lambda: (
                shape.scalars,
                [self._cover_array(a, items) for a in shape.arrays],
                [self._cover_object(o, props) for o in shape.objects],
                shape.text,
                shape.checks,
            ),
        )

    def _cover_object(self, o: ObjectShape, extra: Shape) -> ObjectShape:
        """`o` with `extra` applied to the members no keyword annotated."""
        algebra = self.algebra
        named = {
            k: p if p.evaluated else Prop(algebra.intersect(p.value, extra), True)
            for k, p in o.named.items()
        }
        regions = tuple(
            r
            if r.evaluated
            else Region(r.keys, algebra.intersect(r.value, extra), True, r.by_pattern)
            for r in o.regions
        )
        return ObjectShape(named, regions, o.required, o.min_props, o.max_props)

    def _cover_array(self, a: ArrayShape, extra: Shape) -> ArrayShape:
        """`a` with `extra` applied to the items no keyword annotated."""
        if a.rest_evaluated:
            return a
        algebra = self.algebra
        prefix = tuple(
            x if i < a.evaluated else algebra.intersect(x, extra) for i, x in enumerate(a.prefix)
        )
        return ArrayShape(
            prefix,
            algebra.intersect(a.items, extra),
            a.min_items,
            a.max_items,
            a.contains,
            a.min_contains,
            a.max_contains,
            a.unique,
            len(prefix),
            True,
        )

    # -- type-specific keywords ------------------------------------------------------------------

    def _own(self, s: Mapping, ptr: str, scope) -> Shape:
        algebra = self.algebra
        declared = s.get("type", list(TYPE_NAMES))  # well formed (check_schema_object)
        declared = [declared] if isinstance(declared, str) else declared
        scalars = dfa_from_strings([])
        if "null" in declared:
            scalars = algebra.dfa_or(scalars, _LITERALS["null"])
        if "boolean" in declared:
            scalars = algebra.dfa_or(scalars, _LITERALS["boolean"])
        if "number" in declared or "integer" in declared:
            scalars = algebra.dfa_or(
                scalars, self._number(s, ptr, integer="number" not in declared)
            )
        text = None
        if "string" in declared:
            strings = self._string(s, ptr)
            if isinstance(strings, Lengths):
                text = strings
            else:
                scalars = algebra.dfa_or(scalars, strings)
        arrays = [self._array(s, ptr, scope)] if "array" in declared else []
        objects = self._object(s, ptr, scope) if "object" in declared else []
        if len(declared) == len(TYPE_NAMES) and not _TYPE_KEYWORDS.intersection(s):
            return ANY
        return only(scalars=scalars, arrays=arrays, objects=objects, text=text)

    def _number(self, s: Mapping, ptr: str, integer: bool) -> ByteDFA:
        algebra = self.algebra
        dfa = self._regex((INTEGER_LITERAL if self.draft4 else INTEGER) if integer else NUMBER)
        for keyword in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
            if keyword not in s or isinstance(s[keyword], bool):
                continue  # draft 4 booleans are read with their minimum / maximum below
            value = _bound(s[keyword], keyword, ptr)
            lower = "inimum" in keyword
            strict = (
                keyword.startswith("exclusive")
                or s.get("exclusiveMinimum" if lower else "exclusiveMaximum") is True
            )
            dfa = algebra.dfa_and(dfa, self._regex(bound_regex(value, strict, lower)))
        if "multipleOf" in s:
            step = _decimal(s["multipleOf"], "multipleOf", ptr)
            if step <= 0:
                raise UnsupportedSchemaError("multipleOf must be > 0", "multipleOf", ptr)
            try:
                dfa = algebra.dfa_and(dfa, multiple_of_dfa(step))
            except (WorkLimitError, Abandoned):  # ValueErrors too, but not the step's
                raise
            except ValueError as exc:
                self.unsupported(str(exc), "multipleOf", ptr)
        return dfa

    def _string(self, s: Mapping, ptr: str) -> ByteDFA | Lengths:
        """The strings of a schema: a DFA, or `Lengths` when a length bound applies and it is
        long, or would make the pattern's DFA huge. A length bound becomes part of the DFA only
        where it constrains: not when `pattern` / `format` admit every string (then it stays
        symbolic), nor a `maxLength` that no string of theirs reaches."""
        algebra = self.algebra
        low, high = int(s.get("minLength", 0)), s.get("maxLength")
        high = None if high is None else int(high)
        dfa = STRINGS
        if "pattern" in s:
            search = _search(s["pattern"])
            dfa = algebra.dfa_and(
                dfa, self._string_dfa(search, "pattern", ptr, dialect="ecma", given=s["pattern"])
            )
        fmt = s.get("format")
        if fmt in FORMATS:
            dfa = algebra.dfa_and(dfa, quoted(format_dfa(fmt)))
        elif fmt in SPEC_FORMATS:
            self.unsupported(f"format {fmt!r} is not supported", "format", ptr)
        if dfa is not STRINGS and algebra.empty_combination(STRINGS, dfa, "minus"):
            dfa = STRINGS  # the pattern admits every string
        if dfa is STRINGS and max(low, high or 0) > _LONG:
            return Lengths(low, high)
        if high is not None and dfa is not STRINGS:
            longest = dfa.longest()  # bytes between the quotes: at least as many as characters
            if longest is not None and longest - 2 <= high:
                high = None
        if low or high is not None:
            try:
                return algebra.bounded(dfa, low, high)
            except ShapeUnsupported as exc:
                keyword = "maxLength" if high is not None else "minLength"
                raise UnsupportedSchemaError(str(exc), keyword, ptr) from None
        return dfa

    def _string_dfa(
        self, pattern: str, keyword: str, ptr: str, dialect="python", given: str | None = None
    ) -> ByteDFA:
        """The quoted strings matching `pattern`; an error names `given`, the user's pattern
        (`pattern` may be its search form)."""
        try:
            return quoted(self._regex(pattern, dialect=dialect, encoding="json"))
        except RegexError as exc:
            what = str(exc) if given is None else f"{given!r}: {exc.reason}"
            self.unsupported(f"cannot compile {keyword} {what}", keyword, ptr)
            return STRINGS

    def _array(self, s: Mapping, ptr: str, scope) -> ArrayShape:
        items = s.get("items")
        if isinstance(items, list):  # before 2020-12: positional items, then additionalItems
            prefix_key, prefix, rest_key = "items", items, "additionalItems"
        else:
            prefix_key, prefix, rest_key = "prefixItems", s.get("prefixItems", []), "items"
        heads = tuple(
            self.shape(sub, f"{ptr}/{prefix_key}/{i}", scope) for i, sub in enumerate(prefix)
        )
        rest = self.shape(s.get(rest_key, True), f"{ptr}/{rest_key}", scope)
        contains = None
        if "contains" in s:
            contains = self.shape(s["contains"], f"{ptr}/contains", scope)
        unique = s.get("uniqueItems") is True  # checked on the text (jsonschema.checks)
        return ArrayShape(
            prefix=heads,
            items=rest,
            min_items=int(s.get("minItems", 0)),
            max_items=None if s.get("maxItems") is None else int(s["maxItems"]),
            contains=contains,
            min_contains=int(s.get("minContains", 1)) if contains is not None else 1,
            max_contains=s.get("maxContains") if contains is not None else None,
            unique=unique,
            evaluated=len(heads),
            rest_evaluated=rest_key in s,
        )

    def _object(self, s: Mapping, ptr: str, scope) -> list[ObjectShape]:
        algebra = self.algebra
        properties = s.get("properties", {})
        patterns = [
            (
                self._key_pattern(p, ptr),
                self.shape(sub, f"{ptr}/patternProperties/{_escape(p)}", scope),
            )
            for p, sub in s.get("patternProperties", {}).items()
        ]
        has_additional = "additionalProperties" in s
        additional = self.shape(
            s.get("additionalProperties", True), f"{ptr}/additionalProperties", scope
        )
        required = list(dict.fromkeys(s.get("required", [])))
        named: dict[str, Prop] = {}
        for key in [*properties, *(k for k in required if k not in properties)]:
            text = key_text(key)
            matching = [value for keys, value in patterns if keys.matches(text)]
            if key in properties:
                value = self.shape(properties[key], f"{ptr}/properties/{_escape(key)}", scope)
                evaluated = True
            else:
                value = ANY if matching else additional
                evaluated = bool(matching) or has_additional
            for extra in matching:
                value = algebra.intersect(value, extra)
            named[key] = Prop(value, evaluated)
        regions = [Region(KeySet(excluded=frozenset(named)), additional, has_additional)]
        for keys, value in patterns:
            split = []
            for region in regions:
                inside = algebra.key_set_restricted(region.keys, keys, inside=True)
                outside = algebra.key_set_restricted(region.keys, keys, inside=False)
                if not algebra.key_set_empty(inside):
                    governed = (
                        algebra.intersect(region.value, value) if region.by_pattern else value
                    )
                    split.append(Region(inside, governed, True, True))
                if not algebra.key_set_empty(outside):
                    split.append(Region(outside, region.value, region.evaluated, region.by_pattern))
            regions = split
        if "propertyNames" in s:
            names = self.shape(s["propertyNames"], f"{ptr}/propertyNames", scope)
            allowed = algebra.strings_of(names)
            for key, prop in named.items():
                if not allowed.matches(key_text(key)):
                    named[key] = Prop(NOTHING, prop.evaluated)
            regions = [
                Region(k, r.value, r.evaluated, r.by_pattern)
                for r in regions
                if not algebra.key_set_empty(
                    k := algebra.key_set_restricted(r.keys, allowed, inside=True)
                )
            ]
        if any(named[k].value is NOTHING for k in required):
            return []
        return [
            ObjectShape(
                named,
                tuple(regions),
                frozenset(required),
                int(s.get("minProperties", 0)),
                None if s.get("maxProperties") is None else int(s["maxProperties"]),
            )
        ]

    def _key_pattern(self, pattern: str, ptr: str) -> ByteDFA:
        try:
            return quoted(self._regex(_search(pattern), dialect="ecma", encoding="json"))
        except RegexError as exc:
            raise UnsupportedSchemaError(
                f"cannot compile patternProperties pattern: {exc}", "patternProperties", ptr
            ) from None

    # -- enum / const values ----------------------------------------------------------------------

    def values(self, vs: list) -> Shape:
        """The shape admitting exactly the JSON values `vs` (an `enum`): the scalars as one
        DFA built at once (strings, null and booleans as a set of texts, numbers as one
        alternation), not as a union of one DFA per value."""
        texts, numbers, others = [], [], []
        for v in vs:
            if v is None or isinstance(v, (bool, str)):
                texts.append(key_text(v) if isinstance(v, str) else json.dumps(v).encode())
            elif isinstance(v, (int, float)):
                if not isinstance(v, float) or math.isfinite(v):
                    numbers.append(_number_literal(_exact(v)))
            else:
                others.append(self.value(v))
        scalars = [dfa_from_strings(texts)]
        if numbers:
            scalars.append(self._regex("|".join(f"(?:{n})" for n in dict.fromkeys(numbers))))
        return self.algebra.union([only(scalars=self.algebra.dfa_union(scalars)), *others])

    def value(self, v: Any) -> Shape:
        """The shape admitting exactly the JSON value `v` (numbers by value: 1 == 1.0)."""
        if v is None or isinstance(v, bool):
            return only(scalars=dfa_from_strings([json.dumps(v)]))
        if isinstance(v, (int, float)):
            if isinstance(v, float) and not math.isfinite(v):
                return NOTHING
            return only(scalars=self._regex(_number_literal(_exact(v))))
        if isinstance(v, str):
            return only(scalars=dfa_from_strings([key_text(v)]))
        if isinstance(v, list):
            items = tuple(self.value(x) for x in v)
            return only(arrays=[ArrayShape(items, NOTHING, len(v), len(v))])
        if isinstance(v, Mapping):
            named = {k: Prop(self.value(x)) for k, x in v.items()}
            return only(objects=[ObjectShape(named, (), frozenset(v))])
        raise UnsupportedSchemaError(f"{type(v).__name__} is not a JSON value", "enum", "")


# -- helpers ----------------------------------------------------------------------------------------

_LITERALS = {
    "null": dfa_from_strings(["null"]),
    "boolean": dfa_from_strings(["true", "false"]),
}
# keywords that constrain some type (a schema without `type` and without these admits anything)
_TYPE_KEYWORDS = {
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minLength",
    "maxLength", "pattern", "format", "items", "prefixItems", "additionalItems", "minItems",
    "maxItems", "contains", "uniqueItems", "properties", "patternProperties",
    "additionalProperties", "required", "propertyNames", "minProperties", "maxProperties",
}  # fmt: skip


def _non_objects() -> Shape:
    return only(scalars=ANY.scalars, arrays=ANY.arrays)


def _object_only(o: ObjectShape) -> Shape:
    return only(objects=[o])


def _with_required(key: str) -> Shape:
    return _object_only(
        ObjectShape(
            {key: Prop(ANY)},
            (Region(KeySet(excluded=frozenset([key])), ANY),),
            frozenset([key]),
        )
    )


def _decimal(value: Any, keyword: str, ptr: str) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UnsupportedSchemaError(f"{keyword} must be a number, not {value!r}", keyword, ptr)
    try:
        return _exact(value)
    except InvalidOperation:
        raise UnsupportedSchemaError(f"{keyword} {value!r} is not finite", keyword, ptr) from None


def _bound(value: Any, keyword: str, ptr: str) -> Decimal:
    """A `minimum` / `maximum` (or exclusive) value: its regex grows with the square of its
    digits, so one of more than `_MAX_BOUND_DIGITS` digits either side of the point is refused."""
    bound = _decimal(value, keyword, ptr)
    if max(bound.adjusted() + 1, -bound.as_tuple().exponent) > _MAX_BOUND_DIGITS:
        raise UnsupportedSchemaError(
            f"{keyword} {bound:.3E} has more than {_MAX_BOUND_DIGITS} digits before or after "
            "the point",
            keyword,
            ptr,
        )
    return bound


def _exact(value: int | float) -> Decimal:
    """A schema number as the compiler reads it: an int exactly (of any length: no text in
    between), a float as its shortest text (``0.1`` is 1/10)."""
    return Decimal(value) if isinstance(value, int) else Decimal(repr(value))


def _number_literal(v: Decimal) -> str:
    """Every number text whose value is `v`."""
    if v == 0:
        return r"-?0(?:\.0+)?"
    sign = "-" if v < 0 else ""
    text = format(abs(v), "f")
    whole, _, fraction = text.partition(".")
    fraction = fraction.rstrip("0")
    return rf"{sign}{whole}\.{fraction}0*" if fraction else rf"{sign}{whole}(?:\.0+)?"


def _search(pattern: Any) -> str:
    """ECMA-262 `pattern` semantics (a search, not a full match) as a full-match regex: each
    top-level alternative is padded with "anything" on the sides it is not anchored.

    Alternatives anchored alike share one padding (``.*(?:a|b).*``, not ``.*a.*|.*b.*``), so the
    DFA tracks one "matched" state instead of one per alternative and their combinations.
    """
    if not isinstance(pattern, str):
        raise RegexError(f"a pattern must be a string, not {pattern!r}", str(pattern), None)
    groups: dict[tuple[bool, bool], list[str]] = {}
    for alt in _top_level_alternatives(pattern):
        anchored_start = alt.startswith("^")
        anchored_end = alt.endswith("$") and not escaped(alt, len(alt) - 1)
        core = alt[1:] if anchored_start else alt
        core = core[:-1] if anchored_end else core
        groups.setdefault((anchored_start, anchored_end), []).append(f"(?:{core})")
    out = []
    for (anchored_start, anchored_end), cores in groups.items():
        start = "" if anchored_start else f"{ANY_CHAR}*"
        end = "" if anchored_end else f"{ANY_CHAR}*"
        out.append(f"{start}(?:{'|'.join(cores)}){end}")
    return "|".join(out)


def _top_level_alternatives(pattern: str) -> list[str]:
    """The alternatives of `pattern`, those of a group spanning a whole alternative included
    (``^$|(^a+$)`` has the alternatives ``^$`` and ``^a+$``: a group does not change what
    matches, and its anchors then count as the alternative's)."""
    parts, depth, last = [], 0, 0
    for i, c in syntax_chars(pattern):
        if c == "|" and depth == 0:
            parts.append(pattern[last:i])
            last = i + 1
        depth += {"(": 1, ")": -1}.get(c, 0)
    parts.append(pattern[last:])
    out = []
    for part in parts:
        inner = _group_body(part)
        out.extend([part] if inner is None else _top_level_alternatives(inner))
    return out


def _group_body(alternative: str) -> str | None:
    """The body of a (capturing, non-capturing or named) group that is the whole of
    `alternative`, or None."""
    if not alternative.startswith("(") or alternative.startswith(("(?=", "(?!", "(?<=", "(?<!")):
        return None
    depth = 0
    for i, c in syntax_chars(alternative):
        depth += {"(": 1, ")": -1}.get(c, 0)
        if depth == 0:
            if i != len(alternative) - 1:
                return None
            break
    else:
        return None
    body = alternative[1:-1]
    if body.startswith("?:"):
        return body[2:]
    if body.startswith(("?<", "?P<")):
        return body[body.index(">") + 1 :]
    return None if body.startswith("?") else body


def _escape(key: str) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")


def _culprit(schema: Mapping) -> str:
    for keyword in ("not", "oneOf", "if", "allOf", "anyOf", "$ref", "dependentSchemas"):
        if keyword in schema:
            return keyword
    return next(iter(schema), "")
