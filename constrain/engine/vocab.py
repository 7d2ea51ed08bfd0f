"""Vocabulary: token id <-> the exact bytes the token contributes to the text, and a token trie.

Every constraint in the library works on bytes, so the first job is to know, for each token id,
which bytes it appends to the output:

* byte-level BPE (GPT-2, SmolLM2, Llama-3, Qwen): each character of the token string stands for
  one byte through the GPT-2 byte-to-unicode map;
* SentencePiece with byte fallback (Llama-2, Gemma): ``▁`` is a space and ``<0xXX>`` is one raw
  byte; other pieces are their UTF-8 text;
* added tokens: special ones (``<|im_end|>``, ``<bos>``) contribute no text and are never
  produced by a text constraint; non-special added tokens contribute their literal content.

``size`` is the model's logits dimension, which may exceed the tokenizer's length (padding rows);
ids without bytes are never allowed by a text constraint, EOS ids only when it accepts.

The token trie is stored in flat numpy arrays in DFS (lexicographic) order: node ``i``'s subtree
is ``[i, subtree_end[i])``, so a walk that rejects a byte skips the whole subtree in O(1); a
children CSR lets the mask computation expand a whole trie level at once with numpy.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from constrain.engine.cache import BoundedCache
from constrain.errors import VocabularyError

__all__ = ["Vocabulary", "TokenTrie"]


def _gpt2_unicode_to_byte() -> dict[str, int]:
    """Inverse of the GPT-2 byte-to-unicode map used by byte-level BPE vocabularies."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    mapping = {chr(b): b for b in printable}
    shift = 0
    for b in range(256):
        if b not in printable:
            mapping[chr(256 + shift)] = b
            shift += 1
    return mapping


_BYTE_OF_CHAR = _gpt2_unicode_to_byte()


def _byte_level_bytes(piece: str) -> bytes | None:
    try:
        return bytes(_BYTE_OF_CHAR[c] for c in piece)
    except KeyError:  # not a byte-level piece (should not happen in a byte-level vocabulary)
        return None


def _sentencepiece_bytes(piece: str) -> bytes:
    if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
        try:
            return bytes([int(piece[3:5], 16)])
        except ValueError:
            pass
    return piece.replace("\u2581", " ").encode("utf-8")


def _decoder_kind(tokenizer) -> str:
    """'byte_level' or 'sentencepiece', read off the fast tokenizer's decoder pipeline."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    decoder = getattr(backend, "decoder", None) if backend is not None else None
    text = ""
    if decoder is not None:
        state = decoder.__getstate__()
        text = state.decode() if isinstance(state, bytes) else str(state)
    if "ByteLevel" in text:
        return "byte_level"
    if "ByteFallback" in text or "\u2581" in text or "Metaspace" in text:
        return "sentencepiece"
    vocab = tokenizer.get_vocab()
    if "<0x0A>" in vocab:
        return "sentencepiece"
    return "byte_level"


class Vocabulary:
    """Token ids of one model, the bytes each contributes, its EOS ids and its token trie.

    Args:
        token_bytes: for each tokenizer id, the bytes it adds to the text, or None for special
            tokens (which no text constraint may produce).
        eos_ids: ids that end generation; allowed exactly when a constraint accepts.
        size: the model's logits dimension (>= len(token_bytes)); extra ids are padding and
            never allowed.
        tokenizer: the Hugging Face tokenizer, used by `encode` / `decode_text`.
        special_ids: special token text (``<|im_end|>``) -> id, for grammars that use special
            tokens as terminals.
    """

    def __init__(
        self,
        token_bytes: Sequence[bytes | None],
        eos_ids: Iterable[int],
        *,
        size: int | None = None,
        tokenizer=None,
        name: str = "",
        special_ids: Mapping[str, int] | None = None,
    ):
        # a tuple, not a list: the garbage collector stops traversing it (see docs/architecture.md)
        eos = {int(i) for i in eos_ids}
        self._bytes: tuple[bytes | None, ...] = tuple(
            None if i in eos else data for i, data in enumerate(token_bytes)
        )
        self.size: int = max(size or 0, len(self._bytes))
        self.eos_ids: tuple[int, ...] = tuple(sorted({int(i) for i in eos_ids}))
        if not self.eos_ids:
            raise VocabularyError("a vocabulary needs at least one EOS id")
        bad = [i for i in self.eos_ids if not 0 <= i < self.size]
        if bad:
            raise VocabularyError(f"EOS ids {bad} are outside the vocabulary of size {self.size}")
        self.tokenizer = tokenizer
        self.name = name
        self.special_ids: dict[str, int] = dict(special_ids or {})
        # structures derived from this vocabulary alone (its slices, the token sets of text
        # checks, the constraints compiled for it), built by their modules on first use
        self.derived: BoundedCache[Hashable, object] = BoundedCache(256)

    @classmethod
    def from_tokenizer(
        cls, tokenizer, size: int | None = None, eos_ids: Iterable[int] | None = None
    ) -> Vocabulary:
        """Build the vocabulary of a Hugging Face (fast) tokenizer.

        Args:
            tokenizer: a `transformers` tokenizer.
            size: the model's logits dimension; defaults to the tokenizer's length.
            eos_ids: stop ids; defaults to the tokenizer's EOS id.
        """
        kind = _decoder_kind(tokenizer)
        n = len(tokenizer)
        pieces = tokenizer.convert_ids_to_tokens(list(range(n)))
        added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
        special = set(getattr(tokenizer, "all_special_ids", []) or [])
        special.update(i for i, tok in added.items() if getattr(tok, "special", False))
        convert = _byte_level_bytes if kind == "byte_level" else _sentencepiece_bytes
        out: list[bytes | None] = []
        for i, piece in enumerate(pieces):
            if i in special or piece is None:
                out.append(None)
            elif i in added:  # a non-special added token is literal text
                out.append(str(added[i].content).encode("utf-8") or None)
            else:
                out.append(convert(piece) or None)
        if eos_ids is None:
            eos_ids = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
        name = getattr(tokenizer, "name_or_path", "") or ""
        special_ids = {pieces[i]: i for i in sorted(special) if 0 <= i < n and pieces[i]}
        return cls(
            out, eos_ids, size=size, tokenizer=tokenizer, name=str(name), special_ids=special_ids
        )

    # -- lookups ------------------------------------------------------------------------------

    def __len__(self) -> int:
        return self.size

    def token_bytes(self, token_id: int) -> bytes | None:
        """The bytes token `token_id` adds to the text; None for special, EOS and padding ids."""
        if 0 <= token_id < len(self._bytes):
            return self._bytes[token_id]
        return None

    @cached_property
    def texts(self) -> tuple[bytes, ...]:
        """Every id's bytes in id order, b"" where `token_bytes` is None (size entries)."""
        return tuple(b or b"" for b in self._bytes) + (b"",) * (self.size - len(self._bytes))

    @cached_property
    def native_texts(self):
        """`texts` copied once into the native core (`native.TokenTexts`), for the native
        objects that read tokens' bytes."""
        from constrain.engine.native import TokenTexts

        return TokenTexts(self.texts)

    @cached_property
    def text_token_ids(self) -> np.ndarray:
        """Ids of all tokens that contribute text (int64, ascending)."""
        return np.array([i for i, b in enumerate(self._bytes) if b], dtype=np.int64)

    def encode(self, text: str) -> list[int]:
        """Tokenize `text` as the model would (no special tokens added)."""
        if self.tokenizer is None:
            raise ValueError("this vocabulary has no tokenizer to encode with")
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def encode_bytes(self, data: bytes) -> list[int]:
        """Tokens spelling `data`: the tokenizer's when they round-trip, else greedy longest
        match in the trie (stopping before the first byte no token starts with, so the tokens
        may spell only a prefix of `data`)."""
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if text is not None and self.tokenizer is not None:
            ids = self.encode(text)
            if self.decode_bytes(ids) == data:
                return ids
        return self.trie.longest_match_tokens(data)

    def decode_bytes(self, token_ids: Iterable[int]) -> bytes:
        """The concatenated bytes of `token_ids` (special and EOS ids contribute nothing)."""
        return b"".join(self.token_bytes(int(t)) or b"" for t in token_ids)

    def decode(self, token_ids: Iterable[int]) -> str:
        """The text of `token_ids`; invalid UTF-8 (a token cut mid-character) is replaced."""
        return self.decode_bytes(token_ids).decode("utf-8", errors="replace")

    @cached_property
    def trie(self) -> TokenTrie:
        """The token trie over the text tokens (built natively on first use, then cached)."""
        return TokenTrie.from_texts(self.native_texts, len(self._bytes))

    def __repr__(self) -> str:
        return f"Vocabulary({self.name!r}, size={self.size}, eos_ids={self.eos_ids})"


@dataclass(frozen=True, eq=False)
class TokenTrie:
    """A byte trie of the vocabulary in flat arrays, nodes numbered in DFS (lexicographic) order.

    Node 0 is the root (the empty prefix). For node ``i``:

    * ``byte[i]``: the byte on the edge from its parent; ``depth[i]``: the prefix length;
    * ``subtree_end[i]``: one past the last node of its subtree, so ``[i, subtree_end[i])`` is
      the subtree and a rejected prefix is skipped by jumping to ``subtree_end[i]``;
    * ``child_start[i] : child_start[i + 1]`` indexes ``children``, its children in byte order;
    * ``token_start[i] : token_start[i + 1]`` indexes ``tokens``, the ids whose bytes end here
      (several when a tokenizer has duplicate byte strings).
    """

    byte: np.ndarray
    depth: np.ndarray
    parent: np.ndarray
    subtree_end: np.ndarray
    child_start: np.ndarray
    children: np.ndarray
    token_start: np.ndarray
    tokens: np.ndarray
    node_of_token: np.ndarray  # node id for every tokenizer id (0 = no bytes)

    @property
    def n_nodes(self) -> int:
        return len(self.byte)

    @classmethod
    def build(cls, token_bytes: Sequence[bytes | None]) -> TokenTrie:
        """Build the trie of every id whose bytes are non-empty."""
        ids = [i for i, b in enumerate(token_bytes) if b]
        ids.sort(key=lambda i: token_bytes[i])
        node_bytes: list[int] = [0]
        depth: list[int] = [0]
        parent: list[int] = [-1]
        node_of_token = np.zeros(len(token_bytes), dtype=np.int64)
        path: list[int] = [0]  # path[d] = node at depth d on the current branch
        previous = b""
        for i in ids:
            data = token_bytes[i]
            if data != previous:
                common = 0
                limit = min(len(data), len(previous))
                while common < limit and data[common] == previous[common]:
                    common += 1
                del path[common + 1 :]
                for d in range(common, len(data)):
                    node_bytes.append(data[d])
                    depth.append(d + 1)
                    parent.append(path[d])
                    path.append(len(node_bytes) - 1)
                previous = data
            node_of_token[i] = path[len(data)]
        n = len(node_bytes)
        depth_a = np.array(depth, dtype=np.int32)
        parent_a = np.array(parent, dtype=np.int64)
        # subtree end: the next node (in DFS order) whose depth is <= this node's depth
        subtree_end = np.full(n, n, dtype=np.int64)
        stack: list[int] = []
        for node in range(n):
            d = depth[node]
            while stack and depth[stack[-1]] >= d:
                subtree_end[stack.pop()] = node
            stack.append(node)
        # children CSR: nodes grouped by parent; DFS order keeps them in byte order
        child_nodes = np.arange(1, n, dtype=np.int64)
        order = np.argsort(parent_a[1:], kind="stable")
        children = child_nodes[order]
        counts = np.bincount(parent_a[1:], minlength=n)
        child_start = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(counts, out=child_start[1:])
        # tokens CSR
        token_ids = np.array(ids, dtype=np.int64)
        token_nodes = node_of_token[token_ids]
        order = np.argsort(token_nodes, kind="stable")
        tcounts = np.bincount(token_nodes, minlength=n)
        token_start = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(tcounts, out=token_start[1:])
        return cls(
            byte=np.array(node_bytes, dtype=np.uint8),
            depth=depth_a,
            parent=parent_a,
            subtree_end=subtree_end,
            child_start=child_start,
            children=children,
            token_start=token_start,
            tokens=token_ids[order],
            node_of_token=node_of_token,
        )

    @classmethod
    def from_texts(cls, texts, n_ids: int) -> TokenTrie:
        """`build` of ids ``0..n_ids-1`` done by the native core from `texts` (a
        `native.TokenTexts`): the same arrays, in a fraction of the time."""
        from constrain.engine.native import trie_arrays

        return cls(*trie_arrays(texts, n_ids))

    def restricted(self, keep: np.ndarray) -> TokenTrie:
        """The trie of the tokens `keep` marks (bool by token id, at least one per id of this
        trie), the same arrays `build` makes from those tokens' bytes, filtered from this trie
        in a few vectorised passes instead of rebuilt byte by byte (a cold mask waits on it).

        A node stays when a kept token ends in its subtree, which in DFS order is a range:
        prefix sums over the nodes' kept-token counts decide every node at once."""
        n = self.n_nodes
        entry_kept = keep[self.tokens]
        per_node = np.bincount(
            np.repeat(np.arange(n), np.diff(self.token_start))[entry_kept], minlength=n
        )
        counts = np.concatenate(([0], np.cumsum(per_node)))
        stays = counts[self.subtree_end] - counts[:-1] > 0
        stays[0] = True
        before = np.concatenate(([0], np.cumsum(stays)))  # kept nodes before each node
        new_id = before[:-1]
        child_kept = stays[self.children]
        child_counts = np.diff(np.concatenate(([0], np.cumsum(child_kept)))[self.child_start])
        parent = np.where(self.parent >= 0, new_id[np.maximum(self.parent, 0)], -1)[stays]
        node_of_token = np.zeros(len(keep), dtype=np.int64)
        ids = np.flatnonzero(keep[: len(self.node_of_token)])
        node_of_token[ids] = new_id[self.node_of_token[ids]]
        return TokenTrie(
            byte=self.byte[stays],
            depth=self.depth[stays],
            parent=parent,
            subtree_end=before[self.subtree_end][stays],
            child_start=np.concatenate(([0], np.cumsum(child_counts[stays]))),
            children=new_id[self.children[child_kept]],
            token_start=np.concatenate(([0], np.cumsum(per_node[stays]))),
            tokens=self.tokens[entry_kept],
            node_of_token=node_of_token,
        )

    @cached_property
    def native(self):
        """This trie in the native core (`constrain.engine.native.Trie`), copied on first use."""
        from constrain.engine.native import Trie

        return Trie(self)

    def child_count(self, nodes: np.ndarray) -> np.ndarray:
        return self.child_start[nodes + 1] - self.child_start[nodes]

    def expand(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """All children of `nodes`, and for each child the index of its parent in `nodes`."""
        starts = self.child_start[nodes]
        counts = self.child_start[nodes + 1] - starts
        total = int(counts.sum())
        if total == 0:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty
        owner = np.repeat(np.arange(len(nodes)), counts)
        offsets = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
        return self.children[starts[owner] + offsets], owner

    def tokens_at(self, nodes: np.ndarray) -> np.ndarray:
        """Token ids whose bytes end exactly at one of `nodes`."""
        starts = self.token_start[nodes]
        counts = self.token_start[nodes + 1] - starts
        has = counts > 0
        starts, counts = starts[has], counts[has]
        if len(starts) == 0:
            return np.zeros(0, dtype=np.int64)
        if (counts == 1).all():
            return self.tokens[starts]
        offsets = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
        return self.tokens[np.repeat(starts, counts) + offsets]

    def tokens_read_by(
        self, table: np.ndarray, state: int, accepting: np.ndarray | None = None
    ) -> np.ndarray:
        """Ids of the tokens whose bytes lead a byte DFA (transition `table`, state 0 dead) from
        `state` to a live state, or to an `accepting` one when given: a level-by-level walk
        that never enters the subtree of a rejected prefix."""
        nodes = self.children[self.child_start[0] : self.child_start[1]]
        states = table[state, self.byte[nodes]]
        found: list[np.ndarray] = []
        while True:
            live = states != 0
            nodes, states = nodes[live], states[live]
            if len(nodes) == 0:
                break
            found.append(self.tokens_at(nodes if accepting is None else nodes[accepting[states]]))
            nodes, owner = self.expand(nodes)
            states = table[states[owner], self.byte[nodes]]
        return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)

    def node_of(self, data: bytes) -> int:
        """The node for prefix `data`, or -1 if no token starts with it."""
        node = 0
        for b in data:
            lo, hi = self.child_start[node], self.child_start[node + 1]
            kids = self.children[lo:hi]
            k = int(np.searchsorted(self.byte[kids], b))
            if k >= len(kids) or self.byte[kids[k]] != b:
                return -1
            node = int(kids[k])
        return node

    def has_extension(self, data: bytes) -> bool:
        """True when some token's bytes start with `data` and are longer than it."""
        node = self.node_of(data)
        return node >= 0 and self.subtree_end[node] > node + 1

    def longest_match_tokens(self, data: bytes) -> list[int]:
        """Greedy longest-match tokens spelling `data`, stopping before the first byte no token
        starts with (so the result may spell only a prefix)."""
        ids: list[int] = []
        pos = 0
        while pos < len(data):
            node, best, best_len = 0, -1, 0
            for k in range(pos, len(data)):
                lo, hi = self.child_start[node], self.child_start[node + 1]
                kids = self.children[lo:hi]
                j = int(np.searchsorted(self.byte[kids], data[k]))
                if j >= len(kids) or self.byte[kids[j]] != data[k]:
                    break
                node = int(kids[j])
                if self.token_start[node + 1] > self.token_start[node]:
                    best, best_len = int(self.tokens[self.token_start[node]]), k + 1 - pos
            if best < 0:
                return ids
            ids.append(best)
            pos += best_len
        return ids
