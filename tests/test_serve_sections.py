"""The regexes the server's answer sections are built from, against plain string oracles:
`regex_literal` matches exactly its text; `not_starting_with` matches exactly the texts that
do not start with the trigger (enumerated over a small alphabet)."""

from __future__ import annotations

import itertools

import pytest

from constrain.engine.regex import compile_regex
from constrain.serve.sections import not_starting_with, regex_literal

TRIGGERS = ["<tool_call>\n", "[TOOL_CALLS]", "{", "a.b", "<a<"]


@pytest.mark.parametrize("text", [*TRIGGERS, "x*y+z?(w)|[v]^$\\ \t", "caf\u00e9 \u2603"])
def test_regex_literal_matches_exactly_its_text(text):
    dfa = compile_regex(regex_literal(text))
    assert dfa.matches(text)
    assert not dfa.matches(text[:-1]) and not dfa.matches(text + "x")
    assert not dfa.matches(text.replace(text[0], "Q", 1))


@pytest.mark.parametrize("trigger", TRIGGERS)
def test_not_starting_with_is_the_complement_of_the_trigger_prefix(trigger):
    dfa = compile_regex(not_starting_with(trigger))
    alphabet = sorted(set(trigger)) + ["z", "\n"]
    texts = {"".join(t) for n in range(0, 5) for t in itertools.product(alphabet, repeat=n)}
    texts |= {trigger, trigger + "z", trigger[:-1], trigger[:-1] + "z", "z" + trigger}
    for text in texts:
        assert dfa.matches(text) == (not text.startswith(trigger)), (trigger, text)
