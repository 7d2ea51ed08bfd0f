"""Where the data directories (grammars/, schemas/) are, so loaders work installed or not.

They live at the top of the repository. A regular install copies each one into the package as
``constrain/data/<name>/`` (pyproject.toml maps them there); from a checkout (an editable
install, or the repository on PYTHONPATH) they are read in place, next to ``constrain/``.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["path"]

_PACKAGE = Path(__file__).resolve().parent


def path(name: str) -> Path:
    """The data directory `name` ("grammars", "schemas"): its installed copy, else the checkout's."""
    installed = _PACKAGE / "data" / name
    return installed if installed.is_dir() else _PACKAGE.parent / name
