"""The keyword registry: what the compiler does with each JSON Schema keyword.

One table serves two readers: the docs (`python -m constrain.jsonschema --write
docs/json-schema.md` regenerates the support table there) and the compiler, which reads
`SPEC_FORMATS` from here.
"""

from __future__ import annotations

__all__ = ["KEYWORDS", "SPEC_FORMATS", "support_table", "write_into"]

# the formats the specification defines: one we cannot enforce is an error, never ignored
# (a validator may assert it); any other format name is an annotation (nothing checks it)
SPEC_FORMATS = frozenset(
    {
        "date-time", "date", "time", "duration", "email", "idn-email", "hostname",
        "idn-hostname", "ipv4", "ipv6", "uri", "uri-reference", "iri", "iri-reference", "uuid",
        "uri-template", "json-pointer", "relative-json-pointer", "regex",
    }
)  # fmt: skip

# keyword -> (status, how / limits); status: "exact", "partial" or "no"
KEYWORDS: dict[str, tuple[str, str]] = {
    "type": ("exact", "string or array of types; an `integer` is written `1`, never `1.0` or "
             "`-0` (with `spellings=\"all\"` `1.0` is admitted too, except under draft 4, as its "
             "`$schema` says)"),
    "enum": ("exact", "any JSON values; numbers compared by value (`1` matches `1.0`)"),
    "const": ("exact", "any JSON value"),
    "$ref": ("exact", "JSON pointers, `$anchor`s and `$id`-relative URIs inside the document; "
             "recursion; before 2019-09 (declared `$schema`) it replaces its siblings"),
    "$defs / definitions": ("exact", "targets of references"),
    "$id / id": ("exact", "sets the base URI of references"),
    "$anchor": ("exact", "plain-name references"),
    "$dynamicRef / $dynamicAnchor": ("exact", "resolved through the dynamic scope at compile "
                                     "time"),
    "$recursiveRef": ("partial", "resolved to the document root"),
    "allOf": ("exact", "intersection of the normal forms (sibling keywords included)"),
    "anyOf": ("exact", "union"),
    "oneOf": ("exact", "union when branches are provably disjoint, else each branch minus the "
              "others; where that has no normal form, a check site (below)"),
    "not": ("exact", "complement of scalars always; of arrays and objects unless it needs "
            "\"some extra key / item has a bad value\" (then a check site)"),
    "if / then / else": ("exact", "(if and then) or (not if and else); as `not`"),
    "(check sites)": ("exact", "a schema object whose `oneOf` / `not` / `if` has no normal form "
                      "(and every `anyOf` / `oneOf` / `if` / `dependentSchemas` / `contains` "
                      "that can reach it) is relaxed to a superset in the grammar (its numbers, "
                      "null and booleans stay exact) and its value validated with `jsonschema` "
                      "when complete: a token completing an invalid value is refused; no "
                      "lookahead: dead ends are backtracked by `generate`"),
    "properties": ("exact", "output in schema order (any order with `any_order=True`, for "
                   "any number of properties); no object repeats a key (checked on the text "
                   "where the grammar alone does not prevent it)"),
    "required": ("exact", ""),
    "additionalProperties": ("exact", "extra keys exclude declared names and patterns exactly"),
    "patternProperties": ("exact", "overlapping patterns split into disjoint key regions"),
    "propertyNames": ("exact", "intersected with every key region; a region of at most 16 "
                                "keys (an enum) is written as named optional properties, in "
                                "sorted order (any order with `any_order`)"),
    "minProperties / maxProperties": ("exact", "counted in the grammar"),
    "dependentRequired / dependentSchemas / dependencies": ("exact", "per trigger key: objects "
                                                             "without it, or with its demands"),
    "unevaluatedProperties": ("partial", "exact except keys evaluated only by a second matching "
                              "anyOf / oneOf branch (such instances are rejected)"),
    "items / prefixItems / additionalItems": ("exact", "both the 2020-12 and the array form"),
    "minItems / maxItems": ("exact", ""),
    "contains / minContains / maxContains": ("exact", "items split into matching / not "
                                             "matching, counted in the grammar"),
    "unevaluatedItems": ("partial", "as unevaluatedProperties; `contains` annotations ignored"),
    "uniqueItems": ("exact", "items of at most 10 distinct scalar values: in the grammar "
                    "(each value written at most once, in any order; fewer values than "
                    "`minItems`: refused at compile); otherwise not context-free, so checked "
                    "on the text beside the grammar: a token completing a repeated item "
                    "(compared as JSON values) is refused; enforced where any `anyOf` branch "
                    "asks for it; `not` of it is a check site; no lookahead: dead ends are "
                    "backtracked by `generate` (`backtracks=`)"),
    "minLength / maxLength": ("exact", "code points; escapes count as one character; long "
                              "bounds counted in the grammar in 32-character chunks, and "
                              "beside a large pattern in a lexeme built as it is read"),
    "pattern": ("exact", "ECMA-262 search semantics (Unicode `\\s`, `\\S` also inside a "
                "class), intersected with length and format; lookaheads (not nested), `^` and `$` "
                "anywhere; no "
                "lookbehinds, backreferences, word boundaries (`\\b`, `\\B`; `[\\b]` is a "
                "backspace) or `\\S` in a negated class: each is an error"),
    "format": ("partial", "every format of the specification is enforced, exact or narrower "
               "(see below); unknown names are annotations"),
    "minimum / maximum / exclusiveMinimum / exclusiveMaximum": ("exact", "decimal bounds, both "
                                                                "draft styles"),
    "multipleOf": ("exact", "integers and decimals, up to 200,000 automaton states"),
}  # fmt: skip


def support_table() -> str:
    """The markdown support tables of docs/json-schema.md (keywords, then formats)."""
    from constrain.jsonschema.formats import FORMAT_NOTES

    rows = ["| keyword | support | how / limits |", "|---|---|---|"]
    for keyword, (status, how) in KEYWORDS.items():
        rows.append(f"| `{keyword}` | {status} | {how} |")
    rows += ["", "| format | admitted (never wider than the RFC) |", "|---|---|"]
    for name, note in FORMAT_NOTES.items():
        rows.append(f"| `{name}` | {note} |")
    return "\n".join(rows)


_START, _END = "<!-- support-table:start -->", "<!-- support-table:end -->"


def write_into(path: str) -> None:
    """Replace the generated section of a markdown file with the current tables."""
    with open(path) as f:
        text = f.read()
    head, _, rest = text.partition(_START)
    _, _, tail = rest.partition(_END)
    with open(path, "w") as f:
        f.write(f"{head}{_START}\n{support_table()}\n{_END}{tail}")
