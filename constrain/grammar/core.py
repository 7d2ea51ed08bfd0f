"""The `Grammar` value: what text is allowed, independent of any tokenizer."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from constrain.automaton import Automaton, DFAAutomaton, TextCheck
from constrain.errors import GrammarError
from constrain.grammar.cfg import CFGAutomaton
from constrain.grammar.ir import GrammarIR
from constrain.grammar.lark_frontend import ir_from_lark, read_lark
from constrain.regex import ByteDFA, compile_regex, dfa_from_strings


class Grammar:
    """A constraint on text, before it is bound to a vocabulary.

    Build one with a constructor (`from_regex`, `from_choices`, `from_lark`, `from_ir`); bind it with
    ``constrain.Constraint(grammar, vocab)``. Grammars are immutable and cheap to share.
    """

    def __init__(self, automaton: Automaton, *, kind: str, source: str):
        self._automaton = automaton
        self.kind = kind
        self.source = source
        self.ir: GrammarIR | None = None
        # what the automaton cannot say, checked on the text beside it (see `TextCheck`)
        self.check: TextCheck | None = None

    @classmethod
    def from_regex(
        cls, pattern: str, *, max_states: int = 100_000, timeout: float = 10.0
    ) -> Grammar:
        """Texts that fully match `pattern` (see docs/regex.md for the supported syntax).

        Raises:
            RegexError: the pattern is malformed, unsupported, or exceeds a limit.
            GrammarError: the regex matches nothing.
        """
        dfa = compile_regex(pattern, max_states=max_states, timeout=timeout)
        return cls._from_dfa(dfa, kind="regex", source=pattern)

    @classmethod
    def from_choices(cls, choices: Iterable[str | bytes]) -> Grammar:
        """Exactly one of `choices` (a finite set of strings)."""
        items = list(choices)
        if not items:
            raise GrammarError("from_choices needs at least one choice")
        bad = [c for c in items if not isinstance(c, (str, bytes))]
        if bad:
            raise GrammarError(
                f"choices must be str or bytes, got {type(bad[0]).__name__}: {bad[0]!r}"
            )
        return cls._from_dfa(dfa_from_strings(items), kind="choices", source=repr(items))

    @classmethod
    def from_lark(
        cls,
        grammar: str | os.PathLike,
        *,
        start: str = "start",
        special_tokens: Mapping[str, str] | None = None,
    ) -> Grammar:
        """A Lark grammar, given as text or as the path of a ``.lark`` file.

        Any context-free grammar works (ambiguous, left-recursive, with empty rules); see
        docs/grammars.md for the lexing semantics and what is supported.

        Args:
            grammar: Lark grammar text, or a path to a file holding it.
            start: the start rule.
            special_tokens: ``%declare``d terminal -> special token text, e.g.
                ``{"EOT": "<|im_end|>"}``.

        Raises:
            GrammarError: lark's message (with line and column) for a malformed grammar, an
                unknown rule or terminal, an unsupported terminal pattern, or an empty language.
        """
        import_paths: list[str] = []
        if isinstance(grammar, os.PathLike) or (
            isinstance(grammar, str) and "\n" not in grammar and grammar.endswith(".lark")
        ):
            name = str(grammar)
            grammar, import_paths = read_lark(grammar)
            source = name
        else:
            source = "<grammar>"
        ir = ir_from_lark(
            grammar,
            start=start,
            import_paths=import_paths,
            special_tokens=special_tokens,
            source=source,
        )
        return cls.from_ir(ir, kind="lark", source=source)

    @classmethod
    def from_json_schema(
        cls,
        schema,
        *,
        whitespace: str | None = "compact",
        indent: int = 2,
        any_order: bool = False,
        lenient: bool = False,
        draft: str | None = None,
        timeout: float = 10.0,
    ) -> Grammar:
        """The JSON documents valid under `schema` (a dict, a bool or JSON text).

        Strings are written in one encoding: characters raw (UTF-8), escapes only where JSON
        requires them (``\\"``, ``\\\\``, control characters), as ``json.dumps(...,
        ensure_ascii=False)`` writes them. Numbers are written without an exponent.

        Args:
            whitespace: "compact", "default" (bounded, admits `json.dumps` output), "pretty"
                (exactly ``json.dumps(value, indent=indent)``) or a regex.
            any_order: object members in any order (default: schema order, then extra keys).
            lenient: drop what cannot be expressed, with a warning, instead of raising.
            draft: read the schema in this dialect ("2020-12", "2019-09", "draft-07",
                "draft-06", "draft-04") whatever its ``$schema`` says.
            timeout: limit on the compilation, in seconds.

        Raises:
            UnsupportedSchemaError: a keyword that cannot be expressed exactly, named with its
                JSON pointer (strict mode), or the compilation took longer than `timeout`.
        """
        from constrain.jsonschema import compile_schema

        ir, check = compile_schema(
            schema,
            whitespace=whitespace,
            indent=indent,
            any_order=any_order,
            lenient=lenient,
            draft=draft,
            timeout=timeout,
        )
        # JSON separates every value by punctuation, and a string chunk is a fixed length:
        # no lexeme can be trapped by longest match, so the lint is skipped
        grammar = cls.from_ir(ir, kind="json_schema", lint=False)
        grammar.check = check
        return grammar

    @classmethod
    def from_type(cls, annotation, **options) -> Grammar:
        """The JSON documents of the values of a Python type: pydantic models, dataclasses,
        TypedDict, `Literal`, `Enum`, `list[...]`, `tuple[...]`, `dict[str, ...]`, `Optional`,
        unions and `Annotated` constraints. `options` are those of `from_json_schema`.

        Raises:
            TypeError: an annotation with no JSON Schema counterpart.
        """
        from constrain.jsonschema.types import schema_from_type

        return cls.from_json_schema(schema_from_type(annotation), **options)

    @classmethod
    def from_ir(
        cls, ir: GrammarIR, *, kind: str = "ir", source: str | None = None, lint: bool = True
    ) -> Grammar:
        """A grammar from the IR (the target of every front end); validated here, and checked
        for terminals that longest-match lexing could never end unless `lint` is off (for
        generated grammars that separate their lexemes by construction)."""
        ir = ir.validated()
        grammar = cls(CFGAutomaton(ir, lint=lint), kind=kind, source=source or ir.source)
        grammar.ir = ir
        return grammar

    @classmethod
    def _from_dfa(cls, dfa: ByteDFA, *, kind: str, source: str) -> Grammar:
        if dfa.is_empty():
            raise GrammarError(f"the {kind} {source!r} matches no text: its language is empty")
        return cls(DFAAutomaton(dfa), kind=kind, source=source)

    @property
    def automaton(self) -> Automaton:
        """The byte-level automaton that recognises this grammar's language."""
        return self._automaton

    def matches(self, text: str | bytes) -> bool:
        """Whether the whole of `text` is in the language."""
        data = text.encode("utf-8") if isinstance(text, str) else text
        a = self._automaton
        state = a.step(a.start, data)
        if state is None or not a.accepting(state):
            return False
        return self.check is None or self.check.feed(self.check.start, data) is not None

    def __repr__(self) -> str:
        src = self.source if len(self.source) <= 60 else self.source[:57] + "..."
        return f"Grammar.{'from_' + self.kind}({src})"
