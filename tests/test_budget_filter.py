"""A token budget's filter (`CompletionPlans.owed_after`) computed by vectorised walks agrees
with its definition: for each allowed token, the shortest completion after stepping it alone."""

from __future__ import annotations

import random

import numpy as np
import pytest

from constrain import schemas
from constrain.constraints.budget import _UNKNOWN, CompletionPlans
from constrain.constraints.spec import ConstraintSpec


def _definition(automaton, plans, state) -> np.ndarray:
    owed = np.full(automaton.vocab.size, _UNKNOWN, dtype=np.int32)
    for token in np.flatnonzero(automaton.mask_for(state)).tolist():
        if token in automaton.eos:
            owed[token] = 0
            continue
        plan = plans.completion(automaton.step(state, token))
        if plan is not None:
            owed[token] = plan[0]
    return owed


@pytest.mark.parametrize(
    "spec",
    [
        ConstraintSpec(schema=schemas.load("person_record"),
                       schema_options={"whitespace": "natural"}),
        ConstraintSpec(regex=r"[a-z]{2,30}( [0-9]{1,4}){0,3}\.?"),
        ConstraintSpec(grammar="sql"),
    ],
    ids=["schema", "regex", "lark"],
)  # fmt: skip
def test_owed_after_agrees_with_its_definition(spec, smollm_vocab):
    automaton = spec.constraint(smollm_vocab).token_automaton
    fast, slow = CompletionPlans(automaton), CompletionPlans(automaton)
    rng = random.Random(0)
    state = automaton.automaton.start
    for _ in range(20):
        assert np.array_equal(fast.owed_after(state), _definition(automaton, slow, state))
        allowed = np.flatnonzero(automaton.mask_for(state))
        allowed = allowed[~np.isin(allowed, automaton.eos_array)]
        if not len(allowed):
            break
        state = automaton.step(state, int(rng.choice(allowed)))
