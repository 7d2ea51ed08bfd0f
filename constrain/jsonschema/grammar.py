"""`Grammar` with the JSON Schema front end: `from_json_schema` and `from_type`.

The engine's `constrain.engine.Grammar` knows regexes, choices, Lark and the grammar IR; this
subclass adds the constructors whose compiler lives in this package, so the engine never
imports its front end. ``cn.Grammar`` is this class.
"""

from __future__ import annotations

from constrain.engine.grammar import Grammar as EngineGrammar
from constrain.jsonschema.compiler import compile_schema
from constrain.jsonschema.layout import Layout
from constrain.jsonschema.types import schema_from_type

__all__ = ["Grammar"]


class Grammar(EngineGrammar):
    """A constraint on text (see `constrain.engine.Grammar`), also built from a JSON Schema
    or a Python type."""

    @classmethod
    def from_json_schema(
        cls,
        schema,
        *,
        whitespace: str | Layout | None = "compact",
        indent: int = 2,
        any_order: bool = False,
        lenient: bool = False,
        draft: str | None = None,
        timeout: float = 10.0,
        spellings: str = "canonical",
    ) -> Grammar:
        """The JSON documents valid under `schema` (a dict, a bool or JSON text).

        By default (``spellings="canonical"``, for generation) every value has one text:
        strings in one encoding (characters raw, escapes only where JSON requires them, as
        ``json.dumps(..., ensure_ascii=False)`` writes them), numbers without an exponent,
        a fraction never ending in ``0`` (``0.3``, not ``0.30``; integers without one, so
        ``json.loads`` gives an ``int`` where the schema says ``integer``), never ``-0``, and
        at most 20 digits before the point, 17 significant and 20 after it (see
        `constrain.jsonschema.spellings`). ``spellings="all"`` admits every text JSON
        allows for the same values (``1972.0``, ``"\\u00e9"``, ``"\\/"``), for checking
        given text; numbers with an exponent are admitted in neither.

        Args:
            whitespace: the layout around punctuation: "compact" (none), "natural" (the
                layouts JSON printers and models write: ``json.dumps`` with or without
                ``indent``, compact separators; never a space before ``:`` or a line break
                before ``,``), "default" (bounded runs of spaces, tabs and one line break on
                either side of every punctuation), "pretty" (exactly
                ``json.dumps(value, indent=indent)``), a `constrain.jsonschema.Layout`, or a
                regex allowed on either side of every punctuation.
            any_order: object members in any order (default: schema order, then extra keys).
            lenient: drop what cannot be expressed, with a warning, instead of raising.
            draft: read the schema in this dialect ("2020-12", "2019-09", "draft-07",
                "draft-06", "draft-04") whatever its ``$schema`` says.
            timeout: limit on the compilation, in seconds.
            spellings: "canonical" (generation) or "all" (validation), as above.

        Raises:
            SchemaError: an invalid schema: not JSON, or a keyword whose value has the wrong
                type, named with its JSON pointer.
            UnsupportedSchemaError: a keyword that cannot be expressed exactly, named with its
                JSON pointer (strict mode), or the compilation took longer than `timeout`.
        """
        ir, check = compile_schema(
            schema,
            whitespace=whitespace,
            indent=indent,
            any_order=any_order,
            lenient=lenient,
            draft=draft,
            timeout=timeout,
            spellings=spellings,
        )
        # JSON separates every value by punctuation, and a string chunk is a fixed length:
        # no lexeme can be trapped by longest match, so the lint is skipped
        grammar = cls.from_ir(ir, kind="json_schema", lint=False)
        grammar.check = check
        return grammar

    @classmethod
    def from_type(cls, annotation, **options) -> Grammar:
        """The JSON documents of the values of a Python type: pydantic models, dataclasses,
        TypedDict, `Literal`, `Enum`, `list[...]`, `tuple[...]`, `dict[str, ...]`, `Optional`,
        unions and `Annotated` constraints. `options` are those of `from_json_schema`.

        Raises:
            TypeError: an annotation with no JSON Schema counterpart.
        """
        return cls.from_json_schema(schema_from_type(annotation), **options)
