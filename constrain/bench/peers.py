"""Other engines run beside ours in the MaskBench harness: llguidance and XGrammar, if installed.

Each peer compiles a schema with its own JSON Schema compiler (whitespace to match the
harness's option, JSON Schema semantics rather than "strict" shortcuts) and is fed the same
token ids as ours, with the MaskBench protocol: a full mask (a packed bitmask) before every
token and after the last. Only the masks are timed; compile time is the schema to a matcher
ready for its first mask.
"""

from __future__ import annotations

import json
import time
from typing import Protocol

__all__ = [
    "PEERS",
    "PeerEngine",
    "PeerError",
    "PeerMatcher",
    "load_peers",
    "run_peer_instance",
]


class PeerError(Exception):
    """A peer refused a schema (or failed compiling it)."""


class PeerMatcher(Protocol):
    """One instance's walk through a peer's compiled schema."""

    def fill_mask(self) -> None: ...

    def consume(self, token: int) -> bool: ...

    def accepting(self) -> bool: ...


class PeerEngine(Protocol):
    """A peer engine bound to one tokenizer."""

    name: str

    def compile(self, schema: dict) -> object: ...

    def start(self, compiled: object) -> PeerMatcher: ...


def _compact(options: dict) -> bool:
    return options.get("whitespace", "compact") == "compact"


class _LLGuidanceMatcher:
    def __init__(self, matcher, n_vocab: int):
        import llguidance.numpy

        self.matcher = matcher
        self.bitmask = llguidance.numpy.allocate_token_bitmask(1, n_vocab)
        self._fill = llguidance.numpy.fill_next_token_bitmask

    def fill_mask(self) -> None:
        self._fill(self.matcher, self.bitmask)

    def consume(self, token: int) -> bool:
        return self.matcher.consume_token(token) and not self.matcher.is_error()

    def accepting(self) -> bool:
        return self.matcher.is_accepting()


class LLGuidanceEngine:
    """llguidance (Rust): `LLMatcher` over the schema's grammar; default slices."""

    name = "llguidance"

    def __init__(self, hf_tokenizer, n_vocab: int, options: dict):
        import llguidance
        import llguidance.hf

        self._llmatcher = llguidance.LLMatcher
        self.tokenizer = llguidance.hf.from_tokenizer(hf_tokenizer, n_vocab=n_vocab)
        self.n_vocab = n_vocab
        self.defaults = {"whitespace_flexible": not _compact(options)}

    def compile(self, schema: dict) -> object:
        grammar = self._llmatcher.grammar_from_json_schema(schema, defaults=self.defaults)
        matcher = self._llmatcher(self.tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise PeerError(matcher.get_error())
        return matcher

    def start(self, compiled) -> PeerMatcher:
        return _LLGuidanceMatcher(compiled.deep_copy(), self.n_vocab)


class _XGrammarMatcher:
    def __init__(self, compiled, n_vocab: int):
        import xgrammar

        self.matcher = xgrammar.GrammarMatcher(compiled)
        self.bitmask = xgrammar.allocate_token_bitmask(1, n_vocab)

    def fill_mask(self) -> None:
        self.matcher.fill_next_token_bitmask(self.bitmask)

    def consume(self, token: int) -> bool:
        return self.matcher.accept_token(token)

    def accepting(self) -> bool:
        return self.matcher.is_completed()


class XGrammarEngine:
    """XGrammar (C++): `compile_json_schema` without strict mode (JSON Schema's own rules for
    extra properties and items), one compiler thread, no compile cache."""

    name = "xgrammar"

    def __init__(self, hf_tokenizer, n_vocab: int, options: dict):
        import xgrammar

        info = xgrammar.TokenizerInfo.from_huggingface(hf_tokenizer, vocab_size=n_vocab)
        self.compiler = xgrammar.GrammarCompiler(info, max_threads=1, cache_enabled=False)
        self.n_vocab = n_vocab
        compact = _compact(options)
        self.layout = {"any_whitespace": not compact}
        if compact:
            self.layout["separators"] = (",", ":")

    def compile(self, schema: dict) -> object:
        try:
            return self.compiler.compile_json_schema(
                json.dumps(schema), strict_mode=False, **self.layout
            )
        except RuntimeError as exc:  # xgrammar reports unsupported schemas this way
            raise PeerError(str(exc)) from exc

    def start(self, compiled) -> PeerMatcher:
        return _XGrammarMatcher(compiled, self.n_vocab)


PEERS = {"llguidance": LLGuidanceEngine, "xgrammar": XGrammarEngine}


def load_peers(names: list[str], hf_tokenizer, n_vocab: int, options: dict) -> list[PeerEngine]:
    """The named peers that are installed, bound to `hf_tokenizer` (others are skipped)."""
    engines = []
    for name in names:
        try:
            engines.append(PEERS[name](hf_tokenizer, n_vocab, options))
        except ImportError:
            continue
    return engines


def run_peer_instance(
    engine: PeerEngine, compiled: object, tokens: list[int], masks: list[float] | None = None
) -> bool:
    """Feed `tokens`; with `masks`, a full mask is filled (and timed) before every token and
    after the last."""
    matcher = engine.start(compiled)
    for token in tokens:
        if masks is not None:
            t0 = time.perf_counter()
            matcher.fill_mask()
            masks.append(time.perf_counter() - t0)
        if not matcher.consume(token):
            return False
    if masks is not None:
        t0 = time.perf_counter()
        matcher.fill_mask()
        masks.append(time.perf_counter() - t0)
    return matcher.accepting()
