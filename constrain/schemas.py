"""The example JSON Schemas of the repository's schemas/, by name, for the demo, docs and CLI.

cn.schemas.names()        # ['city', 'location', 'moon_landing', 'person', 'person_record']
schema = cn.schemas.load("person")
cn.generate(model, "Invent a person.", schema=schema)
"""

from __future__ import annotations

import json
from pathlib import Path

from constrain import datadirs
from constrain.errors import ConstrainError

__all__ = ["load", "names", "path"]


def names() -> list[str]:
    """The names of the example schemas."""
    return datadirs.names("schemas", ".json")


def path(name: str) -> Path:
    """The file of example schema `name` (for `constrain generate --schema`)."""
    return datadirs.file("schemas", name, ".json", ConstrainError, "example schema")


def load(name: str) -> dict:
    """Example schema `name`, parsed (a new dict each call: changing it changes no other)."""
    return json.loads(path(name).read_text(encoding="utf-8"))
