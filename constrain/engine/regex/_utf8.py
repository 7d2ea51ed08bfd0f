"""Code-point ranges -> UTF-8 byte-range sequences.

A range of code points whose encodings have the same length n splits into a few sequences of n
byte ranges, each the cartesian product of its byte ranges (e.g. U+0080..U+07FF is
[C2-DF][80-BF]). Surrogates (U+D800..U+DFFF) have no UTF-8 encoding and are dropped.
"""

from __future__ import annotations

MAX_CODE_POINT = 0x10FFFF
_LENGTH_LIMITS = ((0x7F, 1), (0x7FF, 2), (0xFFFF, 3), (MAX_CODE_POINT, 4))

ByteRanges = tuple[tuple[int, int], ...]


def _encode(cp: int, n: int) -> bytes:
    return chr(cp).encode("utf-8", "surrogatepass") if n > 1 else bytes([cp])


def _same_length(lo: int, hi: int, n: int, out: list[ByteRanges]) -> None:
    for i in range(1, n):
        m = (1 << (6 * i)) - 1  # the bits carried by the last i continuation bytes
        if lo & ~m != hi & ~m:
            if lo & m:
                _same_length(lo, lo | m, n, out)
                _same_length((lo | m) + 1, hi, n, out)
                return
            if hi & m != m:
                _same_length(lo, (hi & ~m) - 1, n, out)
                _same_length(hi & ~m, hi, n, out)
                return
    a, b = _encode(lo, n), _encode(hi, n)
    out.append(tuple((a[k], b[k]) for k in range(n)))


_SHORT_ESCAPES = {0x08: "b", 0x09: "t", 0x0A: "n", 0x0C: "f", 0x0D: "r", 0x22: '"', 0x5C: "\\"}


def _json_escapes(cp: int) -> list[ByteRanges]:
    """The escaped form of a character JSON may not write raw (``\\n``, or ``\\u001f`` in
    lower case, as `json.dumps` writes it): one form per character keeps languages exact."""
    text = "\\" + _SHORT_ESCAPES[cp] if cp in _SHORT_ESCAPES else f"\\u{cp:04x}"
    return [tuple((b, b) for b in text.encode())]


def json_sequences(lo: int, hi: int) -> list[ByteRanges]:
    """Like `utf8_sequences`, for characters inside a JSON string: control characters, ``"``
    and ``\\`` become their escapes (the short form where JSON has one, else ``\\u00XX``),
    every other character is written raw. This is the one encoding of a string the JSON Schema
    compiler admits, so languages built from it stay exact under intersection and difference."""
    out: list[ByteRanges] = []
    start = lo
    for cp in range(lo, min(hi, 0x5C) + 1):
        if cp < 0x20 or cp in (0x22, 0x5C):
            if start < cp:
                out.extend(utf8_sequences(start, cp - 1))
            out.extend(_json_escapes(cp))
            start = cp + 1
    if start <= hi:
        out.extend(utf8_sequences(start, hi))
    return out


def utf8_sequences(lo: int, hi: int) -> list[ByteRanges]:
    """Byte-range sequences whose union encodes exactly the code points lo..hi (no surrogates)."""
    out: list[ByteRanges] = []
    pieces = (
        [(lo, min(hi, 0xD7FF)), (max(lo, 0xE000), hi)]
        if lo <= 0xDFFF and hi >= 0xD800
        else [(lo, hi)]
    )
    for a, b in pieces:
        start = 0
        for limit, n in _LENGTH_LIMITS:
            x, y = max(a, start), min(b, limit)
            if x <= y:
                _same_length(x, y, n, out)
            start = limit + 1
    return out
