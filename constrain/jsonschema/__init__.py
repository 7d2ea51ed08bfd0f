"""JSON Schema -> grammar IR (see `constrain.jsonschema.compiler`), and Python types -> JSON
Schema (`schema_from_type`)."""

from constrain.jsonschema.compiler import WHITESPACE, compile_schema
from constrain.jsonschema.types import schema_from_type

__all__ = ["WHITESPACE", "compile_schema", "schema_from_type"]
