"""`BoundedCache`: the one cache helper, a least-recently-used map with explicit bounds.

Every cache in the library is one of these, owned by the object whose lifetime it shares (a
vocabulary's derived structures, a constraint's masks, a model's prompts), so no cache
outlives what it describes and none grows without a limit. A server fills them from several
threads at once (requests compile in worker threads while the scheduler decodes), so every
operation holds the cache's lock, and `get_or_build` builds each missing value once: a second
thread asking for a value being built waits for it instead of building it again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar

__all__ = ["BoundedCache", "memoized"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class _Pending:
    """A value one thread is building, which others wait for."""

    __slots__ = ("done", "value", "failed")

    def __init__(self):
        self.done = threading.Event()
        self.value = None
        self.failed = False


class BoundedCache(Generic[K, V]):
    """A map that forgets its least recently used entries beyond `max_entries` (and, with a
    `size` function, beyond `max_bytes` of values; the newest entry is always kept). `hits`
    and `misses` count the lookups (`get`, `get_or_build`). Safe to share between threads.

    A value is measured when it is stored; values that grow while cached (a compiled
    constraint's own caches) are measured again by `recount`."""

    __slots__ = (
        "max_entries", "max_bytes", "_size", "_bytes", "_sizes", "_items", "_lock", "_pending",
        "hits", "misses",
    )  # fmt: skip

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
        self._sizes: dict[K, int] = {}  # each value's size when last measured
        self._items: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()
        self._pending: dict[K, _Pending] = {}  # values being built by `get_or_build`
        self.hits = self.misses = 0

    def get(self, key: K, default: V | None = None) -> V | None:
        """The value under `key` (marked as recently used), or `default`."""
        with self._lock:
            if key in self._items:
                return self._hit(key)
            self.misses += 1
            return default

    def _hit(self, key: K) -> V:
        """The value under `key`, counted as a hit and marked as recently used (lock held)."""
        self.hits += 1
        self._items.move_to_end(key)
        return self._items[key]

    def __getitem__(self, key: K) -> V:
        with self._lock:
            value = self._items[key]
            self._items.move_to_end(key)
            return value

    def __setitem__(self, key: K, value: V) -> None:
        with self._lock:
            self._put(key, value)

    def _put(self, key: K, value: V) -> None:
        items = self._items
        if self._size is not None:
            self._bytes += self._size(value) - self._sizes.get(key, 0)
            self._sizes[key] = self._size(value)
        items[key] = value
        items.move_to_end(key)
        self._evict()

    def _evict(self) -> None:
        """Drop the least recently used entries beyond the bounds (lock held)."""
        items = self._items
        while len(items) > 1 and (
            len(items) > self.max_entries
            or (self.max_bytes is not None and self._bytes > self.max_bytes)
        ):
            key, _ = items.popitem(last=False)
            if self._size is not None:
                self._bytes -= self._sizes.pop(key)

    def recount(self) -> int:
        """Measure every value again (they may have grown), drop the least recently used
        beyond the bounds, and return the bytes held. The values are measured without the
        lock held (a size may take other locks)."""
        if self._size is None:
            return 0
        with self._lock:
            values = list(self._items.items())
        measured = {key: self._size(value) for key, value in values}
        with self._lock:
            for key, size in measured.items():
                if key in self._sizes:
                    self._bytes += size - self._sizes[key]
                    self._sizes[key] = size
            self._evict()
            return self._bytes

    def get_or_build(self, key: K, build: Callable[[], V]) -> V:
        """The value under `key`, built (and kept) on a miss, once: a thread that misses while
        another builds the same key waits for that value (and builds it itself only if that
        build failed). `build` runs without the lock held, so it may use the cache."""
        while True:
            with self._lock:
                if key in self._items:
                    return self._hit(key)
                pending = self._pending.get(key)
                owner = pending is None
                if owner:
                    self.misses += 1
                    pending = self._pending[key] = _Pending()
            if owner:
                break
            pending.done.wait()
            if not pending.failed:
                return pending.value
        try:
            value = build()
        except BaseException:
            pending.failed = True
            raise
        else:
            pending.value = value
            with self._lock:
                self._put(key, value)
            return value
        finally:
            with self._lock:
                del self._pending[key]
            pending.done.set()

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._items

    def holds(self, key: object) -> bool:
        """Whether `key` has a value, or one being built by `get_or_build`."""
        with self._lock:
            return key in self._items or key in self._pending

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[K]:
        with self._lock:
            return iter(list(self._items))

    def values(self) -> list[V]:
        with self._lock:
            return list(self._items.values())

    @property
    def bytes(self) -> int:
        """The summed `size` of the values, as last measured (0 without a size function)."""
        return self._bytes

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._sizes.clear()
            self._bytes = 0

    def __repr__(self) -> str:
        return f"BoundedCache({len(self)}/{self.max_entries} entries)"


def memoized(max_entries: int, *, max_bytes: int, size: Callable[[V], int]):
    """A decorator keeping a pure function's results by its (hashable) arguments in a
    `BoundedCache` of `max_entries` and `max_bytes` (`size` measures a result), shared by
    every caller: what `functools.lru_cache` does, bounded by bytes as well.
    `function.cache_clear()` forgets them."""

    def decorate(function: Callable[..., V]) -> Callable[..., V]:
        kept: BoundedCache[tuple, V] = BoundedCache(max_entries, max_bytes=max_bytes, size=size)

        def cached(*args):
            return kept.get_or_build(args, lambda: function(*args))

        cached.__doc__, cached.__name__ = function.__doc__, function.__name__
        cached.__wrapped__ = function  # type: ignore[attr-defined]
        cached.cache_clear = kept.clear  # type: ignore[attr-defined]
        cached.cache = kept  # type: ignore[attr-defined]
        return cached

    return decorate
