"""Context-free grammars as byte-level automata: a longest-match lexer driving an Earley parser.

State. ``(node, s)``: `node` is the interned Earley `ChartNode` after the lexemes completed so
far, `s` the state of the grammar's `Lexer` inside the lexeme in progress (reached from the start
state of the lexemes `node` allows, plus the ignored ones); ``s == 0`` means no lexeme has
started (only at the very beginning). Both parts are hashable and position-free, so states recur
across positions and sequences and every cache below keys on them.

Special-token terminals (``<|im_end|>``) match no bytes: the token itself ends the lexeme in
progress and is scanned by the parser (`step_special`), leaving no lexeme in progress.

Reading a byte b (`step`): if the lexer can consume b it does (longest match: a lexeme never
ends while it or another allowed lexeme can go on); otherwise the lexeme ends with the tag of
``s`` (the lexemes matching there) unless b would continue a keyword's word (`Lexer.can_end`),
the parser scans it (or skips it when it is ignored and not expected), and b starts the next
lexeme from the new node's start state. A lexeme may thus end inside a token and a token may
span several lexemes.

Liveness. Lexer states are live (some allowed lexeme can complete), nodes only hold
completable items (rules are productive), so a state is reachable only if the text can still be
completed: masks are sound without lookahead. (A grammar can still be written so that longest
match never lets a lexeme end, e.g. ``NAME NAME`` with no separator; `check_lexeme_ends` reports
it at compile time.)

Masks (`token_ids`). A walk of the vocabulary trie from ``(node, s)``, split into *pieces*: a
piece walks inside one lexeme in progress from a frontier of trie nodes, level by level with
numpy, and records the trie children where a lexeme ends (grouped by tag). A piece depends only
on the lexer state it starts from and the trie nodes it starts at, never on the parser, so pieces
are cached per vocabulary; the parser is consulted only at lexeme boundaries, once per group,
through scans cached on the interned nodes.

With a native lexer the parser is native too (`NativeChart`), and `step`, `token_ids` and
whole masks (`native_masks`: slices, walk, special tokens and EOS) are single native calls; the
Python code here stays the reference the tests hold them to.
"""

from __future__ import annotations

import threading
import weakref

import numpy as np

from constrain.engine.automaton import walk_bytes
from constrain.engine.cache import BoundedCache
from constrain.engine.grammar.completion import Completions
from constrain.engine.grammar.earley import ChartNode, EarleyParser, dotted_rules
from constrain.engine.grammar.ir import GrammarIR
from constrain.engine.grammar.lexer import Piece
from constrain.engine.grammar.lexers import NativeLexer, make_lexer
from constrain.engine.grammar.lint import check_lexeme_ends
from constrain.engine.grammar.native_chart import NativeChart, NativeMasks, NativeSteps
from constrain.engine.regex import ByteDFA
from constrain.engine.slices import VocabularySlices
from constrain.engine.vocab import TokenTrie, Vocabulary
from constrain.fuel import burn

__all__ = ["CFGAutomaton"]

_MAX_FORCED = 1024  # forced text is computed at most this far ahead
_FRESH = 0  # lexer state meaning "no lexeme in progress"
_MAX_CACHED_STATES = 2**16  # entries of the per-state caches (expected, forced bytes, admits)
_MEMO_BYTES = 16 * 2**20  # and their estimated bytes, each
_PIECES_KEPT, _PIECES_BYTES = 2**14, 64 * 2**20  # mask pieces per vocabulary trie
# Estimated bytes of Python objects, for `nbytes` (CPython 3.10+, 64-bit):
_MEMO_ENTRY = 192  # a memo entry beyond its value's items: the dict slot, the key, the value
_PY_PIECE_KEY = 160  # a Python piece cache's key and its ordered-dict node


class CFGAutomaton:
    """A validated `GrammarIR` as an `Automaton` (see the module docstring)."""

    def __init__(self, ir: GrammarIR, *, lint: bool = True, engine: str | None = None):
        if lint:  # off for generated grammars whose lexemes always end (JSON Schema)
            check_lexeme_ends(ir)
        self.ir = ir
        self.lexeme_table = list(ir.lexemes.values())
        self.lexeme_ids = {lx.name: i for i, lx in enumerate(self.lexeme_table)}
        self.ignore = frozenset(self.lexeme_ids[n] for n in ir.ignore)
        self.specials = frozenset(
            i for i, lx in enumerate(self.lexeme_table) if lx.special is not None
        )
        self.special_texts = frozenset(self.lexeme_table[i].special for i in self.specials)
        self.lexer = make_lexer(self.lexeme_table, engine)
        rules = dotted_rules(ir, self.lexeme_ids)
        # with a native lexer, the parser and the hot paths (`step`, `token_ids`) are native
        self._native: NativeChart | None = None
        if isinstance(self.lexer, NativeLexer):
            self.parser = self._native = NativeChart(rules, self.lexer, self.ignore, self.specials)
        else:
            self.parser = EarleyParser(rules)
        self._pieces: weakref.WeakKeyDictionary[TokenTrie, object] = weakref.WeakKeyDictionary()
        self.max_piece_bytes = _PIECES_BYTES  # per vocabulary trie
        # (lexer state or lexeme, language) -> admits
        self._admits: _Memo = _Memo(lambda found: _MEMO_ENTRY)
        self._completions: Completions | None = None
        self._expected: _Memo = _Memo(lambda found: _MEMO_ENTRY + 8 * len(found))
        self._forced: _Memo = _Memo(lambda found: _MEMO_ENTRY + len(found))
        # the native masks and steps handed out, alive (their memos grow with this grammar)
        self._handed: weakref.WeakSet = weakref.WeakSet()
        self._handed_lock = threading.Lock()
        self.start = (self.parser.root, _FRESH)
        self._start(self.parser.root)

    # -- lexers and lexeme ends -----------------------------------------------------------------

    def _start(self, node: ChartNode) -> int:
        """The lexer state where the lexemes `node` allows (and the ignored ones) start."""
        if self._native is not None:
            return self._native.start_of(node)
        start = node.lexer_start
        if start is None:
            lexemes = (node.expected | self.ignore) - self.specials
            start = node.lexer_start = self.lexer.start_of(lexemes)
        return start

    def _end(self, node: ChartNode, tags: frozenset[int]) -> ChartNode | None:
        """The node after a lexeme matching `tags` ends at `node` (ignored lexemes are skipped)."""
        scanned = tags & node.expected
        if scanned:
            return self.parser.scan(node, scanned)
        return node if tags & self.ignore else None

    # -- the Automaton interface ------------------------------------------------------------------

    def step(self, state: tuple, data: bytes) -> tuple | None:
        if self._native is not None:
            return self._native.step(state, data)
        node, s = state
        if not data:
            return state
        lexer = self.lexer
        if s == _FRESH:
            s = self._start(node)
        for b in data:
            t = lexer.row(s)[b]
            if not t:
                tag = lexer.tag_of(s)
                if not lexer.ends_before(tag)[b]:  # nothing ends here, or a keyword in a word
                    return None
                node = self._end(node, lexer.tag_set(tag))
                if node is None:
                    return None
                t = lexer.row(self._start(node))[b]
                if not t:
                    return None
            s = t
        return (node, s)

    def _after_lexeme(self, state: tuple) -> ChartNode | None:
        """The node reached if the lexeme in progress ends now (the node itself if none started)."""
        node, s = state
        if s == _FRESH:
            return node
        tag = self.lexer.tag_of(s)
        return self._end(node, self.lexer.tag_set(tag)) if tag else None

    def allowed_specials(self, state: tuple) -> frozenset[str]:
        after = self._after_lexeme(state)
        if after is None or not self.specials:
            return frozenset()
        return frozenset(self.lexeme_table[i].special for i in after.expected & self.specials)

    def step_special(self, state: tuple, text: str) -> tuple | None:
        """The state after the special token `text`: the lexeme in progress ends, then the
        special terminal is scanned and no lexeme is in progress."""
        after = self._after_lexeme(state)
        if after is None:
            return None
        scanned = frozenset(
            i for i in after.expected & self.specials if self.lexeme_table[i].special == text
        )
        return (self.parser.scan(after, scanned), _FRESH) if scanned else None

    def accepting(self, state: tuple) -> bool:
        after = self._after_lexeme(state)
        return after is not None and after.accepts

    def expected_bytes(self, state: tuple) -> list[int]:
        """The bytes that can come next, sorted (cached by state: `done`, `forced` and the
        samplers' statistics ask at every token)."""
        found = self._expected.get(state)
        if found is not None:
            return found
        node, s = state
        lexer = self.lexer
        found = set(lexer.live_bytes(self._start(node) if s == _FRESH else s))
        after = self._after_lexeme(state) if s != _FRESH else None
        if after is not None:
            ends_before = lexer.ends_before(lexer.tag_of(s))
            found.update(b for b in lexer.live_bytes(self._start(after)) if ends_before[b])
        return _remember(self._expected, state, sorted(found))

    def can_continue(self, state: tuple) -> bool:
        return bool(self.expected_bytes(state)) or bool(self.allowed_specials(state))

    def forced_bytes(self, state: tuple) -> bytes:
        found = self._forced.get(state)
        if found is not None:
            return found
        here = state
        out = bytearray()
        while len(out) < _MAX_FORCED and not self.accepting(here):
            options = self.expected_bytes(here)
            if len(options) != 1:
                break
            out.append(options[0])
            here = self.step(here, bytes(options))
        return _remember(self._forced, state, bytes(out))

    def completion(self, state: tuple) -> bytes | None:
        """A shortest text that finishes a sentence from `state` (see `constrain.engine.grammar.completion`)."""
        if self._completions is None:
            self._completions = Completions(self)
        return self._completions.of(state)

    # -- masks --------------------------------------------------------------------------------

    def admits(self, state: tuple, language: ByteDFA) -> bool:
        """Whether every string of `language` stays inside the lexemes in progress (so no
        boundary and no parser step is involved, and the state stays live).

        One lexeme in progress that admits the language alone is enough (checked in its own
        DFA, a result shared by every lexer holding it); only when none does is the product
        searched, for strings that different lexemes cover together."""
        node, s = state
        s = self._start(node) if s == _FRESH else s
        key = (s, language)
        found = self._admits.get(key)
        if found is None:
            alive = self.lexer.key(s)
            found = any(self._lexeme_admits(lexeme, at, language) for lexeme, at in alive)
            if not found and len(alive) > 1:
                found = self.lexer.admits(s, language)
            _remember(self._admits, key, found)
        return found

    def walk_admitted(
        self, state: tuple, data: np.ndarray, lengths: np.ndarray
    ) -> tuple[list[tuple], np.ndarray]:
        """Strings that stay inside the lexemes in progress move the lexer only: one
        vectorised lexer walk (the rows of the states reached, per byte position)."""
        node, s = state
        s = self._start(node) if s == _FRESH else s
        lexer = self.lexer

        def step(states: np.ndarray, column: np.ndarray) -> np.ndarray:
            distinct, index = np.unique(states, return_inverse=True)
            return lexer.rows(distinct)[index.ravel(), column]

        distinct, index = np.unique(walk_bytes(step, s, data, lengths), return_inverse=True)
        return [(node, t) for t in distinct.tolist()], index.ravel()

    def _lexeme_admits(self, lexeme: int, at: int, language: ByteDFA) -> bool:
        key = ("lexeme", lexeme, at, language)
        found = self._admits.get(key)
        if found is None:
            found = _remember(self._admits, key, self.lexer.lexeme_admits(lexeme, at, language))
        return found

    def native_masks(
        self, slices: VocabularySlices, special_ids: dict[str, int], eos_ids: list[int]
    ) -> NativeMasks | None:
        """Whole masks over the vocabulary of `slices` in native code (None: a Python lexer)."""
        if self._native is None:
            return None
        specials = self._special_tokens(special_ids)
        masks = self._native.masks(slices, specials, eos_ids, (_PIECES_KEPT, self.max_piece_bytes))
        return self._hand_out(masks)

    def native_steps(
        self, vocab: Vocabulary, special_ids: dict[str, int], eos_ids: list[int]
    ) -> NativeSteps | None:
        """Tokens of `vocab` read in native code (None: a Python lexer)."""
        if self._native is None:
            return None
        specials = self._special_tokens(special_ids)
        return self._hand_out(self._native.token_steps(vocab.native_texts, specials, eos_ids))

    def _hand_out(self, made):
        """`made` (native masks or steps), counted by `nbytes` while it lives."""
        with self._handed_lock:
            self._handed.add(made)
        return made

    def _special_tokens(self, special_ids: dict[str, int]) -> list[tuple[int, int]]:
        """(special lexeme, its token id) for each special terminal."""
        return [(i, special_ids[self.lexeme_table[i].special]) for i in sorted(self.specials)]

    def token_ids(self, state: tuple, trie: TokenTrie) -> np.ndarray:
        cache = self._pieces.get(trie)
        if cache is None:
            cache = self._pieces[trie] = (
                BoundedCache(_PIECES_KEPT, max_bytes=self.max_piece_bytes, size=_piece_bytes)
                if self._native is None
                else self._native.piece_cache(_PIECES_KEPT, self.max_piece_bytes)
            )
        if self._native is not None:
            return self._native.tokens(state, trie, cache)
        node, s = state
        s = self._start(node) if s == _FRESH else s
        roots = trie.children[trie.child_start[0] : trie.child_start[1]]
        found: list[np.ndarray] = []
        stack = [(node, ("root", s), s, roots, True)]
        while stack:
            node, key, start, starts, end_at_start = stack.pop()
            piece = cache.get(key)
            if piece is None:
                burn(1)  # the active fuel (the walk burns its own work)
                piece = cache[key] = self.lexer.walk(trie, start, starts, end_at_start)
            found.append(piece.tokens)
            for tags, children in piece.groups:
                after = self._end(node, tags)
                if after is None:
                    continue
                start = self._start(after)
                stack.append((after, (start, children.tobytes()), start, children, False))
        return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)

    # -- memory ---------------------------------------------------------------------------------

    def nbytes(self) -> int:
        """Estimated bytes this automaton holds and has grown (caches, parser, native masks)."""
        native = self._native
        if native is not None:
            held = self.lexer.nbytes + native.nbytes
        else:
            held = self.lexer.nbytes + self.parser.nbytes
        # a snapshot of the tries' caches (`data`: copied at once, as another thread adds one)
        for pieces in list(self._pieces.data.values()):
            if native is not None:
                held += native.piece_cache_nbytes(pieces)
            else:
                held += pieces.bytes + len(pieces) * _PY_PIECE_KEY
        with self._handed_lock:
            handed = list(self._handed)
        held += sum(made.nbytes for made in handed)
        held += self._admits.bytes + self._expected.bytes + self._forced.bytes
        if self._completions is not None:
            held += self._completions.nbytes
        dfas = {}  # built lexeme DFAs (a cached property: not built here), each once
        for lexeme in self.lexeme_table:
            dfa = lexeme.built_dfa
            if dfa is not None:
                dfas[id(dfa)] = dfa
        return held + sum(dfa.nbytes for dfa in dfas.values())


def _piece_bytes(piece: Piece) -> int:
    """What a piece holds, for its cache's byte bound: its arrays, and a little per object."""
    return 64 + piece.tokens.nbytes + sum(64 + nodes.nbytes for _, nodes in piece.groups)


class _Memo(dict):
    """A per-state memo, with the estimated bytes of its entries (`size` of each value)."""

    __slots__ = ("bytes", "size")

    def __init__(self, size):
        super().__init__()
        self.bytes = 0
        self.size = size


def _remember(cache: _Memo, key: tuple, value):
    """Store `value` for `key` (a state, or one with a language), emptying the cache when
    full (states are unbounded): past `_MAX_CACHED_STATES` entries or `_MEMO_BYTES`."""
    if key in cache:  # (another thread's, just stored)
        return value
    size = cache.size(value)
    if len(cache) >= _MAX_CACHED_STATES or cache.bytes + size > _MEMO_BYTES:
        cache.clear()
        cache.bytes = 0
    cache[key] = value
    cache.bytes += size
    return value
