"""The grammar library: the Lark grammars of the repository's grammars/, loadable by name.

cn.grammars.names()        # ['arithmetic', 'csv', 'json', 'python_expr', 'sql']
g = cn.grammars.load("sql")
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
    """The file of library grammar `name`."""
    return datadirs.file("grammars", name, ".lark", GrammarError)


@cache
def load(name: str) -> Grammar:
    """The library grammar `name` (compiled once per process)."""
    return Grammar.from_lark(path(name))
