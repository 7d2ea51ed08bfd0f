"""The exception hierarchy: every error the library raises derives from `ConstrainError`.

Errors carry the location of the problem (the regex position, the grammar rule, the JSON
pointer) so that a user can fix their input without reading our source.
"""

from __future__ import annotations


class ConstrainError(Exception):
    """Base class of every error raised by `constrain`."""


class RegexError(ConstrainError, ValueError):
    """A regex is malformed, uses an unsupported construct, or exceeds a compile limit.

    Attributes:
        reason: what is wrong, without the position and pattern.
        pattern: the regex source.
        position: character offset of the offending construct, or None when the error is global
            (for example a state-count limit).
    """

    def __init__(self, message: str, pattern: str, position: int | None = None):
        where = f" at position {position}" if position is not None else ""
        super().__init__(f"{message}{where} in regex {pattern!r}")
        self.reason = message
        self.pattern = pattern
        self.position = position


class GrammarError(ConstrainError, ValueError):
    """A grammar is malformed, names an unknown rule, or has an empty language."""


class EmptyLanguageError(GrammarError):
    """A grammar, regex or schema is well formed but admits no text: nothing could be generated."""


class UnsupportedSchemaError(ConstrainError, ValueError):
    """A JSON Schema uses a construct the compiler cannot express exactly.

    Attributes:
        keyword: the offending keyword.
        pointer: JSON pointer of the schema location that holds it.
    """

    def __init__(self, message: str, keyword: str | None = None, pointer: str = ""):
        super().__init__(f"{message} (keyword {keyword!r} at {pointer or '#'})")
        self.keyword = keyword
        self.pointer = pointer


class SchemaError(UnsupportedSchemaError):
    """A JSON Schema is invalid: not JSON, or a keyword whose value has the wrong type (a
    string where a list is expected, say). `keyword` and `pointer` say where."""


class InvalidTokenError(ConstrainError, ValueError):
    """A token was fed to a Matcher that does not keep the output completable."""


class VocabularyError(ConstrainError, ValueError):
    """The vocabulary cannot express what a constraint requires (no token fits a reachable state)."""


class ModelLoadError(ConstrainError, RuntimeError):
    """A model could not be loaded (missing bundled package, bad path, offline Hub id)."""


class ConfigError(ConstrainError, ValueError):
    """An option or setting is invalid: a decoding option, a processor's parameter, a saved
    sampler state file. The message names the option (or file) and the value."""


class ArgumentTypeError(ConfigError, TypeError):
    """An argument is the wrong kind of object: a non-processor in a processor stack, a
    non-formula in model arithmetic."""


class AnnotationError(ConstrainError, TypeError):
    """A Python type has no JSON Schema (`Grammar.from_type`, a `@cn.function`'s return
    annotation), or a `@cn.function` is defined without what it needs (a return annotation,
    a docstring template whose fields are its parameters)."""


class ContextLengthError(ConstrainError, ValueError):
    """A prompt (with the tokens asked for) does not fit in the model's context window.

    Attributes:
        prompt_tokens: the prompt's length in tokens.
        max_tokens: the tokens asked for after it.
        context_length: the model's context window in tokens.
    """

    def __init__(self, message: str, prompt_tokens: int, max_tokens: int, context_length: int):
        super().__init__(message)
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.context_length = context_length


class WorkLimitError(ConstrainError, ValueError):
    """Preparing an input (compiling it, planning its completions) needs more work than its
    `Fuel` allows. The same input always needs the same work, so it fails the same way on an
    idle and on a loaded machine.

    Attributes:
        limit: the budget's name (the option that raises it).
        units: the budget, in work units.
        stage: what was being done when it ran out.
    """

    def __init__(self, message: str, limit: str, units: int, stage: str):
        super().__init__(message)
        self.limit = limit
        self.units = units
        self.stage = stage


class Abandoned(ConstrainError, RuntimeError):
    """Work was stopped from outside before it finished (its client went away, the server
    shuts down, or its wall-clock backstop passed); `reason` says which."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason
