"""The operations on shapes for one compilation: intersection, complement, difference, union.

`allOf` is `ShapeAlgebra.intersect`, `not` is `complement`, `anyOf` is `union`; `oneOf` and
`if`/`then`/`else` are built from the three. Scalars are exact under all of them (languages over
one universe, see `constrain.jsonschema.shapes`). Arrays and objects are intersected field by
field; their complement is the union of the ways to violate one constraint, and raises
`ShapeUnsupported` where that union has no normal form (e.g. "some extra key has a bad value").

One `ShapeAlgebra` serves one compilation (the compiler makes it, the normalizer and the emitter
use it) and owns everything that compilation remembers: results memoised on their operands (the
memo holds the operands, so each lives as long as the algebra), operations deferred on shapes
not filled yet (recursion: results are created before they are filled, so cycles map to
cycles; `settle` runs them), and the deadline (`time_left`). Nothing is shared between
compilations but immutable constants and bounded caches of pure constructions, so compilations
in different threads do not meet.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import replace

from constrain.engine.regex import ByteDFA, combine, is_empty_combination
from constrain.engine.regex._limits import BYTES_PER_UNIT
from constrain.errors import RegexError
from constrain.fuel import burn
from constrain.jsonschema.shapes import (
    ANY,
    ANY_ARRAY,
    ANY_OBJECT,
    EMPTY,
    MAX_ALTERNATIVES,
    NOTHING,
    SCALARS,
    STRINGS,
    UNQUOTED,
    ArrayShape,
    KeySet,
    Lengths,
    ObjectShape,
    Prop,
    Region,
    Shape,
    ShapeUnsupported,
    finite_within,
    keys_dfa,
    length_dfa,
    min_bound,
    plain_keys,
    strings_except_plain,
)

__all__ = ["CompileTimeout", "ShapeAlgebra", "is_empty"]

Parts = Callable[[], tuple]  # computes the arguments of `Shape.fill`
# a length bound times a pattern of more (states x (bound + 1)) stays symbolic (`bounded`)
_EAGER_PRODUCT = 100_000


_KEPT_DFA_BYTES = 4096  # a memoised product beyond its tables: its objects and memo entry

class CompileTimeout(Exception):
    """The compilation ran past its deadline (see `ShapeAlgebra.time_left`)."""


class ShapeAlgebra:
    """The shape operations of one compilation, memoised on their operands, with its deadline
    (a `time.monotonic()` value; operations past it raise `CompileTimeout`) and the operations
    waiting on recursive shapes (see the module docstring)."""

    def __init__(self, deadline: float = math.inf):
        self.deadline = deadline
        # memos keyed on the operands themselves (DFAs and shapes hash by identity): an entry
        # keeps its operands alive, so no key ever stands for a freed object
        self._combined: dict[tuple[ByteDFA, ByteDFA, str], ByteDFA] = {}
        self._empty: dict[tuple[ByteDFA, ByteDFA, str], bool] = {}
        self._meets: dict[tuple[Shape, Shape], Shape] = {}
        self._differences: dict[tuple[Shape, Shape], Shape] = {}
        self._complements: dict[Shape, Shape] = {}
        self._unquoted: dict[Shape, Shape] = {}
        self._key_set_dfas: dict[KeySet, ByteDFA] = {}
        # operations on shapes not filled yet: (inputs, output, compute the output's parts)
        self._deferred: list[tuple[list[Shape], Shape, Parts]] = []

    # -- the deadline -----------------------------------------------------------------------------

    def time_left(self, units: int = 1) -> float:
        """Seconds left before the compilation's deadline, after burning `units` of the active
        fuel for the step about to be taken (a few microseconds of bookkeeping: the automata
        it builds burn their own work).

        Raises:
            CompileTimeout: none are left.
            WorkLimitError, Abandoned: from the active fuel (`constrain.fuel`).
        """
        burn(units)
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise CompileTimeout
        return left

    # -- DFAs, with fast paths --------------------------------------------------------------------

    def _dfa(self, a: ByteDFA, b: ByteDFA, op: str) -> ByteDFA:
        if op == "and":
            if a.is_empty() or b.is_empty():
                return EMPTY
            if a is SCALARS:
                return b
            if b is SCALARS:
                return a
        if op == "minus" and (a.is_empty() or b.is_empty()):
            return a
        key = (a, b, op)
        got = self._combined.get(key)
        if got is None:
            pattern = f"({a.pattern}){op}({b.pattern})"
            left = self.time_left()
            try:  # the product gets what is left of the compilation's time, not a fresh limit
                limit = {"timeout": left} if left < math.inf else {}
                got = combine(a, b, op, pattern, **limit)
            except RegexError:
                self.time_left()  # past the deadline: a CompileTimeout, like every other stage
                raise
            burn((_KEPT_DFA_BYTES + got.nbytes) // BYTES_PER_UNIT)  # what the memo keeps
            self._combined[key] = got
        return got

    def empty_combination(self, a: ByteDFA, b: ByteDFA, op: str) -> bool:
        """Whether ``a & b`` ("and") or ``a - b`` ("minus") is empty (no product built)."""
        key = (a, b, op)
        got = self._empty.get(key)
        if got is None:
            got = self._empty[key] = is_empty_combination(a, b, op)
        return got

    def dfa_and(self, a: ByteDFA, b: ByteDFA) -> ByteDFA:
        return self._dfa(a, b, "and")

    def dfa_minus(self, a: ByteDFA, b: ByteDFA) -> ByteDFA:
        return self._dfa(a, b, "minus")

    def dfa_or(self, a: ByteDFA, b: ByteDFA) -> ByteDFA:
        if a.is_empty():
            return b
        if b.is_empty():
            return a
        return self._dfa(a, b, "or")

    def dfa_union(self, dfas: list[ByteDFA]) -> ByteDFA:
        """The union of many DFAs, combined pairwise in a balanced tree (n log n, not n^2)."""
        dfas = [d for d in dfas if not d.is_empty()]
        if not dfas:
            return EMPTY
        while len(dfas) > 1:
            dfas = [
                self.dfa_or(*dfas[i : i + 2]) if i + 1 < len(dfas) else dfas[i]
                for i in range(0, len(dfas), 2)
            ]
        return dfas[0]

    def strings_of(self, shape: Shape) -> ByteDFA:
        """All the strings `shape` admits, as one DFA (materialising a symbolic length bound)."""
        strings = self.dfa_and(shape.scalars, STRINGS)
        return strings if shape.text is None else self.dfa_or(strings, self.text_dfa(shape.text))

    # -- strings of bounded length ----------------------------------------------------------------

    def text_dfa(self, text: Lengths) -> ByteDFA:
        """`text` as one DFA (raises `ShapeUnsupported` beyond the length chain's limit)."""
        bounded = length_dfa(text.low, text.high)
        return bounded if text.within is None else self.dfa_and(text.within, bounded)

    def bounded(self, strings: ByteDFA, low: int, high: int | None) -> ByteDFA | Lengths:
        """The quoted strings of `strings` with low..high characters: their DFA, or `Lengths`
        over `strings` when the product would exceed the automaton limit (it is then built as
        it is read, `constrain.engine.regex.counted`)."""
        if strings is STRINGS or strings.is_empty():
            return self.text_dfa(Lengths(low, high)) if strings is STRINGS else strings
        if strings.n_states * ((high if high is not None else low) + 1) <= _EAGER_PRODUCT:
            try:
                return self.text_dfa(Lengths(low, high, strings))
            except (RegexError, ShapeUnsupported):  # beyond a limit: counted as read instead
                self.time_left()
        return Lengths(low, high, strings)

    def lengths_and(self, x: Lengths, y: Lengths) -> Lengths:
        """The strings both bounds (and both patterns) admit."""
        within = x.within if y.within is None else y.within
        if x.within is not None and y.within is not None:
            within = self.dfa_and(x.within, y.within)
        return Lengths(max(x.low, y.low), min_bound(x.high, y.high), within)

    def strings_except(self, excluded: frozenset[str]) -> ByteDFA:
        """Every string but the `excluded` ones: from their trie for plain keys (the common
        case), else as a product."""
        if not excluded:
            return STRINGS
        if plain_keys(excluded):
            return strings_except_plain(excluded)
        return self.dfa_minus(STRINGS, keys_dfa(sorted(excluded)))

    def _all_strings(self, dfa: ByteDFA) -> bool:
        return dfa is SCALARS or dfa is STRINGS or self.dfa_minus(STRINGS, dfa).is_empty()

    # -- key sets ---------------------------------------------------------------------------------

    def key_set_dfa(self, keys: KeySet) -> ByteDFA:
        """The quoted keys of `keys`, as one DFA (built once per key set)."""
        got = self._key_set_dfas.get(keys)
        if got is None:
            if keys.within is None:
                got = self.strings_except(keys.excluded)
            elif keys.excluded:
                got = self.dfa_minus(keys.within, keys_dfa(sorted(keys.excluded)))
            else:
                got = keys.within
            self._key_set_dfas[keys] = got
        return got

    def key_set_both(self, x: KeySet, y: KeySet) -> KeySet:
        """The keys in both."""
        if x.within is None or y.within is None:
            within = x.within or y.within
        else:
            within = self.dfa_and(x.within, y.within)
        return KeySet(within, x.excluded | y.excluded)

    def key_set_restricted(self, keys: KeySet, dfa: ByteDFA, inside: bool) -> KeySet:
        """The keys of `keys` also in `dfa` (inside) or not in it. Disjoint and nested languages
        (the usual relation between patterns) are recognised without building a product."""
        base = STRINGS if keys.within is None else keys.within
        if self.empty_combination(base, dfa, "and"):
            return keys if not inside else KeySet(EMPTY)
        if self.empty_combination(base, dfa, "minus"):
            return keys if inside else KeySet(EMPTY)
        within = self.dfa_and(base, dfa) if inside else self.dfa_minus(base, dfa)
        return KeySet(within, keys.excluded)

    def key_set_empty(self, keys: KeySet) -> bool:
        """Whether no key is in `keys` (without a product while `within` may lie inside the
        finitely many excluded names)."""
        if keys.within is None:
            return False
        if keys.excluded and keys not in self._key_set_dfas:
            return finite_within(keys.within, keys.excluded)
        return self.key_set_dfa(keys).is_empty()

    # -- deferred operations (recursion) ----------------------------------------------------------

    def later(self, inputs: list[Shape], out: Shape, parts: Parts) -> Shape:
        """Fill `out` with ``parts()`` now if every input is filled, else once they are
        (`settle`)."""
        if all(s.filled for s in inputs):
            return out.fill(*parts())
        self._deferred.append((inputs, out, parts))
        return out

    def settle(self) -> None:
        """Run the operations deferred on recursive shapes, until every one has run.

        Raises:
            ShapeUnsupported: some input never gets filled (a cycle of bare references).
        """
        while self._deferred:
            jobs, self._deferred = self._deferred, []
            waiting = []
            for inputs, out, parts in jobs:
                self.time_left()  # a deferred operation may defer others: bounded in time
                if all(s.filled for s in inputs):
                    out.fill(*parts())
                else:
                    waiting.append((inputs, out, parts))
            if len(waiting) == len(jobs) and not self._deferred:
                raise ShapeUnsupported("a cycle of references that never reaches a schema")
            self._deferred.extend(waiting)

    # -- intersection -----------------------------------------------------------------------------

    def intersect(self, a: Shape, b: Shape) -> Shape:
        """The shape of the values matching both (``allOf``)."""
        if a is ANY or b is NOTHING:
            return b
        if b is ANY or a is NOTHING or a is b:
            return a
        key = (a, b) if id(a) < id(b) else (b, a)  # either order: one entry
        got = self._meets.get(key)
        if got is not None:
            return got
        out = self._meets[key] = Shape()
        result = _nothing_if_empty(self.later([a, b], out, lambda: self._intersection(a, b)))
        self._meets[key] = result
        return result

    def _intersection(self, a: Shape, b: Shape) -> tuple:
        arrays = [
            r for x in a.arrays for y in b.arrays if (r := self._and_arrays(x, y)) is not None
        ]
        objects = [
            r for x in a.objects for y in b.objects if (r := self._and_objects(x, y)) is not None
        ]
        scalars, text = self.dfa_and(a.scalars, b.scalars), None
        if a.text is not None or b.text is not None:
            if a.text is not None and b.text is not None:
                text = self.lengths_and(a.text, b.text)
            else:
                lengths, other = (a.text, b) if a.text is not None else (b.text, a)
                strings = self.dfa_and(other.scalars, STRINGS)
                if self._all_strings(other.scalars):
                    text = lengths
                elif not strings.is_empty():
                    within = (
                        strings if lengths.within is None else self.dfa_and(lengths.within, strings)
                    )
                    found = self.bounded(within, lengths.low, lengths.high)
                    if isinstance(found, Lengths):
                        text = found
                    else:
                        scalars = self.dfa_or(scalars, found)
            if text is not None and text.is_empty():
                text = None
        return scalars, arrays, objects, text, _both_checks(a, b)

    def with_check(self, shape: Shape, check) -> Shape:
        """`shape` whose values must also pass `check` once complete."""
        if shape is NOTHING:
            return NOTHING

        def parts() -> tuple:
            scalars, arrays, objects, text, checks = shape.parts()
            return scalars, arrays, objects, text, (*checks, check)

        return self.later([shape], Shape(), parts)

    def _and_arrays(self, x: ArrayShape, y: ArrayShape) -> ArrayShape | None:
        low = max(x.min_items, y.min_items)
        high = min_bound(x.max_items, y.max_items)
        if high is not None and low > high:
            return None
        n = max(len(x.prefix), len(y.prefix))
        if high is not None:
            n = min(n, high)
        prefix = tuple(self.intersect(x.item(i), y.item(i)) for i in range(n))
        contains, min_c, max_c = x.contains, x.min_contains, x.max_contains
        if y.contains is not None:
            if contains is None:
                contains, min_c, max_c = y.contains, y.min_contains, y.max_contains
            elif contains is y.contains:
                min_c, max_c = max(min_c, y.min_contains), min_bound(max_c, y.max_contains)
            else:
                raise ShapeUnsupported("two different `contains` constraints on one array")
        return ArrayShape(
            prefix=prefix,
            items=self.intersect(x.items, y.items),
            min_items=low,
            max_items=high,
            contains=contains,
            min_contains=min_c,
            max_contains=max_c,
            unique=x.unique or y.unique,
            evaluated=max(x.evaluated, y.evaluated),
            rest_evaluated=x.rest_evaluated or y.rest_evaluated,
        )

    def _and_objects(self, x: ObjectShape, y: ObjectShape) -> ObjectShape | None:
        low = max(x.min_props, y.min_props)
        high = min_bound(x.max_props, y.max_props)
        required = x.required | y.required
        if high is not None and (low > high or len(required) > high):
            return None
        named: dict[str, Prop] = {}
        for key in [*x.named, *(k for k in y.named if k not in x.named)]:
            px, py = x.lookup(key), y.lookup(key)
            named[key] = Prop(self.intersect(px.value, py.value), px.evaluated or py.evaluated)
        if any(named[k].value is NOTHING for k in required if k in named):
            return None
        regions = []
        for rx in x.regions:
            for ry in y.regions:
                keys = self.key_set_both(rx.keys, ry.keys).without(named)
                if not self.key_set_empty(keys):
                    regions.append(
                        Region(
                            keys,
                            self.intersect(rx.value, ry.value),
                            rx.evaluated or ry.evaluated,
                            rx.by_pattern or ry.by_pattern,
                        )
                    )
        return ObjectShape(named, tuple(regions), required, low, high)

    # -- union --------------------------------------------------------------------------------------

    def union(self, shapes: list[Shape], *, drop_checks: bool = False) -> Shape:
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
                scalars += [self.text_dfa(t) for t in texts]
                text = None
            arrays = [a for s in shapes for a in s.arrays]
            objects = [o for s in shapes for o in s.objects]
            return self.dfa_union(scalars), arrays, objects, text

        return self.later(list(shapes), Shape(), parts)

    # -- check sites ------------------------------------------------------------------------------

    def unquoted(self, shape: Shape) -> Shape:
        """The null, boolean and number values of `shape` alone (no strings, arrays, objects or
        checks): what a check site must keep exact (see `relaxed`)."""
        got = self._unquoted.get(shape)
        if got is None:

            def parts() -> tuple:
                return self.dfa_and(shape.scalars, UNQUOTED), [], []

            got = self._unquoted[shape] = _nothing_if_empty(self.later([shape], Shape(), parts))
        return got

    def relaxed(self, exact: Shape, wider: Shape) -> Shape:
        """The null, boolean and number values of `exact` with the strings, arrays and objects of
        `wider` (a superset of the exact ones), without checks: what a check site keeps of an
        applicator the algebra cannot combine exactly. The site's check decides the values it
        sees complete, at a closing quote or bracket; but a number (or null, true, false) may
        end the text unseen (``1`` may go on as ``12``), so those must be exact already."""

        def parts() -> tuple:
            strings = self.dfa_and(wider.scalars, STRINGS)
            scalars = self.dfa_or(self.dfa_and(exact.scalars, UNQUOTED), strings)
            return scalars, list(wider.arrays), list(wider.objects), wider.text

        return _nothing_if_empty(self.later([exact, wider], Shape(), parts))

    # -- complement ---------------------------------------------------------------------------------

    def complement(self, a: Shape) -> Shape:
        """The shape of the values *not* matching `a` (``not``), without annotations."""
        _refuse_checked(a)
        if a is ANY:
            return NOTHING
        if a is NOTHING:
            return ANY
        got = self._complements.get(a)
        if got is not None:
            return got
        out = self._complements[a] = Shape()
        result = _nothing_if_empty(self.later([a], out, lambda: self._complement(a)))
        self._complements[a] = result
        return result

    def _complement(self, a: Shape) -> tuple:
        _refuse_checked(a)
        arrays = self._not_arrays(a)
        objects = [ANY_OBJECT]
        for alt in a.objects:
            self.time_left()
            objects = [
                r for x in objects for y in self._not_object(alt) if (r := self._and_objects(x, y))
            ]
            _check_size(objects)
        excluded = a.scalars if a.text is None else self.dfa_or(a.scalars, self.text_dfa(a.text))
        return self.dfa_minus(SCALARS, excluded), arrays, objects

    def _not_arrays(self, a: Shape) -> list[ArrayShape]:
        """The array alternatives of ``complement(a)``."""
        arrays = [ANY_ARRAY]
        for alt in a.arrays:
            arrays = [
                r for x in arrays for y in self._not_array(alt) if (r := self._and_arrays(x, y))
            ]
            _check_size(arrays)
        return arrays

    def _not_array(self, x: ArrayShape) -> list[ArrayShape]:
        """Arrays violating one constraint of `x` (a union)."""
        out = []
        if x.min_items > 0:
            out.append(ArrayShape(max_items=x.min_items - 1))
        if x.max_items is not None:
            out.append(ArrayShape(min_items=x.max_items + 1))
        for i, item in enumerate(x.prefix):
            bad = self.complement(item)
            if bad is not NOTHING:
                out.append(ArrayShape(prefix=(ANY,) * i + (bad,), min_items=i + 1))
        bad_rest = self.complement(x.items)
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

    def difference(self, a: Shape, b: Shape) -> Shape:
        """The values of `a` that do not match `b`: ``a and not b``, where "some key has a bad
        value" parts of ``not b`` only range over the keys objects of `a` may have (so objects
        with a finite key set never need an unexpressible complement)."""
        if b is NOTHING or a is NOTHING:
            return a
        if b is ANY:
            return NOTHING
        _refuse_checked(b)
        key = (a, b)
        got = self._differences.get(key)
        if got is not None:
            return got
        out = self._differences[key] = Shape()

        def parts() -> tuple:
            arrays = []
            if a.arrays:
                arrays = [
                    r
                    for x in a.arrays
                    for y in self._not_arrays(b)
                    if (r := self._and_arrays(x, y))
                ]
            objects = []
            for alt in a.objects:
                alts = [alt]
                for other in b.objects:
                    alts = [
                        r
                        for x in alts
                        for y in self._not_object(other, within=alt)
                        if (r := self._and_objects(x, y))
                    ]
                    _check_size(alts)
                objects.extend(alts)
            _refuse_checked(b)
            removed = b.scalars if b.text is None else self.dfa_or(b.scalars, self.text_dfa(b.text))
            text = a.text
            if text is not None and not self.dfa_and(removed, STRINGS).is_empty():
                scalars = self.dfa_or(
                    self.dfa_minus(a.scalars, removed), self.dfa_minus(self.text_dfa(text), removed)
                )
                return scalars, arrays, objects, None, a.checks
            return self.dfa_minus(a.scalars, removed), arrays, objects, text, a.checks

        result = _nothing_if_empty(self.later([a, b], out, parts))
        self._differences[key] = result
        return result

    def _not_object(self, x: ObjectShape, within: ObjectShape | None = None) -> list[ObjectShape]:
        """Objects violating one constraint of `x` (a union); with `within`, only the violations
        an object shaped like `within` can have are needed, so "some key has a bad value" is
        finite over its named keys and needs no normal form where its key regions agree with
        `x`. When every object of `within` violates `x` (a key `x` requires that `within` never
        has, or always has with a value `x` rejects), the answer is every object: no product to
        build."""
        if within is not None and any(self._always_violated(x, within, k) for k in x.required):
            return [ANY_OBJECT]
        out = []
        for key in x.required:
            out.append(_with_key(key, NOTHING, required=False))
        for key, prop in x.named.items():
            if within is None:
                bad = self.complement(prop.value)
            else:  # only the values `within` admits for the key (none: it cannot appear there)
                bad = self.difference(within.lookup(key).value, prop.value)
            if bad is not NOTHING:
                out.append(_with_key(key, bad, required=True))
        if within is None:
            covered = keys_dfa(x.named)
            for region in x.regions:
                covered = self.dfa_or(covered, self.key_set_dfa(region.keys))
                if self.complement(region.value) is not NOTHING:
                    raise ShapeUnsupported("`not` of patternProperties / additionalProperties")
            if not self.dfa_minus(STRINGS, covered).is_empty():
                raise ShapeUnsupported("`not` of an object schema that forbids some keys")
        else:
            for key in within.named:  # finitely many: name the bad ones
                if key in x.named:
                    continue
                bad = self.difference(within.named[key].value, x.lookup(key).value)
                if bad is not NOTHING:
                    out.append(_with_key(key, bad, required=True))
            for region in within.regions:
                if region.value is NOTHING:
                    continue  # no key of this region can appear in `within`
                self._check_region_agrees(region.value, region.keys.without(x.named), x)
        if x.min_props > 0:
            out.append(replace(ANY_OBJECT, max_props=x.min_props - 1))
        if x.max_props is not None:
            out.append(replace(ANY_OBJECT, min_props=x.max_props + 1))
        return out

    def _always_violated(self, x: ObjectShape, within: ObjectShape, key: str) -> bool:
        """Every object of `within` breaks `x`'s requirement of `key`."""
        allowed = within.lookup(key).value
        if allowed is NOTHING:
            return True
        return key in within.required and is_empty(self.intersect(allowed, x.lookup(key).value))

    def _check_region_agrees(self, value: Shape, keys: KeySet, x: ObjectShape) -> None:
        """Raise unless every member (key in `keys`, value in `value`) is one `x` accepts too:
        a key in no region of `x`, or with a value its region rejects, would be a violation of
        the form "some key ..." that has no normal form."""
        if self.key_set_empty(keys):
            return
        uncovered = self.key_set_dfa(keys)
        for region in x.regions:
            overlap = self.key_set_both(keys, region.keys)
            if self.key_set_empty(overlap):
                continue
            uncovered = self.dfa_minus(uncovered, self.key_set_dfa(region.keys))
            bad = self.complement(region.value)
            if bad is not NOTHING and not is_empty(self.intersect(value, bad)):
                raise ShapeUnsupported("`not` of patternProperties / additionalProperties")
        if not uncovered.is_empty():
            raise ShapeUnsupported("`not` of an object schema that forbids some keys")

    # -- emptiness ----------------------------------------------------------------------------------

    def disjoint(self, a: Shape, b: Shape) -> bool:
        """True only when no value matches both (False when unsure). Tries the cheap proofs
        first: scalars that never meet, and objects told apart by a key both require whose
        values never meet (a discriminator such as ``"type": {"enum": ["Bridge"]}``); only then
        is the intersection built."""
        if (
            self.empty_combination(a.scalars, b.scalars, "and")
            and a.text is None
            and b.text is None
        ):
            if not (a.arrays and b.arrays) and all(
                self._objects_disjoint(x, y) for x in a.objects for y in b.objects
            ):
                return True
        return is_empty(self.intersect(a, b))

    def _objects_disjoint(self, x: ObjectShape, y: ObjectShape) -> bool:
        for key in x.required & y.required:
            vx, vy = x.lookup(key).value, y.lookup(key).value
            if (
                vx.filled
                and vy.filled
                and not (vx.arrays or vx.objects or vy.arrays or vy.objects)
                and vx.text is None
                and vy.text is None
                and self.empty_combination(vx.scalars, vy.scalars, "and")
            ):
                return True
        return False


def is_empty(shape: Shape) -> bool:
    """True only when `shape` admits no value (a least fixpoint over the shape graph; shapes it
    cannot decide count as non-empty, so "empty" answers are always right)."""
    nodes: list[Shape] = []
    seen: set[Shape] = set()
    stack = [shape]
    while stack:
        s = stack.pop()
        if s in seen:
            continue
        seen.add(s)
        nodes.append(s)
        for a in s.arrays:
            stack.extend(a.prefix)
            stack.append(a.items)
        for o in s.objects:
            stack.extend(p.value for p in o.named.values())
    productive: set[Shape] = set()
    changed = True
    while changed:
        changed = False
        for s in nodes:
            if s not in productive and _productive(s, productive):
                productive.add(s)
                changed = True
    return shape not in productive


def _productive(s: Shape, productive: set[Shape]) -> bool:
    if not s.filled or not s.scalars.is_empty() or s.text is not None:
        return True
    for a in s.arrays:
        needed = [a.item(i) for i in range(min(a.min_items, len(a.prefix) + 1))]
        if all(x in productive for x in needed):
            return True
    for o in s.objects:
        if all(o.named[k].value in productive for k in o.required if k in o.named):
            return True
    return False


def _refuse_checked(a: Shape) -> None:
    """The algebra does not complement a shape checked on the value (the normalizer validates
    the enclosing schema object instead)."""
    if a.checks:
        raise ShapeUnsupported("`not` of a schema checked on the value")


def _both_checks(a: Shape, b: Shape) -> tuple:
    return a.checks + tuple(c for c in b.checks if c not in a.checks)


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


def _check_size(alternatives: list) -> None:
    if len(alternatives) > MAX_ALTERNATIVES:
        raise ShapeUnsupported(f"`not` expands to more than {MAX_ALTERNATIVES} alternatives")


def _with_key(key: str, value: Shape, *, required: bool) -> ObjectShape:
    rest = Region(KeySet(excluded=frozenset([key])), ANY)
    return ObjectShape({key: Prop(value)}, (rest,), frozenset([key] if required else []))
