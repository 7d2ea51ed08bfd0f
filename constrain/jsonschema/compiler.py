"""JSON Schema -> grammar IR: normalise to shapes, then emit rules over exact lexemes.

`Normalizer` (normalize.py) turns the document into a `Shape` graph with exact semantics;
this module writes that graph as a context-free grammar. Each shape becomes a nonterminal whose
alternatives are one lexeme for all its scalar values (a byte DFA built by intersection and
difference) and one rule set per array or object alternative. Arrays and objects are small
state machines unrolled into rules: array positions and `contains` counts, object members in
schema order (or any order) with property counts. Whitespace is explicit and bounded: a
`Layout` (layout.py) says which may stand at each site next to punctuation; "pretty" is
written here, its indentation following the nesting depth.

Strict by design: what cannot be expressed exactly raises `UnsupportedSchemaError` naming the
keyword and JSON pointer; ``lenient=True`` drops it and warns. Never a silently weaker grammar.
"""

from __future__ import annotations

import json
import re
import warnings
from functools import lru_cache
from typing import Any

from constrain.engine.cache import memoized
from constrain.engine.grammar.ir import GrammarIR, Lexeme, Rule, derivable, repeat
from constrain.engine.regex import (
    ByteDFA,
    compile_regex,
    dfa_from_strings,
    dfa_from_table,
    quoted,
    repeat_unit,
)
from constrain.engine.regex.counted import CountedDFA
from constrain.errors import EmptyLanguageError, GrammarError, RegexError, UnsupportedSchemaError
from constrain.fuel import burn, deadline_after
from constrain.jsonschema.algebra import CompileTimeout, ShapeAlgebra
from constrain.jsonschema.checks import JsonChecks, checks_for
from constrain.jsonschema.layout import WHITESPACE, Layout, layout_of
from constrain.jsonschema.normalize import Contents, InexactSchema, Normalizer
from constrain.jsonschema.shapes import (
    ANY_CHAR,
    NOTHING,
    STRINGS,
    ArrayShape,
    Lengths,
    ObjectShape,
    Prop,
    Shape,
    ShapeUnsupported,
    dfa_strings,
    key_text,
)
from constrain.jsonschema.spellings import SPELLINGS, canonical_numbers, every_escape
from constrain.jsonschema.validation import DRAFTS, draft_validator, load_exact, sites_reaching
from constrain.jsonschema.wellformed import check_json_value, parse_schema_text

__all__ = ["DRAFTS", "WHITESPACE", "Layout", "compile_schema", "draft_validator"]

_ABSENT = Prop(NOTHING)
_CHUNK = 32  # characters per chunk lexeme of a long string
_MAX_SUBSETS = 10  # with any_order, objects of more named properties count required ones
_FEW_KEYS = 16  # a region of at most this many keys is compiled as named properties
_MAX_SITES = 64  # schema objects validated on the value (check sites) per schema
_FEW_TEXTS = 64  # texts of an item language enumerated to count its distinct values


class _TooManyRules(UnsupportedSchemaError):
    """The grammar outgrew `max_rules` (named by the count that unrolled it, where one did)."""


def _largest_count(shape: Shape) -> tuple[str, int] | None:
    """The largest count keyword of `shape`'s strings, arrays and objects: lengths, items and
    properties are unrolled into rules, so it is what a grammar too large most likely holds."""
    counts = []
    if shape.text is not None:
        counts += [("minLength", shape.text.low), ("maxLength", shape.text.high)]
    for a in shape.arrays:
        counts += [("minItems", a.min_items), ("maxItems", a.max_items)]
        if a.contains is not None:
            counts += [("minContains", a.min_contains), ("maxContains", a.max_contains)]
    for o in shape.objects:
        counts += [("minProperties", o.min_props), ("maxProperties", o.max_props)]
    counts = [(keyword, n) for keyword, n in counts if n]
    return max(counts, key=lambda count: count[1]) if counts else None


class _Emitter:
    """Writes shapes as rules; one nonterminal per (shape, depth). Shapes it needs beyond the
    normal form (array items split by `contains`) come from the compilation's `algebra`."""

    def __init__(
        self,
        algebra: ShapeAlgebra,
        layout: Layout | None,
        indent: int | None,
        any_order: bool,
        max_rules: int,
        spellings: str = "canonical",
    ):
        self.algebra = algebra
        self.spellings = spellings
        self.layout = layout  # None with `indent`
        self.indent = indent  # pretty printing: exact json.dumps(indent=...) layout
        self.any_order = any_order
        self.max_rules = max_rules
        self.max_depth = 64
        self.rules: list[Rule] = []
        self.lexemes: dict[str, Lexeme] = {}
        self.names: dict[tuple, str] = {}  # (shape, depth) or ("text", lengths) -> nonterminal
        self.scalar_lexemes: dict[ByteDFA, str] = {}  # by identity (the lexeme holds the DFA)
        self.keys: dict[str, str] = {}  # property name -> its lexeme
        self.spaces: dict[str, str] = {}  # whitespace regex -> its optional nonterminal
        self.defined: set[str] = set()
        self.free_keys = False  # some object's named keys may repeat in the grammar
        self.emptied: list[str] = []  # why parts of the schema admit no value, in words

    def close(self, states) -> None:
        """Give the states of a machine that have no way out a rule that derives nothing."""
        for state in states:
            if state not in self.defined:
                self.add(state, (self.nothing(),))

    # -- symbols --------------------------------------------------------------------------------

    def add(self, lhs: str, rhs: tuple[str, ...]) -> None:
        burn(4 + 4 * len(rhs))  # the active fuel: a rule and the names it was built with
        self.rules.append((lhs, rhs))
        self.defined.add(lhs)
        if len(self.rules) > self.max_rules:
            raise _TooManyRules(
                f"the grammar exceeds {self.max_rules} rules (raise max_rules)", None, ""
            )

    def fresh(self, hint: str) -> str:
        return f"{hint}{len(self.names)}_{len(self.rules)}"

    def literal(self, text: str) -> str:
        name = "L_" + re.sub(r"\W", lambda m: f"x{ord(m.group()):x}", text)
        if name not in self.lexemes:
            self.lexemes[name] = Lexeme(name, text, literal=True)
        return name

    def dfa_lexeme(self, hint: str, dfa: ByteDFA, in_string: bool = False) -> str:
        """The lexeme of `dfa`'s texts (values or keys; string content when `in_string`),
        spelled as the `spellings` option says (see `constrain.jsonschema.spellings`)."""
        name = self.scalar_lexemes.get(dfa)
        if name is None:
            name = self.scalar_lexemes[dfa] = f"R{len(self.lexemes)}_{hint}"
            spelled = dfa
            if self.spellings == "all":
                spelled = every_escape(dfa, in_string)
            elif hint == "scalar":
                spelled = canonical_numbers(dfa)
            self.lexemes[name] = Lexeme(name, dfa.pattern[:80], automaton=spelled)
        return name

    def nothing(self) -> str:
        """A lexeme matching no text: rules using it are pruned; an empty start is an error."""
        self.lexemes.setdefault(
            "NOTHING", Lexeme("NOTHING", "(nothing)", automaton=dfa_from_strings([]))
        )
        return "NOTHING"

    def optional_ws(self, regex: str | None) -> tuple[str, ...]:
        """Nothing, or a nonterminal for no text or one text of `regex` (one per regex: the
        first is ``ws`` over the lexeme ``WS``, the next ``ws1`` over ``WS1``, ...)."""
        if regex is None:
            return ()
        name = self.spaces.get(regex)
        if name is None:
            suffix = str(len(self.spaces) or "")
            name = self.spaces[regex] = "ws" + suffix
            # the site is optional, so a regex that matches "" (vLLM's whitespace_pattern
            # `[ \n]*`) stands for its non-empty texts: a lexeme never matches ""
            empty = compile_regex(regex).matches(b"")
            nonempty = rf"(?=[\s\S])(?:{regex})" if empty else regex
            self.lexemes["WS" + suffix] = Lexeme("WS" + suffix, nonempty)
            self.add(name, ())
            self.add(name, ("WS" + suffix,))
        return (name,)

    def punctuation(self, kind: str, depth: int) -> tuple[str, ...]:
        """`kind` in open{ open[ close} close] comma colon empty{ empty[` at nesting `depth`,
        with the whitespace the layout allows around it."""
        if self.indent is not None:
            inner = "\n" + " " * (self.indent * (depth + 1))
            text = {
                "{": "{" + inner, "[": "[" + inner, ",": "," + inner, ":": ": ",
                "}": "\n" + " " * (self.indent * depth) + "}",
                "]": "\n" + " " * (self.indent * depth) + "]", "{}": "{}", "[]": "[]",
            }[kind]  # fmt: skip
            return (self.literal(text),)
        before, after = self.layout.sites(kind)
        if kind in ("{}", "[]"):
            return (self.literal(kind[0]), *self.optional_ws(after), self.literal(kind[1]))
        return (*self.optional_ws(before), self.literal(kind), *self.optional_ws(after))

    # -- values ---------------------------------------------------------------------------------

    def depth_key(self, depth: int) -> int:
        """What a value's nonterminal is keyed by besides its shape: the nesting depth where
        the punctuation's text depends on it ("pretty"), else 0 (one nonterminal per shape:
        a layout's whitespace is the same at every depth)."""
        return depth if self.indent is not None else 0

    def value(self, shape: Shape, depth: int) -> str:
        key = (shape, self.depth_key(depth))
        name = self.names.get(key)
        if name is not None:
            return name
        name = self.names[key] = f"v{len(self.names)}"
        self.algebra.time_left()  # raises CompileTimeout past the compilation's deadline
        if depth > self.max_depth:
            self.add(name, (self.nothing(),))
            return name
        alternatives = 0
        scalars, text = self.beside_strings(shape)
        if not scalars.is_empty():
            self.add(name, (self.dfa_lexeme("scalar", scalars),))
            alternatives += 1
        try:
            if text is not None:
                try:
                    self.add(name, (self.counted_string(text),))
                except RegexError as exc:  # counting characters beside a pattern
                    raise UnsupportedSchemaError(exc.reason, *_length_keyword(shape)) from None
                alternatives += 1
            for alt in shape.arrays:
                self.add(name, (self.array(alt, depth),))
                alternatives += 1
            for alt in shape.objects:
                self.add(name, (self.object(alt, depth),))
                alternatives += 1
        except _TooManyRules as exc:  # name the count unrolled here, if it is one
            count = _largest_count(shape)
            if count is None:
                raise
            keyword, n = count
            where = shape.name if shape.name.startswith("/") else ""
            raise UnsupportedSchemaError(
                f"{keyword} {n} is counted in the grammar, which exceeds {self.max_rules} rules "
                "(raise max_rules)",
                keyword,
                f"{where}/{keyword}" if where or shape.name == "#" else "",
            ) from exc
        if not alternatives:
            self.add(name, (self.nothing(),))
        return name

    def beside_strings(self, shape: Shape) -> tuple[ByteDFA, Lengths | None]:
        """The shape's scalars and length-bounded strings as the grammar emits them. A string
        counted in chunks opens with a `"` lexeme, which a scalar lexeme of strings would
        outgrow (the lexer takes the longest match, and the chunked string would be lost):
        beside such strings the bounded ones join the scalars as one DFA, or the schema is
        refused where that DFA is too large."""
        text = shape.text
        if text is None or text.within is not None:
            return shape.scalars, text
        if self.algebra.dfa_and(shape.scalars, STRINGS).is_empty():
            return shape.scalars, text
        try:
            return self.algebra.dfa_or(shape.scalars, self.algebra.text_dfa(text)), None
        except ShapeUnsupported as exc:
            raise UnsupportedSchemaError(str(exc), *_length_keyword(shape)) from None

    def counted_string(self, lengths: Lengths) -> str:
        """Strings of low..high characters, counted in chunks of `_CHUNK` characters: a chunk
        lexeme is exactly that long, so the lexer never has to guess where one ends.

        A chain over the chunks read so far (size linear in high / _CHUNK): after n chunks the
        string ends with a tail of the characters still allowed, or reads another chunk; once
        the minimum is behind and there is no maximum, chunks repeat in a left-recursive list
        (whose parser states recur, so their masks are cached).
        """
        key = ("text", lengths)
        if key in self.names:
            return self.names[key]
        if lengths.within is not None:
            name = self.names[key] = self.counted_lexeme(lengths)
            return name
        name = self.names[key] = f"text{len(self.names)}"
        chunk = self.dfa_lexeme("chunk", _chunk_dfa(_CHUNK, _CHUNK, ""), in_string=True)
        low, high = lengths.low, lengths.high
        last = low // _CHUNK + 1 if high is None else high // _CHUNK
        for n in range(last + 1):
            here = f"{name}_{n}"
            if high is None and n == last:  # any number of further chunks, then any tail
                more = repeat(self.rules, f"{name}_more", (chunk,), 0, None)
                tail = self.dfa_lexeme("tail", _chunk_dfa(0, _CHUNK - 1, '"'), in_string=True)
                self.add(here, (more, tail))
                break
            tail_low = max(0, low - n * _CHUNK)
            tail_high = min(_CHUNK - 1, high - n * _CHUNK) if high is not None else _CHUNK - 1
            if tail_low <= tail_high:
                tail_dfa = _chunk_dfa(tail_low, tail_high, '"')
                self.add(here, (self.dfa_lexeme("tail", tail_dfa, in_string=True),))
            if n < last:
                self.add(here, (chunk, f"{name}_{n + 1}"))
        self.close(f"{name}_{n}" for n in range(last + 1))
        self.add(name, (self.literal('"'), f"{name}_0"))
        return name

    def array(self, a: ArrayShape, depth: int) -> str:
        """Arrays as a machine over (items written, `contains` matches counted); unique
        items from a few values as a machine over the values written (`unique_array`)."""
        values = self.unique_values(a)
        if values is not None:
            return self.unique_array(a, values, depth)
        name = self.fresh("arr")
        counting = a.contains is not None and (a.min_contains > 0 or a.max_contains is not None)
        cap = (a.max_contains if a.max_contains is not None else a.min_contains) if counting else 0
        last = max(len(a.prefix), a.min_items, 1)  # from here on every position is alike
        if a.max_items is not None:
            last = a.max_items

        def splits(i: int) -> list[tuple[Shape, int]]:
            item = a.item(i)
            if not counting:
                return [(item, 0)]
            inside = self.algebra.intersect(item, a.contains)
            outside = self.algebra.intersect(item, self.algebra.complement(a.contains))
            return [(inside, 1), (outside, 0)]

        comma = self.punctuation(",", depth)
        states: dict[tuple[int, int], str] = {}
        todo = [(0, 0)]
        states[(0, 0)] = f"{name}_0_0"
        while todo:
            i, c = todo.pop()
            here = states[(i, c)]
            if i > 0 and i >= a.min_items and (not counting or c >= a.min_contains):
                self.add(here, ())
            if a.max_items is not None and i >= a.max_items:
                continue
            for item, step in splits(i):
                nc = c + step
                if counting and a.max_contains is None:
                    nc = min(nc, cap)
                if counting and a.max_contains is not None and nc > a.max_contains:
                    continue
                ni = i + 1 if (a.max_items is not None or i < last) else i
                if (ni, nc) not in states:
                    states[(ni, nc)] = f"{name}_{ni}_{nc}"
                    todo.append((ni, nc))
                lead = comma if i > 0 else ()
                self.add(here, (*lead, self.value(item, depth + 1), states[(ni, nc)]))
        self.close(states.values())
        self.add(
            name, (*self.punctuation("[", depth), states[(0, 0)], *self.punctuation("]", depth))
        )
        if a.min_items == 0 and (not counting or a.min_contains == 0):
            self.add(name, self.punctuation("[]", depth))
        return name

    def keys_available(self, members: list, regions: list, needed: int) -> int | None:
        """How many distinct keys an object may hold, when fewer than `needed` (None: at
        least that many, or more than can be counted)."""
        count = len(members)
        for region in regions:
            if count >= needed:
                return None
            texts = dfa_strings(self.algebra.key_set_dfa(region.keys), needed)
            if texts is None:
                return None
            count += len(texts)
        return count

    def unique_values(self, a: ArrayShape) -> list[ByteDFA] | None:
        """For an array with `uniqueItems` whose items (all alike, no `contains`) are scalars
        of at most `_MAX_SUBSETS` distinct values: the texts of each value, as a DFA (1 and
        1.0 are one value); None otherwise (the text check then refuses repeats)."""
        item = a.items
        if not a.unique or a.prefix or a.contains is not None or item.arrays or item.objects:
            return None
        if item.text is not None or item.checks:
            return None
        texts = dfa_strings(canonical_numbers(item.scalars), _FEW_TEXTS)  # 1, not 1.0
        if texts is None:
            return None
        values: dict[tuple, list[bytes]] = {}
        for text in texts:
            value = load_exact(text)
            kind = "bool" if isinstance(value, bool) else type(value).__name__
            values.setdefault((kind, value), []).append(text)
        if len(values) > _MAX_SUBSETS and len(values) >= a.min_items:
            return None
        return [dfa_from_strings([t.decode() for t in group]) for group in values.values()]

    def unique_array(self, a: ArrayShape, values: list[ByteDFA], depth: int) -> str:
        """A `uniqueItems` array over a few values, exactly: a machine over the set of values
        written (each at most once, in any order), so no repeat is ever begun. Fewer values
        than `minItems` admit no array."""
        name = self.fresh("uarr")
        if len(values) < a.min_items:
            self.emptied.append(
                f"uniqueItems with minItems {a.min_items}: the items take {len(values)} "
                f"distinct value{'s' * (len(values) != 1)}"
            )
            self.add(name, (self.nothing(),))
            return name
        items = [self.dfa_lexeme("scalar", dfa) for dfa in values]
        comma = self.punctuation(",", depth)
        cap = len(values) if a.max_items is None else min(a.max_items, len(values))
        for done in range(1, 2 ** len(values)):
            count = done.bit_count()
            if count > cap:
                continue
            here = f"{name}_{done}"
            if count >= a.min_items:
                self.add(here, ())
            if count < cap:
                for i, item in enumerate(items):
                    if not done >> i & 1:
                        self.add(here, (*comma, item, f"{name}_{done | 1 << i}"))
        first = f"{name}_first"
        for i, item in enumerate(items):
            self.add(first, (item, f"{name}_{1 << i}"))
        self.close(f"{name}_{done}" for done in range(1, 2 ** len(values)))
        self.add(name, (*self.punctuation("[", depth), first, *self.punctuation("]", depth)))
        if a.min_items == 0:
            self.add(name, self.punctuation("[]", depth))
        return name

    def _few_keys_named(self, o: ObjectShape) -> tuple[dict, list]:
        """The object's named properties and regions, where a region of a few keys (an enum
        of `propertyNames`, say) becomes named optional properties: named keys are written
        at most once by the grammar itself, while a region's repeats are only refused by the
        text check, too late to avoid the dead end after the last new key's comma."""
        named, regions = dict(o.named), []
        for region in o.regions:
            texts = dfa_strings(self.algebra.key_set_dfa(region.keys), _FEW_KEYS)
            if texts is None:
                regions.append(region)
                continue
            for text in sorted(texts):
                named[json.loads(text)] = Prop(region.value, region.evaluated)
        return named, regions

    def object(self, o: ObjectShape, depth: int) -> str:
        """Objects as a machine over (members written, property count, nothing written yet).

        Members written are an index in schema order; with `any_order`, the set written (a
        bitmask: exact, no dead ends) for at most `_MAX_SUBSETS` named properties, and beyond
        that the number of *required* ones written: any member may come next, the text check
        refuses a repeated key, so that count reaches the number required exactly when every
        required key is present."""
        name = self.fresh("obj")
        if any(o.named.get(k, _ABSENT).value is NOTHING for k in o.required):
            self.add(name, (self.nothing(),))  # a required key that may not appear
            return name
        named, regions = self._few_keys_named(o)
        members = [(k, p.value) for k, p in named.items() if p.value is not NOTHING]
        keys = self.keys_available(members, regions, o.min_props)
        if keys is not None and keys < o.min_props:
            self.emptied.append(f"minProperties {o.min_props}: only {keys} property names "
                                f"are allowed")  # fmt: skip
            self.add(name, (self.nothing(),))
            return name
        colon, comma = self.punctuation(":", depth), self.punctuation(",", depth)
        pairs = [(self.key_lexeme(k), *colon, self.value(v, depth + 1)) for k, v in members]
        extra = None
        if regions:
            extra = f"{name}_extra"
            for region in regions:
                key = self.dfa_lexeme("key", self.algebra.key_set_dfa(region.keys))
                self.add(extra, (key, *colon, self.value(region.value, depth + 1)))
        counting = o.min_props > 0 or o.max_props is not None
        cap = o.max_props if o.max_props is not None else o.min_props
        required = {i for i, (k, _) in enumerate(members) if k in o.required}
        subsets = self.any_order and len(members) <= _MAX_SUBSETS
        counted = self.any_order and not subsets  # named keys may repeat in the grammar
        self.free_keys = self.free_keys or counted
        some = {}  # with `counted`: a nonterminal for any required / any optional member
        if counted:
            for kind, chosen in (("req", required), ("opt", set(range(len(pairs))) - required)):
                if chosen:
                    some[kind] = f"{name}_{kind}"
                    for i in sorted(chosen):
                        self.add(some[kind], pairs[i])

        def bump(c: int) -> int | None:
            if not counting:
                return 0
            if o.max_props is not None:
                return c + 1 if c + 1 <= o.max_props else None
            return min(c + 1, cap)

        # a state: (members done: index in schema order, a bitmask or a count of required
        # ones; property count; whether something was written)
        start = (0, 0, False)
        states = {start: f"{name}_s"}
        todo = [start]

        def goto(state: tuple) -> str:
            if state not in states:
                states[state] = f"{name}_{len(states)}"
                todo.append(state)
            return states[state]

        while todo:
            done, c, wrote = state = todo.pop()
            here = states[state]
            lead = comma if wrote else ()
            nc = bump(c)
            at_extras = True
            if counted:
                finished = done == len(required)
                if nc is not None:
                    if not finished and "req" in some:
                        self.add(here, (*lead, some["req"], goto((done + 1, nc, True))))
                    if "opt" in some:
                        self.add(here, (*lead, some["opt"], goto((done, nc, True))))
            elif subsets:
                finished = all(done >> i & 1 for i in required)
                for i, pair in enumerate(pairs):
                    if not done >> i & 1 and nc is not None:
                        self.add(here, (*lead, *pair, goto((done | 1 << i, nc, True))))
            else:
                finished = done == len(pairs)
                at_extras = finished
                if not finished:
                    if nc is not None:
                        self.add(here, (*lead, *pairs[done], goto((done + 1, nc, True))))
                    if done not in required:
                        self.add(here, (goto((done + 1, c, wrote)),))
            if at_extras and extra is not None and nc is not None:
                self.add(here, (*lead, extra, goto((done, nc, True))))
            if finished and wrote and (not counting or c >= o.min_props):
                self.add(here, ())
        self.close(states.values())
        self.add(
            name, (*self.punctuation("{", depth), states[start], *self.punctuation("}", depth))
        )
        if not o.required and o.min_props == 0:
            self.add(name, self.punctuation("{}", depth))
        return name

    def counted_lexeme(self, lengths: Lengths) -> str:
        """The lexeme of a pattern's strings with a bounded number of characters, its states
        built as they are read (`CountedDFA`), spelled as the `spellings` option says."""
        within = lengths.within
        assert within is not None
        char = _chunk_dfa(1, 1, "")
        if self.spellings == "all":
            strings, char = every_escape(within), every_escape(char, in_string=True)
        else:
            strings = within
        automaton = CountedDFA(strings, char, lengths.low, lengths.high)
        name = f"R{len(self.lexemes)}_counted"
        self.lexemes[name] = Lexeme(name, automaton.pattern[:80], automaton=automaton)
        return name

    def key_lexeme(self, key: str) -> str:
        """A property name: its one text, or every spelling of it (``spellings="all"``)."""
        if self.spellings != "all":
            return self.literal(key_text(key).decode())
        if key not in self.keys:
            self.keys[key] = self.dfa_lexeme("key", _key_dfa(key))
        return self.keys[key]


def _length_keyword(shape: Shape) -> tuple[str, str]:
    """The keyword and pointer an error about `shape`'s length bound names."""
    keyword = "maxLength" if shape.text is not None and shape.text.high is not None else "minLength"
    return keyword, shape.name if shape.name.startswith("/") else ""


@memoized(4096, max_bytes=64 * 2**20, size=lambda dfa: dfa.nbytes)
def _key_dfa(key: str) -> ByteDFA:
    """The one text of a property name, as a DFA (shared, so where its strings' characters are
    is found once: see `every_escape`)."""
    return dfa_from_strings([key_text(key)])


@lru_cache(maxsize=256)
def _chunk_dfa(low: int, high: int, end: str) -> ByteDFA:
    """The body characters of a string, low..high of them, then `end` (the closing quote)."""
    char = compile_regex(ANY_CHAR, encoding="json")
    body = repeat_unit(char, low, high)
    if not end:
        return body
    whole = quoted(body)  # then skip the opening quote
    table = whole.transitions[1:].astype("int64") - 1
    start = whole.step(whole.start, ord('"')) - 1
    return dfa_from_table(table, whole.accepting[1:], start, f'{body.pattern}"')


def compile_schema(
    schema: Any,
    *,
    whitespace: str | Layout | None = "compact",
    indent: int = 2,
    any_order: bool = False,
    lenient: bool = False,
    draft: str | None = None,
    max_rules: int = 100_000,
    timeout: float = 10.0,
    spellings: str = "canonical",
) -> tuple[GrammarIR, JsonChecks | None]:
    """Compile a JSON Schema (a dict, a bool or JSON text) to the grammar IR, and the text
    check for what a grammar cannot say (no duplicate keys, `uniqueItems`; None if not needed).

    Args:
        whitespace: the whitespace around punctuation, a `Layout` or the name of one
            (`constrain.jsonschema.layout`): "compact" (none); "natural" (what JSON printers
            and models write: nothing before ``:`` and ``,``; after ``:`` nothing or a space;
            after ``,`` nothing, a space or a line break; after ``{`` / ``[`` and before
            ``}`` / ``]`` nothing or a line break; a line break is ``\n`` then up to 40
            spaces or up to 10 tabs; empty containers are ``{}`` and ``[]``: admits
            ``json.dumps`` output with or without ``indent`` up to 40 columns deep, and with
            compact separators); "default" (on either side of every punctuation, at most 40
            spaces or tabs, one line break and 40 more); "pretty" (exactly the layout of
            ``json.dumps(value, indent=indent)``); or a regex allowed on either side of every
            punctuation. Never whitespace before or after the document's value.
        any_order: admit object members in any order (default: schema order, then extra keys);
            any number of properties; `required` is enforced and no key repeats.
        lenient: drop what cannot be expressed (with a warning listing it) instead of raising.
        draft: the dialect to read the schema in ("2020-12", "2019-09", "draft-07",
            "draft-06", "draft-04"), overriding its ``$schema`` (default: as it declares,
            else 2020-12).
        max_rules: limit on the size of the grammar.
        timeout: limit on the compilation, in seconds.
        spellings: "canonical" (generation: every value in its one canonical text, numbers
            without trailing fraction zeros, digits bounded) or "all" (validation: every
            spelling JSON allows, escapes in strings and keys included); see
            `constrain.jsonschema.spellings`.

    Raises:
        UnsupportedSchemaError: a keyword that cannot be expressed exactly (named, with its
            JSON pointer), in strict mode; or the compilation took longer than `timeout`.
    """
    if isinstance(schema, str):
        schema = parse_schema_text(schema)
    check_json_value(schema, None, "")  # JSON data throughout (no sets, NaN, tuples ...)
    if draft is not None and draft_validator(draft) is None:
        raise GrammarError(f"unknown draft {draft!r}: one of {', '.join(DRAFTS)}")
    if spellings not in SPELLINGS:
        raise GrammarError(f"unknown spellings {spellings!r}: one of {', '.join(SPELLINGS)}")
    pretty = whitespace == "pretty"
    layout = None if pretty else layout_of(whitespace)
    try:
        normalizer, root = _normalized(schema, lenient, draft, deadline_after(timeout))
        emitter = _Emitter(
            normalizer.algebra, layout, indent if pretty else None, any_order, max_rules, spellings
        )
        start = emitter.value(root, 0)
    except ShapeUnsupported as exc:
        raise UnsupportedSchemaError(str(exc), None, "") from None
    except CompileTimeout:
        raise UnsupportedSchemaError(
            f"compiling the schema took longer than its limit of {timeout:g} s (timeout=)",
            None,
            "",
        ) from None
    emitter.add("start", (start,))
    live = set(emitter.lexemes) - {"NOTHING"}
    if "start" not in derivable(emitter.rules, live):
        why = "; ".join(emitter.emptied) or "no JSON value satisfies all its keywords together"
        raise EmptyLanguageError(f"the schema admits no value (its language is empty): {why}")
    if normalizer.dropped:
        warnings.warn(
            "lenient JSON Schema compile dropped: " + "; ".join(normalizer.dropped), stacklevel=2
        )
    ir = GrammarIR("start", emitter.rules, emitter.lexemes, [], source=json.dumps(schema)[:200])
    return ir, checks_for(root, emitter.free_keys, escapes=spellings == "all")


def _normalized(
    schema: Any, lenient: bool, draft: str | None, deadline: float
) -> tuple[Normalizer, Shape]:
    """The schema's normal form; schema objects the algebra cannot combine exactly become
    check sites, found one per pass (a schema rarely has more than one or two). Each pass has
    its own `ShapeAlgebra` (the normalizer returned holds the last, for the emitter); the
    passes share the content keys of the schema objects."""
    sites: frozenset[int] = frozenset()
    contents = Contents()
    while True:
        algebra = ShapeAlgebra(deadline)
        normalizer = Normalizer(
            schema, algebra=algebra, lenient=lenient, draft=draft, sites=sites, contents=contents
        )
        try:
            root = normalizer.shape(schema, "")
            algebra.settle()
        except InexactSchema as exc:
            if len(sites) >= _MAX_SITES:
                raise UnsupportedSchemaError(
                    f"{exc.message} (more than {_MAX_SITES} schema objects would be validated "
                    f"on the value)",
                    exc.keyword,
                    exc.pointer,
                ) from None
            targets = {*sites, contents.of(exc.schema)}
            sites = sites_reaching(normalizer.resources, targets, contents.of)
            continue
        except ShapeUnsupported as exc:
            raise UnsupportedSchemaError(str(exc), "$ref", "") from None
        return normalizer, root
