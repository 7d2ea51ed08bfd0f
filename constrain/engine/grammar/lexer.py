"""The lexer: one byte DFA for all of a grammar's lexemes, with longest-match semantics.

At each point the parser allows a set of lexemes (plus the ignored ones); the lexer runs them
side by side. A lexer state is the tuple of the lexemes still alive, each with the state of its
own DFA: ``((lexeme id, DFA state), ...)``. What a state reads next depends on nothing else,
so one `Lexer` serves every set the parser asks for: a set is only a start state
(`start_of`), and sets that reach the same alive lexemes (after the opening quote of a key,
say) share the states, their rows and everything cached on them (mask pieces, completions).
A state is dead when every lexeme is dead, so every non-dead state can still complete some
lexeme (the lexeme DFAs are live).

Longest match: while some lexeme can consume the next byte, the lexer consumes it; a lexeme ends
only when no allowed lexeme can go on. Each state therefore carries the *tag*: the lexemes that
end there if the next byte cannot be consumed, filtered to the highest priority among them, a
keyword winning over the regexes it is a keyword of. `can_end` says before which bytes a tag may
end: a keyword not before a byte that would continue a word (`constrain.engine.grammar.keywords`).

Lazy construction. A JSON Schema grammar allows a distinct set of lexemes at nearly every
object position (the keys still allowed), and a walk reads a few states of each, so a state's
row of transitions is computed the first time it is read: sparse, from the byte classes each
alive lexeme can read (joint byte classes of all the lexemes keep rows short).
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import numpy as np

from constrain.engine.grammar.ir import Lexeme, LexemeDFA
from constrain.engine.grammar.keywords import word_continuations
from constrain.engine.regex import ByteDFA
from constrain.engine.regex.counted import CountedDFA
from constrain.engine.regex.products import joint_byte_classes
from constrain.engine.slices import admits
from constrain.engine.vocab import TokenTrie
from constrain.errors import GrammarError
from constrain.fuel import burn

__all__ = ["COUNTED_ADMITS_PAIRS", "ByteLexer", "Lexer", "Piece", "outgrows"]

MAX_LEXER_STATES = 200_000
COUNTED_ADMITS_PAIRS = 512  # pairs a slice check may visit when a lexeme counts characters
_STATE_BYTES, _ROW_BYTES = 320, 2_400  # a state's key and index entry; a row of 256 ints
_NOTHING = ((-1, 0),)  # the start state of an empty set of lexemes: it reads nothing


def outgrows(dfa: LexemeDFA, language: ByteDFA) -> bool:
    """Whether `language` has strings longer than a counted lexeme's bound (so it cannot
    admit them all): known without a search."""
    return isinstance(dfa, CountedDFA) and dfa.high is not None and language.longest() is None


class Piece(NamedTuple):
    """What a walk of the vocabulary trie inside the lexemes in progress found: the tokens
    read wholly inside them, and per set of lexemes ending (a tag's set) the trie nodes whose
    byte ended them (a new lexeme starts with that byte)."""

    tokens: np.ndarray
    groups: list[tuple[frozenset[int], np.ndarray]]


class ByteLexer(Protocol):
    """What the grammar automaton asks of a lexer (`Lexer` here, `NativeLexer` compiled).
    States are ints, 0 dead; a tag is the set of lexemes ending at a state (0: none)."""

    @property
    def n_states(self) -> int: ...

    def start_of(self, lexemes: frozenset[int]) -> int: ...

    def row(self, state: int) -> list[int]: ...

    def rows(self, states: np.ndarray) -> np.ndarray: ...

    def live_bytes(self, state: int) -> tuple[int, ...]: ...

    def key(self, state: int) -> tuple: ...

    def tag_of(self, state: int) -> int: ...

    def tag_set(self, tag: int) -> frozenset[int]: ...

    def ends_before(self, tag: int) -> np.ndarray: ...

    def walk(self, trie: TokenTrie, state: int, starts: np.ndarray, end_at_start: bool) -> Piece:
        """From `state`, read the trie subtrees of `starts` (each start's own byte first); a
        byte no lexeme can read ends the lexemes of the tag where it may end before it (at a
        start node only when `end_at_start`: a lexeme just started cannot end yet)."""

    def admits(self, state: int, language: ByteDFA) -> bool:
        """Every string of `language` keeps `state` live (no lexeme boundary involved)."""

    def lexeme_admits(self, lexeme: int, at: int, language: ByteDFA) -> bool:
        """Every string of `language` keeps lexeme `lexeme`'s own DFA live from its state `at`."""


class Lexer:
    """Product byte DFA of a grammar's lexemes (state 0 dead) with end-of-lexeme tags.

    Attributes:
        classes: the joint byte class of each byte (256 ints); rows are stored per class.
        tag: int32 per state discovered so far: index into `tag_sets` of the lexemes ending
            there (0: none). Read it afresh after stepping: it grows with the states.
        tag_sets: frozensets of lexeme ids; ``tag_sets[0]`` is empty.
        can_end: bool array (tag, byte): whether the lexemes of a tag end before that byte
            (never for tag 0; a keyword not before a byte that continues a word).
    """

    def __init__(self, table: list[Lexeme]):
        self._table = table
        self._with_bytes = [i for i, lx in enumerate(table) if lx.special is None]
        self.classes, representatives = joint_byte_classes([table[i].dfa for i in self._with_bytes])
        self._representatives = representatives.tolist()
        # per lexeme: its own byte class -> the joint classes inside it (built on first use)
        self._joint: dict[int, dict[int, list[int]]] = {}
        self._own_class: dict[int, np.ndarray] = {}  # per lexeme: its class of each joint class
        self._rows_table = np.zeros((64, len(self._representatives)), dtype=np.int32)
        self._done = [True]  # row computed (the dead state's is)
        self.tag = np.zeros(64, dtype=np.int32)
        self.tag_sets: list[frozenset[int]] = [frozenset()]
        self._tag_of: dict[frozenset[int], int] = {frozenset(): 0}
        self.can_end = np.zeros((8, 256), dtype=bool)  # rows beyond len(tag_sets) unused
        ids = {lx.name: i for i, lx in enumerate(table)}
        # per keyword: the ids of the regexes it is a keyword of (those in the table)
        self._owners = {
            i: frozenset(ids[n] for n in lx.keyword_of if n in ids)
            for i, lx in enumerate(table)
            if lx.keyword_of
        }
        self._combos: list[tuple] = [()]  # per state: ((lexeme id, DFA state), ...) alive
        self._index: dict[tuple, int] = {(): 0}
        self._rows: list[list[int] | None] = [None]
        self._live: list[tuple[int, ...] | None] = [None]
        self._starts: dict[frozenset[int], int] = {}
        # a counted lexeme's states run as deep as its bound: slice checks are cut short
        counted = any(isinstance(table[i].dfa, CountedDFA) for i in self._with_bytes)
        self._admits_cap = COUNTED_ADMITS_PAIRS if counted else None

    @property
    def nbytes(self) -> int:
        """The memory held (an estimate): its tables, and per state its key and the row it
        read, if any."""
        rows = len(self._rows) - self._rows.count(None)
        arrays = self._rows_table.nbytes + self.tag.nbytes + self.can_end.nbytes
        return arrays + len(self._combos) * _STATE_BYTES + rows * _ROW_BYTES

    @property
    def n_states(self) -> int:
        return len(self._combos)

    def start_of(self, lexemes: frozenset[int]) -> int:
        """The state where `lexemes` (ids of lexemes with bytes) may start."""
        found = self._starts.get(lexemes)
        if found is None:
            combo = tuple((i, self._table[i].dfa.start) for i in sorted(lexemes))
            found = self._starts[lexemes] = self._state(combo or _NOTHING)
        return found

    # -- reading transitions ------------------------------------------------------------------

    def rows(self, states: np.ndarray) -> np.ndarray:
        """The transitions of `states`, (len, 256)."""
        self._ensure(states)
        return self._rows_table[states][:, self.classes]

    def next_states(self, states: np.ndarray, data: np.ndarray) -> np.ndarray:
        """The state after byte `data[i]` from `states[i]` (0: dead), elementwise."""
        self._ensure(states)
        return self._rows_table[states, self.classes[data]]

    def row(self, state: int) -> list[int]:
        """The transitions of `state` as a Python list (cached: the byte walk's hot path)."""
        row = self._rows[state]
        if row is None:
            if not self._done[state]:
                self._compute(state)
            row = self._rows[state] = self._rows_table[state][self.classes].tolist()
        return row

    def live_bytes(self, state: int) -> tuple[int, ...]:
        """The bytes `state` can read (cached)."""
        found = self._live[state]
        if found is None:
            if not self._done[state]:
                self._compute(state)
            live = np.flatnonzero(self._rows_table[state][self.classes])
            found = self._live[state] = tuple(live.tolist())
        return found

    def admits(self, state: int, language: ByteDFA) -> bool:
        return admits(self.rows, state, language, self._admits_cap)

    def lexeme_admits(self, lexeme: int, at: int, language: ByteDFA) -> bool:
        dfa = self._table[lexeme].dfa
        if outgrows(dfa, language):
            return False
        return admits(dfa.rows, at, language, self._admits_cap)

    def key(self, state: int) -> tuple:
        """The (lexeme id, DFA state) pairs alive in `state`."""
        return tuple(pair for pair in self._combos[state] if pair[0] >= 0)

    def tag_of(self, state: int) -> int:
        return int(self.tag[state])

    def tag_set(self, tag: int) -> frozenset[int]:
        return self.tag_sets[tag]

    def ends_before(self, tag: int) -> np.ndarray:
        """The bytes before which the lexemes of `tag` may end (bool, 256)."""
        return self.can_end[tag]

    def walk(self, trie: TokenTrie, state: int, starts: np.ndarray, end_at_start: bool) -> Piece:
        """See `ByteLexer.walk`: level by level with numpy."""
        first = self.next_states(np.full(len(starts), state), trie.byte[starts])
        dead = first == 0
        ended_tags, ended_nodes = [], []
        if end_at_start:
            tag = self.tag[state]
            ends = dead & self.can_end[tag, trie.byte[starts]]
            ended_tags.append(np.full(int(ends.sum()), tag, dtype=np.int32))
            ended_nodes.append(starts[ends])
        nodes, states = starts[~dead], first[~dead]
        found = [trie.tokens_at(nodes)]
        while len(nodes):
            kids, owner = trie.expand(nodes)
            if not len(kids):
                break
            burn(1 + len(kids) // 64)  # a level of the trie, a few numpy passes
            st = states[owner]
            data = trie.byte[kids]
            nxt = self.next_states(st, data)
            dead = nxt == 0
            tags = self.tag[st]
            ends = dead & self.can_end[tags, data]
            if ends.any():
                ended_tags.append(tags[ends])
                ended_nodes.append(kids[ends])
            live = ~dead
            nodes, states = kids[live], nxt[live]
            found.append(trie.tokens_at(nodes))
        groups = []
        if ended_tags:
            tags_all, nodes_all = np.concatenate(ended_tags), np.concatenate(ended_nodes)
            for t in np.unique(tags_all).tolist():
                groups.append((self.tag_sets[t], nodes_all[tags_all == t]))
        return Piece(np.concatenate(found).astype(np.int32), groups)

    # -- construction -------------------------------------------------------------------------

    def _ensure(self, states: np.ndarray) -> None:
        done = self._done
        for state in set(states.tolist()):
            if not done[state]:
                self._compute(state)

    def _compute(self, state: int) -> None:
        """The row of `state`: for each byte class, the lexemes that can read it. Sparse: each
        lexeme contributes only the classes it can read from its state."""
        combo = self._combos[state]
        burn(1 + 2 * len(combo))  # the active fuel; nothing is kept before the row is done
        if len(combo) == 1 and combo[0][0] >= 0:  # one lexeme left: its own row, renumbered
            j, s = combo[0]
            own_next = [0] * len(self._joint_of(j))  # per own class of the lexeme
            for own, t in self._table[j].dfa.live_classes(s):
                own_next[own] = self._state(((j, t),))
            self._rows_table[state] = np.array(own_next, dtype=np.int32)[self._own_class[j]]
            self._done[state] = True
            return
        alive: list[list[tuple[int, int]]] = [[] for _ in self._representatives]
        for j, s in combo:
            if j < 0:
                continue
            joint = self._joint_of(j)
            for own, t in self._table[j].dfa.live_classes(s):
                for c in joint[own]:
                    alive[c].append((j, t))
        index = self._index
        out = [0] * len(alive)
        for c, pairs in enumerate(alive):
            if pairs:
                nxt = tuple(pairs)
                found = index.get(nxt)
                out[c] = found if found is not None else self._state(nxt)
        self._rows_table[state] = out
        self._done[state] = True

    def _joint_of(self, j: int) -> dict[int, list[int]]:
        """Lexeme `j`'s byte classes -> the joint classes they contain (the joint classes
        refine every lexeme's own)."""
        found = self._joint.get(j)
        if found is None:
            found = self._joint[j] = {}
            own = self._own_class[j] = self._table[j].dfa.byte_classes()[self._representatives]
            for c, o in enumerate(own.tolist()):
                found.setdefault(o, []).append(c)
        return found

    def _state(self, combo: tuple) -> int:
        """The number of state `combo`, added (with its tag) if new."""
        found = self._index.get(combo)
        if found is not None:
            return found
        state = len(self._combos)
        if state >= MAX_LEXER_STATES:
            names = sorted({self._table[j].name for j, _ in combo if j >= 0})
            raise GrammarError(
                f"the lexer exceeds {MAX_LEXER_STATES} states (reached with terminals "
                f"{', '.join(names[:8])}{', ...' if len(names) > 8 else ''})"
            )
        burn(1 + len(combo))
        if state >= len(self.tag):
            self._grow(2 * len(self.tag))
        self._index[combo] = state
        self._combos.append(combo)
        self._done.append(False)
        self._rows.append(None)
        self._live.append(None)
        # the lexemes that end here, filtered to the highest priority among them
        ending = [j for j, s in combo if j >= 0 and self._table[j].dfa.accepts(s)]
        if ending:
            best = max(self._table[j].priority for j in ending)
            tags = frozenset(j for j in ending if self._table[j].priority == best)
            beaten = [self._owners[j] for j in tags if j in self._owners]
            tags = tags.difference(*beaten)  # a keyword wins over its regexes on its text
            tag = self._tag_of.get(tags)
            if tag is None:
                tag = self._tag_of[tags] = len(self.tag_sets)
                self.tag_sets.append(tags)
                if tag >= len(self.can_end):
                    grown = np.zeros((2 * tag, 256), dtype=bool)
                    grown[:tag] = self.can_end
                    self.can_end = grown
                self.can_end[tag] = self._ends_before(tags)
            self.tag[state] = tag
        return state

    def _ends_before(self, tags: frozenset[int]) -> np.ndarray:
        """The bytes before which lexemes `tags` may end: any byte, but for a keyword none its
        regexes could read after it (it would split a word)."""
        blocked = np.zeros(256, dtype=bool)
        for j in tags:
            owners = self._owners.get(j)
            if owners:
                words = [self._table[i].dfa for i in sorted(owners)]
                blocked |= word_continuations(self._table[j].dfa, words)
        return ~blocked

    def _grow(self, size: int) -> None:
        for name in ("_rows_table", "tag"):
            old = getattr(self, name)
            new = np.zeros((size, *old.shape[1:]), dtype=old.dtype)
            new[: len(old)] = old
            setattr(self, name, new)

    def __repr__(self) -> str:
        return f"Lexer(lexemes={len(self._table)}, states={self.n_states})"
