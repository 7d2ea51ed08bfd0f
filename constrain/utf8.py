"""Text UTF-8 can hold: the check every front end runs on user text before reading it.

A Python string may hold a lone UTF-16 surrogate (a JSON body spells one as ``"\\ud800"``);
no UTF-8 text can, so a prompt, a choice or a tool description holding one would fail deep
inside a tokenizer or a compiler with an error that names neither the field nor the problem.
"""

from __future__ import annotations

from collections.abc import Mapping

from constrain.errors import ConfigError

__all__ = ["lone_surrogate", "refuse_lone_surrogates"]


def lone_surrogate(value, where: str) -> tuple[str, str] | None:
    """The first string in `value` (nested lists and mappings, keys included) that holds a
    lone UTF-16 surrogate, as (where it is, what is wrong in words); None when there is none."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            return where, (
                f"{where} holds a lone surrogate U+{ord(value[exc.start]):04X} at character "
                f"{exc.start}, which UTF-8 text cannot hold"
            )
    elif isinstance(value, Mapping):
        for key, item in value.items():
            found = lone_surrogate(key, where) or lone_surrogate(
                item, f"{where}.{key}" if where else str(key)
            )
            if found:
                return found
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            found = lone_surrogate(item, f"{where}[{i}]")
            if found:
                return found
    return None


def refuse_lone_surrogates(value, where: str) -> None:
    """Raise `ConfigError` naming the first string in `value` holding a lone surrogate (see
    `lone_surrogate`)."""
    found = lone_surrogate(value, where)
    if found is not None:
        raise ConfigError(found[1])
