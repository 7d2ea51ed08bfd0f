"""`PartialJSON` (what a streamed JSON text has completed) against a brute-force oracle: the
longest cut of the prefix that `json.loads` accepts once its open brackets are closed, where
a number at the very end counts only once something follows it. Random values, layouts and
chunkings (hypothesis, fixed seeds via the profile)."""

from __future__ import annotations

import json
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from constrain.serve.partial import PartialJSON

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=False, allow_infinity=False, width=32)
    | st.text(alphabet=st.characters(codec="utf-8"), max_size=6)
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=12,
)


_NUMBER = "0123456789.eE-+"
_ENDS_IN_NUMBER = re.compile(r"-?[0-9][0-9.eE+-]*$|-$")


def _open_brackets(text: str) -> str | None:
    """The brackets `text` leaves open, in order (None: it ends inside a string)."""
    stack, in_string, escaped = [], False, False
    for c in text:
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            stack.append(c)
        elif c in "]}":
            stack.pop()
    return None if in_string else "".join(stack)


def oracle(prefix: str):
    """The value of the longest cut of `prefix` that closes into JSON (complete parts only)."""
    for cut in range(len(prefix), -1, -1):
        part = prefix[:cut].rstrip()
        if part.endswith(","):
            part = part[:-1]
        after = prefix[len(part) : len(part) + 1]
        if _ENDS_IN_NUMBER.search(part) and (not after or after in _NUMBER):
            continue  # inside a number, or a number at the end of what was read: may go on
        opened = _open_brackets(part)
        if opened is None or not part:
            continue
        closing = "".join({"[": "]", "{": "}"}[b] for b in reversed(opened))
        try:
            value = json.loads(part + closing)
        except ValueError:
            continue
        if part[-1:] == ":":
            continue
        return value
    return None


@settings(max_examples=150, deadline=None, derandomize=True)
@given(values, st.sampled_from([None, 2]), st.lists(st.integers(1, 7), min_size=1), st.data())
def test_partial_value_is_what_the_prefix_completed(value, indent, chunks, data):
    text = json.dumps(value, indent=indent, ensure_ascii=bool(data.draw(st.booleans())))
    reader = PartialJSON()
    at, k = 0, 0
    while at < len(text):
        step = chunks[k % len(chunks)]
        reader.feed(text[at : at + step])
        at += step
        k += 1
        assert not reader.broken
        if at < len(text):  # at the end, a number at the root ends only with `finish`
            assert reader.value() == oracle(text[:at]), text[:at]
    reader.finish()
    assert reader.complete and reader.value() == value


@settings(max_examples=100, deadline=None, derandomize=True)
@given(values, st.sampled_from([None, 2]))
def test_spans_hold_each_value_text(value, indent):
    text = json.dumps(value, indent=indent)
    reader = PartialJSON()
    reader.feed(text)
    reader.finish()
    assert reader.spans[()][0] == 0
    for path, (start, end) in reader.spans.items():
        sub = value
        for key in path:
            sub = sub[key]
        assert end is not None and json.loads(text[start:end]) == sub, path


def test_raw_text_of_a_member_grows_then_ends():
    reader = PartialJSON()
    reader.feed('{"name": "get_weather", "arguments": {"city": "Pa')
    assert reader.value() == {"name": "get_weather", "arguments": {}}
    assert reader.raw(("arguments",)) == ('{"city": "Pa', False)
    reader.feed('ris"} }')
    assert reader.raw(("arguments",)) == ('{"city": "Paris"}', True)
    assert reader.complete and reader.raw(("missing",)) is None


def test_text_that_is_not_json_stops_the_reader():
    for bad in ('{"a" 1}', "[1,,2]", '{"a": 1} x', "]", '{1: 2}'):
        reader = PartialJSON()
        reader.feed(bad)
        assert reader.broken, bad
