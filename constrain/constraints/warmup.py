"""Per-vocabulary work done once, before the first constraint: the vocabulary's warm-up.

Every compile and mask reads structures built once per vocabulary: the token trie and its
native copy, the slices of plain-text tokens (engine/slices.py), the duplicate-key check's
byte table in both spelling modes (jsonschema/checks.py), and the modules a JSON Schema or a
regex compile imports. Built lazily, the first constraint of a process paid for all of them
(1.2 s on a 262k vocabulary) before its first token. `warm_up` builds them when a model is
served or a `Generator` is made, so that time is the vocabulary's init, not a request's.
"""

from __future__ import annotations

import contextlib
import time

from constrain.constraints.constraint import Constraint
from constrain.engine.slices import slices_of
from constrain.engine.vocab import Vocabulary
from constrain.errors import ConstrainError
from constrain.jsonschema.grammar import Grammar

__all__ = ["warm_up"]

# a schema whose compile reaches the key check, strings, numbers and the slices
_SCHEMA = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "number"}}}


def warm_up(vocab: Vocabulary) -> float:
    """Build `vocab`'s shared structures (once; threads that ask meanwhile wait for it) and
    return the seconds that first call took."""
    return vocab.derived.get_or_build(("warmed up",), lambda: _warm_up(vocab))


def _warm_up(vocab: Vocabulary) -> float:
    started = time.perf_counter()
    vocab.trie.native  # noqa: B018  (built on first use)
    slices_of(vocab).native  # noqa: B018
    grammars = [Grammar.from_json_schema(_SCHEMA, spellings=s) for s in ("canonical", "all")]
    for grammar in [*grammars, Grammar.from_regex(r"[a-z]+( [0-9]+)?")]:
        # a toy vocabulary may spell no JSON: what it has is built all the same
        with contextlib.suppress(ConstrainError):
            Constraint(grammar, vocab).start().bitmask()
    return time.perf_counter() - started
