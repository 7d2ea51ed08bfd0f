"""`BoundedCache`: the one cache helper, a least-recently-used map with explicit bounds.

Every cache in the library is one of these, owned by the object whose lifetime it shares (a
vocabulary's derived structures, a constraint's masks, a model's prompts), so no cache
outlives what it describes and none grows without a limit.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar

__all__ = ["BoundedCache"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class BoundedCache(Generic[K, V]):
    """A map that forgets its least recently used entries beyond `max_entries` (and, with a
    `size` function, beyond `max_bytes` of values; the newest entry is always kept). `hits`
    and `misses` count the lookups (`get`, `get_or_build`)."""

    __slots__ = ("max_entries", "max_bytes", "_size", "_bytes", "_items", "hits", "misses")

    def __init__(
        self,
        max_entries: int,
        *,
        max_bytes: int | None = None,
        size: Callable[[V], int] | None = None,
    ):
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        if (max_bytes is None) != (size is None):
            raise ValueError("max_bytes and size go together")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._size = size
        self._bytes = 0
        self._items: OrderedDict[K, V] = OrderedDict()
        self.hits = self.misses = 0

    def get(self, key: K, default: V | None = None) -> V | None:
        """The value under `key` (marked as recently used), or `default`."""
        items = self._items
        if key in items:
            self.hits += 1
            items.move_to_end(key)
            return items[key]
        self.misses += 1
        return default

    def __getitem__(self, key: K) -> V:
        value = self._items[key]
        self._items.move_to_end(key)
        return value

    def __setitem__(self, key: K, value: V) -> None:
        items = self._items
        if self._size is not None:
            if key in items:
                self._bytes -= self._size(items[key])
            self._bytes += self._size(value)
        items[key] = value
        items.move_to_end(key)
        while len(items) > 1 and (
            len(items) > self.max_entries
            or (self.max_bytes is not None and self._bytes > self.max_bytes)
        ):
            _, dropped = items.popitem(last=False)
            if self._size is not None:
                self._bytes -= self._size(dropped)

    def get_or_build(self, key: K, build: Callable[[], V]) -> V:
        """The value under `key`, built (and kept) on a miss."""
        items = self._items
        if key in items:
            self.hits += 1
            items.move_to_end(key)
            return items[key]
        self.misses += 1
        value = build()
        self[key] = value
        return value

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[K]:
        return iter(self._items)

    def values(self):
        return self._items.values()

    @property
    def bytes(self) -> int:
        """The summed `size` of the values (0 without a size function)."""
        return self._bytes

    def clear(self) -> None:
        self._items.clear()
        self._bytes = 0

    def __repr__(self) -> str:
        return f"BoundedCache({len(self)}/{self.max_entries} entries)"
