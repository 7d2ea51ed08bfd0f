"""Checks a grammar cannot make: no duplicate keys, and `uniqueItems`.

"Every key of an object differs" and "every item of an array differs" are not context-free, so
the compiled grammar leaves them out and this *text check* runs beside it: a small JSON scanner
that follows the document as tokens arrive, remembers the keys of each open object and the items
of each open array that must be unique, and refuses a token that completes a duplicate (`Matcher`
consults it in `check`, `advance` and `mask`). Its states are immutable, so rollback and fork
are free.

Which arrays must be unique comes from the schema's normal form (`Shape`s): the scanner follows
the instance through the shapes (property -> value shape, position -> item shape). Where several
alternatives could apply (`anyOf`) and one of them requires unique items, uniqueness is enforced:
narrower, never wider. Items compare as JSON values (``1 == 1.0``, objects regardless of member
order); keys compare after unescaping.

When keys alone are checked (no array must be unique, no value is validated), the check runs
whole in the native core (`JsonKeyChecks`: states, scans and the selection of risky tokens),
with `JsonChecks(None)` as its reference.

The check refuses a token only when a key or item *completes* as a duplicate; it does not look
ahead, so a generation can reach a point where every continuation repeats an earlier item (an
array of two booleans that must hold three unique items). The sampler then reports the dead end.
"""

from __future__ import annotations

import bisect
import json
from decimal import Decimal

import numpy as np

from constrain.engine.automaton import TextCheck
from constrain.engine.engines import resolve_engine
from constrain.engine.vocab import Vocabulary
from constrain.jsonschema.shapes import ArrayShape, ObjectShape, Shape, key_text
from constrain.jsonschema.validation import load_exact

__all__ = ["JsonChecks", "JsonKeyChecks", "checks_for"]

# scanner modes
_VALUE, _KEY, _COLON, _AFTER, _STRING, _KEYSTR, _SCALAR, _END = range(8)
_WS = frozenset(b" \t\n\r")
_SCALAR_END = frozenset(b" \t\n\r,]}")
# the bytes a token may need to complete an item (whatever ends a value: a quote, a closing
# bracket, a comma or whitespace after a number)
_ITEM_ENDS = frozenset(b'" \t\n\r,]}')
# between values: a scalar's first byte is none of these (whitespace, punctuation, a quote)
_NOT_SCALAR = frozenset(b' \t\n\r"[]{},:')
# between values, a token can complete one only by closing a container, holding a whole string
# (two quotes) or a scalar and what ends it; ("completes",) selects those tokens
_BETWEEN_VALUES = frozenset((_VALUE, _KEY, _COLON, _AFTER))
# the selectors most masks read, built with a vocabulary's byte table (tens of ms each on a
# large vocabulary: not in a mask)
# leaving a string, or an escape spelling the rest of a repeat
_EXIT_OR_ESCAPE = ("either", ("exit",), ("ends", frozenset(b"\\")))
_COMMON_SELECTORS = (("completes",), ("exit",), ("ends", _ITEM_ENDS), _EXIT_OR_ESCAPE)
_MAX_VERDICTS = 4096  # validations of completed values remembered per schema
_MAX_SELECTIONS = 1024  # "prefixes" selections remembered per vocabulary (one per key prefix)
# quotes a token needs to complete a repeated key, by mode: to close a key in progress, to write
# a whole key (from after a value, a comma or an opening brace), or to close a string value first
_QUOTES_TO_KEY = {_KEYSTR: 1, _STRING: 3}


class _Object:
    __slots__ = ("shapes", "seen", "key", "_seen_key", "_seen_texts")

    def __init__(self, shapes: tuple[ObjectShape, ...] | None, seen: frozenset, key: str | None):
        self.shapes, self.seen, self.key = shapes, seen, key
        self._seen_key: bytes | None = None
        self._seen_texts: list[bytes] | None = None

    def seen_texts(self) -> list[bytes]:
        """The JSON texts of the keys in `seen` (asked at every byte of a key in progress)."""
        found = self._seen_texts
        if found is None:
            found = self._seen_texts = [_spelling(k) for k in self.seen]
        return found

    def seen_key(self) -> bytes:
        """`seen` as bytes, equal exactly when the sets are: the keys sorted, each prefixed
        with its length (bytes, not a tuple, so that mask caches hold no objects the
        collector walks)."""
        found = self._seen_key
        if found is None:
            texts = sorted(k.encode("utf-8", "surrogatepass") for k in self.seen)
            found = self._seen_key = b"".join(len(t).to_bytes(4, "little") + t for t in texts)
        return found


class _Array:
    __slots__ = ("shapes", "unique", "seen", "index")

    def __init__(
        self, shapes: tuple[ArrayShape, ...] | None, unique: bool, seen: frozenset, index: int
    ):
        self.shapes, self.unique, self.seen, self.index = shapes, unique, seen, index


class _State:
    """Where the scanner is: mode, open containers (innermost last), the text of the key or
    string in progress, and the texts of the items in progress of unique arrays."""

    __slots__ = ("mode", "frames", "text", "escaped", "captures", "risky", "key")

    def __init__(self, mode: int, frames: tuple, text: bytes, escaped: bool, captures: tuple):
        self.mode, self.frames, self.text = mode, frames, text
        self.escaped, self.captures = escaped, captures
        self.risky: frozenset[int] | None = None  # cache of JsonChecks.risky
        self.key: bytes | None = None  # cache of JsonChecks.state_key

    def but(self, **changes) -> _State:
        state = _State(self.mode, self.frames, self.text, self.escaped, self.captures)
        for name, value in changes.items():
            setattr(state, name, value)
        return state


class JsonChecks:
    """The text check of a JSON Schema grammar (see the module docstring).

    Args:
        root: the schema's normal form, to find the arrays that must be unique; None when no
            array needs it (only duplicate keys are checked then, without following shapes).
        validates: some value is validated when complete (check sites).
        escapes: the grammar admits every escaped spelling of a string (``spellings="all"``),
            so a repeat may be spelled differently from the text it repeats.
    """

    def __init__(self, root: Shape | None, validates: bool = False, escapes: bool = False):
        self.root = root
        self.validates = validates
        self.escapes = escapes
        # (shapes, value text) -> passes; bounded, and the shapes are those of `root`
        self._verdicts: dict[tuple[tuple[Shape, ...], bytes], bool] = {}
        self.start = _State(_VALUE, (), b"", False, ())

    # -- the text check interface -------------------------------------------------------------

    def feed(self, state: _State, data: bytes) -> _State | None:
        """The state after `data`, or None when it completes a duplicate key or item."""
        i = 0
        n = len(data)
        while i < n:
            mode = state.mode
            if mode == _STRING or mode == _KEYSTR:
                i, state = self._string_run(state, data, i)
                if state is None:
                    return None
                continue
            b = data[i]
            i += 1
            state = self._byte(state, b)
            if state is None:
                return None
        return state

    def allows(self, state: _State, token: int, vocab: Vocabulary) -> bool:
        """`feed` does not refuse `token` (only tokens `risky` selects are scanned)."""
        risky = self.risky(state)
        data = vocab.token_bytes(token)
        if not data or not self.selects(risky, data):
            return True
        return self.feed(state, data) is not None

    def risky_tokens(self, state: _State, vocab: Vocabulary) -> np.ndarray:
        """Ids of the tokens `risky` selects: every token `feed` may refuse next."""
        return self.select(self.risky(state), vocab)

    def refused(self, state: _State, tokens: np.ndarray, vocab: Vocabulary) -> np.ndarray:
        """The tokens of `tokens` that `feed` refuses from `state`."""
        out = []
        for token in tokens.tolist():
            data = vocab.token_bytes(token)
            if data and self.feed(state, data) is None:
                out.append(token)
        return np.array(out, dtype=np.int64)

    def refusals(self, state: _State, vocab: Vocabulary) -> np.ndarray:
        """The risky tokens `feed` refuses from `state` (see `TextCheck.refusals`)."""
        return self.refused(state, self.risky_tokens(state, vocab), vocab)

    def state_key(self, state: _State) -> bytes | None:
        """What `refused` depends on at `state`, when only repeated keys are checked (the mode,
        the key in progress and the keys of each open object), as bytes; None otherwise."""
        if self.root is not None or self.validates:
            return None
        if state.key is not None:
            return state.key
        parts = [bytes((state.mode, state.escaped)), len(state.text).to_bytes(4, "little")]
        parts.append(state.text)
        for f in state.frames:  # an object: its keys' length in bytes, then its keys
            if isinstance(f, _Object):
                seen = f.seen_key()
                parts += (b"o", len(seen).to_bytes(4, "little"), seen)
            else:
                parts.append(b"a")
        state.key = b"".join(parts)
        return state.key

    def with_engine(self, engine: str) -> TextCheck:
        """This check in `engine` (see `constrain.engine.engines`): the duplicate-key check
        alone has a native form (`JsonKeyChecks`)."""
        return _checks(self.root, self.validates, self.escapes, engine)

    def prepare(self, vocab: Vocabulary) -> None:
        _byte_table(vocab)

    def native_check(self, vocab: Vocabulary) -> None:
        return None  # its shapes are followed in Python

    def risky(self, state: _State):
        """The tokens that could be refused next, as a selector (see `selects`): with a unique
        array open or a value to validate, those holding any value end; otherwise those with
        enough quotes to complete a key that repeats one of an open object (a token may close
        inner values first), or to write a key twice within itself.

        Inside a string, where those would be thousands of tokens, the bound is tighter: a
        token can be refused only if it finishes the string as a repeat (a key of its object,
        an item of a unique array: it spells the rest of an earlier one), or leaves the string
        and then closes a container, starts another member or item, or writes another string.
        That is a ``("prefixes", rests, inner)`` selector, which a `Matcher` resolves through
        the token trie instead of a scan of the vocabulary."""
        risky = state.risky
        if risky is None:
            risky = state.risky = self._risky(state)
        return risky

    def _risky(self, state: _State):
        captures = state.captures
        validating = any(capture[2] for capture in captures)
        if validating or any(isinstance(f, _Array) and f.unique for f in state.frames):
            risky = ("completes",) if state.mode in _BETWEEN_VALUES else ("ends", _ITEM_ENDS)
        else:
            needed = _QUOTES_TO_KEY.get(state.mode, 2)
            keys = any(isinstance(f, _Object) and f.seen for f in state.frames)
            risky = ("quotes", needed if keys else needed + 2)
        if risky[0] == "quotes" and risky[1] >= 3:
            return risky  # already a handful of tokens
        if state.mode not in (_STRING, _KEYSTR) or state.escaped:
            return risky
        top = state.frames[-1] if state.frames else None
        here = captures[-1] if captures and captures[-1][0] == len(state.frames) else None
        if state.mode == _STRING and here is not None and here[2]:
            return ("quotes", 1)  # this string is validated once it closes
        if state.mode == _KEYSTR and isinstance(top, _Object):
            earlier = top.seen_texts()
            written = b'"' + state.text
        elif state.mode == _STRING and isinstance(top, _Array) and top.unique and here:
            earlier = [key_text(item[1]) for item in top.seen if item[0] == "s"]
            written = here[1]
        else:
            earlier, written = [], b""
        if self.escapes and b"\\" in written:
            return risky  # an escape written: the rest of a repeat may be spelled any way
        rests = tuple(t[len(written) :] for t in earlier if t.startswith(written))
        leaving = _EXIT_OR_ESCAPE if self.escapes and rests else ("exit",)
        return ("prefixes", rests, leaving)

    def selects(self, selector, data: bytes) -> bool:
        kind = selector[0]
        if kind == "prefixes":
            return data.startswith(selector[1]) or self.selects(selector[2], data)
        if kind == "either":
            return self.selects(selector[1], data) or self.selects(selector[2], data)
        if kind == "exit":  # leaves the string, then completes a value
            quote = data.find(b'"')
            return quote >= 0 and _completes(data[quote + 1 :])
        if kind == "quotes":
            return data.count(b'"') >= selector[1]
        if kind == "completes":
            return _completes(data)
        return not selector[1].isdisjoint(data)

    def select(self, selector, vocab: Vocabulary) -> np.ndarray:
        """Ids of the text tokens `selector` selects: `selects` over the whole vocabulary at
        once, on its bytes laid end to end (a ``"prefixes"`` selector bisects them in order)."""
        return _byte_table(vocab).selected(selector)

    # -- scanning -------------------------------------------------------------------------------

    def _string_run(self, state: _State, data: bytes, i: int) -> tuple[int, _State | None]:
        """Consume string bytes up to and including the closing quote (if in `data`)."""
        n = len(data)
        start = i + 1 if state.escaped else i  # the byte after a backslash is never a quote
        j = _closing_quote(data, start)
        escaped = False
        if j < 0:  # still inside the string, maybe inside an escape
            j = n
            rest = data[start:]
            escaped = (len(rest) - len(rest.rstrip(b"\\"))) % 2 == 1
        mode = state.mode
        key = mode == _KEYSTR  # only a key's text is kept (a value's is in the captures)
        if j == n and not key and not state.captures and escaped == state.escaped:
            return j, state  # nothing to remember: the same state (and its cached `risky`)
        text = state.text + data[i:j] if key else b""
        if j == n:  # still inside the string
            captures = _grow(state.captures, data[i:j])
            return j, _State(mode, state.frames, text, escaped, captures)
        captures = _grow(state.captures, data[i : j + 1])
        if key:
            return j + 1, self._key_done(_State(mode, state.frames, b"", False, captures), text)
        return j + 1, self._value_done(_State(_AFTER, state.frames, b"", False, captures))

    def _byte(self, state: _State, b: int) -> _State | None:
        mode = state.mode
        if mode == _SCALAR:
            if b in _SCALAR_END:
                state = self._value_done(state.but(mode=_AFTER))
                if state is None:
                    return None
                return self._byte(state, b)
            return state.but(captures=_grow(state.captures, bytes((b,))))
        if b in _WS:
            return state
        if mode == _VALUE:
            return self._value_start(state, b)
        if state.captures:  # punctuation inside an item being captured
            state = state.but(captures=_grow(state.captures, bytes((b,))))
        if mode == _KEY:
            if b == 0x22:
                return state.but(mode=_KEYSTR, text=b"")
            if b == 0x7D:  # } of an empty object
                return self._close(state)
            return state  # the grammar rules out anything else
        if mode == _COLON:
            return state.but(mode=_VALUE) if b == 0x3A else state
        if mode == _AFTER:
            if b == 0x2C:  # ,
                top = state.frames[-1] if state.frames else None
                return state.but(mode=_KEY if isinstance(top, _Object) else _VALUE)
            if b in (0x5D, 0x7D):  # ] }
                return self._close(state)
        return state

    def _value_start(self, state: _State, b: int) -> _State | None:
        if b == 0x5D:  # ] of an empty array
            return self._close(state.but(captures=_grow(state.captures, b"]")))
        shapes = self._value_shapes(state)
        captures = state.captures
        top = state.frames[-1] if state.frames else None
        unique_item = isinstance(top, _Array) and top.unique
        checked = shapes if shapes and any(s.checks for s in shapes) else ()
        if unique_item or checked:
            captures = captures + ((len(state.frames), b"", checked),)
        captures = _grow(captures, bytes((b,)))
        if b == 0x7B:  # {
            objects = None if shapes is None else _flatten(s.objects for s in shapes)
            frame = _Object(objects, frozenset(), None)
            return state.but(mode=_KEY, frames=state.frames + (frame,), captures=captures)
        if b == 0x5B:  # [
            arrays = None if shapes is None else _flatten(s.arrays for s in shapes)
            unique = arrays is not None and any(a.unique for a in arrays)
            frame = _Array(arrays, unique, frozenset(), 0)
            return state.but(mode=_VALUE, frames=state.frames + (frame,), captures=captures)
        if b == 0x22:
            return state.but(mode=_STRING, text=b"", captures=captures)
        return state.but(mode=_SCALAR, captures=captures)

    def _value_shapes(self, state: _State) -> tuple[Shape, ...] | None:
        """The shapes the value starting now may have (None: not followed)."""
        if self.root is None:
            return None
        if not state.frames:
            return (self.root,)
        top = state.frames[-1]
        if top.shapes is None:
            return None
        if isinstance(top, _Object):
            found = (o.lookup(top.key).value for o in top.shapes)
        else:
            found = (a.item(top.index) for a in top.shapes)
        return tuple(dict.fromkeys(found))  # shapes hash by identity

    def _key_done(self, state: _State, text: bytes) -> _State | None:
        top = state.frames[-1]
        key = _string_value(b'"' + text + b'"')
        if key is None:  # not a JSON string: only a token the grammar refuses writes it
            return state.but(mode=_COLON)
        if key in top.seen:
            return None
        frame = _Object(top.shapes, top.seen | {key}, key)
        return state.but(mode=_COLON, frames=state.frames[:-1] + (frame,))

    def _value_done(self, state: _State) -> _State | None:
        """A value ended (mode already _AFTER): the checks of its schema run on it, and an item
        of a unique array is compared with the others."""
        captures = state.captures
        text = None
        if captures and captures[-1][0] == len(state.frames):  # this value was captured
            _, text, checked = captures[-1]
            if checked and not self._passes(checked, text):
                return None
            captures = captures[:-1]
        if not state.frames:
            return state.but(mode=_END, captures=captures)
        top = state.frames[-1]
        if not isinstance(top, _Array):
            return state if captures is state.captures else state.but(captures=captures)
        seen = top.seen
        if top.unique:
            item = _canonical(json.loads(text, parse_float=Decimal, parse_int=Decimal))
            if item in seen:
                return None
            seen = seen | {item}
        frame = _Array(top.shapes, top.unique, seen, top.index + 1)
        return state.but(frames=state.frames[:-1] + (frame,), captures=captures)

    def _passes(self, shapes: tuple[Shape, ...], text: bytes) -> bool:
        """The value `text` passes the checks of one of the shapes it may have (several when
        the schema has alternatives there: the check site around them decides). Remembered: a
        mask completes the same value with every token that closes it the same way."""
        key = (shapes, text)
        verdict = self._verdicts.get(key)
        if verdict is None:
            value = load_exact(text)  # numbers exact, as the grammar reads them
            verdict = any(all(check(value) for check in shape.checks) for shape in shapes)
            if len(self._verdicts) >= _MAX_VERDICTS:
                self._verdicts.clear()
            self._verdicts[key] = verdict
        return verdict

    def _close(self, state: _State) -> _State | None:
        """The innermost container closed (its closing byte is already captured)."""
        frames = state.frames[:-1]
        state = state.but(mode=_AFTER, frames=frames)
        return self._value_done(state)


class JsonKeyChecks:
    """The text check of a schema whose only condition is no duplicate key (no shapes
    followed, nothing validated), whole in the native core: its states (`KeyCheckState`), what
    a token does to them, and which tokens of a vocabulary it refuses, selected and scanned in
    one call. `JsonChecks(None)` is its reference (`with_engine("python")`).

    Args:
        escapes: the grammar admits every escaped spelling of a string.
    """

    root = None  # as `JsonChecks`: no shapes followed
    validates = False  # and no value validated

    def __init__(self, escapes: bool = False):
        from constrain.engine.native import KeyCheckState

        self.escapes = escapes
        self.start = KeyCheckState()
        self._last: tuple[Vocabulary, object] | None = None  # the vocabulary last asked for

    def feed(self, state, data: bytes):
        return state.fed(data)

    def allows(self, state, token: int, vocab: Vocabulary) -> bool:
        return self._over(vocab).allows(state, token)

    def risky_tokens(self, state, vocab: Vocabulary) -> np.ndarray:
        return self._over(vocab).risky(state)

    def refused(self, state, tokens: np.ndarray, vocab: Vocabulary) -> np.ndarray:
        return self._over(vocab).refused(state, tokens)

    def refusals(self, state, vocab: Vocabulary) -> np.ndarray:
        return self._over(vocab).refusals(state)

    def state_key(self, state) -> bytes:
        return state.key()

    def with_engine(self, engine: str) -> TextCheck:
        return _checks(None, False, self.escapes, engine)

    def prepare(self, vocab: Vocabulary) -> None:
        self._over(vocab)

    def native_check(self, vocab: Vocabulary):
        return self._over(vocab)

    def _over(self, vocab: Vocabulary):
        """The native check over `vocab` (built once per vocabulary and spelling mode)."""
        last = self._last
        if last is None or last[0] is not vocab:
            check = vocab.derived.get_or_build(
                ("json key check", self.escapes), lambda: _key_check(vocab, self.escapes)
            )
            last = self._last = (vocab, check)
        return last[1]


def _key_check(vocab: Vocabulary, escapes: bool):
    """The native duplicate-key check over `vocab`: its token texts and the selections
    `JsonChecks.risky` makes there (tokens with n quotes, tokens leaving a string)."""
    from constrain.engine.native import KeyCheck

    table = _byte_table(vocab)
    return KeyCheck(
        vocab.native_texts,
        vocab.trie.tokens,
        [table.selected(("quotes", n)) for n in range(1, 6)],
        table.selected(("exit",)),
        table.selected(_EXIT_OR_ESCAPE),
        escapes,
    )


class _ByteTable:
    """A vocabulary's token bytes end to end, with what `selects` asks of each byte."""

    def __init__(self, vocab: Vocabulary):
        texts = vocab.texts
        lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
        self.data = np.frombuffer(b"".join(texts), dtype=np.uint8)
        self.token = np.repeat(np.arange(vocab.size), lengths)  # the token of each byte
        self.size = vocab.size
        quote = self.data == 0x22
        self.quotes = np.bincount(self.token[quote], minlength=vocab.size)
        self._starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])  # each token's first byte
        self.after_quote = self.after(quote)
        # the tokens with bytes in byte order (the trie's depth-first order), and their bytes
        # (a tuple of bytes: the collector stops traversing it)
        self._sorted_ids = vocab.trie.tokens
        self._sorted_texts = tuple(texts[t] for t in self._sorted_ids.tolist())
        self._selections: dict = {}  # "prefixes" selector -> token ids
        self._fixed: dict = {}  # any other selector -> token ids
        for selector in _COMMON_SELECTORS:
            self.selected(selector)

    def after(self, found: np.ndarray) -> np.ndarray:
        """Per byte: some earlier byte of its own token is `found` (a bool per byte)."""
        seen = np.concatenate([[0], np.cumsum(found)])  # found bytes before each byte offset
        return seen[:-1] - seen[self._starts][self.token] > 0

    def selected(self, selector) -> np.ndarray:
        """Ids of the tokens `selector` selects, remembered: the few selectors that do not
        name keys for good (the common ones built with the table), a ``"prefixes"`` selector
        among the latest `_MAX_SELECTIONS`."""
        fixed = selector[0] != "prefixes"
        kept = self._fixed if fixed else self._selections
        found = kept.get(selector)
        if found is None:
            if fixed:
                found = np.flatnonzero(_selected(selector, self))
            else:
                if len(kept) >= _MAX_SELECTIONS:
                    del kept[next(iter(kept))]  # the oldest
                _, rests, inner = selector
                prefixed = [self.with_prefix(rest) for rest in rests]
                found = np.unique(np.concatenate([self.selected(inner), *prefixed]))
            kept[selector] = found
        return found

    def with_prefix(self, data: bytes) -> np.ndarray:
        """Ids of the tokens whose bytes start with `data` (every token for b""), by bisection."""
        lo = bisect.bisect_left(self._sorted_texts, data)
        end = data.rstrip(b"\xff")  # the least bytes after every text starting with `data`
        if end:
            after = end[:-1] + bytes((end[-1] + 1,))
            hi = bisect.bisect_left(self._sorted_texts, after, lo)
        else:
            hi = len(self._sorted_texts)
        return self._sorted_ids[lo:hi]

    def having(self, found: np.ndarray) -> np.ndarray:
        """Per token: some of its bytes are `found` (a bool per byte)."""
        return np.bincount(self.token[found], minlength=self.size) > 0

    def of(self, byte_set: frozenset[int]) -> np.ndarray:
        """Per byte: it is in `byte_set`."""
        table = np.zeros(256, dtype=bool)
        table[list(byte_set)] = True
        return table[self.data]


def _selected(selector, table: _ByteTable) -> np.ndarray:
    """Per token: `JsonChecks.selects(selector, its bytes)` (tokens without bytes: False)."""
    kind = selector[0]
    if kind == "either":
        return _selected(selector[1], table) | _selected(selector[2], table)
    if kind == "quotes":
        return table.quotes >= selector[1]
    if kind in ("exit", "completes"):  # `_completes` of what follows the first quote, or all
        counted = table.after_quote if kind == "exit" else np.ones(len(table.data), dtype=bool)
        quotes = 3 if kind == "exit" else 2  # the first quote, then a whole string
        closes = table.having(table.of(frozenset(b"]}")) & counted)
        scalar = ~table.of(_NOT_SCALAR) & counted
        ended = table.having(table.of(_SCALAR_END) & table.after(scalar))
        found = (table.quotes >= quotes) | closes | ended
        return found & (table.quotes >= 1) if kind == "exit" else found
    return table.having(table.of(selector[1]))  # "ends"


def _byte_table(vocab: Vocabulary) -> _ByteTable:
    return vocab.derived.get_or_build(("json check bytes",), lambda: _ByteTable(vocab))


def _spelling(key: str) -> bytes:
    """`key_text`, with a lone surrogate's bytes as "surrogatepass" gives them (a key written
    with an escape may be one; no spelling the grammar admits then starts like it)."""
    return json.dumps(key, ensure_ascii=False).encode("utf-8", "surrogatepass")


def _string_value(quoted: bytes) -> str | None:
    """The string a JSON string's text (quotes included) spells, or None when it is not one:
    masks scan tokens the grammar refuses too, and those may write a key that is not."""
    try:
        return json.loads(quoted)
    except ValueError:
        return None


def _completes(data: bytes) -> bool:
    """Between values, `data` may complete one: it closes a container, holds a whole string
    (two quotes), or a scalar and then what ends it (see `_BETWEEN_VALUES`)."""
    if data.count(b'"') >= 2 or b"]" in data or b"}" in data:
        return True
    scalar = next((i for i, b in enumerate(data) if b not in _NOT_SCALAR), None)
    return scalar is not None and not _SCALAR_END.isdisjoint(data[scalar + 1 :])


def _closing_quote(data: bytes, i: int) -> int:
    """Index of the first unescaped quote of `data` from `i` (outside an escape there), or -1."""
    while True:
        quote = data.find(b'"', i)
        if quote < 0:
            return -1
        slash = data.find(b"\\", i, quote)
        if slash < 0:
            return quote
        i = slash + 2  # skip the escaped byte


def _grow(captures: tuple, data: bytes) -> tuple:
    """Append `data` to every value text being captured."""
    if not captures:
        return captures
    return tuple((depth, text + data, checked) for depth, text, checked in captures)


def _flatten(groups) -> tuple:
    out = {}
    for group in groups:
        for x in group:
            out[id(x)] = x
    return tuple(out.values())


def _canonical(value):
    """A hashable form under which JSON values are equal exactly when JSON Schema says so."""
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, Decimal):
        return ("n", value.normalize())
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, list):
        return ("a", tuple(_canonical(v) for v in value))
    if isinstance(value, dict):
        return ("o", frozenset((k, _canonical(v)) for k, v in value.items()))
    return ("z", None)


def checks_for(root: Shape, free_keys: bool = False, escapes: bool = False) -> TextCheck | None:
    """The text check a schema needs: none when no object takes extra keys and `free_keys` is
    false (named keys never repeat), no array must be unique and no value is validated (check
    sites); shapes are followed only if some array must be unique or some value validated.

    `free_keys`: the grammar lets some object repeat its named keys (any order beyond the
    subsets the grammar tracks); `escapes`: strings are admitted in every spelling."""
    unique = extra = checked = False
    seen: set[Shape] = set()
    todo = [root]
    while todo:
        shape = todo.pop()
        if shape in seen:
            continue
        seen.add(shape)
        checked = checked or bool(shape.checks)
        for a in shape.arrays:
            unique = unique or a.unique
            todo.extend(a.prefix)
            todo.append(a.items)
            if a.contains is not None:
                todo.append(a.contains)
        for o in shape.objects:
            extra = extra or bool(o.regions)
            todo.extend(p.value for p in o.named.values())
            todo.extend(r.value for r in o.regions)
    if not unique and not extra and not checked and not free_keys:
        return None
    return _checks(root if unique or checked else None, checked, escapes, None)


def _checks(root: Shape | None, validates: bool, escapes: bool, engine: str | None) -> TextCheck:
    """`JsonChecks`, or its native form when it checks keys alone and `engine` is native."""
    if root is None and not validates and resolve_engine(engine) == "native":
        return JsonKeyChecks(escapes)
    return JsonChecks(root, validates, escapes)
