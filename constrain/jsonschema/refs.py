"""References inside one JSON Schema document: `$id` bases, `$anchor`, `$dynamicAnchor`,
JSON pointers, and the dynamic scope that `$dynamicRef` resolves against.

The document is walked once: every schema object that declares an `$id` (`id` in draft 4)
starts a resource with a base URI resolved against its parent's; anchors are registered under
their resource. A reference is resolved against the base of the schema holding it, to a schema
object plus that object's own base. Remote documents are out of scope: a reference that leaves
the document is an error naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote, urldefrag, urljoin

from constrain.errors import UnsupportedSchemaError
from constrain.fuel import burn

__all__ = ["DOCUMENT_BASE", "Location", "Resources"]

DOCUMENT_BASE = "urn:constrain:document"
# keywords whose values are data, not schemas: never searched for $id or anchors
_DATA = {"const", "enum", "examples", "default"}
_SCHEMA_MAPS = {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}


class Location(tuple):
    """(schema, base URI, JSON pointer from the document root) of a resolved schema."""

    __slots__ = ()

    def __new__(cls, schema: Any, base: str, pointer: str):
        return super().__new__(cls, (schema, base, pointer))


class Resources:
    """Every resource, anchor and dynamic anchor of a document."""

    def __init__(self, root: Any, legacy_ids: bool = False):
        self.root = root
        self.legacy_ids = legacy_ids  # draft 4-7: `$id`/`id` may be a plain-name fragment
        self.resources: dict[str, Location] = {}
        self.anchors: dict[str, Location] = {}
        self.dynamic: dict[str, set[str]] = {}  # resource URI -> its dynamic anchor names
        # id(schema object) -> its base URI (`root` holds the objects, so no id is reused)
        self.base_of: dict[int, str] = {}
        self._walk(root, DOCUMENT_BASE, "")
        self.resources.setdefault(DOCUMENT_BASE, Location(root, DOCUMENT_BASE, ""))

    def _walk(self, node: Any, base: str, pointer: str) -> None:
        if isinstance(node, list):
            for i, item in enumerate(node):
                self._walk(item, base, f"{pointer}/{i}")
            return
        if not isinstance(node, Mapping):
            return
        burn(1 + len(node))  # the document is walked once: a unit per key
        ident = node.get("$id", node.get("id") if self.legacy_ids else None)
        if isinstance(ident, str):
            target, fragment = urldefrag(_join(base, ident))
            if fragment and self.legacy_ids and not ident.startswith("#/"):
                self.anchors[f"{target}#{fragment}"] = Location(node, base, pointer)
            elif not fragment:
                base = target
                self.resources.setdefault(base, Location(node, base, pointer))
        self.base_of[id(node)] = base
        for key in ("$anchor", "$dynamicAnchor"):
            name = node.get(key)
            if isinstance(name, str):
                self.anchors.setdefault(f"{base}#{name}", Location(node, base, pointer))
                if key == "$dynamicAnchor":
                    self.dynamic.setdefault(base, set()).add(name)
        for key, value in node.items():
            if key in _DATA:
                continue
            if key in _SCHEMA_MAPS and isinstance(value, Mapping):
                for name, sub in value.items():
                    self._walk(sub, base, f"{pointer}/{key}/{_escape(name)}")
            elif isinstance(value, (Mapping, list)):
                self._walk(value, base, f"{pointer}/{_escape(key)}")

    def base(self, schema: Any) -> str:
        return self.base_of.get(id(schema), DOCUMENT_BASE)

    def resolve(self, ref: str, base: str, keyword: str, pointer: str) -> Location:
        """The schema `ref` names, seen from a schema whose base URI is `base`."""
        target, fragment = urldefrag(_join(base, ref))
        if not fragment or fragment.startswith("/"):
            resource = self.resources.get(target)
            if resource is None:
                raise UnsupportedSchemaError(
                    f"reference {ref!r} leaves the document (remote references are not supported)",
                    keyword,
                    pointer,
                )
            return self._follow(resource, unquote(fragment), ref, keyword, pointer)
        found = self.anchors.get(f"{target}#{fragment}")
        if found is None:
            raise UnsupportedSchemaError(f"reference {ref!r} does not resolve", keyword, pointer)
        return found

    def _follow(self, start: Location, fragment: str, ref: str, keyword: str, pointer: str):
        node, base, where = start
        for part in fragment.split("/")[1:] if fragment else []:
            part = part.replace("~1", "/").replace("~0", "~")
            try:
                node = node[int(part)] if isinstance(node, list) else node[part]
            except (KeyError, IndexError, ValueError, TypeError):
                raise UnsupportedSchemaError(
                    f"reference {ref!r} does not resolve", keyword, pointer
                ) from None
            where = f"{where}/{_escape(part)}"
            base = self.base_of.get(id(node), base)
        return Location(node, base, where)

    def dynamic_target(self, ref: str, base: str, scope: tuple[str, ...], pointer: str) -> Location:
        """`$dynamicRef`: the static target, unless it is a dynamic anchor, in which case the
        outermost resource of the dynamic scope that declares the same dynamic anchor."""
        static = self.resolve(ref, base, "$dynamicRef", pointer)
        target, fragment = urldefrag(_join(base, ref))
        if not fragment or fragment not in self.dynamic.get(target, ()):
            return static
        for resource in scope:
            if fragment in self.dynamic.get(resource, ()):
                return self.anchors[f"{resource}#{fragment}"]
        return static

    @property
    def has_dynamic(self) -> bool:
        return bool(self.dynamic)


def _join(base: str, ref: str) -> str:
    """`ref` resolved against `base` (fragments work for any base, URNs included)."""
    if ref.startswith("#"):
        return urldefrag(base)[0] + ref
    return urljoin(base, ref)


def _escape(key: str) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")
