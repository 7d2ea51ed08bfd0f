"""Regexes as minimal byte-level DFAs.

Pipeline: interegular parses the pattern (after a scan that rejects what an automaton cannot
express and names it with its position); a Thompson NFA over code-point sets is determinised
over the code-point intervals the regex distinguishes; each character transition is expanded
into UTF-8 byte ranges with shared continuation states; the result is pruned to reachable and
live states and minimised.

Invariants: state 0 is dead; every other state is reachable from the start state 1 and live
(some accepting state is reachable from it), so a byte walk that never hits 0 is always
completable. Limits on states, compile time and memory are explicit, checked by every stage,
and raise `RegexError`.

Modules, in the order data flows: `bytedfa` (the `ByteDFA` every stage produces), `nfa`
(Thompson construction), `subsets` (subset construction, lookaheads included), `minimize`
(pruning and Moore minimisation), `lowering` (UTF-8 expansion to bytes), then `products`
(intersection, union, difference), `constructors` (DFAs built without the parser) and `compile`
(`compile_regex`, its pipeline and cache); `budget` holds the work accounting they share.
"""

from constrain.engine.regex._limits import DEFAULT_MAX_MEMORY
from constrain.engine.regex._syntax import escaped, syntax_chars
from constrain.engine.regex.bytedfa import DEAD, ByteDFA
from constrain.engine.regex.compile import compile_regex
from constrain.engine.regex.constructors import (
    dfa_from_byte_classes,
    dfa_from_code_points,
    dfa_from_strings,
    dfa_from_table,
    quoted,
    repeat_unit,
)
from constrain.engine.regex.products import combine, is_empty_combination

__all__ = [
    "DEAD",
    "DEFAULT_MAX_MEMORY",
    "ByteDFA",
    "combine",
    "compile_regex",
    "dfa_from_byte_classes",
    "dfa_from_code_points",
    "dfa_from_strings",
    "dfa_from_table",
    "escaped",
    "is_empty_combination",
    "quoted",
    "repeat_unit",
    "syntax_chars",
]
