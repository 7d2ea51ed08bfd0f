"""JSON Schema -> grammar IR (see `constrain.jsonschema.compiler`)."""

from constrain.jsonschema.compiler import WHITESPACE, compile_schema

__all__ = ["WHITESPACE", "compile_schema"]
