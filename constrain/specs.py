"""From what the user states to a `Constraint`: regex, choices, grammar, JSON Schema or type.

`constraint_for` builds the grammar and binds it to the model's vocabulary, and caches the
result per vocabulary by the constraint's specification (a schema by its canonical JSON text),
so generating again with the same constraint compiles nothing.
"""

from __future__ import annotations

import json
import os
import weakref
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from constrain.engine.matcher import Constraint
from constrain.engine.vocab import Vocabulary
from constrain.jsonschema.grammar import Grammar

__all__ = ["constraint_for", "free_text", "grammar_from"]

_CACHED_PER_VOCABULARY = 64  # constraints kept per vocabulary, least recently used out
_constraint_cache: weakref.WeakKeyDictionary[Vocabulary, OrderedDict[tuple, Constraint]] = (
    weakref.WeakKeyDictionary()
)


def grammar_from(grammar: Grammar | str | os.PathLike) -> Grammar:
    """A Grammar from a Grammar, a library grammar name, a ``.lark`` path, or Lark text."""
    from constrain import grammars

    if isinstance(grammar, Grammar):
        return grammar
    if isinstance(grammar, os.PathLike):
        return Grammar.from_lark(grammar)
    if not isinstance(grammar, str):
        raise TypeError(
            f"grammar= expects a Grammar, a library name, a path or Lark text, got {type(grammar).__name__}"
        )
    if grammar in grammars.names():
        return grammars.load(grammar)
    return Grammar.from_lark(grammar)


def constraint_for(
    vocab: Vocabulary,
    *,
    regex: str | None = None,
    choices=None,
    grammar: Grammar | str | os.PathLike | None = None,
    schema: Any = None,
    type: Any = None,
    schema_options: Mapping[str, Any] | None = None,
) -> Constraint:
    """The constraint given by at most one of the keyword arguments (free text when none)."""
    schema_options = dict(schema_options or {})
    type_ = type
    given = {
        name: value
        for name, value in (
            ("regex", regex),
            ("choices", choices),
            ("grammar", grammar),
            ("schema", schema),
            ("type", type_),
        )
        if value is not None
    }
    if len(given) > 1:
        raise ValueError(f"pass at most one constraint, got {', '.join(f'{k}=' for k in given)}")
    if not given:
        return free_text(vocab)
    ((kind, spec),) = given.items()
    if kind == "grammar":
        spec = grammar_from(spec)
        key = ("grammar", id(spec))
    elif kind == "schema":
        key = ("schema", json.dumps(spec, sort_keys=True), _options_key(schema_options))
    elif kind == "choices":
        spec = tuple(spec)
        key = ("choices", spec)
    else:
        key = (kind, spec, _options_key(schema_options) if kind == "type" else ())
    per_vocab = _constraint_cache.setdefault(vocab, OrderedDict())
    cached = per_vocab.get(key)
    if cached is not None and (kind != "grammar" or cached.grammar is spec):
        per_vocab.move_to_end(key)
        return cached
    builders = {
        "grammar": lambda: spec,
        "regex": lambda: Grammar.from_regex(spec),
        "choices": lambda: Grammar.from_choices(spec),
        "schema": lambda: Grammar.from_json_schema(spec, **schema_options),
        "type": lambda: Grammar.from_type(spec, **schema_options),
    }
    constraint = Constraint(builders[kind](), vocab)
    per_vocab[key] = constraint
    if len(per_vocab) > _CACHED_PER_VOCABULARY:
        per_vocab.popitem(last=False)
    return constraint


def _options_key(options: dict) -> tuple:
    return tuple(sorted(options.items()))


def free_text(vocab: Vocabulary) -> Constraint:
    """The constraint of unconstrained generation: any text (valid UTF-8), EOS anywhere."""
    per_vocab = _constraint_cache.setdefault(vocab, OrderedDict())
    if ("free",) not in per_vocab:
        per_vocab[("free",)] = Constraint(Grammar.from_regex(r"(?:.|\n)*"), vocab)
    return per_vocab[("free",)]
