"""The `Grammar` value: what text is allowed, independent of any tokenizer."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from constrain.engine.automaton import Automaton, DFAAutomaton, TextCheck
from constrain.engine.grammar.cfg import CFGAutomaton
from constrain.engine.grammar.gbnf import ir_from_gbnf
from constrain.engine.grammar.ir import GrammarIR
from constrain.engine.grammar.lark_frontend import ir_from_lark, read_lark
from constrain.engine.regex import DEFAULT_MAX_MEMORY, ByteDFA, compile_regex, dfa_from_strings
from constrain.errors import EmptyLanguageError, GrammarError


class Grammar:
    """A constraint on text, before it is bound to a vocabulary.

    Build one with a constructor (`from_regex`, `from_choices`, `from_lark`, `from_lark_file`,
    `from_gbnf`, `from_ir`); bind it with ``constrain.Constraint(grammar, vocab)``. Grammars are
    immutable and cheap to share.
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
        cls,
        pattern: str,
        *,
        max_states: int = 100_000,
        timeout: float = 10.0,
        max_memory: int = DEFAULT_MAX_MEMORY,
    ) -> Grammar:
        """Texts that fully match `pattern` (see docs/regex.md for the supported syntax and
        the limits: states, seconds, bytes).

        Raises:
            RegexError: the pattern is malformed, unsupported, or exceeds a limit.
            GrammarError: the regex matches nothing.
        """
        dfa = compile_regex(pattern, max_states=max_states, timeout=timeout, max_memory=max_memory)
        return cls._from_dfa(dfa, kind="regex", source=pattern)

    @classmethod
    def from_choices(cls, choices: Iterable[str | bytes]) -> Grammar:
        """Exactly one of `choices` (a finite set of strings). One string is not a list of
        choices (it would be read as its characters): pass ``[text]``."""
        if isinstance(choices, (str, bytes)):
            raise GrammarError(
                f"choices must be a list of strings, not one string ({choices!r:.60}): "
                f"pass [{choices!r:.60}] for that one choice"
            )
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
        text: str,
        *,
        start: str = "start",
        special_tokens: Mapping[str, str] | None = None,
        import_paths: Sequence[str | os.PathLike] = (),
        timeout: float = 10.0,
    ) -> Grammar:
        """A Lark grammar given as text: parsed, never read from a file, whatever the string
        looks like (`from_lark_file` reads one), so untrusted text is safe to pass.

        Any context-free grammar works (ambiguous, left-recursive, with empty rules); see
        docs/grammars.md for the lexing semantics and what is supported.

        Args:
            text: the Lark grammar.
            start: the start rule.
            special_tokens: ``%declare``d terminal -> special token text, e.g.
                ``{"EOT": "<|im_end|>"}``.
            import_paths: directories ``%import`` may read from; without them it reads only
                the grammar library (``%import json (value)``) and lark's grammars
                (``%import common.WS``).
            timeout: seconds the compilation may take (lark's loading and the terminals).

        Raises:
            GrammarError: lark's message (with line and column) for a malformed grammar, an
                unknown rule or terminal, an ``%import`` found nowhere it may look, an
                unsupported terminal pattern, a compile limit, or an empty language.
        """
        if not isinstance(text, str):
            hint = (
                f"; to read the file {os.fspath(text)!r}, use Grammar.from_lark_file"
                if isinstance(text, os.PathLike)
                else ""
            )
            raise GrammarError(
                f"Grammar.from_lark takes grammar text (a str), got {type(text).__name__}{hint}"
            )
        try:
            ir = ir_from_lark(
                text,
                start=start,
                import_paths=import_paths,
                special_tokens=special_tokens,
                timeout=timeout,
            )
        except GrammarError as exc:
            if "\n" in text or not text.strip().endswith(".lark"):
                raise
            raise GrammarError(
                f"{exc} (the text {text.strip()!r} is parsed as a grammar, not read as a file: "
                f"use Grammar.from_lark_file to read one)"
            ) from None
        return cls.from_ir(ir, kind="lark", source="<grammar>")

    @classmethod
    def from_lark_file(
        cls,
        path: str | os.PathLike,
        *,
        start: str = "start",
        special_tokens: Mapping[str, str] | None = None,
        import_paths: Sequence[str | os.PathLike] = (),
        timeout: float = 10.0,
    ) -> Grammar:
        """The Lark grammar in the file `path` (UTF-8). Its ``%import``s look in the file's
        directory, then `import_paths`, the grammar library and lark's grammars; the other
        arguments are `from_lark`'s.

        Raises:
            GrammarError: the file cannot be read (named), or as `from_lark`.
        """
        path = Path(path)
        text = read_lark(path)
        try:
            ir = ir_from_lark(
                text,
                start=start,
                import_paths=[path.parent, *import_paths],
                special_tokens=special_tokens,
                source=str(path),
                timeout=timeout,
            )
            return cls.from_ir(ir, kind="lark", source=str(path))
        except GrammarError as exc:
            raise GrammarError(f"grammar file {str(path)!r}: {exc}") from exc.__cause__

    @classmethod
    def from_gbnf(cls, text: str, *, start: str = "root", timeout: float = 10.0) -> Grammar:
        """A GBNF grammar (llama.cpp's format) given as text; never reads a file.

        The language is exactly the GBNF's (a grammar over characters: any derivation counts);
        token references ``<text>`` and ``<[id]>`` name special tokens of the vocabulary the
        grammar is bound to. See docs/grammars.md#gbnf and `constrain.engine.grammar.gbnf`.

        Args:
            text: the grammar.
            start: the start rule.
            timeout: seconds the parse and translation may take.

        Raises:
            GrammarError: a syntax error (what, with its line and column), an undefined rule,
                no start rule, a token negation ``!<...>`` (not expressible over text), a
                limit (repetition bound, rule count, nesting, timeout), or an empty language.
        """
        if not isinstance(text, str):
            raise GrammarError(
                f"Grammar.from_gbnf takes grammar text (a str), got {type(text).__name__}"
            )
        ir = ir_from_gbnf(text, start=start, timeout=timeout)
        return cls.from_ir(ir, kind="gbnf", source="<grammar>")

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
            raise EmptyLanguageError(f"the {kind} {source!r} matches no text: its language is empty")
        return cls(DFAAutomaton(dfa), kind=kind, source=source)

    def with_engine(self, engine: str) -> Grammar:
        """This grammar with its automaton in `engine`: "native" (the compiled core) or
        "python" (the reference; see `constrain.engine.engines`)."""
        if self.ir is None:
            automaton = DFAAutomaton(self._automaton.dfa, engine=engine)
        else:
            automaton = CFGAutomaton(self.ir, lint=False, engine=engine)
        copy = Grammar(automaton, kind=self.kind, source=self.source)
        copy.ir = self.ir
        copy.check = None if self.check is None else self.check.with_engine(engine)
        return copy

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
