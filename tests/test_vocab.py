"""Vocabulary: token bytes on both bundled tokenizers, special/EOS/padding ids, the token trie."""

from __future__ import annotations

import numpy as np
import pytest

from constrain.engine.vocab import TokenTrie, Vocabulary

TEXTS = [
    "Hello, world!",
    "héllo wörld — naïve café, Øresund, Ελληνικά, русский, 日本語のテキスト, 한국어",
    "emoji 🎉🚀👩‍👩‍👧 and flags 🇫🇷",
    '{"name": "Ada", "tags": ["x", "y"], "n": -1.5e3, "ok": true, "nested": {"a": null}}',
    "def f(x):\n    return x ** 2  # comment\n\tif x:\r\n        pass\n",
    "SELECT a, b FROM t WHERE c >= 10 ORDER BY a DESC;",
    "  leading spaces and trailing   ",
    "\n\n\nnewlines\n",
]


@pytest.fixture
def vocab(any_vocab) -> Vocabulary:
    return any_vocab


@pytest.mark.parametrize("text", TEXTS)
def test_encoded_bytes_concatenate_to_the_text(vocab, text):
    ids = vocab.encode(text)
    assert all(vocab.token_bytes(i) for i in ids), "encode produced a token without bytes"
    assert vocab.decode_bytes(ids) == text.encode("utf-8")


def test_each_token_bytes_match_the_tokenizers_decoding(vocab):
    tok = vocab.tokenizer
    anchor = vocab.encode("a")[-1]  # decode in context: SentencePiece strips a leading space
    base = tok.decode([anchor])
    checked = 0
    for i in vocab.text_token_ids.tolist():
        data = vocab.token_bytes(i)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue  # a partial UTF-8 sequence; covered by the round-trip tests
        decoded = tok.decode([anchor, i], clean_up_tokenization_spaces=False)
        assert decoded == base + text, (i, data, decoded)
        checked += 1
    assert checked > 0.9 * len(vocab.text_token_ids)


def test_special_tokens_carry_no_text(vocab):
    tok = vocab.tokenizer
    for i in tok.all_special_ids:
        assert vocab.token_bytes(i) is None
    for i in vocab.eos_ids:
        assert vocab.token_bytes(i) is None
    assert len(vocab.text_token_ids) > 0.95 * len(tok) - 1000


def test_padding_ids_and_several_eos():
    v = Vocabulary([b"a", b"b", None, b"ab"], eos_ids=[2, 1], size=8)
    assert v.size == 8 and len(v) == 8
    assert v.eos_ids == (1, 2)
    assert v.token_bytes(1) is None  # an EOS id never also stands for text
    assert v.token_bytes(6) is None and v.token_bytes(-1) is None
    with pytest.raises(ValueError, match="outside"):
        Vocabulary([b"a"], eos_ids=[5])


def _check_trie(trie: TokenTrie, token_bytes: list[bytes | None]) -> None:
    n = trie.n_nodes
    prefixes = [b""] * n
    for node in range(1, n):
        prefixes[node] = prefixes[trie.parent[node]] + bytes([trie.byte[node]])
        assert trie.parent[node] < node  # DFS order: parents come first
    assert prefixes == sorted(prefixes)  # DFS order is lexicographic order
    for node in range(n):
        end = trie.subtree_end[node]
        inside = prefixes[node + 1 : end]
        assert all(p.startswith(prefixes[node]) and len(p) > len(prefixes[node]) for p in inside)
        assert end == n or not prefixes[end].startswith(prefixes[node])
        kids, owner = trie.expand(np.array([node]))
        assert list(trie.parent[kids]) == [node] * len(kids)
        assert list(trie.byte[kids]) == sorted(trie.byte[kids])
    for i, data in enumerate(token_bytes):
        if data:
            node = trie.node_of(data)
            assert prefixes[node] == data
            assert i in trie.tokens_at(np.array([node])).tolist()


def test_trie_structure_small():
    token_bytes = [b"a", b"ab", b"abc", b"b", None, b"ab", b"ba", b"\xff", b"abd"]
    trie = TokenTrie.build(token_bytes)
    _check_trie(trie, token_bytes)
    assert sorted(trie.tokens_at(np.array([trie.node_of(b"ab")])).tolist()) == [1, 5]
    assert trie.has_extension(b"ab") and not trie.has_extension(b"abc")
    assert trie.node_of(b"zz") == -1


def test_trie_on_real_vocabulary(vocab):
    trie = vocab.trie
    assert trie.n_nodes < 4 * len(vocab.text_token_ids)
    rng = np.random.default_rng(0)
    for i in rng.choice(vocab.text_token_ids, 300, replace=False).tolist():
        node = trie.node_of(vocab.token_bytes(i))
        assert i in trie.tokens_at(np.array([node])).tolist()
        end = trie.subtree_end[node]
        assert (trie.depth[node + 1 : end] > trie.depth[node]).all()


_TRIE_FIELDS = (
    "byte", "depth", "parent", "subtree_end", "child_start", "children", "token_start", "tokens",
    "node_of_token",
)  # fmt: skip


def test_a_restricted_trie_is_the_trie_built_from_the_kept_tokens(vocab):
    """`restricted(keep)` gives, array for array, what `build` makes from the kept tokens'
    bytes alone: random subsets of a real vocabulary and of a toy with duplicates, none and
    all included."""
    cases = [(vocab.texts, vocab.trie)]
    toy = [b"a", b"ab", b"abc", b"b", None, b"ab", b"ba", b"\xff", b"abd", b"ab"]
    cases.append((toy, TokenTrie.build(toy)))
    rng = np.random.default_rng(7)
    for (token_bytes, full), shares in zip(cases, [(0.0, 0.02, 0.5), (0.0, 0.3, 0.7, 1.0)]):
        n = len(token_bytes)
        for keep in [rng.random(n) < share for share in shares]:
            built = TokenTrie.build([b if keep[i] else None for i, b in enumerate(token_bytes)])
            got = full.restricted(keep)
            for name in _TRIE_FIELDS:
                a, b = getattr(built, name), getattr(got, name)
                assert a.dtype == b.dtype and np.array_equal(a, b), name


def test_the_native_trie_is_the_reference_build(vocab):
    """`from_texts` (the native build a vocabulary uses) gives `build`'s arrays exactly, on the
    real vocabulary and on random byte strings with duplicates, prefixes, empties and ids past
    the texts."""
    cases = [(vocab._bytes, len(vocab._bytes))]
    rng = np.random.default_rng(11)
    for _ in range(20):
        pool = [bytes(rng.integers(0, 256, rng.integers(0, 5)).tolist()) for _ in range(30)]
        pool += [b"ab", b"a", b"abc", b"\x00", b"\xff\xff"]
        texts = [pool[i] or None for i in rng.integers(0, len(pool), rng.integers(0, 80))]
        cases.append((texts, len(texts)))
    from constrain.engine.native import TokenTexts

    for texts, n_ids in cases:
        built = TokenTrie.build(texts)
        native = TokenTrie.from_texts(TokenTexts([t or b"" for t in texts]), n_ids)
        for name in _TRIE_FIELDS:
            a, b = getattr(built, name), getattr(native, name)
            assert a.dtype == b.dtype and np.array_equal(a, b), name


def test_warm_up_builds_once_under_threads(smollm_tokenizer):
    """Threads warming one fresh vocabulary at once build its shared structures once (one
    trie, one set of slices, one answer), and masks after it are a cold vocabulary's."""
    import sys
    import threading

    import constrain as cn
    from constrain.constraints import warm_up
    from constrain.engine.slices import slices_of

    vocab = Vocabulary.from_tokenizer(smollm_tokenizer, eos_ids=[2])
    answers, tries, slices = [], [], []

    def warm():
        answers.append(warm_up(vocab))
        tries.append(vocab.trie)
        slices.append(slices_of(vocab))

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=warm) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(switch)
    assert len(set(answers)) == 1 and answers[0] > 0
    assert all(t is tries[0] for t in tries) and all(s is slices[0] for s in slices)
    cold = Vocabulary.from_tokenizer(smollm_tokenizer, eos_ids=[2])
    schema = {"type": "object", "properties": {"k": {"type": "string"}}, "required": ["k"]}
    warmed, fresh = (cn.Constraint(cn.Grammar.from_json_schema(schema), v).start()
                     for v in (vocab, cold))  # fmt: skip
    for token in vocab.encode('{"k":"a b"}'):
        assert np.array_equal(warmed.bitmask(), fresh.bitmask())
        warmed.advance(token)
        fresh.advance(token)
