"""`PartialJSON`: a JSON text read as it is written, for streaming what is already complete.

Constrained decoding writes JSON a token at a time, and every prefix it writes can still be
completed. Streaming clients want to act on it before it ends: a tool call's arguments as they
are written (OpenAI's argument deltas), or the part of a structured answer that is final (the
keys whose values are complete, for typed partial objects). `PartialJSON` is fed the text as
it grows and keeps, in one pass over each new character:

- `value()`: the value so far with only its complete parts: scalars once they end, containers
  as soon as they open (holding their complete members);
- `spans`: where each value begins and ends in the text, by its path (``("arguments",)``,
  ``(0, "name")``), so a member's raw text can be streamed as it grows.

It reads what constrained decoding writes (a valid JSON prefix); text that is not one stops
it (`broken`), it never raises.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["PartialJSON"]

_WS = " \t\n\r"
_SCALAR_CHARS = frozenset("0123456789+-.eEtruefalsn")
_LITERALS = ("true", "false", "null")
_Path = tuple  # keys and indices from the root


class _Frame:
    """An open object or array: its container (already in its parent), its path, and what
    comes next in it."""

    __slots__ = ("container", "path", "expect", "key", "index")

    def __init__(self, container: dict | list, path: _Path):
        self.container, self.path = container, path
        self.expect = "first"  # "first", "key", "colon", "value", "next"
        self.key: str | None = None
        self.index = 0


class PartialJSON:
    """A JSON text read incrementally (see the module docstring)."""

    def __init__(self):
        self.text = ""
        self.spans: dict[_Path, list] = {}  # path -> [start, end or None]
        self.broken = False
        self._root: list = []  # holds the root value once it starts
        self._stack: list[_Frame] = []
        self._done = False  # the root value has ended
        self._token_start: int | None = None  # a string or scalar being read
        self._token_is_key = False
        self._escaped = False

    # -- reading --------------------------------------------------------------------------

    def feed(self, more: str) -> None:
        """Read `more`, the text's next characters."""
        start = len(self.text)
        self.text += more
        for i in range(start, len(self.text)):
            if self.broken:
                return
            self._char(i, self.text[i])

    def finish(self) -> None:
        """The text has ended: a scalar at its end (a number at the root) is complete."""
        if self._token_start is not None and self.text[self._token_start] != '"':
            self._end_scalar(len(self.text))

    @property
    def complete(self) -> bool:
        """The root value has ended."""
        return self._done

    def value(self) -> Any:
        """The value so far, complete parts only (None before the root value starts)."""
        return self._root[0] if self._root else None

    def raw(self, path: _Path) -> tuple[str, bool] | None:
        """The text of the value at `path` so far and whether it has ended (None: it has not
        begun)."""
        span = self.spans.get(path)
        if span is None:
            return None
        start, end = span
        return self.text[start : len(self.text) if end is None else end], end is not None

    # -- the scanner ----------------------------------------------------------------------

    def _char(self, i: int, c: str) -> None:
        if self._token_start is not None:
            if self.text[self._token_start] == '"':
                self._in_string(i, c)
                return
            if c in _SCALAR_CHARS:
                if self.text[self._token_start : i + 1] in _LITERALS:  # nothing can follow
                    self._end_scalar(i + 1)
                return
            self._end_scalar(i)
        if c in _WS:
            return
        frame = self._stack[-1] if self._stack else None
        if frame is None:
            if self._done:
                self.broken = True
            else:
                self._begin_value(i, c, ())
            return
        expect = frame.expect
        if c in "}]" and expect in ("first", "next"):
            if (c == "}") != isinstance(frame.container, dict):
                self.broken = True
                return
            self._end_value(frame.path, i + 1)
            self._stack.pop()
            self._after_value()
        elif expect == "next":
            if c != ",":
                self.broken = True
            else:
                frame.expect = "key" if isinstance(frame.container, dict) else "value"
        elif isinstance(frame.container, dict) and expect in ("first", "key"):
            if c != '"':
                self.broken = True
            else:
                self._token_start, self._token_is_key = i, True
        elif expect == "colon":
            if c != ":":
                self.broken = True
            frame.expect = "value"
        else:  # a value: an object member's, or an array item
            self._begin_value(i, c, self._current_path())

    def _in_string(self, i: int, c: str) -> None:
        if self._escaped:
            self._escaped = False
        elif c == "\\":
            self._escaped = True
        elif c == '"':
            start, self._token_start = self._token_start, None
            try:
                text = json.loads(self.text[start : i + 1])
            except ValueError:
                self.broken = True
                return
            if self._token_is_key:
                frame = self._stack[-1]
                frame.key, frame.expect = text, "colon"
                self._token_is_key = False
            else:
                self._store(text)
                self._end_value(self._current_path(), i + 1)
                self._after_value()

    def _begin_value(self, i: int, c: str, path: _Path) -> None:
        self.spans[path] = [i, None]
        if c in "{[":
            container: dict | list = {} if c == "{" else []
            self._store(container)
            self._stack.append(_Frame(container, path))
        elif c == '"' or c in _SCALAR_CHARS:
            self._token_start, self._token_is_key = i, False
        else:
            self.broken = True

    def _end_scalar(self, end: int) -> None:
        start, self._token_start = self._token_start, None
        try:
            value = json.loads(self.text[start:end])
        except ValueError:
            self.broken = True
            return
        self._store(value)
        self._end_value(self._current_path(), end)
        self._after_value()

    def _current_path(self) -> _Path:
        if not self._stack:
            return ()
        frame = self._stack[-1]
        return frame.path + ((frame.key,) if isinstance(frame.container, dict) else (frame.index,))

    def _store(self, value: Any) -> None:
        """Put a value that has begun (a container) or ended (a scalar) into its parent."""
        if not self._stack:
            self._root.append(value)
            return
        frame = self._stack[-1]
        if isinstance(frame.container, dict):
            frame.container[frame.key] = value
        else:
            frame.container.append(value)

    def _end_value(self, path: _Path, end: int) -> None:
        self.spans[path][1] = end

    def _after_value(self) -> None:
        if not self._stack:
            self._done = True
            return
        frame = self._stack[-1]
        frame.expect = "next"
        if isinstance(frame.container, list):
            frame.index += 1
