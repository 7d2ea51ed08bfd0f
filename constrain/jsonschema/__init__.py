"""JSON Schema -> grammar IR (see `constrain.jsonschema.compiler`), and Python types -> JSON
Schema (`schema_from_type`); `Layout`, the whitespace a grammar admits around punctuation."""

from constrain.jsonschema.compiler import WHITESPACE, compile_schema
from constrain.jsonschema.layout import Layout
from constrain.jsonschema.types import schema_from_type

__all__ = ["WHITESPACE", "Layout", "compile_schema", "schema_from_type"]
