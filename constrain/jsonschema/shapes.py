"""Schemas in normal form, closed under intersection and (mostly) complement.

A `Shape` is a union over JSON types: one byte DFA for every scalar value it admits (the JSON
texts of null, booleans, numbers and strings), plus alternatives for arrays and for objects.
`allOf` is `intersect`, `not` is `complement`, `anyOf` is `union`; `oneOf` and `if`/`then`/`else`
are built from the three. Scalars are exact under all three operations because they are
languages over one fixed universe (`SCALARS`: numbers without exponent, strings with one
encoding per character). Arrays and objects are intersected field by field; their complement is
the union of the ways to violate one constraint, and raises `ShapeUnsupported` where that union
has no normal form (e.g. "some extra key has a bad value").

Shapes form a graph: recursive schemas make cycles. Every operation is memoised on the identity
of its operands, and results are created before they are filled, so cycles map to cycles.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field, replace
from functools import lru_cache

import numpy as np

from constrain.engine.regex import (
    ByteDFA,
    combine,
    compile_regex,
    dfa_from_strings,
    is_empty_combination,
    quoted,
    repeat_unit,
)
from constrain.jsonschema.numbers import NUMBER

__all__ = [
    "ANY",
    "ANY_CHAR",
    "NOTHING",
    "ArrayShape",
    "KeySet",
    "Lengths",
    "ObjectShape",
    "Prop",
    "Region",
    "Shape",
    "CompileTimeout",
    "ShapeUnsupported",
    "complement",
    "difference",
    "disjoint",
    "fresh",
    "intersect",
    "is_empty",
    "length_dfa",
    "strings_of",
    "time_left",
    "later",
    "settle",
    "union",
    "with_check",
]

_MAX_ALTERNATIVES = 256


class ShapeUnsupported(Exception):
    """An operation whose result has no normal form (the caller names keyword and pointer)."""


class CompileTimeout(Exception):
    """The compilation ran past its deadline (see `fresh`)."""


ANY_CHAR = r"(?:[^\n]|\n)"  # every character (a negated class stays small)


def _string_universe() -> ByteDFA:
    return quoted(compile_regex(f"{ANY_CHAR}*", encoding="json"))


def strings_of(shape: Shape) -> ByteDFA:
    """All the strings `shape` admits, as one DFA (materialising a symbolic length bound)."""
    strings = dfa_and(shape.scalars, STRINGS)
    return strings if shape.text is None else dfa_or(strings, shape.text.dfa)


STRINGS = _string_universe()  # every JSON string in the admitted encoding
SCALARS = combine(
    combine(dfa_from_strings(["null", "true", "false"]), compile_regex(NUMBER), "or", "scalar"),
    STRINGS,
    "or",
    "any scalar",
)
EMPTY = dfa_from_strings([])


class Shape:
    """A normalised schema: ``scalars`` (a DFA over value texts) or one of ``arrays`` or one of
    ``objects``, and ``checks`` the value must also pass once it is complete (schema objects the
    algebra could not express, validated on the value: see `constrain.jsonschema.sites`).
    Created empty and filled in place, so recursive schemas can refer to it."""

    __slots__ = ("scalars", "text", "arrays", "objects", "checks", "filled", "name", "__weakref__")

    def __init__(self, name: str = ""):
        self.scalars: ByteDFA = EMPTY
        self.text: Lengths | None = None  # strings by length only, kept symbolic (see Lengths)
        self.arrays: list[ArrayShape] = []
        self.objects: list[ObjectShape] = []
        self.checks: tuple = ()
        self.filled = False
        self.name = name

    def fill(
        self,
        scalars: ByteDFA,
        arrays: list[ArrayShape],
        objects: list[ObjectShape],
        text: Lengths | None = None,
        checks: tuple = (),
    ) -> Shape:
        if len(arrays) > _MAX_ALTERNATIVES or len(objects) > _MAX_ALTERNATIVES:
            raise ShapeUnsupported(f"more than {_MAX_ALTERNATIVES} alternatives for one value")
        self.scalars, self.arrays, self.objects, self.text = scalars, arrays, objects, text
        self.checks = checks
        self.filled = True
        return self

    def parts(self) -> tuple:
        return self.scalars, self.arrays, self.objects, self.text, self.checks

    def __repr__(self) -> str:
        return (
            f"Shape({self.name or hex(id(self))}: scalars={self.scalars.pattern!r}, "
            f"{len(self.arrays)} arrays, {len(self.objects)} objects)"
        )


@dataclass(frozen=True)
class Lengths:
    """Every string of `low`..`high` characters. Long bounds (`maxLength: 32767`) would be huge
    DFAs, so a shape keeps them symbolic (its `scalars` then hold no strings) and the grammar
    counts characters in fixed-size chunks. Combined with another string constraint, the bound
    becomes a DFA after all (`dfa`), which raises beyond the size limit."""

    low: int = 0
    high: int | None = None

    def both(self, other: Lengths) -> Lengths:
        return Lengths(max(self.low, other.low), _min_bound(self.high, other.high))

    def is_empty(self) -> bool:
        return self.high is not None and self.high < self.low

    @property
    def dfa(self) -> ByteDFA:
        return length_dfa(self.low, self.high)


MAX_LENGTH_STATES = 40_000  # a length bound as a DFA is a chain of this many states at most


@lru_cache(maxsize=512)
def length_dfa(low: int, high: int | None) -> ByteDFA:
    """Strings of low..high characters (escapes count as one)."""
    char = compile_regex(ANY_CHAR, encoding="json")
    size = (high if high is not None else low) * char.n_states
    if size > MAX_LENGTH_STATES:
        bound = f"maxLength {high}" if high is not None else f"minLength {low}"
        raise ShapeUnsupported(
            f"{bound} combined with another string constraint needs {size} automaton states "
            f"(limit {MAX_LENGTH_STATES})"
        )
    return quoted(repeat_unit(char, low, high))


@dataclass(frozen=True)
class ArrayShape:
    """Arrays: item i < len(prefix) matches prefix[i], the rest match `items`; the length and
    the number of items matching `contains` are bounded. `evaluated` counts the leading positions
    annotated by prefixItems / items (for unevaluatedItems; `rest_evaluated` covers the others)."""

    prefix: tuple[Shape, ...] = ()
    items: Shape = field(default=None)  # type: ignore[assignment]  # ANY when None
    min_items: int = 0
    max_items: int | None = None
    contains: Shape | None = None
    min_contains: int = 1
    max_contains: int | None = None
    unique: bool = False
    evaluated: int = 0
    rest_evaluated: bool = False

    def __post_init__(self):
        if self.items is None:
            object.__setattr__(self, "items", ANY)

    def item(self, i: int) -> Shape:
        return self.prefix[i] if i < len(self.prefix) else self.items


@dataclass(frozen=True)
class Prop:
    """A named property: its value shape and whether a keyword annotated it as evaluated."""

    value: Shape
    evaluated: bool = False


class KeySet:
    """A set of keys: those (as quoted JSON texts) of `within` (every string when None) except
    the names in `excluded`. Kept symbolic, so most object intersections never build a DFA."""

    __slots__ = ("within", "excluded", "_dfa")

    def __init__(self, within: ByteDFA | None = None, excluded: frozenset[str] = frozenset()):
        self.within = within
        self.excluded = frozenset(excluded)
        self._dfa: ByteDFA | None = None

    def contains(self, key: str) -> bool:
        if key in self.excluded:
            return False
        return self.within is None or self.within.matches(key_text(key))

    def both(self, other: KeySet) -> KeySet:
        if self.within is None or other.within is None:
            within = self.within or other.within
        else:
            within = dfa_and(self.within, other.within)
        return KeySet(within, self.excluded | other.excluded)

    def without(self, names) -> KeySet:
        return KeySet(self.within, self.excluded | frozenset(names))

    def restricted(self, dfa: ByteDFA, inside: bool) -> KeySet:
        """The keys also in `dfa` (inside) or not in it. Disjoint and nested languages (the
        usual relation between patterns) are recognised without building a product."""
        base = STRINGS if self.within is None else self.within
        if empty_combination(base, dfa, "and"):
            return self if not inside else KeySet(EMPTY)
        if empty_combination(base, dfa, "minus"):
            return self if inside else KeySet(EMPTY)
        return KeySet(dfa_and(base, dfa) if inside else dfa_minus(base, dfa), self.excluded)

    def is_empty(self) -> bool:
        if self.within is None:
            return False
        if self._dfa is None and self.excluded:  # no product: is `within` inside `excluded`?
            return _finite_within(self.within, self.excluded)
        return self.dfa.is_empty()

    @property
    def dfa(self) -> ByteDFA:
        if self._dfa is None:
            if self.within is None:
                self._dfa = strings_except(self.excluded)
            elif self.excluded:
                self._dfa = dfa_minus(self.within, keys_dfa(sorted(self.excluded)))
            else:
                self._dfa = self.within
        return self._dfa


@dataclass(frozen=True)
class Region:
    """The keys governed by one value shape, outside the named keys."""

    keys: KeySet
    value: Shape
    evaluated: bool = False
    by_pattern: bool = False  # matched by a patternProperties pattern (so additional is moot)


@dataclass(frozen=True)
class ObjectShape:
    """Objects: named keys (in output order) with their values, disjoint regions of other keys
    (a key in no region and not named may not appear), required keys and bounds on the count."""

    named: dict[str, Prop] = field(default_factory=dict)
    regions: tuple[Region, ...] = ()
    required: frozenset[str] = frozenset()
    min_props: int = 0
    max_props: int | None = None

    def lookup(self, key: str) -> Prop:
        """The value shape a key gets here (NOTHING when it may not appear)."""
        if key in self.named:
            return self.named[key]
        for region in self.regions:
            if region.keys.contains(key):
                return Prop(region.value, region.evaluated)
        return Prop(NOTHING)


def key_text(key: str) -> bytes:
    """The one admitted JSON text of a key (or string value)."""
    out = ['"']
    for c in key:
        if c == '"' or c == "\\":
            out.append("\\" + c)
        elif ord(c) < 0x20:
            short = {"\b": "b", "\t": "t", "\n": "n", "\f": "f", "\r": "r"}.get(c)
            out.append("\\" + short if short else f"\\u{ord(c):04x}")
        else:
            out.append(c)
    out.append('"')
    return "".join(out).encode()


def keys_dfa(keys) -> ByteDFA:
    """The quoted JSON texts of `keys`, as one DFA (cached per set of keys)."""
    return _keys_dfa(frozenset(keys))


@lru_cache(maxsize=1024)
def _keys_dfa(keys: frozenset[str]) -> ByteDFA:
    return dfa_from_strings([key_text(k) for k in keys])


@lru_cache(maxsize=1024)
def _key_texts(names: frozenset[str]) -> frozenset[bytes]:
    return frozenset(key_text(k) for k in names)


def _finite_within(dfa: ByteDFA, names: frozenset[str]) -> bool:
    """Whether every string of `dfa` is the text of one of `names` (so the language is
    finite and small)."""
    texts = _key_texts(names)
    strings = dfa_strings(dfa, len(texts))
    return strings is not None and set(strings) <= texts


def dfa_strings(dfa: ByteDFA, limit: int) -> list[bytes] | None:
    """The strings of `dfa` when there are at most `limit` of them, else None: a depth-first
    enumeration that stops at a cycle, at the string past the limit or at too many prefixes."""
    table, accepting = dfa.transitions, dfa.accepting
    found: list[bytes] = []
    stack = [(dfa.start, b"", frozenset([dfa.start]))]
    while stack:
        state, text, path = stack.pop()
        if accepting[state]:
            found.append(text)
            if len(found) > limit:
                return None
        row = table[state]
        for byte in np.flatnonzero(row).tolist():
            nxt = int(row[byte])
            if nxt in path:
                return None  # a cycle: infinitely many strings
            stack.append((nxt, text + bytes([byte]), path | {nxt}))
        if len(stack) > 64 * (limit + 1):
            return None  # too many prefixes for a small finite set
    return found


@lru_cache(maxsize=1024)
def strings_except(excluded: frozenset[str]) -> ByteDFA:
    """Every string but the `excluded` ones, built straight from their trie (plain ASCII keys,
    the common case) instead of a product construction."""
    if not excluded:
        return STRINGS
    if not all(
        k.isascii() and k.isprintable() and '"' not in k and "\\" not in k for k in excluded
    ):
        return dfa_minus(STRINGS, keys_dfa(sorted(excluded)))
    inside = int(STRINGS.transitions[STRINGS.start, ord('"')])
    end = int(STRINGS.transitions[inside, ord('"')])
    n = STRINGS.n_states
    children: list[dict[int, int]] = [{}]
    terminal = [False]
    for key in excluded:
        node = 0
        for b in key.encode():
            nxt = children[node].get(b)
            if nxt is None:
                nxt = children[node][b] = len(children)
                children.append({})
                terminal.append(False)
            node = nxt
        terminal[node] = True
    trans = np.zeros((n + len(children), 256), dtype=np.int32)
    trans[:n] = STRINGS.transitions
    trans[n:] = STRINGS.transitions[inside]
    trans[STRINGS.start, ord('"')] = n
    for node, edges in enumerate(children):
        for b, child in edges.items():
            trans[n + node, b] = n + child
        trans[n + node, ord('"')] = 0 if terminal[node] else end
    accepting = np.zeros(len(trans), dtype=bool)
    accepting[:n] = STRINGS.accepting
    return ByteDFA(trans, accepting, STRINGS.start, f"string except {sorted(excluded)[:5]}")


# -- the universal and empty shapes --------------------------------------------------------------

ANY = Shape("any")
NOTHING = Shape("nothing").fill(EMPTY, [], [])
ANY.fill(
    SCALARS,
    [ArrayShape(items=ANY)],
    [ObjectShape(regions=(Region(KeySet(), ANY),))],
)
ANY_ARRAY = ArrayShape(items=ANY)
ANY_OBJECT = ANY.objects[0]


def only(*, scalars: ByteDFA = EMPTY, arrays=(), objects=(), text: Lengths | None = None) -> Shape:
    return Shape().fill(scalars, list(arrays), list(objects), text)


# -- DFA algebra with fast paths -------------------------------------------------------------------


class _Memo(threading.local):
    """Results memoised on operand identities, for one compilation in one thread (`fresh`
    clears them, so identities of freed objects are never looked up again)."""

    def __init__(self, deadline: float = math.inf):
        self.deadline = deadline  # time.monotonic() by which the compilation must end
        self.dfa: dict[tuple[int, int, str], ByteDFA] = {}
        self.keep: list = []  # operands of memoised results stay alive: ids are not reused
        self.conj: dict[tuple[int, int], Shape] = {}
        self.neg: dict[int, Shape] = {}
        # operations on shapes not filled yet (recursion): (inputs, output, compute parts)
        self.deferred: list[tuple[list[Shape], Shape, object]] = []


_MEMO = _Memo()


def fresh(deadline: float = math.inf) -> None:
    """Forget memoised results (call at the start of each compilation); operations past
    `deadline` (a `time.monotonic()` value) raise `CompileTimeout`."""
    _MEMO.__init__(deadline)


def time_left() -> float:
    """Seconds left before the compilation's deadline.

    Raises:
        CompileTimeout: none are left.
    """
    left = _MEMO.deadline - time.monotonic()
    if left <= 0:
        raise CompileTimeout
    return left


def _dfa(a: ByteDFA, b: ByteDFA, op: str) -> ByteDFA:
    if op == "and":
        if a.is_empty() or b.is_empty():
            return EMPTY
        if a is SCALARS:
            return b
        if b is SCALARS:
            return a
    if op == "minus" and (a.is_empty() or b.is_empty()):
        return a
    key = (id(a), id(b), op)
    got = _MEMO.dfa.get(key)
    if got is None:
        time_left()
        got = _MEMO.dfa[key] = combine(a, b, op, f"({a.pattern}){op}({b.pattern})")
        _MEMO.keep.extend((a, b))
    return got


def empty_combination(a: ByteDFA, b: ByteDFA, op: str) -> bool:
    """Whether ``a & b`` ("and") or ``a - b`` ("minus") is empty (memoised, no product built)."""
    key = (id(a), id(b), "empty " + op)
    got = _MEMO.dfa.get(key)
    if got is None:
        got = _MEMO.dfa[key] = is_empty_combination(a, b, op)
        _MEMO.keep.extend((a, b))
    return got


def dfa_and(a: ByteDFA, b: ByteDFA) -> ByteDFA:
    return _dfa(a, b, "and")


def dfa_minus(a: ByteDFA, b: ByteDFA) -> ByteDFA:
    return _dfa(a, b, "minus")


def dfa_or(a: ByteDFA, b: ByteDFA) -> ByteDFA:
    if a.is_empty():
        return b
    if b.is_empty():
        return a
    return _dfa(a, b, "or")


def dfa_union(dfas: list[ByteDFA]) -> ByteDFA:
    """The union of many DFAs, combined pairwise in a balanced tree (n log n, not n^2)."""
    dfas = [d for d in dfas if not d.is_empty()]
    if not dfas:
        return EMPTY
    while len(dfas) > 1:
        dfas = [
            dfa_or(*dfas[i : i + 2]) if i + 1 < len(dfas) else dfas[i]
            for i in range(0, len(dfas), 2)
        ]
    return dfas[0]


# -- intersection ---------------------------------------------------------------------------------


def intersect(a: Shape, b: Shape) -> Shape:
    """The shape of the values matching both (``allOf``)."""
    if a is ANY or b is NOTHING:
        return b
    if b is ANY or a is NOTHING or a is b:
        return a
    key = (id(a), id(b)) if id(a) < id(b) else (id(b), id(a))
    got = _MEMO.conj.get(key)
    if got is not None:
        return got
    out = _MEMO.conj[key] = Shape()
    _MEMO.keep.extend((a, b))
    result = _nothing_if_empty(later([a, b], out, lambda: _intersection(a, b)))
    _MEMO.conj[key] = result
    return result


def _intersection(a: Shape, b: Shape) -> tuple:
    arrays = [r for x in a.arrays for y in b.arrays if (r := _and_arrays(x, y)) is not None]
    objects = [r for x in a.objects for y in b.objects if (r := _and_objects(x, y)) is not None]
    scalars, text = dfa_and(a.scalars, b.scalars), None
    if a.text is not None or b.text is not None:
        if a.text is not None and b.text is not None:
            text = a.text.both(b.text)
        else:
            lengths, other = (a.text, b) if a.text is not None else (b.text, a)
            if _all_strings(other.scalars):
                text = lengths
            elif not dfa_and(other.scalars, STRINGS).is_empty():
                scalars = dfa_or(scalars, dfa_and(lengths.dfa, other.scalars))
        if text is not None and text.is_empty():
            text = None
    return scalars, arrays, objects, text, _both_checks(a, b)


def _both_checks(a: Shape, b: Shape) -> tuple:
    return a.checks + tuple(c for c in b.checks if c not in a.checks)


def with_check(shape: Shape, check) -> Shape:
    """`shape` whose values must also pass `check` once complete."""
    if shape is NOTHING:
        return NOTHING

    def parts() -> tuple:
        scalars, arrays, objects, text, checks = shape.parts()
        return scalars, arrays, objects, text, (*checks, check)

    return later([shape], Shape(), parts)


def _all_strings(dfa: ByteDFA) -> bool:
    return dfa is SCALARS or dfa is STRINGS or dfa_minus(STRINGS, dfa).is_empty()


def _nothing_if_empty(shape: Shape) -> Shape:
    """`NOTHING` for a filled shape that admits nothing at all (so identity tests find it)."""
    if (
        shape.filled
        and shape.scalars.is_empty()
        and shape.text is None
        and not shape.arrays
        and not shape.objects
    ):
        return NOTHING
    return shape


def later(inputs: list[Shape], out: Shape, parts) -> Shape:
    """Fill `out` with ``parts()`` now if every input is filled, else once they are (`settle`)."""
    if all(s.filled for s in inputs):
        return out.fill(*parts())
    _MEMO.deferred.append((inputs, out, parts))
    return out


def settle() -> None:
    """Run the operations deferred on recursive shapes, until every one has run.

    Raises:
        ShapeUnsupported: some input never gets filled (a cycle of bare references).
    """
    while _MEMO.deferred:
        jobs, _MEMO.deferred = _MEMO.deferred, []
        waiting = []
        for inputs, out, parts in jobs:
            if all(s.filled for s in inputs):
                out.fill(*parts())
            else:
                waiting.append((inputs, out, parts))
        if len(waiting) == len(jobs) and not _MEMO.deferred:
            raise ShapeUnsupported("a cycle of references that never reaches a schema")
        _MEMO.deferred.extend(waiting)


def _and_arrays(x: ArrayShape, y: ArrayShape) -> ArrayShape | None:
    low = max(x.min_items, y.min_items)
    high = _min_bound(x.max_items, y.max_items)
    if high is not None and low > high:
        return None
    n = max(len(x.prefix), len(y.prefix))
    if high is not None:
        n = min(n, high)
    prefix = tuple(intersect(x.item(i), y.item(i)) for i in range(n))
    contains, min_c, max_c = x.contains, x.min_contains, x.max_contains
    if y.contains is not None:
        if contains is None:
            contains, min_c, max_c = y.contains, y.min_contains, y.max_contains
        elif contains is y.contains:
            min_c, max_c = max(min_c, y.min_contains), _min_bound(max_c, y.max_contains)
        else:
            raise ShapeUnsupported("two different `contains` constraints on one array")
    return ArrayShape(
        prefix=prefix,
        items=intersect(x.items, y.items),
        min_items=low,
        max_items=high,
        contains=contains,
        min_contains=min_c,
        max_contains=max_c,
        unique=x.unique or y.unique,
        evaluated=max(x.evaluated, y.evaluated),
        rest_evaluated=x.rest_evaluated or y.rest_evaluated,
    )


def _and_objects(x: ObjectShape, y: ObjectShape) -> ObjectShape | None:
    low = max(x.min_props, y.min_props)
    high = _min_bound(x.max_props, y.max_props)
    required = x.required | y.required
    if high is not None and (low > high or len(required) > high):
        return None
    named: dict[str, Prop] = {}
    for key in [*x.named, *(k for k in y.named if k not in x.named)]:
        px, py = x.lookup(key), y.lookup(key)
        named[key] = Prop(intersect(px.value, py.value), px.evaluated or py.evaluated)
    if any(named[k].value is NOTHING for k in required if k in named):
        return None
    regions = []
    for rx in x.regions:
        for ry in y.regions:
            keys = rx.keys.both(ry.keys).without(named)
            if not keys.is_empty():
                regions.append(
                    Region(
                        keys,
                        intersect(rx.value, ry.value),
                        rx.evaluated or ry.evaluated,
                        rx.by_pattern or ry.by_pattern,
                    )
                )
    return ObjectShape(named, tuple(regions), required, low, high)


def _min_bound(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else min(a, b)


def union(shapes: list[Shape], *, drop_checks: bool = False) -> Shape:
    """The shape of the values matching any of `shapes` (``anyOf``). The members' checks do
    not carry over (a union of alternatives cannot tell which one a value took): a member
    checked on the value raises, unless `drop_checks` says the caller validates the union's
    schema object instead."""
    if not shapes:
        return NOTHING
    if len(shapes) == 1:
        return shapes[0]
    if any(s is ANY for s in shapes):
        return ANY

    def parts() -> tuple:
        if not drop_checks and any(s.checks for s in shapes):
            raise ShapeUnsupported("`anyOf` over a schema checked on the value")
        texts = {s.text for s in shapes if s.text is not None}
        scalars = [s.scalars for s in shapes]
        text = texts.pop() if len(texts) == 1 else None
        if len(texts) > 0:  # several different bounds: as DFAs
            scalars += [t.dfa for t in texts]
            text = None
        arrays = [a for s in shapes for a in s.arrays]
        return dfa_union(scalars), arrays, [o for s in shapes for o in s.objects], text

    return later(list(shapes), Shape(), parts)


# -- complement -----------------------------------------------------------------------------------


def complement(a: Shape) -> Shape:
    """The shape of the values *not* matching `a` (``not``), without annotations."""
    _refuse_checked(a)
    if a is ANY:
        return NOTHING
    if a is NOTHING:
        return ANY
    got = _MEMO.neg.get(id(a))
    if got is not None:
        return got
    out = _MEMO.neg[id(a)] = Shape()
    _MEMO.keep.append(a)
    result = _MEMO.neg[id(a)] = _nothing_if_empty(later([a], out, lambda: _complement(a)))
    return result


def _refuse_checked(a: Shape) -> None:
    """The algebra does not complement a shape checked on the value (the normalizer validates
    the enclosing schema object instead)."""
    if a.checks:
        raise ShapeUnsupported("`not` of a schema checked on the value")


def _complement(a: Shape) -> tuple:
    _refuse_checked(a)
    arrays = _not_arrays(a)
    objects = [ANY_OBJECT]
    for alt in a.objects:
        objects = [r for x in objects for y in _not_object(alt) if (r := _and_objects(x, y))]
        _check_size(objects)
    excluded = a.scalars if a.text is None else dfa_or(a.scalars, a.text.dfa)
    return dfa_minus(SCALARS, excluded), arrays, objects


def _not_arrays(a: Shape) -> list[ArrayShape]:
    """The array alternatives of ``complement(a)``."""
    arrays = [ANY_ARRAY]
    for alt in a.arrays:
        arrays = [r for x in arrays for y in _not_array(alt) if (r := _and_arrays(x, y))]
        _check_size(arrays)
    return arrays


def _check_size(alternatives: list) -> None:
    if len(alternatives) > _MAX_ALTERNATIVES:
        raise ShapeUnsupported(f"`not` expands to more than {_MAX_ALTERNATIVES} alternatives")


def _not_array(x: ArrayShape) -> list[ArrayShape]:
    """Arrays violating one constraint of `x` (a union)."""
    out = []
    if x.min_items > 0:
        out.append(ArrayShape(max_items=x.min_items - 1))
    if x.max_items is not None:
        out.append(ArrayShape(min_items=x.max_items + 1))
    for i, item in enumerate(x.prefix):
        bad = complement(item)
        if bad is not NOTHING:
            out.append(ArrayShape(prefix=(ANY,) * i + (bad,), min_items=i + 1))
    bad_rest = complement(x.items)
    if bad_rest is not NOTHING:
        if x.prefix:
            raise ShapeUnsupported("`not` of an array schema with both prefixItems and items")
        out.append(ArrayShape(contains=bad_rest, min_contains=1))
    if x.contains is not None:
        if x.min_contains > 0:
            out.append(
                ArrayShape(contains=x.contains, min_contains=0, max_contains=x.min_contains - 1)
            )
        if x.max_contains is not None:
            out.append(ArrayShape(contains=x.contains, min_contains=x.max_contains + 1))
    if x.unique:
        raise ShapeUnsupported("`not` of uniqueItems")
    return out


def difference(a: Shape, b: Shape) -> Shape:
    """The values of `a` that do not match `b`: ``a and not b``, where "some key has a bad
    value" parts of ``not b`` only range over the keys objects of `a` may have (so objects
    with a finite key set never need an unexpressible complement)."""
    if b is NOTHING or a is NOTHING:
        return a
    if b is ANY:
        return NOTHING
    _refuse_checked(b)
    key = ("diff", id(a), id(b))
    got = _MEMO.conj.get(key)
    if got is not None:
        return got
    out = _MEMO.conj[key] = Shape()
    _MEMO.keep.extend((a, b))

    def parts() -> tuple:
        arrays = []
        if a.arrays:
            arrays = [r for x in a.arrays for y in _not_arrays(b) if (r := _and_arrays(x, y))]
        objects = []
        for alt in a.objects:
            alts = [alt]
            for other in b.objects:
                alts = [
                    r
                    for x in alts
                    for y in _not_object(other, within=alt)
                    if (r := _and_objects(x, y))
                ]
                _check_size(alts)
            objects.extend(alts)
        _refuse_checked(b)
        removed = b.scalars if b.text is None else dfa_or(b.scalars, b.text.dfa)
        text = a.text
        if text is not None and not dfa_and(removed, STRINGS).is_empty():
            scalars = dfa_or(dfa_minus(a.scalars, removed), dfa_minus(text.dfa, removed))
            return scalars, arrays, objects, None, a.checks
        return dfa_minus(a.scalars, removed), arrays, objects, text, a.checks

    result = _MEMO.conj[key] = _nothing_if_empty(later([a, b], out, parts))
    return result


def _not_object(x: ObjectShape, within: ObjectShape | None = None) -> list[ObjectShape]:
    """Objects violating one constraint of `x` (a union); with `within`, only the violations
    an object shaped like `within` can have are needed, so "some key has a bad value" is
    finite over its named keys and needs no normal form where its key regions agree with `x`.
    When every object of `within` violates `x` (a key `x` requires that `within` never has, or
    always has with a value `x` rejects), the answer is every object: no product to build."""
    if within is not None and any(_always_violated(x, within, key) for key in x.required):
        return [ANY_OBJECT]
    out = []
    for key in x.required:
        out.append(_with_key(key, NOTHING, required=False))
    for key, prop in x.named.items():
        if within is None:
            bad = complement(prop.value)
        else:  # only the values `within` admits for the key (none: it cannot appear there)
            bad = difference(within.lookup(key).value, prop.value)
        if bad is not NOTHING:
            out.append(_with_key(key, bad, required=True))
    if within is None:
        covered = keys_dfa(x.named)
        for region in x.regions:
            covered = dfa_or(covered, region.keys.dfa)
            if complement(region.value) is not NOTHING:
                raise ShapeUnsupported("`not` of patternProperties / additionalProperties")
        if not dfa_minus(STRINGS, covered).is_empty():
            raise ShapeUnsupported("`not` of an object schema that forbids some keys")
    else:
        for key in within.named:  # finitely many: name the bad ones
            if key in x.named:
                continue
            bad = difference(within.named[key].value, x.lookup(key).value)
            if bad is not NOTHING:
                out.append(_with_key(key, bad, required=True))
        for region in within.regions:
            if region.value is NOTHING:
                continue  # no key of this region can appear in `within`
            _check_region_agrees(region.value, region.keys.without(x.named), x)
    if x.min_props > 0:
        out.append(replace(ANY_OBJECT, max_props=x.min_props - 1))
    if x.max_props is not None:
        out.append(replace(ANY_OBJECT, min_props=x.max_props + 1))
    return out


def _always_violated(x: ObjectShape, within: ObjectShape, key: str) -> bool:
    """Every object of `within` breaks `x`'s requirement of `key`."""
    allowed = within.lookup(key).value
    if allowed is NOTHING:
        return True
    return key in within.required and is_empty(intersect(allowed, x.lookup(key).value))


def _check_region_agrees(value: Shape, keys: KeySet, x: ObjectShape) -> None:
    """Raise unless every member (key in `keys`, value in `value`) is one `x` accepts too:
    a key in no region of `x`, or with a value its region rejects, would be a violation of
    the form "some key ..." that has no normal form."""
    if keys.is_empty():
        return
    uncovered = keys.dfa
    for region in x.regions:
        overlap = keys.both(region.keys)
        if overlap.is_empty():
            continue
        uncovered = dfa_minus(uncovered, region.keys.dfa)
        bad = complement(region.value)
        if bad is not NOTHING and not is_empty(intersect(value, bad)):
            raise ShapeUnsupported("`not` of patternProperties / additionalProperties")
    if not uncovered.is_empty():
        raise ShapeUnsupported("`not` of an object schema that forbids some keys")


def _with_key(key: str, value: Shape, *, required: bool) -> ObjectShape:
    rest = Region(KeySet(excluded=frozenset([key])), ANY)
    return ObjectShape({key: Prop(value)}, (rest,), frozenset([key] if required else []))


# -- emptiness --------------------------------------------------------------------------------------


def disjoint(a: Shape, b: Shape) -> bool:
    """True only when no value matches both (False when unsure). Tries the cheap proofs
    first: scalars that never meet, and objects told apart by a key both require whose values
    never meet (a discriminator such as ``"type": {"enum": ["Bridge"]}``); only then is the
    intersection built."""
    if empty_combination(a.scalars, b.scalars, "and") and a.text is None and b.text is None:
        if not (a.arrays and b.arrays) and all(
            _objects_disjoint(x, y) for x in a.objects for y in b.objects
        ):
            return True
    return is_empty(intersect(a, b))


def _objects_disjoint(x: ObjectShape, y: ObjectShape) -> bool:
    for key in x.required & y.required:
        vx, vy = x.lookup(key).value, y.lookup(key).value
        if (
            vx.filled
            and vy.filled
            and not (vx.arrays or vx.objects or vy.arrays or vy.objects)
            and vx.text is None
            and vy.text is None
            and empty_combination(vx.scalars, vy.scalars, "and")
        ):
            return True
    return False


def is_empty(shape: Shape) -> bool:
    """True only when `shape` admits no value (a least fixpoint over the shape graph; shapes it
    cannot decide count as non-empty, so "empty" answers are always right)."""
    nodes: list[Shape] = []
    seen: set[int] = set()
    stack = [shape]
    while stack:
        s = stack.pop()
        if id(s) in seen:
            continue
        seen.add(id(s))
        nodes.append(s)
        for a in s.arrays:
            stack.extend(a.prefix)
            stack.append(a.items)
        for o in s.objects:
            stack.extend(p.value for p in o.named.values())
    productive: set[int] = set()
    changed = True
    while changed:
        changed = False
        for s in nodes:
            if id(s) not in productive and _productive(s, productive):
                productive.add(id(s))
                changed = True
    return id(shape) not in productive


def _productive(s: Shape, productive: set[int]) -> bool:
    if not s.filled or not s.scalars.is_empty() or s.text is not None:
        return True
    for a in s.arrays:
        needed = [a.item(i) for i in range(min(a.min_items, len(a.prefix) + 1))]
        if all(id(x) in productive for x in needed):
            return True
    for o in s.objects:
        if all(id(o.named[k].value) in productive for k in o.required if k in o.named):
            return True
    return False
