"""Mask contracts for tests: a mask against independent oracles (a fresh check, a regex).

A `Matcher.check` on the Constraint that computed a mask may answer from that cached mask, so
comparing ``m.mask()`` with ``m.check(t)`` on one Constraint compares the mask with itself and
cannot fail. These helpers build their oracle from scratch instead:

* `assert_mask_matches_checks`: a fresh Constraint with no mask cached, so each ``check(t)``
  walks the token's bytes through the automaton (the mask comes from a trie walk and
  vocabulary slices: two independent computations of one language);
* `assert_mask_matches_regex`: Python's `regex` module with partial matching, which answers
  "is this text a prefix of a match?" without any of constrain's code.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import regex as regex_oracle  # partial matches: is this text a prefix of a match?

import constrain as cn
from constrain.engine.grammar import Grammar
from constrain.engine.vocab import Vocabulary

__all__ = ["assert_mask_matches_checks", "assert_mask_matches_regex", "tokens_to_compare"]

_MAX_REPORTED = 10  # mismatching tokens listed in a failure message


def tokens_to_compare(
    vocab: Vocabulary,
    mask: np.ndarray,
    *,
    tokens: Iterable[int] | None = None,
    sample: int | None = None,
    every_allowed: bool = True,
    seed: int = 0,
) -> np.ndarray:
    """The token ids a contract compares: every id by default, else the given ones and/or
    `sample` refused ids drawn at random, always with the EOS and special ids, and with every
    id the mask allows (or, when not `every_allowed`, `sample` of them drawn at random too)."""
    if tokens is None and sample is None:
        return np.arange(vocab.size)
    chosen = [
        np.asarray(vocab.eos_ids, dtype=np.int64),
        np.asarray(list(vocab.special_ids.values()), dtype=np.int64),
    ]
    if tokens is not None:
        chosen.append(np.asarray(list(tokens), dtype=np.int64))
    rng = np.random.default_rng(seed)
    allowed, refused = np.flatnonzero(mask), np.flatnonzero(~mask)
    if every_allowed:
        chosen.append(allowed)
    elif sample is not None:
        chosen.append(rng.choice(allowed, size=min(sample, len(allowed)), replace=False))
    if sample is not None:
        chosen.append(rng.choice(refused, size=min(sample, len(refused)), replace=False))
    return np.unique(np.concatenate(chosen)).astype(np.int64)


def _describe(vocab: Vocabulary, prefix_tokens: Sequence[int]) -> str:
    return f"after {len(prefix_tokens)} tokens {vocab.decode_bytes(prefix_tokens)!r}"


def _failure(
    vocab: Vocabulary,
    prefix_tokens: Sequence[int],
    wrong: list[tuple[int, bool, bool]],
    compared: int,
    oracle: str,
) -> str:
    lines = [
        f"mask disagrees with {oracle} on {len(wrong)} of {compared} tokens "
        f"{_describe(vocab, prefix_tokens)}:"
    ]
    for token, in_mask, expected in wrong[:_MAX_REPORTED]:
        lines.append(
            f"  token {token} {vocab.token_bytes(token)!r}: mask says {in_mask}, "
            f"{oracle} says {expected}"
        )
    if len(wrong) > _MAX_REPORTED:
        lines.append(f"  ... and {len(wrong) - _MAX_REPORTED} more")
    return "\n".join(lines)


def _checked_mask(mask: np.ndarray, vocab: Vocabulary) -> np.ndarray:
    mask = np.asarray(mask)
    assert mask.shape == (vocab.size,), f"mask shape {mask.shape}, vocabulary size {vocab.size}"
    assert mask.dtype == bool, f"mask dtype {mask.dtype}, expected bool"
    return mask


def assert_mask_matches_checks(
    grammar: Grammar,
    vocab: Vocabulary,
    prefix_tokens: Sequence[int],
    mask: np.ndarray | None = None,
    *,
    tokens: Iterable[int] | None = None,
    sample: int | None = None,
    seed: int = 0,
    max_tokens: int | None = None,
) -> np.ndarray:
    """Assert that `mask` allows exactly the tokens a fresh Constraint's `check` allows after
    `prefix_tokens`; returns the mask.

    The oracle is a new ``cn.Constraint(grammar, vocab)`` that has never computed a mask, so
    its `check` walks each token's bytes through the automaton rather than reading a cached
    mask (asserted before and after the walk). `mask` defaults to the mask of another new
    Constraint after the same prefix; pass the mask under test when it comes from elsewhere
    (a Constraint that has cached masks, a sampler, a budget).

    Args:
        grammar: the grammar both sides use.
        vocab: the vocabulary both sides use.
        prefix_tokens: the tokens consumed before the mask.
        mask: the mask under test (bool, shape (vocab.size,)).
        tokens, sample, seed: compare only these ids, or only `sample` refused ids drawn at
            random with `seed` (for the 262k vocabulary); every allowed, EOS and special id is
            compared anyway.
        max_tokens: the token budget of both matchers.
    """
    prefix_tokens = list(prefix_tokens)
    if mask is None:
        under_test = cn.Constraint(grammar, vocab).start(max_tokens=max_tokens)
        under_test.advance_many(prefix_tokens)
        mask = under_test.mask()
    mask = _checked_mask(mask, vocab)
    constraint = cn.Constraint(grammar, vocab)
    fresh = constraint.start(max_tokens=max_tokens)
    fresh.advance_many(prefix_tokens)
    assert constraint.cached_states == 0, (
        "the oracle's Constraint cached a mask while advancing: its check would read it"
    )
    compared = tokens_to_compare(vocab, mask, tokens=tokens, sample=sample, seed=seed)
    wrong = []
    for token in compared.tolist():
        expected = fresh.check(token)
        if bool(mask[token]) != expected:
            wrong.append((token, bool(mask[token]), expected))
    assert constraint.cached_states == 0, (
        "the oracle's check computed a mask: it is no longer independent of the mask"
    )
    assert not wrong, _failure(vocab, prefix_tokens, wrong, len(compared), "a fresh check")
    return mask


def regex_allows(pattern: str, text: bytes) -> bool | None:
    """`text` can be continued into a full match of `pattern` (Python's `regex`, ASCII
    classes as in constrain); None when `text` ends inside a UTF-8 character or is not UTF-8."""
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError:
        return None
    found = regex_oracle.fullmatch(pattern, decoded, partial=True, flags=regex_oracle.ASCII)
    return found is not None


def assert_mask_matches_regex(
    pattern: str,
    vocab: Vocabulary,
    prefix_tokens: Sequence[int],
    mask: np.ndarray,
    *,
    tokens: Iterable[int] | None = None,
    sample: int | None = None,
    seed: int = 0,
) -> int:
    """Assert that `mask` after `prefix_tokens` agrees with a regex oracle on every compared
    token whose text is whole UTF-8; returns how many tokens the oracle could judge.

    A text token is allowed iff the text so far plus its bytes is a prefix of a match of
    `pattern`; EOS iff the text so far is a full match; special and padding ids never.
    Tokens leaving the text inside a character are skipped (the oracle reads characters).
    The oracle costs a few microseconds a token, so `sample` draws that many allowed and
    that many refused ids (plus EOS and special ids); `tokens` adds ids of your choice.
    """
    prefix_tokens = list(prefix_tokens)
    mask = _checked_mask(mask, vocab)
    text = vocab.decode_bytes(prefix_tokens)
    try:
        complete = regex_oracle.fullmatch(pattern, text.decode("utf-8"), flags=regex_oracle.ASCII)
    except UnicodeDecodeError:
        complete = None
    eos = set(vocab.eos_ids)
    compared = tokens_to_compare(
        vocab, mask, tokens=tokens, sample=sample, every_allowed=False, seed=seed
    )
    wrong, judged = [], 0
    for token in compared.tolist():
        data = vocab.token_bytes(token)
        if token in eos:
            expected = complete is not None
        elif not data:  # special and padding ids
            expected = False
        else:
            expected = regex_allows(pattern, text + data)
            if expected is None:
                continue
        judged += 1
        if bool(mask[token]) != expected:
            wrong.append((token, bool(mask[token]), expected))
    assert not wrong, _failure(vocab, prefix_tokens, wrong, judged, f"the regex {pattern!r}")
    return judged


def accepts_token_by_token(constraint, tokens: list[int]) -> bool:
    """Whether a fresh matcher of `constraint` takes `tokens` one by one and then EOS."""
    m = constraint.start()
    for t in tokens:
        if not m.check(t):
            return False
        m.advance(t)
    return m.check(constraint.vocab.eos_ids[0])


def accepts_text(constraint, text: str) -> bool:
    """Whether a fresh matcher of `constraint` takes the tokens of `text` and then accepts."""
    m = constraint.start()
    for token in constraint.vocab.encode(text):
        if not m.check(token):
            return False
        m.advance(token)
    return m.accepting()
