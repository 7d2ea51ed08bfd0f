"""The grammar library: the Lark grammars of the repository's grammars/, loadable by name.

cn.grammars.names()        # ['arithmetic', 'csv', 'json', 'python_expr', 'sql']
g = cn.grammars.load("sql")

A name is only ever one of `names()`: it is never read as a path or as grammar text.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from constrain import datadirs
from constrain.engine.grammar import Grammar
from constrain.errors import GrammarError

__all__ = ["load", "names", "path"]


def names() -> list[str]:
    """The names of the library grammars."""
    return datadirs.names("grammars", ".lark")


def path(name: str) -> Path:
    """The file of library grammar `name`.

    Raises:
        GrammarError: `name` is not a library grammar (the message lists those there are).
    """
    return datadirs.file("grammars", name, ".lark", GrammarError, "library grammar")


@cache
def load(name: str) -> Grammar:
    """The library grammar `name` (compiled once per process).

    Raises:
        GrammarError: `name` is not a library grammar (the message lists those there are).
    """
    return Grammar.from_lark_file(path(name))
