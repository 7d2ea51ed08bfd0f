"""Schemas in normal form: the `Shape` graph the grammar is emitted from.

A `Shape` is a union over JSON types: one byte DFA for every scalar value it admits (the JSON
texts of null, booleans, numbers and strings), plus alternatives for arrays and for objects.
Scalars are languages over one fixed universe (`SCALARS`: numbers without exponent, strings with
one encoding per character), so they stay exact under intersection and complement. Arrays and
objects are constraints field by field: item shapes and bounds, named properties and regions of
other keys (`KeySet`).

Shapes form a graph: recursive schemas make cycles, so a shape is created empty and filled in
place. The operations on shapes (intersection, complement, ...) are in
`constrain.jsonschema.algebra`; this module holds the data, its constants (`ANY`, `NOTHING`) and
the pure constructions they need.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from constrain.engine.cache import memoized
from constrain.engine.regex import (
    ByteDFA,
    combine,
    compile_regex,
    dfa_from_strings,
    quoted,
    repeat_unit,
)
from constrain.fuel import burn
from constrain.jsonschema.numbers import NUMBER

__all__ = [
    "ANY",
    "ANY_ARRAY",
    "ANY_CHAR",
    "ANY_OBJECT",
    "EMPTY",
    "MAX_ALTERNATIVES",
    "MAX_LENGTH_STATES",
    "NOTHING",
    "SCALARS",
    "STRINGS",
    "UNQUOTED",
    "ArrayShape",
    "KeySet",
    "Lengths",
    "ObjectShape",
    "Prop",
    "Region",
    "Shape",
    "ShapeUnsupported",
    "dfa_strings",
    "finite_within",
    "key_text",
    "keys_dfa",
    "length_dfa",
    "min_bound",
    "only",
    "plain_keys",
    "strings_except_plain",
]

MAX_ALTERNATIVES = 256  # array or object alternatives of one shape


class ShapeUnsupported(Exception):
    """An operation whose result has no normal form (the caller names keyword and pointer)."""


ANY_CHAR = r"(?:[^\n]|\n)"  # every character (a negated class stays small)


def _string_universe() -> ByteDFA:
    return quoted(compile_regex(f"{ANY_CHAR}*", encoding="json"))


STRINGS = _string_universe()  # every JSON string in the admitted encoding
# null, booleans and numbers: the values whose end is not in their text (``1`` may go on)
UNQUOTED = combine(
    dfa_from_strings(["null", "true", "false"]), compile_regex(NUMBER), "or", "scalar"
)
SCALARS = combine(UNQUOTED, STRINGS, "or", "any scalar")
EMPTY = dfa_from_strings([])


class Shape:
    """A normalised schema: ``scalars`` (a DFA over value texts) or one of ``arrays`` or one of
    ``objects``, and ``checks`` the value must also pass once it is complete (schema objects the
    algebra could not express, validated on the value: see `constrain.jsonschema.validation`).
    Created empty and filled in place, so recursive schemas can refer to it. Compared and
    hashed by identity (memos of the algebra key on shapes)."""

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
        if len(arrays) > MAX_ALTERNATIVES or len(objects) > MAX_ALTERNATIVES:
            raise ShapeUnsupported(f"more than {MAX_ALTERNATIVES} alternatives for one value")
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
    """The strings of `within` (every string when None) with `low`..`high` characters, kept
    symbolic in a shape (its `scalars` then hold none of them) because as one DFA they would be
    huge: a long bound alone (`maxLength: 32767`), which the grammar counts in fixed-size
    chunks, or a bound times a large pattern, which becomes a lexeme built as it is read
    (`constrain.engine.regex.counted`). Where the algebra must have them as a DFA after all
    (`ShapeAlgebra.text_dfa`), it raises beyond the size limits."""

    low: int = 0
    high: int | None = None
    within: ByteDFA | None = None

    def is_empty(self) -> bool:
        return (self.high is not None and self.high < self.low) or (
            self.within is not None and self.within.is_empty()
        )


def min_bound(a: int | None, b: int | None) -> int | None:
    """The tighter of two upper bounds (None: unbounded)."""
    if a is None:
        return b
    return a if b is None else min(a, b)


MAX_LENGTH_STATES = 40_000  # a length bound as a DFA is a chain of this many states at most


def _dfa_bytes(dfa: ByteDFA) -> int:
    return dfa.nbytes


@memoized(512, max_bytes=64 * 2**20, size=_dfa_bytes)  # pure: shared by every compilation
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
    the names in `excluded`. Kept symbolic, so most object intersections never build a DFA (the
    algebra combines key sets and materialises their DFA: `ShapeAlgebra.key_set_dfa`).
    Compared and hashed by identity."""

    __slots__ = ("within", "excluded")

    def __init__(self, within: ByteDFA | None = None, excluded: frozenset[str] = frozenset()):
        self.within = within
        self.excluded = frozenset(excluded)

    def contains(self, key: str) -> bool:
        if key in self.excluded:
            return False
        return self.within is None or self.within.matches(key_text(key))

    def without(self, names) -> KeySet:
        return KeySet(self.within, self.excluded | frozenset(names))


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
    """The one admitted JSON text of a key (or string value): `"` and `\\` escaped, control
    characters as their short escape or ``\\u00xx``, everything else as itself."""
    return json.dumps(key, ensure_ascii=False).encode()


def keys_dfa(keys) -> ByteDFA:
    """The quoted JSON texts of `keys`, as one DFA (cached per set of keys)."""
    return _keys_dfa(frozenset(keys))


@memoized(1024, max_bytes=64 * 2**20, size=_dfa_bytes)  # pure: shared by every compilation
def _keys_dfa(keys: frozenset[str]) -> ByteDFA:
    return dfa_from_strings([key_text(k) for k in keys])


@memoized(1024, max_bytes=16 * 2**20, size=lambda texts: 256 + sum(64 + len(t) for t in texts))
def _key_texts(names: frozenset[str]) -> frozenset[bytes]:
    return frozenset(key_text(k) for k in names)


def finite_within(dfa: ByteDFA, names: frozenset[str]) -> bool:
    """Whether every string of `dfa` is the text of one of `names` (so the language is
    finite and small)."""
    texts = _key_texts(names)
    strings = dfa_strings(dfa, len(texts))
    return strings is not None and set(strings) <= texts


def dfa_strings(dfa: ByteDFA, limit: int) -> list[bytes] | None:
    """The strings of `dfa` when there are at most `limit` of them, else None: a depth-first
    enumeration that stops at a cycle, at the string past the limit or at too many prefixes."""
    accepting = dfa.accepting
    found: list[bytes] = []
    stack = [(dfa.start, b"", frozenset([dfa.start]))]
    while stack:
        state, text, path = stack.pop()
        burn(4)  # the active fuel: a state's row scanned
        if accepting[state]:
            found.append(text)
            if len(found) > limit:
                return None
        row = dfa.row(state)
        for byte in np.flatnonzero(row).tolist():
            nxt = int(row[byte])
            if nxt in path:
                return None  # a cycle: infinitely many strings
            stack.append((nxt, text + bytes([byte]), path | {nxt}))
        if len(stack) > 64 * (limit + 1):
            return None  # too many prefixes for a small finite set
    return found


def plain_keys(names) -> bool:
    """Whether every name is printable ASCII without quote or backslash (its JSON text is
    itself between quotes, so `strings_except_plain` applies)."""
    return all(k.isascii() and k.isprintable() and '"' not in k and "\\" not in k for k in names)


@memoized(1024, max_bytes=64 * 2**20, size=_dfa_bytes)  # pure: shared by every compilation
def strings_except_plain(excluded: frozenset[str]) -> ByteDFA:
    """Every string but the `excluded` ones (plain keys: see `plain_keys`), built straight
    from their trie instead of a product construction."""
    quote = ord('"')
    inside = STRINGS.step(STRINGS.start, quote)
    end = STRINGS.step(inside, quote)
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
    # STRINGS' byte classes, with each byte the keys read (and the quote) in its own
    used = sorted({b for edges in children for b in edges} | {quote})
    label = STRINGS.classes.astype(np.int64) * 257 + 256
    label[used] = label[used] - 256 + used
    _, representatives, classes = np.unique(label, return_index=True, return_inverse=True)
    column = classes.ravel().tolist()
    base = STRINGS.columns(representatives)
    trans = np.zeros((n + len(children), len(representatives)), dtype=np.int32)
    trans[:n] = base
    trans[n:] = base[inside]
    trans[STRINGS.start, column[quote]] = n
    for node, edges in enumerate(children):
        for b, child in edges.items():
            trans[n + node, column[b]] = n + child
        trans[n + node, column[quote]] = 0 if terminal[node] else end
    accepting = np.zeros(len(trans), dtype=bool)
    accepting[:n] = STRINGS.accepting
    pattern = f"string except {sorted(excluded)[:5]}"
    return ByteDFA.from_classes(trans, classes.ravel(), accepting, STRINGS.start, pattern)


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
    """A new shape with just these parts (filled at once)."""
    return Shape().fill(scalars, list(arrays), list(objects), text)
