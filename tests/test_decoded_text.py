"""`DecodedText` (a sequence's text decoded once per token) against Python's own UTF-8
decoding of the tokens' bytes, on both bundled vocabularies, with tokens that split characters
(byte-level BPE pieces, SentencePiece byte fallback) and random rollbacks."""

from __future__ import annotations

import random

import pytest

from constrain.decoding.text import DecodedText

TEXTS = ["héllo wörld ☃ 日本語 🎉 ok", '{"name": "Zoë", "emoji": "🙂"}', "plain ascii text"]


def byte_tokens(vocab, text: str) -> list[int]:
    """`text` as one token per byte where the vocabulary has such tokens (splitting every
    multi-byte character), else as the tokenizer writes it."""
    singles = {vocab.token_bytes(t): t for t in range(vocab.size) if vocab.token_bytes(t)}
    singles = {b: t for b, t in singles.items() if len(b) == 1}
    data = text.encode()
    if all(bytes([b]) in singles for b in data):
        return [singles[bytes([b])] for b in data]
    return vocab.encode(text)


def expected(vocab, tokens: list[int]) -> str:
    """Python's decoding of the tokens' bytes, an unfinished character at the end left out."""
    data = vocab.decode_bytes(tokens)
    for cut in range(len(data), max(len(data) - 4, -1), -1):
        try:
            return data[:cut].decode("utf-8")
        except UnicodeDecodeError as exc:
            if exc.reason != "unexpected end of data":
                return data.decode("utf-8", errors="replace")
    return data.decode("utf-8", errors="replace")


@pytest.mark.parametrize("split", [False, True])
def test_text_follows_appends_and_rollbacks(any_vocab, split):
    rng = random.Random(0)
    for text in TEXTS:
        tokens = byte_tokens(any_vocab, text) if split else any_vocab.encode(text)
        decoded, kept = DecodedText(any_vocab), []
        for token in tokens:
            decoded.append(token)
            kept.append(token)
            if rng.random() < 0.2:  # roll back a few tokens, check, write them again
                n = rng.randint(0, len(kept))
                undone = kept[n:]
                decoded.truncate(n)
                del kept[n:]
                assert decoded.text() == expected(any_vocab, kept)
                for again in undone:
                    decoded.append(again)
                    kept.append(again)
            assert decoded.text() == expected(any_vocab, kept)
            assert decoded.chars == len(decoded.text())
        assert decoded.text() == text


def test_slices_offsets_and_search(smollm_vocab):
    text = "abc ☃ def ☃ ghi"
    decoded = DecodedText(smollm_vocab)
    tokens = byte_tokens(smollm_vocab, text)
    for token in tokens:
        decoded.append(token)
    whole = decoded.text()
    for i in range(len(tokens) + 1):
        for j in range(i, len(tokens) + 1):
            a, b = decoded.offset(i), decoded.offset(j)
            assert decoded.text(i, j) == whole[a:b]
            assert decoded.between(a, b) == whole[a:b]
    for start in range(len(whole) + 1):
        assert decoded.find("☃", start) == whole.find("☃", start)
    twin = decoded.copy()
    twin.truncate(3)
    assert decoded.text() == whole and twin.text() == expected(smollm_vocab, tokens[:3])
