"""The token-level automata: what a constraint allows, for any prefix, as tokens.

Vocabulary and token trie, regex -> byte DFA, the grammar IR and its Lark front end, the
longest-match lexer, the Earley parser, vocabulary slices, and the Matcher. This layer imports
neither torch nor the JSON Schema front end nor anything above it.
"""

from constrain.engine.grammar import Grammar
from constrain.engine.matcher import Matcher, TokenAutomaton, TokenMatcher
from constrain.engine.vocab import TokenTrie, Vocabulary

__all__ = ["Grammar", "Matcher", "TokenAutomaton", "TokenMatcher", "TokenTrie", "Vocabulary"]
