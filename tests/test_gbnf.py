"""GBNF front end: llama.cpp's grammar format, checked against oracles that share none of its code.

* random derivations (a generator over the *parsed* grammar, not over the IR) are accepted,
  and masks along their tokenizations allow each next token and EOS exactly where a
  hand-written oracle (a Python `re`, lark's scannerless Earley) says the text is complete;
* small grammars against a brute-force enumeration of their language (bounded length), on
  every string of a small alphabet: the longest-match traps of the module docstring included;
* the same languages written in Lark give the same masks on both vocabularies and engines;
* every error names what is wrong and where.
"""

from __future__ import annotations

import itertools
import json
import random
import re

import lark
import numpy as np
import pytest
from contract import assert_mask_matches_checks

import constrain as cn
import constrain.grammars as library
from bench.gbnf import JSON_SAME_LANGUAGE
from constrain.engine.grammar import gbnf
from constrain.engine.grammar.gbnf import (
    AnyChar,
    CharClass,
    Choice,
    Concat,
    Literal,
    Repeat,
    RuleRef,
    TokenRef,
    grammar_syntax,
    parse_gbnf,
)
from constrain.engine.vocab import Vocabulary
from constrain.errors import GrammarError

# -- grammars written from the format description ------------------------------------------------

# Every construct but token references, in a regular language (for a `re` oracle). Escapes:
# \n \r \t \\ \" \[ \] \- \xHH \uHHHH \UHHHHHHHH in strings and classes.
EVERY = r"""
# a small configuration format
root    ::= header entries footer?   # a comment after a rule
header  ::= "#!" [ \t]* ("cfg" | "conf") "\n"
entries ::= entry{1,}
entry   ::= key " "? "=" " "? value "\n" |
            "[" [A-Z] [A-Z0-9\-]{0,7} "]" "\n"
key     ::= [a-zA-Z_] [a-zA-Z0-9_.]{,11}
value   ::= number | string | bool | list
number  ::= "-"? [0-9]{1,4} ("." [0-9]{2})?
string  ::= "\"" ( [^"\\\n] | "\\" ["\\nrt\[\]] )* "\""
bool    ::= ("true" | "false") "!"{0,1} "?"{0}
list    ::= "(" (
    number ("," " "? number){0,3}   # a rule spans lines inside parentheses
  )? ")"
footer  ::= "\x2D\u002D" [\u00e9\U0001F600\t\-]{2} . "\r"? "\n"+
"""

_NUMBER = r"-?[0-9]{1,4}(?:\.[0-9]{2})?"
EVERY_REGEX = re.compile(
    r"#![ \t]*(?:cfg|conf)\n"
    r"(?:[a-zA-Z_][a-zA-Z0-9_.]{0,11} ?= ?"
    rf"""(?:{_NUMBER}|"(?:[^"\\\n]|\\["\\nrt\[\]])*"|(?:true|false)!?"""
    rf"|\((?:{_NUMBER}(?:, ?{_NUMBER}){{0,3}})?\))\n"
    r"|\[[A-Z][A-Z0-9\-]{0,7}\]\n)+"
    r"(?:--[\u00e9\U0001F600\t\-]{2}.\r?\n+)?",
    re.DOTALL,
)

# left- and right-recursive, ambiguous in the spaces; its oracle is lark's Earley parser with
# every split of the text into one-character terminals
ARITH = r"""
root   ::= expr
expr   ::= expr sp? [-+] sp? term | term
term   ::= term sp? [*/] sp? factor | factor
factor ::= [0-9]+ | "(" sp? expr sp? ")" | "-" factor
sp     ::= " "+
"""

ARITH_LARK = r"""
start: expr
expr: expr SP? ADD SP? term | term
term: term SP? MUL SP? factor | factor
factor: DIGIT+ | "(" SP? expr SP? ")" | "-" factor
SP: /[ ]+/
ADD: /[-+]/
MUL: /[*\/]/
DIGIT: /[0-9]/
"""

# the language of the library's json.lark, in GBNF (the benchmark's grammar)
JSON = JSON_SAME_LANGUAGE

# key=value lists, in both formats; the Lark terminals are such that longest match is harmless
PAIRS = r"""
root  ::= pair ("," " "? pair)*
pair  ::= [a-z]+ "=" ( [0-9]+ | "\"" [^"\n]* "\"" | "[" ( [0-9]+ ("," [0-9]+)* )? "]" )
"""
PAIRS_LARK = r"""
start: pair ("," " "? pair)*
pair: KEY "=" (INT | STR | "[" [INT ("," INT)*] "]")
KEY: /[a-z]+/
INT: /[0-9]+/
STR: /"[^"\n]*"/
"""

# the longest-match traps: exact only if the translation splits what longest match would merge
TRAPS = [
    'root ::= "ab" "c" | "a" "bd"',
    'root ::= [a-z]* "x"',
    'root ::= word "x" | word\nword ::= [a-z]+',
    'root ::= (word " "?)* "!"\nword ::= [ab]+',
    'root ::= item* "aab"\nitem ::= "a" | "ab" | "b"',
    'root ::= "a"{2,3} "a"? "b"',
    'root ::= s\ns ::= s s | "(" s ")" | "a" | ',
    'root ::= x "y"* | x "yy" "z"\nx ::= "x" "y"?',
    'root ::= (. "a")+ | "é"+ "b"',
    'root ::= [^b] root? "b" | "ab"',
]


# -- an independent random derivation generator over the parsed grammar ---------------------------


class Special(str):
    """A special token in a derivation (a token reference)."""


def _cost(node, costs) -> float:
    """Shortest derivation length of `node` (characters), with `costs` per rule."""
    if isinstance(node, Literal):
        return len(node.text)
    if isinstance(node, (CharClass, AnyChar, TokenRef)):
        return 1
    if isinstance(node, RuleRef):
        return costs[node.name]
    if isinstance(node, Concat):
        return sum(_cost(i, costs) for i in node.items)
    if isinstance(node, Choice):
        return min(_cost(o, costs) for o in node.options)
    return node.low * _cost(node.item, costs) if node.low else 0


def _rule_costs(grammar) -> dict[str, float]:
    costs = {name: float("inf") for name in grammar.rules}
    changed = True
    while changed:
        changed = False
        for name, rule in grammar.rules.items():
            c = _cost(rule.body, costs)
            if c < costs[name]:
                costs[name], changed = c, True
    return costs


_PREFERRED = [chr(c) for c in range(0x20, 0x7F)] + ["\n", "\t", "é", "中", "😀"]


def _pick(ranges, rng: random.Random) -> str:
    ranges = [(lo, hi) for lo, hi in ranges if not (0xD800 <= lo and hi <= 0xDFFF)]
    inside = [c for c in _PREFERRED if any(lo <= ord(c) <= hi for lo, hi in ranges)]
    if inside and rng.random() < 0.9:
        return rng.choice(inside)
    while True:
        lo, hi = rng.choice(ranges)
        cp = rng.randint(lo, min(hi, lo + 2000))
        if not 0xD800 <= cp <= 0xDFFF:
            return chr(cp)


def derive(grammar, rng: random.Random, start: str = "root", depth: int = 6) -> list[str]:
    """A random derivation: text pieces and `Special` tokens, choosing freely up to `depth`
    nested rules, then along shortest derivations."""
    costs = _rule_costs(grammar)
    out: list[str] = []

    def go(node, level: int) -> None:
        deep = level > depth
        if isinstance(node, Literal):
            out.append(node.text)
        elif isinstance(node, CharClass):
            out.append(_pick(node.code_points(), rng))
        elif isinstance(node, AnyChar):
            out.append(_pick([(0, 0x10FFFF)], rng))
        elif isinstance(node, TokenRef):
            out.append(Special(node.text))
        elif isinstance(node, RuleRef):
            go(grammar.rules[node.name].body, level + 1)
        elif isinstance(node, Concat):
            for item in node.items:
                go(item, level)
        elif isinstance(node, Choice):
            finite = [o for o in node.options if _cost(o, costs) < float("inf")]
            go(min(finite, key=lambda o: _cost(o, costs)) if deep else rng.choice(finite), level)
        else:
            high = node.low + 3 if node.high is None else min(node.high, node.low + 3)
            for _ in range(node.low if deep else rng.randint(node.low, high)):
                go(node.item, level + 1)

    go(grammar.rules[start].body, 0)
    return out


def _text(pieces: list[str]) -> str:
    assert not any(isinstance(p, Special) for p in pieces)
    return "".join(pieces)


# -- a brute-force oracle: the language up to a length, by fixpoint over the parsed grammar ------


def bounded_language(grammar, alphabet: str, n: int, start: str = "root") -> set[str]:
    """Every text of at most `n` characters of `alphabet` the grammar derives."""
    rules: dict[str, set[str]] = {name: set() for name in grammar.rules}

    def cat(a: set[str], b: set[str]) -> set[str]:
        return {x + y for x in a for y in b if len(x) + len(y) <= n}

    def lang(node) -> set[str]:
        if isinstance(node, Literal):
            return {node.text} if len(node.text) <= n else set()
        if isinstance(node, (CharClass, AnyChar)):
            ranges = node.code_points() if isinstance(node, CharClass) else [(0, 0x10FFFF)]
            return {c for c in alphabet if any(lo <= ord(c) <= hi for lo, hi in ranges)}
        if isinstance(node, RuleRef):
            return rules[node.name]
        if isinstance(node, Concat):
            out = {""}
            for item in node.items:
                out = cat(out, lang(item))
            return out
        if isinstance(node, Choice):
            return set().union(*(lang(o) for o in node.options))
        item, out, power = lang(node.item), set(), {""}
        high = node.high if node.high is not None else node.low + n + 1
        for k in range(high + 1):
            if k >= node.low:
                out |= power
            power = cat(power, item)
        return out

    changed = True
    while changed:
        changed = False
        for name, rule in grammar.rules.items():
            new = lang(rule.body) - rules[name]
            if new:
                rules[name] |= new
                changed = True
    return rules[start]


def _strings(alphabet: str, n: int) -> list[str]:
    return ["".join(p) for k in range(n + 1) for p in itertools.product(alphabet, repeat=k)]


def _random_grammar(rng: random.Random, alphabet: str) -> str:
    """A random GBNF grammar of up to three rules over `alphabet`, recursion allowed."""
    n_rules = rng.randint(1, 3)

    def item(depth: int) -> str:
        k = rng.random()
        if k < 0.3:
            return json.dumps("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 3))))
        if k < 0.45:
            chars = "".join(sorted(set(rng.choices(alphabet, k=2))))
            return f"[{'^' if rng.random() < 0.3 else ''}{chars}]"
        if k < 0.5:
            return "."
        if k < 0.7 and depth < 2:
            return "(" + " | ".join(seq(depth + 1) for _ in range(rng.randint(1, 3))) + ")"
        return f"r{rng.randrange(n_rules)}"

    def seq(depth: int) -> str:
        out = []
        for _ in range(rng.randint(0 if depth else 1, 3)):
            it, q = item(depth), rng.random()
            lo = rng.randint(0, 2)
            ops = ["*", "+", "?", f"{{{lo}}}", f"{{{lo},}}", f"{{{lo},{lo + 1}}}", f"{{,{lo + 1}}}"]
            out.append(it + (rng.choice(ops) if q < 0.4 else ""))
        return " ".join(out)

    lines = [
        f"r{i} ::= " + " | ".join(seq(0) for _ in range(rng.randint(1, 3))) for i in range(n_rules)
    ]
    return "\n".join([*lines, "root ::= r0"])


# -- helpers --------------------------------------------------------------------------------------


def _tokens(vocab: Vocabulary, text: str) -> list[int] | None:
    tokens = vocab.encode_bytes(text.encode())
    return tokens if vocab.decode_bytes(tokens) == text.encode() else None


def _walk_masks(grammar: cn.Grammar, vocab: Vocabulary, tokens: list[int], complete) -> None:
    """Along `tokens`: each token allowed by the mask, EOS allowed exactly where `complete`
    says the text so far is in the language."""
    m = cn.Constraint(grammar, vocab).start()
    eos = vocab.eos_ids[0]
    for i, token in enumerate([*tokens, None]):
        mask = m.mask()
        data = vocab.decode_bytes(tokens[:i])
        try:
            text = data.decode()
        except UnicodeDecodeError:  # inside a character: not complete
            text = None
        assert mask[eos] == (text is not None and complete(text)), f"EOS after {data!r}"
        if token is None:
            break
        assert mask[token], f"token {token} {vocab.token_bytes(token)!r} after {data!r}"
        m.advance(token)


def _mutate(text: str, rng: random.Random, pool: str) -> str:
    chars = list(text)
    for _ in range(rng.randint(1, 3)):
        j = rng.randrange(len(chars) + 1)
        op = rng.randrange(3)
        if op == 0 and j < len(chars):
            del chars[j]
        elif op == 1:
            chars.insert(j, rng.choice(pool))
        elif j < len(chars):
            chars[j] = rng.choice(pool)
    return "".join(chars)


# -- parsing ---------------------------------------------------------------------------------------


def test_every_construct_parses_into_the_structure_written():
    g = parse_gbnf(EVERY)
    assert list(g.rules) == [
        "root",
        "header",
        "entries",
        "entry",
        "key",
        "value",
        "number",
        "string",
        "bool",
        "list",
        "footer",
    ]
    entry = g.rules["entry"].body
    assert len(entry.options) == 2  # the alternative after | on the next line
    reps = {
        n.op: (n.low, n.high)
        for r in g.rules.values()
        for n in gbnf._walk(r.body)
        if isinstance(n, Repeat)
    }
    assert reps == {
        "?": (0, 1),
        "*": (0, None),
        "+": (1, None),
        "{1,}": (1, None),
        "{0,7}": (0, 7),
        "{,11}": (0, 11),
        "{1,4}": (1, 4),
        "{2}": (2, 2),
        "{0,1}": (0, 1),
        "{0}": (0, 0),
        "{0,3}": (0, 3),
    }
    footer = g.rules["footer"].body.options[0].items
    assert footer[0] == Literal("--", footer[0].at)
    assert footer[1].item.code_points() == (
        (0x9, 0x9),
        (0x2D, 0x2D),
        (0xE9, 0xE9),
        (0x1F600, 0x1F600),
    )
    assert isinstance(footer[2], AnyChar)
    string = g.rules["string"].body.options[0].items[1].item.options
    assert string[0].items[0].negated and string[0].items[0].code_points()[0] == (0, 9)
    escaped = string[1].items[1].code_points()
    assert {chr(c) for lo, hi in escaped for c in range(lo, hi + 1)} == set('"\\nrt[]')
    assert g.rules["entry"].at == (6, 1) and entry.options[1].items[0].at == (7, 13)


def test_token_references_and_their_negations_parse():
    g = parse_gbnf('root ::= <think> t <[1000]> !<[7]>* !</think>\nt ::= "x"')
    refs = [n for n in gbnf._walk(g.rules["root"].body) if isinstance(n, TokenRef)]
    found = sorted((r.text, r.token_id, r.negated) for r in refs)
    assert found == [
        ("</think>", None, True),
        ("<[1000]>", 1000, False),
        ("<[7]>", 7, True),
        ("<think>", None, False),
    ]


def test_grammar_syntax_tells_gbnf_from_lark():
    assert grammar_syntax(JSON) == "gbnf" and grammar_syntax(EVERY) == "gbnf"
    assert grammar_syntax(library.path("json").read_text()) == "lark"
    assert grammar_syntax(ARITH_LARK) == "lark" and grammar_syntax(PAIRS_LARK) == "lark"
    assert grammar_syntax("root::=[a-z]") == "gbnf"
    assert grammar_syntax('# comment: with a colon\n\nroot ::= "a:b"') == "gbnf"
    assert grammar_syntax('// x ::= y\nstart: "::="') == "lark"
    assert grammar_syntax("?start: a\na: /x/") == "lark"
    assert grammar_syntax("NUMBER.2: /[0-9]+/\nstart: NUMBER") == "lark"
    assert grammar_syntax("%import common.WS\nstart: WS") == "lark"
    assert grammar_syntax("") == "lark"


# -- languages: derivations, masks, rejection ----------------------------------------------------


def test_derivations_of_every_construct_are_accepted_with_masks_along_them(any_vocab):
    grammar = cn.Grammar.from_gbnf(EVERY)
    parsed = parse_gbnf(EVERY)
    rng = random.Random(0)
    walked = 0
    for _ in range(40):
        text = _text(derive(parsed, rng))
        assert EVERY_REGEX.fullmatch(text), text  # the generator and the oracle agree
        assert grammar.matches(text), text
        tokens = _tokens(any_vocab, text)
        if tokens is not None and walked < 6:
            _walk_masks(grammar, any_vocab, tokens, lambda t: bool(EVERY_REGEX.fullmatch(t)))
            walked += 1
    assert walked == 6


def test_mutations_are_rejected_exactly_where_the_regex_rejects():
    grammar = cn.Grammar.from_gbnf(EVERY)
    parsed = parse_gbnf(EVERY)
    rng = random.Random(1)
    pool = '#!cfgon= "\\\n\t-.0123456789()[]ABZtrue,é😀\r'
    agreed = {True: 0, False: 0}
    for _ in range(300):
        text = _mutate(_text(derive(parsed, rng)), rng, pool)
        expected = bool(EVERY_REGEX.fullmatch(text))
        assert grammar.matches(text) == expected, text
        agreed[expected] += 1
    assert min(agreed.values()) > 15


def test_left_recursive_grammar_against_a_scannerless_earley_oracle(smollm_vocab):
    grammar = cn.Grammar.from_gbnf(ARITH)
    oracle = lark.Lark(ARITH_LARK, parser="earley", lexer="dynamic_complete")

    def complete(text: str) -> bool:
        try:
            oracle.parse(text)
        except lark.exceptions.LarkError:
            return False
        return True

    parsed, rng = parse_gbnf(ARITH), random.Random(2)
    for i in range(40):
        text = _text(derive(parsed, rng, depth=5))
        assert grammar.matches(text) and complete(text), text
        wrong = _mutate(text, rng, "0123456789 +-*/()")
        assert grammar.matches(wrong) == complete(wrong), wrong
        if i < 5:
            _walk_masks(grammar, smollm_vocab, _tokens(smollm_vocab, text), complete)


@pytest.mark.parametrize("text", TRAPS)
def test_longest_match_traps_against_a_brute_force_language(text):
    grammar = cn.Grammar.from_gbnf(text)
    language = bounded_language(parse_gbnf(text), "abcdxyz!é ()", 5)
    for s in _strings("abdxyé (", 4) + sorted(language):
        assert grammar.matches(s) == (s in language), s
    automaton = grammar.automaton
    for s in language:  # every prefix of a sentence stays alive, and every live state completes
        for k in range(len(s)):
            state = automaton.step(automaton.start, s[:k].encode())
            assert state is not None, (s, k)
            assert grammar.matches(s[:k].encode() + automaton.completion(state))


def test_the_traps_of_the_docstring():
    g = cn.Grammar.from_gbnf('root ::= "ab" "c" | "a" "bd"')
    assert g.matches("abd") and g.matches("abc") and not g.matches("ab")
    g = cn.Grammar.from_gbnf('root ::= [a-z]* "x"')
    assert g.matches("abcx") and g.matches("x") and g.matches("xx") and not g.matches("xa")
    # where it is not regular as a whole, the one-lexeme form would be wrong: it is split
    g = cn.Grammar.from_gbnf('root ::= word "x" | "(" root ")"\nword ::= [a-z]*')
    assert g.matches("abcx") and g.matches("((xx))") and not g.matches("(ab)")
    assert all(lx.dfa.longest() == 1 for lx in g.ir.lexemes.values())


def test_random_grammars_against_a_brute_force_language():
    alphabet = "abé"
    strings = _strings(alphabet, 4)
    rng = random.Random(3)
    tested = 0
    while tested < 25:
        text = _random_grammar(rng, alphabet)
        try:
            grammar = cn.Grammar.from_gbnf(text)
        except GrammarError as exc:
            assert "empty" in str(exc)  # a language with no finite text
            continue
        language = bounded_language(parse_gbnf(text), alphabet, 4)
        for s in strings:
            assert grammar.matches(s) == (s in language), (text, s)
        tested += 1


def test_one_character_automata_from_code_points():
    from constrain.engine.regex import dfa_from_code_points

    rng = random.Random(5)
    for _ in range(100):
        ranges = []
        for _ in range(rng.randint(0, 4)):
            lo = rng.choice(
                [rng.randint(0, 300), rng.randint(0xD700, 0xE100), rng.randint(0, 0x10FFFF)]
            )
            ranges.append((lo, min(0x10FFFF, lo + rng.choice([0, 3, 300, 70000]))))
        dfa = dfa_from_code_points(ranges, "test")
        for _ in range(50):
            cp = rng.choice(
                [rng.randint(0, 400), rng.randint(0xD700, 0xE100), rng.randint(0, 0x10FFFF)]
            )
            if not 0xD800 <= cp <= 0xDFFF:
                inside = any(lo <= cp <= hi for lo, hi in ranges)
                assert dfa.matches(chr(cp)) == inside, (ranges, cp)
                assert not dfa.matches(chr(cp) * 2)
        assert not dfa.matches("") and not dfa.matches(b"\xed\xa0\x80")  # a surrogate's bytes


def test_private_use_characters_the_regex_layer_reserves():
    from constrain.engine.regex._syntax import lookahead_index

    lo, hi = gbnf._MARKERS
    assert lookahead_index(chr(lo)) == 0 and lookahead_index(chr(hi)) is not None
    assert lookahead_index(chr(lo - 1)) is None and lookahead_index(chr(hi + 1)) is None
    g = cn.Grammar.from_gbnf(f'root ::= "a{chr(lo + 5)}b" [{chr(lo)}-{chr(hi + 9)}]+ . "x"')
    assert g.matches(f"a{chr(lo + 5)}b{chr(hi)}{chr(lo)}{chr(lo + 3)}x")
    assert not g.matches(f"a{chr(lo + 5)}b{chr(hi + 10)}{chr(lo)}x")


def test_multi_character_lexemes_where_exact():
    """Strings and numbers are one lexeme each (masks as fast as Lark's), not characters."""
    g = cn.Grammar.from_gbnf(JSON)
    multi = [lx for lx in g.ir.lexemes.values() if lx.dfa.longest() != 1]
    assert any(lx.dfa.matches('"a\\n\\u00e9"') for lx in multi)
    assert any(lx.dfa.matches("-12.5e3") for lx in multi)
    assert len(g.ir.lexemes) < 20


# -- the same language in Lark: the same masks ---------------------------------------------------


def _json_texts() -> list[str]:
    rng = np.random.default_rng(4)
    values = [{"a": [1, -2.5e-3, "x\\y\n\u00e9"], "b": {"c": None, "d": True}}, [], "s", 0]
    values += [{"k": [int(v) for v in rng.integers(-50, 50, 3)]}]
    texts = [json.dumps(v) for v in values] + [json.dumps(values[0], indent=2) + "\n"]
    return texts + ['{ "a" :\t[ 1 ,2 ] }', "[\r\n  1\r\n]"]


@pytest.mark.parametrize(
    "gbnf_text, lark_text, texts",
    [
        (JSON, None, _json_texts()),
        (PAIRS, PAIRS_LARK, ['ab=12, c="x y",d=[1,22,3]', "k=[]", 'zz="",q=0']),
    ],
    ids=["json", "pairs"],
)
def test_same_language_in_lark_gives_the_same_masks(any_vocab, gbnf_text, lark_text, texts):
    ours = cn.Grammar.from_gbnf(gbnf_text)
    theirs = library.load("json") if lark_text is None else cn.Grammar.from_lark(lark_text)
    grammars = [ours, ours.with_engine("python"), theirs]
    for text in texts:
        tokens = _tokens(any_vocab, text)
        matchers = [cn.Constraint(g, any_vocab).start() for g in grammars]
        for token in [*tokens, None]:
            masks = [m.mask() for m in matchers]
            for other in masks[1:]:
                diff = np.flatnonzero(masks[0] != other)
                assert not diff.size, (text, [any_vocab.token_bytes(t) for t in diff[:5]])
            if token is not None:
                for m in matchers:
                    m.advance(token)


def test_masks_match_fresh_checks(smollm_vocab):
    grammar = cn.Grammar.from_gbnf(EVERY)
    text = '#! cfg\nkey = "a\\"b"\n[SEC-1]\n'
    tokens = _tokens(smollm_vocab, text)
    for k in (0, 3, len(tokens) - 2):
        assert_mask_matches_checks(grammar, smollm_vocab, tokens[:k])


# -- token references -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "vocab_name, by_text, by_id",
    [("smollm_vocab", "<|im_start|>", 3), ("gemma_vocab", "<start_of_turn>", 106)],
)
def test_token_references_are_special_tokens(request, vocab_name, by_text, by_id):
    vocab = request.getfixturevalue(vocab_name)
    grammar = cn.Grammar.from_gbnf(f'root ::= "yes" {by_text} [0-9]+ | "no" <[{by_id}]>')
    m = cn.Constraint(grammar, vocab).start()
    m.advance_many(vocab.encode_bytes(b"yes"))
    assert np.flatnonzero(m.mask()).tolist() == [vocab.special_ids[by_text]]
    m.advance(vocab.special_ids[by_text])
    assert not m.mask()[vocab.special_ids[by_text]]
    m.advance_many(vocab.encode_bytes(b"42"))
    assert m.accepting()
    m = cn.Constraint(grammar, vocab).start()
    m.advance_many(vocab.encode_bytes(b"no"))
    assert np.flatnonzero(m.mask()).tolist() == [by_id]
    m.advance(by_id)
    assert m.accepting() and not grammar.matches("no")


def test_token_references_that_cannot_be_bound_are_errors(smollm_vocab):
    def bind(text: str) -> str:
        with pytest.raises(GrammarError) as err:
            cn.Constraint(cn.Grammar.from_gbnf(text), smollm_vocab).start()
        return str(err.value)

    assert "text token" in bind('root ::= "a" <[5000]>') and "write its text" in bind(
        'root ::= "a" <[5000]>'
    )
    assert "49152 tokens" in bind('root ::= "a" <[99999999]>')
    assert "<think>" in bind('root ::= "a" <think>')
    assert "EOS" in bind('root ::= "a" <|im_end|>')
    assert "twice" in bind('root ::= "a" <|im_start|> | "b" <[1]>')


def test_token_negation_parses_then_is_refused_with_its_place():
    text = "root ::= <think> body </think>\nbody ::= !</think>*"
    parse_gbnf(text)
    with pytest.raises(GrammarError, match=r"token negation !</think> .* line 2, column 10"):
        cn.Grammar.from_gbnf(text)
    with pytest.raises(GrammarError, match=r"token negation !<\[7\]>.*line 1, column 10"):
        cn.Grammar.from_gbnf("root ::= !<[7]>")


# -- errors and limits ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, message",
    [
        ('root ::= "abc', r"unterminated string .*line 1, column 14"),
        ('root ::= ("a" | "b"', r"unclosed parenthesis, at line 1, column 10"),
        ('root ::= "a")', r"unmatched \), at line 1, column 13"),
        ("root ::= [a-", r"unterminated character class"),
        ('root ::= "\\q"', r"bad escape \\q .*line 1, column 11"),
        ("root ::= [\\x4]", r"bad escape \\x: it needs 2 hexadecimal digits"),
        ('root ::= "\\uD800"', r"surrogate U\+D800"),
        ("root ::= [z-a]", r"reversed range 'z'-'a'"),
        ('root ::= "a"{3,2}', r"bad repetition \{3,2\}: the minimum is above the maximum"),
        ('root ::= "a"{x}', r"bad repetition: expected \{m\}"),
        ('root ::= "a"{,}', r"bad repetition \{,\}"),
        ('root ::= "a"{2', r"expected \} after the bounds"),
        ('root ::= "a"{20000}', r"repetition bound 20000 is above the limit of 10000"),
        ("root ::= * x", r"\* has nothing before it to repeat, at line 1, column 10"),
        ('root ::= "a"\n  | "b"', r"expected a rule name, found '\|' \(a rule goes on .* line 2"),
        ("root = x", r"expected ::= after the rule name 'root', found '='"),
        ('root ::= x\nx ::= "a"\nx ::= "b"', r"rule 'x' is defined twice \(first at line 2\)"),
        ("root ::= ab cd\ncd ::= ab", r"undefined rule 'ab' \(used in rule 'root'\).*line 1"),
        ('rot ::= "a"', r"the start rule 'root' is not defined"),
        ("root ::= <[x]>", r"token id reference is written <\[id\]>"),
        ("root ::= <think", r"unterminated token reference"),
        ("root ::= !x", r"! must be followed by a token reference"),
        ('root ::= "a" ?', r""),  # a repetition may follow a space
        ('root ::= \nx ::= "a"', r"the definition of rule 'x' starts inside another rule"),
        ("root ::= [b-a]|[]", r"reversed range"),
        ("root ::= [^\\x00-\\U0010FFFF]", r"language is empty"),
        ("root ::= root", r"language is empty"),
    ],
)
def test_errors_name_what_and_where(text, message):
    if not message:
        assert cn.Grammar.from_gbnf(text).matches("a")
        return
    with pytest.raises(GrammarError, match=message):
        cn.Grammar.from_gbnf(text)


def test_limits_are_errors(monkeypatch):
    deep = "root ::= " + "(" * 101 + '"a"' + ")" * 101
    with pytest.raises(GrammarError, match=r"nested deeper than 100 \(MAX_DEPTH\)"):
        cn.Grammar.from_gbnf(deep)
    assert cn.Grammar.from_gbnf("root ::= " + "(" * 100 + '"a"' + ")" * 100).matches("a")
    with pytest.raises(GrammarError, match=r"nested deeper than 100"):
        cn.Grammar.from_gbnf('root ::= "a"' + "?" * 101)
    with pytest.raises(GrammarError, match=r"time limit of 0 s \(timeout=\)"):
        cn.Grammar.from_gbnf(JSON, timeout=0)
    monkeypatch.setattr(gbnf, "MAX_RULES", 1000)
    with pytest.raises(GrammarError, match=r"more than 1000 rules \(MAX_RULES\)"):
        cn.Grammar.from_gbnf('root ::= x{0,2000}\nx ::= "a" | root')


def test_bounded_repetition_at_the_limit():
    g = cn.Grammar.from_gbnf('root ::= ("a" | "(" root ")"){0,10000}')
    assert g.matches("a" * 10000) and not g.matches("a" * 10001) and g.matches("(a)a")


def test_left_recursion_and_cn_grammar_inherits_from_gbnf():
    g = cn.Grammar.from_gbnf('root ::= root "+" [0-9] | [0-9]')
    assert isinstance(g, cn.Grammar) and g.kind == "gbnf"
    assert g.matches("1+2+3") and not g.matches("1+")
    with pytest.raises(GrammarError, match="takes grammar text"):
        cn.Grammar.from_gbnf(b"root ::= x")
    assert cn.Grammar.from_gbnf('start ::= "s"', start="start").matches("s")
    with pytest.raises(GrammarError, match=r"start rule 'go' \(start=\) is not defined"):
        cn.Grammar.from_gbnf('root ::= "s"', start="go")


def test_grammar_text_is_read_in_its_own_syntax(tmp_path):
    """`grammar=` text is GBNF when its rules are defined with ::=, else Lark; a .gbnf file is
    GBNF (what the server and `cn.generate` read grammar text with)."""
    from constrain.constraints import grammar_from

    assert grammar_from('root ::= "a" [0-9]+\n').kind == "gbnf"
    assert grammar_from('# comment\nroot ::= "a"').kind == "gbnf"
    assert grammar_from('start: "a" /[0-9]+/\n').kind == "lark"
    path = tmp_path / "digits.gbnf"
    path.write_text('root ::= [0-9]{2}\n')
    assert grammar_from(path).matches("42") and not grammar_from(path).matches("4")
