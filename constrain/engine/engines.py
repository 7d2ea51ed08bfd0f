"""Which engine runs the token-level hot path: the compiled core, or the Python reference.

The native core (the extension `constrain.engine.native`, C++ in ``native/``, built by
``pip install -e .``) computes what the Python engine computes, faster: the lexer's product DFA
and the vocabulary trie walks. The Python engine stays the executable specification, and the
tests hold the two to the same masks. An automaton takes ``engine="native"`` or ``"python"``;
None means `default_engine()`.
"""

from __future__ import annotations

import os
import warnings

from constrain.errors import ConfigError

__all__ = ["ENGINES", "default_engine", "native_available", "resolve_engine"]

ENGINES = ("native", "python")
_warned = False


def native_available() -> bool:
    """Whether the compiled core is built and importable."""
    try:
        import constrain.engine.native  # noqa: F401
    except ImportError:
        return False
    return True


def default_engine() -> str:
    """``CONSTRAIN_ENGINE`` if set, else "native" when it is built, else "python" (with a
    warning once: a checkout used without ``pip install -e .``)."""
    global _warned
    chosen = os.environ.get("CONSTRAIN_ENGINE")
    if chosen:
        return chosen
    if native_available():
        return "native"
    if not _warned:
        _warned = True
        warnings.warn(
            "the native engine core is not built (pip install -e .): using the Python engine",
            stacklevel=3,
        )
    return "python"


def resolve_engine(engine: str | None) -> str:
    """`engine` checked ("native" only when it is built), or the default when None."""
    engine = engine or default_engine()
    if engine not in ENGINES:
        raise ConfigError(f"engine must be one of {ENGINES}, not {engine!r}")
    if engine == "native" and not native_available():
        raise ConfigError("engine='native' asked for, but the native core is not built")
    return engine
