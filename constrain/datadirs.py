"""Where the data directories (grammars/, schemas/) are, so loaders work installed or not.

They live at the top of the repository. A regular install copies each one into the package as
``constrain/data/<name>/`` (pyproject.toml maps them there); from a checkout (an editable
install, or the repository on PYTHONPATH) they are read in place, next to ``constrain/``.
"""

from __future__ import annotations

from pathlib import Path

from constrain.errors import ConstrainError

__all__ = ["names", "path", "file"]

_PACKAGE = Path(__file__).resolve().parent


def path(name: str) -> Path:
    """The data directory `name` ("grammars", "schemas"): its installed copy, else the checkout's."""
    installed = _PACKAGE / "data" / name
    return installed if installed.is_dir() else _PACKAGE.parent / name


def names(directory: str, suffix: str) -> list[str]:
    """The names of the files ending in `suffix` in data directory `directory`."""
    return sorted(p.stem for p in path(directory).glob(f"*{suffix}"))


def file(directory: str, name: str, suffix: str, error: type[ConstrainError], what: str) -> Path:
    """The file `name` + `suffix` of data directory `directory`, `name` being one of `names`
    (never a path: ``../x`` names nothing). Otherwise `error` says it is an unknown `what`
    ("library grammar") and lists the names there are."""
    known = names(directory, suffix)
    if name not in known:
        raise error(f"unknown {what} {name!r}; available: {', '.join(known)}")
    return path(directory) / f"{name}{suffix}"
