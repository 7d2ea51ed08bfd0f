"""Grammar engine: Lark grammars as token-level automata, checked against lark's Earley parser."""

from __future__ import annotations

import lark
import numpy as np
import pytest
from contract import accepts_token_by_token, assert_mask_matches_checks

import constrain as cn
import constrain.grammars as library
from constrain.engine.engines import native_available
from constrain.engine.grammar.sample import random_text
from constrain.engine.vocab import Vocabulary
from constrain.errors import GrammarError, VocabularyError

ENGINES = ["python", *(["native"] if native_available() else [])]

AMBIGUOUS = """
start: e
e: e "+" e | e "*" e | NUMBER | "(" e ")"
NUMBER: /[0-9]+/
%ignore " "
"""


def _lark_oracle(text: str) -> lark.Lark:
    # dynamic_complete tries every split of the text into terminals: a superset of longest match
    return lark.Lark(text, parser="earley", lexer="dynamic_complete")


def _mutate(text: str, rng: np.random.Generator) -> str:
    chars = list(text)
    alphabet = sorted(set(text) | set(",()\"' .{}[]:+-*"))
    for _ in range(int(rng.integers(1, 4))):
        j = int(rng.integers(len(chars) + 1))
        c = alphabet[int(rng.integers(len(alphabet)))]
        op = int(rng.integers(3))
        if op == 0 and j < len(chars):
            del chars[j]
        elif op == 1:
            chars.insert(j, c)
        elif j < len(chars):
            chars[j] = c
    return "".join(chars)


def _tokens(vocab: Vocabulary, text: str) -> list[int] | None:
    """Tokens spelling `text` exactly: the tokenizer's, else greedy longest match (SmolLM2's
    tokenizer drops some unassigned characters); None when the vocabulary cannot spell it (no
    token for some control bytes)."""

    tokens = vocab.encode_bytes(text.encode())
    return tokens if vocab.decode_bytes(tokens) == text.encode() else None


@pytest.mark.parametrize("name", library.names())
def test_random_derivations_are_accepted_and_mutations_lark_rejects_are_rejected(
    any_vocab: Vocabulary, name
):
    grammar = library.load(name)
    constraint = cn.Constraint(grammar, any_vocab)
    oracle = _lark_oracle(library.path(name).read_text())
    rng = np.random.default_rng(7)
    rejected_mutations = 0
    for _ in range(25):
        text = random_text(grammar.ir, rng, max_depth=6)
        tokens = _tokens(any_vocab, text)
        if tokens is None:
            continue
        assert accepts_token_by_token(constraint, tokens), text
        mutated = _mutate(text, rng)
        try:
            oracle.parse(mutated)
            lark_accepts = True
        except lark.exceptions.LarkError:
            lark_accepts = False
        if not lark_accepts:
            tokens = _tokens(any_vocab, mutated)
            if tokens is not None:
                rejected_mutations += 1
                assert not accepts_token_by_token(constraint, tokens), mutated
    assert rejected_mutations >= 3  # the mutations do exercise rejection


@pytest.mark.parametrize("name", library.names())
def test_masks_equal_a_brute_force_check_of_every_token(any_vocab: Vocabulary, name):
    grammar = library.load(name)
    rng = np.random.default_rng(3)
    tokens = None
    while tokens is None:
        tokens = _tokens(any_vocab, random_text(grammar.ir, rng, max_depth=5))
    cuts = sorted({0, len(tokens) // 3, (2 * len(tokens)) // 3, len(tokens)})
    for cut in cuts[: 2 if any_vocab.size > 100_000 else 4]:
        assert_mask_matches_checks(grammar, any_vocab, tokens[:cut])


def test_ambiguous_left_recursive_grammar(smollm_vocab: Vocabulary):
    grammar = cn.Grammar.from_lark(AMBIGUOUS)
    oracle = _lark_oracle(AMBIGUOUS)
    for text in [
        "1",
        "1+2*3",
        "(1+2)*3",
        "1 + 2 * 3 + 4",
        "((7))",
        "1+",
        "(1",
        "1 2",
        "",
        "+1",
        "1**2",
    ]:
        try:
            oracle.parse(text)
            expected = True
        except lark.exceptions.LarkError:
            expected = False
        assert grammar.matches(text) == expected, text
    m = cn.Constraint(grammar, smollm_vocab).start()
    m.advance_many(smollm_vocab.encode("(1+2"))
    assert not m.accepting()
    assert m.check(smollm_vocab.encode(")")[0]) and not m.check(smollm_vocab.encode("(")[0])


def test_right_recursion_and_empty_rules():
    grammar = cn.Grammar.from_lark('start: x\nx: "a" x | "b" y\ny: | "c" y\n')
    for text, ok in [("b", True), ("aab", True), ("abccc", True), ("a", False), ("ca", False)]:
        assert grammar.matches(text) == ok, text


def test_a_token_may_span_several_lexemes_and_a_lexeme_several_tokens(smollm_vocab: Vocabulary):
    grammar = library.load("json")
    constraint = cn.Constraint(grammar, smollm_vocab)
    m = constraint.start()
    text = '{"key": [1, 2, {"a": null}], "other": "a long string value"}'
    m.advance_many(smollm_vocab.encode(text))
    assert m.accepting()
    spans = [smollm_vocab.token_bytes(t) for t in smollm_vocab.encode(text)]
    assert any(
        b'"' in s and len(s.strip(b'"')) > 0 and s.count(b'"') == 1 for s in spans
    )  # ends a string


def test_forced_bytes_and_tokens(smollm_vocab: Vocabulary):
    grammar = cn.Grammar.from_lark('start: "SELECT" " " NAME " FROM users"\nNAME: /[a-z]+/\n')
    m = cn.Constraint(grammar, smollm_vocab).start()
    assert m.forced_bytes() == b"SELECT "
    forced = m.forced()
    assert smollm_vocab.decode_bytes(forced) in (b"SELECT", b"SELECT ")
    m.advance_many(smollm_vocab.encode("SELECT name"))
    assert m.forced_bytes() == b""  # the name may go on


def test_ignored_terminals_between_lexemes():
    grammar = cn.Grammar.from_lark('start: "a" "b"\n%import common.WS\n%ignore WS\n')
    assert grammar.matches("ab") and grammar.matches(" a \n b ") and not grammar.matches("a c")


def test_escaped_string_from_common_is_exact():
    grammar = cn.Grammar.from_lark("start: ESCAPED_STRING\n%import common.ESCAPED_STRING\n")
    assert grammar.matches(r'"a\"b"') and grammar.matches('""') and grammar.matches(r'"\\"')
    assert not grammar.matches('"a"b"') and not grammar.matches(r'"\"')


def test_case_insensitive_strings_and_priorities():
    grammar = cn.Grammar.from_lark('start: "select"i NAME\nNAME: /[a-z]+/\n%ignore " "\n')
    assert grammar.matches("SELECT abc") and grammar.matches("SeLeCt x")


def test_library_grammars_via_generate_argument_forms(tmp_path):
    from constrain.constraints import grammar_from as _as_grammar

    assert _as_grammar("sql") is library.load("sql")
    path = tmp_path / "g.lark"
    path.write_text('start: "x"+\n')
    assert _as_grammar(path).matches("xxx")  # a Path is a file; a str never is
    with pytest.raises(GrammarError, match="pass pathlib.Path"):
        _as_grammar(str(path))
    assert _as_grammar('start: "y"\n').matches("y")
    g = cn.Grammar.from_regex("z")
    assert _as_grammar(g) is g


@pytest.mark.parametrize(
    "text, message",
    [
        ('start: "a" (\n', "line 1 column"),
        ("start: a\n", "'a' used but not defined"),
        ('start: A\nA: "x"\nB: /(?<=a)b/\nstart2: B\n', None),
        ("start: B\nB: /(?<=a)b/\n", "terminal B"),
        ("start: B\nB: /a*?/\n", "terminal B"),
        ("start: B\nB: /a*/\n", "matches the empty string"),
        ('start: x\nx: "a" x\n', "language is empty"),
        ("start: EOT\n%declare EOT\n", "declared but has no pattern"),
    ],
)
def test_bad_grammars_get_specific_errors(text, message):
    if message is None:
        cn.Grammar.from_lark(text)  # an unused bad terminal is never compiled
        return
    with pytest.raises(GrammarError, match=message):
        cn.Grammar.from_lark(text)


def test_unknown_library_grammar_names_the_available_ones():
    with pytest.raises(GrammarError, match="available: arithmetic"):
        library.load("cobol")


def test_state_without_fitting_token_names_the_expected_bytes():
    vocab = Vocabulary([b"a", b"b", None], eos_ids=[2])
    constraint = cn.Constraint(cn.Grammar.from_lark('start: "a" "c"\n'), vocab)
    m = constraint.start()
    m.advance(0)
    with pytest.raises(VocabularyError, match="b'c'"):
        m.mask()


def test_rollback_and_fork_follow_the_parse(smollm_vocab: Vocabulary):
    constraint = cn.Constraint(library.load("json"), smollm_vocab)
    m = constraint.start()
    tokens = smollm_vocab.encode('{"a": [1, 2]}')
    m.advance_many(tokens)
    assert m.accepting()
    twin = m.fork()
    m.rollback(2)
    assert not m.accepting() and twin.accepting()
    m.advance_many(tokens[-2:])
    assert m.accepting() and m.state == twin.state  # interned parser states: the same node


def _special_vocab() -> Vocabulary:
    pieces = [b"a", b"b", b"ab", b" ", b"a b", None, None, None]
    return Vocabulary(pieces, eos_ids=[7], special_ids={"<|sep|>": 5, "<|other|>": 6})


def test_special_token_terminals_end_the_lexeme_in_progress():
    grammar = cn.Grammar.from_lark(
        'start: NAME SEP NAME\nNAME: /[ab]+/\nWS: " "\n%ignore WS\n%declare SEP\n',
        special_tokens={"SEP": "<|sep|>"},
    )
    vocab = _special_vocab()
    m = cn.Constraint(grammar, vocab).start()
    assert not m.check(5) and not m.mask()[5]  # NAME must come first
    m.advance(2)  # "ab": NAME in progress; the special token may end it, or NAME goes on
    assert np.flatnonzero(m.mask()).tolist() == [0, 1, 2, 3, 5]  # not "a b": NAME NAME
    twin = m.fork()
    m.advance(5)
    assert not m.accepting() and not m.check(5) and not m.check(6)
    m.advance_many([3, 0])
    assert m.accepting() and m.check(7)
    twin.advance_many([3, 5, 1, 7])  # ignored whitespace before the special token
    assert twin.finished()
    with pytest.raises(cn.InvalidTokenError, match="special token <\\|other\\|>"):
        twin.rollback(4)
        twin.advance(6)


def test_special_tokens_must_exist_and_not_be_eos(smollm_vocab: Vocabulary):
    text = 'start: "yes" TURN "no"\n%declare TURN\n'
    grammar = cn.Grammar.from_lark(text, special_tokens={"TURN": "<|im_start|>"})
    m = cn.Constraint(grammar, smollm_vocab).start()
    m.advance_many(smollm_vocab.encode("yes"))
    start_id = smollm_vocab.special_ids["<|im_start|>"]
    assert np.flatnonzero(m.mask()).tolist() == [start_id]
    m.advance(start_id)
    m.advance_many(smollm_vocab.encode("no"))
    assert m.accepting()
    with pytest.raises(GrammarError, match="is an EOS id"):
        cn.Constraint(
            cn.Grammar.from_lark(text, special_tokens={"TURN": "<|im_end|>"}), smollm_vocab
        )
    with pytest.raises(GrammarError, match="does not have"):
        cn.Constraint(cn.Grammar.from_lark(text, special_tokens={"TURN": "<|nope|>"}), smollm_vocab)


def test_bounded_and_unbounded_repetition_in_the_ir():
    from constrain.engine.grammar.ir import GrammarIR, Lexeme, Rule, repeat

    rules: list[Rule] = [("start", ("few", "SEP", "many"))]
    repeat(rules, "few", ["A"], 2, 4)
    repeat(rules, "many", ["B", "A"], 1, None)
    lexemes = {
        "A": Lexeme("A", "a", literal=True),
        "B": Lexeme("B", "b", literal=True),
        "SEP": Lexeme("SEP", "-", literal=True),
    }
    grammar = cn.Grammar.from_ir(GrammarIR("start", rules, lexemes))
    for n in range(7):
        assert grammar.matches("a" * n + "-ba") == (2 <= n <= 4), n
    assert (
        grammar.matches("aa-bababa")
        and not grammar.matches("aa-")
        and not grammar.matches("aa-bab")
    )
    with pytest.raises(GrammarError, match="minimum 3 above maximum 1"):
        repeat([], "bad", ["A"], 3, 1)


@pytest.mark.parametrize(
    ("text", "trapped"),
    [
        ("start: NAME NAME\nNAME: /[a-z]+/\n", "NAME"),
        ('start: NUMBER unit\nunit: NUMBER | "kg"\nNUMBER: /[0-9a-z]+/\n', "NUMBER"),
        ('start: NAME NAME\nNAME: /[a-z]+/\nWS: " "\n%ignore WS\n', None),  # whitespace splits them
        ('start: NAME ("," NAME)*\nNAME: /[a-z]+/\n', None),
        ("start: NAME NUMBER\nNAME: /[a-z]+/\nNUMBER: /[0-9]+/\n", None),
    ],
)
def test_terminals_that_longest_match_never_ends_are_rejected(text, trapped):
    if trapped is None:
        cn.Grammar.from_lark(text).automaton  # noqa: B018
    else:
        with pytest.raises(GrammarError, match=f"terminal {trapped} can never end"):
            cn.Grammar.from_lark(text).automaton  # noqa: B018


COMPLETION_SCHEMAS = [
    {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 2},
            "tags": {"type": "array", "items": {"enum": ["a", "bb"]}, "minItems": 1},
            "child": {"$ref": "#"},
        },
        "required": ["name", "tags"],
    },
    {"type": "array", "items": {"type": "integer", "minimum": 10}, "minItems": 2},
]


@pytest.mark.parametrize(
    "grammar",
    [
        pytest.param(library.load(n), marks=pytest.mark.slow) if n == "sql" else library.load(n)
        for n in library.names()
    ]  # sql: 20 s
    + [cn.Grammar.from_json_schema(s) for s in COMPLETION_SCHEMAS]
    + [cn.Grammar.from_regex(r"(ab|c)*d{2,3}")],
    ids=library.names() + ["schema-recursive", "schema-array", "regex"],
)
def test_completions_are_shortest_sentences(grammar):
    """From states along random prefixes of sentences, `completion` finishes a sentence and is
    (nearly always) as short as a breadth-first search over bytes finds."""
    from constrain.engine.grammar.completion import search_completion

    automaton = grammar.automaton
    rng = np.random.default_rng(3)
    checked = exact = 0
    for _ in range(30):
        if grammar.ir is not None:
            text = random_text(grammar.ir, rng, max_depth=5).encode()
        else:
            text = b"ababcdd"
        state = automaton.step(automaton.start, text[: int(rng.integers(0, len(text) + 1))])
        completion = automaton.completion(state)
        end = automaton.step(state, completion)
        assert end is not None and automaton.accepting(end), (text, completion)
        reference = search_completion(automaton, state, max_states=20_000)
        if reference is not None:
            # as short, but for the separators that stop longest match merging lexemes
            assert len(reference) <= len(completion) <= 2 * len(reference), (completion, reference)
            exact += len(completion) == len(reference)
            checked += 1
    assert checked >= 20 and exact >= 0.8 * checked


_NESTED = r"""
start: value
value: "[" [value ("," value)*] "]" | "{" [pair ("," pair)*] "}" | DIGIT
pair: KEY ":" value
KEY: /"[a-c]"/
DIGIT: /[0-9]/
"""


def _nested_text(rng, depth: int) -> str:
    kind = int(rng.integers(0, 3 if depth else 1))
    if kind == 0:
        return str(int(rng.integers(0, 10)))
    n = int(rng.integers(0, 4))
    if kind == 1:
        return "[" + ",".join(_nested_text(rng, depth - 1) for _ in range(n)) + "]"
    keys = [f'"{"abc"[int(rng.integers(0, 3))]}"' for _ in range(n)]
    return "{" + ",".join(f"{k}:{_nested_text(rng, depth - 1)}" for k in keys) + "}"


def _in_nested(text: str) -> bool:
    """Whether `text` is a sentence of `_NESTED`, by `json.loads` (no spaces in it)."""
    import json

    def fits(v) -> bool:
        if isinstance(v, list):
            return all(map(fits, v))
        if isinstance(v, tuple):  # an object's pairs
            return all(k in "abc" and len(k) == 1 and fits(x) for k, x in v)
        return type(v) is int and 0 <= v <= 9

    try:
        return " " not in text and fits(json.loads(text, object_pairs_hook=tuple))
    except json.JSONDecodeError:
        return False


@pytest.mark.parametrize("engine", ENGINES)
def test_parser_memory_is_bounded_and_forgetting_changes_no_answer(engine: str):
    """A parser over its item budget forgets its interned nodes: it then holds at most that
    budget, nodes it forgot are freed once unused, and every answer (viable prefix, sentence,
    shortest completion) is a fresh unbounded parser's; sentences are `json.loads`'s."""
    import gc

    from constrain.engine.grammar.earley import ChartNode

    def alive_nodes() -> int:
        gc.collect()
        if engine == "native":
            import constrain.engine.native as native

            return native.chart_nodes_alive()
        return sum(isinstance(o, ChartNode) for o in gc.get_objects())

    before = alive_nodes()
    bounded = cn.Grammar.from_lark(_NESTED).with_engine(engine).automaton
    bounded.parser.max_items = 60
    rng = np.random.default_rng(11)
    texts = [_nested_text(rng, 6) for _ in range(60)]
    texts += [t[:i] + t[j:] for t in texts[:30] for i, j in [sorted(rng.integers(0, len(t), 2))]]
    answers = []
    for text in texts:
        state = bounded.start
        for i, ch in enumerate(text):
            state = bounded.step(state, ch.encode())
            assert bounded.parser.items_held <= 60
            if state is None:
                break
            if i % 5 == 0:
                answers.append((text[: i + 1], len(bounded.completion(state))))
        answers.append((text, state is not None and bounded.accepting(state)))
    assert bounded.parser.forgotten > 10
    kept = alive_nodes() - before
    fresh = cn.Grammar.from_lark(_NESTED).with_engine(engine).automaton
    for text, answer in answers:
        state = fresh.step(fresh.start, text.encode())
        if isinstance(answer, bool):
            assert answer == (state is not None and fresh.accepting(state)), text
            assert answer == _in_nested(text), text
        else:
            assert answer == len(fresh.completion(state)), text
    assert fresh.parser.forgotten == 0
    assert kept < fresh.parser.n_nodes / 4, (kept, fresh.parser.n_nodes)


@pytest.mark.parametrize("engine", ENGINES)
def test_mask_pieces_are_bounded_in_bytes_and_masks_unchanged(
    engine: str, smollm_vocab: Vocabulary
):
    """The trie walks a grammar caches for its masks stay within their byte bound (here a
    small one, so entries are dropped), and every mask is a fresh unbounded grammar's."""
    bounded = library.load("json").with_engine(engine).automaton
    bounded.max_piece_bytes = 8_000
    fresh = library.load("json").with_engine(engine).automaton
    trie = smollm_vocab.trie
    rng = np.random.default_rng(5)
    for _ in range(6):
        text = random_text(bounded.ir, rng, max_depth=4).encode()
        for cut in sorted({int(c) for c in rng.integers(0, len(text) + 1, 6)}):
            state_b = bounded.step(bounded.start, text[:cut])
            state_f = fresh.step(fresh.start, text[:cut])
            got = np.sort(bounded.token_ids(state_b, trie))
            assert np.array_equal(got, np.sort(fresh.token_ids(state_f, trie))), text[:cut]
    kept, everything = bounded._pieces[trie], fresh._pieces[trie]
    assert kept.bytes <= 8_000 < everything.bytes and len(kept) < len(everything)


def test_a_dropped_constraint_is_freed_without_the_cycle_collector(smollm_vocab: Vocabulary):
    """A constraint used for masks, checks, a token budget (its shortest completions), a fork
    and a rollback leaves no reference cycle behind: dropping it frees it at once, instead of
    leaving a graph of parser nodes for a full collection to free inside some later mask."""
    import gc
    import json

    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "array", "items": {"type": "integer"}, "uniqueItems": True},
            "b": {"type": "string", "pattern": "^x+$"},
            "c": {"type": "object", "additionalProperties": {"type": "number"}},
        },
        "required": ["a", "b"],
    }
    value = {"c": {"k": 1.5, "j": 2}, "b": "xxx", "a": [1, 2, 3]}
    tokens = smollm_vocab.encode_bytes(json.dumps(value, separators=(",", ":")).encode())

    def use(max_tokens: int | None) -> bool:
        grammar = cn.Grammar.from_json_schema(schema, any_order=True)
        matcher = cn.Constraint(grammar, smollm_vocab).start(max_tokens=max_tokens)
        for token in tokens:
            matcher.bitmask()
            assert matcher.check(token)
            matcher.advance(token)
        fork = matcher.fork()
        fork.rollback(3)
        fork.bitmask()
        return matcher.accepting()

    use(None), use(100)  # imports and module caches made on first use are not the point
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        for max_tokens in (None, 100):
            assert use(max_tokens)
            gc.set_debug(gc.DEBUG_SAVEALL)
            gc.collect()
            gc.set_debug(0)
            left = [type(o).__name__ for o in gc.garbage]
            gc.garbage.clear()
            assert left == [], (max_tokens, sorted(set(left)))
    finally:
        gc.set_debug(0)
        if enabled:
            gc.enable()
