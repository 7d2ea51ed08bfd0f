"""Grammars: tokenizer-independent descriptions of the texts a constraint admits.

A `Grammar` is built from a regex, a list of choices (and, in later layers, a Lark grammar, a
JSON Schema or a Python type). It knows nothing about tokens: binding it to a `Vocabulary`
gives a `constrain.Constraint`.
"""

from constrain.engine.grammar.core import Grammar

__all__ = ["Grammar"]
