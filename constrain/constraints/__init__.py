"""Constraints on a sequence, composed over the engine's Matcher with its own interface.

`Constraint` binds a grammar to a vocabulary and assembles each sequence's matcher: the token
automaton's `Matcher`, times the grammar's text check (`TextChecked`), times a token budget
(`Budgeted`). `ConstraintSpec` is what the user states (regex, choices, grammar, schema, type).
"""

from constrain.constraints.budget import Budgeted, CompletionPlans
from constrain.constraints.constraint import Constraint
from constrain.constraints.spec import ConstraintSpec, grammar_from
from constrain.constraints.text_check import TextChecked
from constrain.constraints.warmup import warm_up

__all__ = [
    "Budgeted",
    "CompletionPlans",
    "Constraint",
    "ConstraintSpec",
    "TextChecked",
    "grammar_from",
    "warm_up",
]
