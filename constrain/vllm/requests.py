"""What a vLLM structured-output request asks for, as a `ConstraintSpec`, and its checked compile.

vLLM reduces every structured request (``response_format``, ``structured_outputs``, tool
calling) to one kind and one text: a JSON Schema, ``json_object``, a regex, a list of choices
(JSON text), a grammar (Lark or GBNF/EBNF: `grammar_from` reads either) or a structural tag
(XGrammar's format, which vLLM writes for tool calls: `structural_tag`). This module maps that pair, with the request's
whitespace options, to a spec, and compiles the spec's grammar under a `Fuel`, so a schema
that is unsupported or needs too much work fails with the keyword and where, in bounded work.
It knows nothing of vLLM's own types, so it is tested without vLLM installed.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from constrain.constraints.constraint import Constraint
from constrain.constraints.spec import ConstraintSpec, compiled_constraints
from constrain.engine.grammar import Grammar
from constrain.engine.vocab import Vocabulary
from constrain.errors import ConstrainError, UnsupportedSchemaError, WorkLimitError
from constrain.fuel import Fuel
from constrain.serve.conventions import DEFAULT_JSON_WHITESPACE, closed
from constrain.vllm.structural_tag import grammar_from_structural_tag

__all__ = ["COMPILE_FUEL", "KINDS", "Refused", "StructuredRequest", "compile_fuel"]

KINDS = ("json", "json_object", "regex", "choice", "grammar", "structural_tag")
COMPILE_FUEL = "CONSTRAIN_VLLM_COMPILE_FUEL"  # the environment variable that sets the budget
_DEFAULT_FUEL = 10_000_000  # units (about 1 us each): 5.5x what 99.9% of real schemas need


class Refused(ConstrainError, ValueError):
    """A structured-output request that cannot be served: `parameter` names the request field
    (``structured_outputs.json``, with the schema's JSON pointer when there is one)."""

    def __init__(self, message: str, parameter: str):
        super().__init__(message)
        self.parameter = parameter


def compile_fuel() -> int:
    """The work budget of one request's compile, in units: `COMPILE_FUEL` or 10M."""
    text = os.environ.get(COMPILE_FUEL, "")
    try:
        units = int(text) if text else _DEFAULT_FUEL
    except ValueError:
        raise Refused(f"{COMPILE_FUEL} must be a whole number of units, got {text!r}",
                      COMPILE_FUEL) from None  # fmt: skip
    if units <= 0:
        raise Refused(f"{COMPILE_FUEL} must be positive, got {units}", COMPILE_FUEL)
    return units


@dataclass(frozen=True)
class StructuredRequest:
    """One request's constraint as vLLM states it.

    Attributes:
        kind: one of `KINDS`.
        text: the schema, regex, choices (a JSON list), grammar text or structural tag (JSON)
            ("" for json_object).
        compact: ``disable_any_whitespace``: JSON without whitespace between tokens.
        whitespace_pattern: a regex for the whitespace between JSON tokens.
        closed_objects: ``disable_additional_properties``: objects admit only the properties
            they name unless they say otherwise.
    """

    kind: str
    text: str
    compact: bool = False
    whitespace_pattern: str | None = None
    closed_objects: bool = False

    @property
    def parameter(self) -> str:
        """The request field this constraint came from, as vLLM names it."""
        return f"structured_outputs.{self.kind}"

    def spec(self) -> ConstraintSpec:
        """The constraint as a spec (its `constraint(vocab)` compiles and caches it).

        Raises:
            Refused: an unknown kind, text that is not JSON where JSON is expected, or choices
                that are not a list of strings.
        """
        if self.kind == "regex":
            return ConstraintSpec(regex=self.text)
        if self.kind == "grammar":
            return ConstraintSpec(grammar=self.text)
        if self.kind == "choice":
            choices = self._json()
            if not isinstance(choices, list) or not all(isinstance(c, str) for c in choices):
                raise Refused("choice must be a list of strings", self.parameter)
            return ConstraintSpec(choices=choices)
        if self.kind == "structural_tag":
            grammar = grammar_from_structural_tag(self.text, whitespace=self._whitespace())
            return ConstraintSpec(grammar=grammar)
        if self.kind not in ("json", "json_object"):
            raise Refused(f"the constrain backend serves {', '.join(KINDS)}, not {self.kind}",
                          f"structured_outputs.{self.kind}")  # fmt: skip
        schema = {"type": "object"} if self.kind == "json_object" else self._json()
        if self.closed_objects:
            schema = closed(schema)
        return ConstraintSpec(schema=schema, schema_options={"whitespace": self._whitespace()})

    def constraint(self, vocab: Vocabulary) -> Constraint:
        """The constraint bound to `vocab`, kept by the vocabulary under the request's content
        (a structural tag too, whose grammar a spec would key by identity)."""
        if self.kind != "structural_tag":
            return self.spec().constraint(vocab)
        key = ("structural_tag", self.text, self._whitespace())
        return compiled_constraints(vocab).get_or_build(
            key, lambda: Constraint(self.spec().compile_grammar(), vocab)
        )

    def compile(self, fuel: Fuel) -> Grammar:
        """The spec's grammar, compiled under `fuel` (what a front end checks a request with).

        Raises:
            Refused: the constraint is malformed, unsupported, or needs more work than `fuel`;
                the message says what and where (a schema's keyword and JSON pointer).
        """
        try:
            with fuel.active():
                return self.spec().compile_grammar()
        except Refused:
            raise
        except WorkLimitError as exc:
            raise Refused(f"{self.parameter}: {exc}", self.parameter) from None
        except UnsupportedSchemaError as exc:
            pointer = (exc.pointer or "#").lstrip("#")
            raise Refused(str(exc), self.parameter + pointer) from None
        except ConstrainError as exc:
            raise Refused(f"{self.parameter}: {exc}", self.parameter) from None
        except RecursionError:
            raise Refused(f"{self.parameter} nests too deeply to be read",
                          self.parameter) from None  # fmt: skip

    def _json(self):
        try:
            return json.loads(self.text)
        except (ValueError, RecursionError) as exc:
            raise Refused(f"{self.parameter} is not JSON: {exc}", self.parameter) from None

    def _whitespace(self) -> str:
        if self.compact and self.whitespace_pattern is not None:
            raise Refused("at most one of disable_any_whitespace and whitespace_pattern",
                          "structured_outputs.whitespace_pattern")  # fmt: skip
        if self.compact:
            return "compact"
        return self.whitespace_pattern or DEFAULT_JSON_WHITESPACE
