"""`ConstraintSpec`: what the output must be, as the user states it, and its `Constraint`.

A spec names at most one of a regex, a list of choices, a grammar, a JSON Schema or a Python
type (none: free text). `constraint(vocab)` compiles it and binds it to the vocabulary, kept by
the vocabulary under the spec's content (a schema by its canonical JSON text), so generating
again with the same constraint compiles nothing; `value(text)` reads a complete output as the
user's value (parsed JSON, an instance of the type).
"""

from __future__ import annotations

import json
import os
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import jsonschema

from constrain.constraints.constraint import Constraint
from constrain.engine.cache import BoundedCache
from constrain.engine.grammar import Grammar as EngineGrammar
from constrain.engine.grammar.gbnf import grammar_syntax
from constrain.engine.grammar.lark_frontend import read_lark as read_grammar_file
from constrain.engine.vocab import Vocabulary
from constrain.errors import ConfigError, ConstrainError, GrammarError
from constrain.jsonschema.grammar import Grammar
from constrain.jsonschema.types import schema_from_type
from constrain.jsonschema.validation import (
    draft_validator,
    exact_numbers,
    exact_validator,
    load_exact,
)
from constrain.jsonschema.values import value_from_json
from constrain.utf8 import refuse_lone_surrogates

__all__ = ["CONSTRAINTS_BYTES", "ConstraintSpec", "compiled_constraints", "grammar_from"]

_KINDS = ("regex", "choices", "grammar", "schema", "type")
_CONSTRAINTS_KEPT = 64  # compiled constraints kept per vocabulary (least recently used out)
CONSTRAINTS_BYTES = 2**30  # and the bytes they may hold (`Constraint.nbytes`), by default


def grammar_from(grammar: EngineGrammar | str | os.PathLike) -> EngineGrammar:
    """A Grammar from a Grammar, a library grammar name (``"sql"``), a file (a ``Path``: only
    a path object is read as a file; a ``.gbnf`` file is GBNF), or grammar text: GBNF when its
    rules are defined with ``::=`` (`grammar_syntax`), else Lark. A string without whitespace
    or ``:`` is no grammar text, so it names a library grammar, and an unknown one is an error
    listing them.

    Raises:
        GrammarError: an unknown library grammar name, an unreadable file, a bad grammar, or
            something else than these four.
    """
    from constrain import grammars

    if isinstance(grammar, EngineGrammar):
        return grammar
    if isinstance(grammar, os.PathLike):
        if os.fspath(grammar).endswith(".gbnf"):
            return Grammar.from_gbnf(read_grammar_file(grammar))
        return Grammar.from_lark_file(grammar)
    if not isinstance(grammar, str):
        raise GrammarError(
            f"grammar= expects a Grammar, a library grammar name, a pathlib.Path or Lark text, "
            f"got {type(grammar).__name__}"
        )
    if ":" not in grammar and not any(c.isspace() for c in grammar.strip()):
        try:
            return grammars.load(grammar.strip())
        except GrammarError as exc:
            if grammar.strip().endswith(".lark") or "/" in grammar or os.sep in grammar:
                raise GrammarError(
                    f"{exc}; a string is never read as a file: pass pathlib.Path({grammar!r}) "
                    f"to read one"
                ) from None
            raise
    if grammar_syntax(grammar) == "gbnf":
        return Grammar.from_gbnf(grammar)
    return Grammar.from_lark(grammar)


def compiled_constraints(vocab: Vocabulary) -> BoundedCache:
    """The constraints compiled for `vocab`, by their specification (its hits and misses
    are the compile cache's), at most `CONSTRAINTS_BYTES` of them as last measured (they
    grow while used: `recount` measures them again; set `max_bytes` to change the bound)."""
    return vocab.derived.get_or_build(
        ("constraints",),
        lambda: BoundedCache(_CONSTRAINTS_KEPT, max_bytes=CONSTRAINTS_BYTES, size=_constraint_bytes),
    )


def _check_type(given: Any) -> None:
    """Refuse a `type=` that is no type (an instance, a dict), before it is hashed."""
    if isinstance(given, Mapping):
        raise ConfigError("type= expects a Python type; a JSON Schema (a dict) goes in schema=")
    try:
        hash(given)
    except TypeError:
        raise ConfigError(
            f"type= expects a Python type (a class, list[int], Literal[...], ...), got an "
            f"instance of {type(given).__name__}"
        ) from None
    if not isinstance(given, type) and typing.get_origin(given) is None and not _typing_form(given):
        raise ConfigError(
            f"type= expects a Python type (a class, list[int], Literal[...], ...), got "
            f"{given!r}, an instance of {type(given).__name__}"
        )


def _typing_form(given: Any) -> bool:
    """Whether `given` is a type of the `typing` module without an origin (Any, a NewType,
    a TypeVar, an alias) rather than a value."""
    return type(given).__module__ in ("typing", "typing_extensions") or given is None


def _constraint_bytes(constraint: Constraint) -> int:
    return constraint.nbytes()


@dataclass(frozen=True, eq=False)
class ConstraintSpec:
    """At most one of `regex`, `choices`, `grammar`, `schema`, `type` (none: free text).

    Attributes:
        grammar: a `Grammar`, a library grammar name ("json", "sql", ...), a `pathlib.Path` of
            a ``.lark`` file, or Lark grammar text (see `grammar_from`).
        schema: a JSON Schema (dict, bool or JSON text).
        type: a Python type (`Grammar.from_type`).
        schema_options: options of `Grammar.from_json_schema` (`whitespace`, `any_order`, ...).
    """

    regex: str | None = None
    choices: Sequence[str] | None = None
    grammar: EngineGrammar | str | os.PathLike | None = None
    schema: dict | bool | str | None = None
    type: Any = None
    schema_options: Mapping[str, Any] | None = None

    def __post_init__(self):
        given = [k for k in _KINDS if getattr(self, k) is not None]
        if len(given) > 1:
            raise ConfigError(
                f"pass at most one constraint, got {', '.join(f'{k}=' for k in given)}"
            )
        if self.choices is not None:
            if isinstance(self.choices, (str, bytes)) or not all(
                isinstance(c, str) for c in self.choices
            ):
                raise ConfigError("choices= expects a list of strings")
            refuse_lone_surrogates(list(self.choices), "choices")
        if isinstance(self.regex, str):
            refuse_lone_surrogates(self.regex, "regex")
        if self.type is not None:
            _check_type(self.type)

    @property
    def kind(self) -> str:
        """ "regex", "choices", "grammar", "schema", "type", or "free" (no constraint)."""
        return next((k for k in _KINDS if getattr(self, k) is not None), "free")

    @property
    def is_json(self) -> bool:
        return self.kind in ("schema", "type")

    def constraint(self, vocab: Vocabulary) -> Constraint:
        """The compiled constraint, bound to `vocab` (kept by the vocabulary under the
        spec's content; grammar text too, so a server compiles each grammar once)."""
        kept = compiled_constraints(vocab)
        text = self.kind == "grammar" and isinstance(self.grammar, str)
        grammar = grammar_from(self.grammar) if self.kind == "grammar" and not text else None
        key = ("grammar-text", self.grammar) if text else self._key(grammar)
        if grammar is None:  # keyed by content: built once however many ask at once
            return kept.get_or_build(
                key, lambda: Constraint(self.compile_grammar(), vocab)
            )
        found = kept.get(key)
        if found is None or found.grammar is not grammar:
            found = kept[key] = Constraint(grammar, vocab)
        return found

    def is_compiled(self, vocab: Vocabulary) -> bool:
        """Whether `constraint(vocab)` would be found compiled or being compiled (a free
        lookup: a grammar object or file is not read; those count as not compiled)."""
        if self.kind == "grammar" and not isinstance(self.grammar, str):
            return False
        key = ("grammar-text", self.grammar) if self.kind == "grammar" else self._key(None)
        return compiled_constraints(vocab).holds(key)

    def _key(self, grammar: EngineGrammar | None) -> tuple:
        options = tuple(sorted((self.schema_options or {}).items()))
        if self.kind == "grammar":
            return ("grammar", id(grammar))
        if self.kind == "schema":
            try:
                return ("schema", json.dumps(self.schema, sort_keys=True), options)
            except (TypeError, ValueError, RecursionError):  # not JSON data (or too deep):
                # compiling it says what and where
                return ("schema", id(self.schema), options)
        if self.kind == "choices":
            return ("choices", tuple(self.choices))
        if self.kind == "type":
            return ("type", self.type, options)
        return (self.kind, self.regex)

    def compile_grammar(self) -> EngineGrammar:
        """The spec's grammar, compiled anew (no vocabulary, no cache): what `constraint`
        binds, and what a front end checks a request with before an engine compiles it."""
        options = dict(self.schema_options or {})
        if self.kind == "grammar":
            return grammar_from(self.grammar)
        if self.kind == "regex":
            return Grammar.from_regex(self.regex)
        if self.kind == "choices":
            return Grammar.from_choices(self.choices)
        if self.kind == "schema":
            return Grammar.from_json_schema(self.schema, **options)
        if self.kind == "type":
            return Grammar.from_type(self.type, **options)
        return Grammar.from_regex(r"(?:.|\n)*")  # free text: any valid UTF-8, EOS anywhere

    @cached_property
    def _validator(self):
        """A `jsonschema` validator of the output (in the `draft` option's dialect, else the
        schema's own), for JSON constraints; numbers exact, as the compiler reads them
        (`exact_validator`: with floats, 0.3 is no multiple of 0.1)."""
        schema = schema_from_type(self.type) if self.kind == "type" else self.schema
        if isinstance(schema, str):
            schema = json.loads(schema)
        draft = (self.schema_options or {}).get("draft")
        cls = draft_validator(draft) if draft else None
        if cls is None:
            cls = jsonschema.validators.validator_for(
                schema, default=jsonschema.Draft202012Validator
            )
        cls = exact_validator(cls)
        return cls(exact_numbers(schema), format_checker=cls.FORMAT_CHECKER)

    def value(self, text: str) -> Any:
        """A complete output as the user's value: the parsed JSON (an instance of `type`),
        validated again as a safety net; None for constraints that are not JSON."""
        if not self.is_json:
            return None
        data = json.loads(text)
        error = jsonschema.exceptions.best_match(self._validator.iter_errors(load_exact(text)))
        if error is not None:  # the compiler promises exactness: this is a bug, say so
            raise ConstrainError(
                f"internal error: the output does not validate ({error.message} at "
                f"{error.json_path}); please report it with the schema: {text[:200]}"
            )
        return value_from_json(self.type, data) if self.kind == "type" else data
