"""`generate()`: constrained generation with a language model in one call."""

from __future__ import annotations

import json
import os
import random
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from constrain.errors import ConstrainError
from constrain.grammar import Grammar
from constrain.matcher import Constraint
from constrain.samplers import sample_lcd
from constrain.vocab import Vocabulary

__all__ = ["generate", "GenerationResult", "GenerationStats"]


@dataclass
class GenerationStats:
    """Where the time went, in seconds."""

    prefill_s: float = 0.0
    token_s: list[float] = field(default_factory=list)  # wall time of each decoding step
    constraint_s: float = 0.0  # masks, checks and matcher updates
    compile_s: float = 0.0  # grammar compilation and binding to the vocabulary
    total_s: float = 0.0

    @property
    def tokens_per_s(self) -> float:
        spent = sum(self.token_s)
        return len(self.token_s) / spent if spent else 0.0


@dataclass
class GenerationResult:
    """The outcome of `generate()`.

    Attributes:
        text: the generated text (EOS excluded).
        tokens: the generated token ids (EOS excluded).
        finish_reason: "stop" (the constraint accepted and generation ended) or "length"
            (`max_tokens` ran out first).
        complete: True when the text is in the constraint's language; a "length" result is
            marked incomplete, never silently invalid.
        value: for `schema=` and `type=`, the parsed JSON value (None when incomplete).
        log_weight: sum over steps of log Z, the log mass the constraint allowed (the LCD
            importance weight).
    """

    text: str
    value: Any
    tokens: list[int]
    finish_reason: str
    complete: bool
    log_weight: float
    stats: GenerationStats

    def __str__(self) -> str:
        return self.text


_constraint_cache: weakref.WeakKeyDictionary[Vocabulary, dict[tuple, Constraint]] = (
    weakref.WeakKeyDictionary()
)


def _as_grammar(grammar: Grammar | str | os.PathLike) -> Grammar:
    """A Grammar from a Grammar, a library grammar name, a ``.lark`` path, or Lark text."""
    from constrain import grammars

    if isinstance(grammar, Grammar):
        return grammar
    if isinstance(grammar, os.PathLike):
        return Grammar.from_lark(grammar)
    if not isinstance(grammar, str):
        raise TypeError(
            f"grammar= expects a Grammar, a library name, a path or Lark text, got {type(grammar).__name__}"
        )
    if grammar in grammars.names():
        return grammars.load(grammar)
    return Grammar.from_lark(grammar)


def _constraint(
    vocab: Vocabulary, regex, choices, grammar, schema, type_, schema_options: dict
) -> Constraint | None:
    given = {
        name: value
        for name, value in (
            ("regex", regex),
            ("choices", choices),
            ("grammar", grammar),
            ("schema", schema),
            ("type", type_),
        )
        if value is not None
    }
    if len(given) > 1:
        raise ValueError(f"pass at most one constraint, got {', '.join(f'{k}=' for k in given)}")
    if not given:
        return None
    (kind, spec), = given.items()
    if kind == "grammar":
        spec = _as_grammar(spec)
        key = ("grammar", id(spec))
    elif kind == "schema":
        key = ("schema", json.dumps(spec, sort_keys=True), _options_key(schema_options))
    elif kind == "choices":
        spec = tuple(spec)
        key = ("choices", spec)
    else:
        key = (kind, spec, _options_key(schema_options) if kind == "type" else ())
    per_vocab = _constraint_cache.setdefault(vocab, {})
    cached = per_vocab.get(key)
    if cached is not None and (kind != "grammar" or cached.grammar is spec):
        return cached
    builders = {
        "grammar": lambda: spec,
        "regex": lambda: Grammar.from_regex(spec),
        "choices": lambda: Grammar.from_choices(spec),
        "schema": lambda: Grammar.from_json_schema(spec, **schema_options),
        "type": lambda: Grammar.from_type(spec, **schema_options),
    }
    constraint = Constraint(builders[kind](), vocab)
    per_vocab[key] = constraint
    return constraint


def _options_key(options: dict) -> tuple:
    return tuple(sorted(options.items()))


def generate(
    model,
    prompt: str | Sequence[dict],
    *,
    regex: str | None = None,
    choices: Sequence[str] | None = None,
    grammar: Grammar | str | os.PathLike | None = None,
    schema: dict | bool | str | None = None,
    type: Any = None,
    schema_options: Mapping[str, Any] | None = None,
    max_tokens: int = 256,
    temperature: float = 1.0,
    greedy: bool = False,
    seed: int | None = None,
    chat: bool | None = None,
    system: str | None = None,
) -> GenerationResult:
    """Generate text from `model` for `prompt` that satisfies the given constraint.

    Args:
        model: a loaded model (`constrain.load_model()`).
        prompt: the user message (or a list of chat messages); the chat template is applied
            when the tokenizer has one, unless `chat=False`.
        regex / choices / grammar / schema / type: the constraint (at most one; none means
            free text). `grammar` is a `Grammar`, a library grammar name ("json", "sql", ...), a
            ``.lark`` path or Lark grammar text; `schema` a JSON Schema (dict, bool or JSON
            text); `type` a Python type (`Grammar.from_type`).
        schema_options: options of `Grammar.from_json_schema` (`whitespace`, `any_order`, ...)
            for `schema` and `type`.
        max_tokens: generation stops after this many tokens; if the constraint has not accepted
            by then, `finish_reason == "length"` and `complete` is False.
        temperature: softmax temperature; `greedy=True` takes the most likely allowed token.
        seed: makes sampling reproducible.

    Returns:
        A `GenerationResult` with the text, tokens, finish reason, weight and timings.
    """
    t_start = time.perf_counter()
    stats = GenerationStats()
    vocab: Vocabulary = model.vocab
    options = dict(schema_options or {})
    constraint = _constraint(vocab, regex, choices, grammar, schema, type, options)
    stats.compile_s = time.perf_counter() - t_start
    matcher = constraint.start() if constraint is not None else None

    generator = torch.Generator(device=model.device)
    generator.manual_seed(seed if seed is not None else random.getrandbits(63))
    eos = set(vocab.eos_ids)
    not_text = torch.ones(vocab.size, dtype=torch.bool)
    not_text[torch.as_tensor(vocab.text_token_ids)] = False
    free_mask = ~not_text
    free_mask[list(eos)] = True
    free_mask = free_mask.to(model.device)
    masks_on_device: dict = {}

    t0 = time.perf_counter()
    stream = model.start(model.encode_prompt(prompt, chat=chat, system=system))
    stats.prefill_s = time.perf_counter() - t0

    tokens: list[int] = []
    log_weight = 0.0
    finish_reason = "length"
    for _ in range(max_tokens):
        t_step = time.perf_counter()
        if matcher is not None and matcher.done():
            finish_reason = "stop"  # only EOS can follow: no need to ask the model
            break
        logprobs = model.logprobs([stream])[0]
        tc = time.perf_counter()
        if matcher is None:
            mask = free_mask
        else:
            state = matcher.state
            mask = masks_on_device.get(state)
            if mask is None:
                mask = torch.from_numpy(matcher.mask().copy()).to(model.device)
                masks_on_device[state] = mask
        stats.constraint_s += time.perf_counter() - tc
        token, log_z = sample_lcd(
            logprobs, mask, temperature=temperature, greedy=greedy, generator=generator
        )
        log_weight += log_z
        tc = time.perf_counter()
        if matcher is not None:
            matcher.advance(token)
        stats.constraint_s += time.perf_counter() - tc
        stats.token_s.append(time.perf_counter() - t_step)
        if token in eos:
            finish_reason = "stop"
            break
        tokens.append(token)
        model.append(stream, token)

    complete = matcher is None or matcher.finished() or matcher.accepting()
    if finish_reason == "stop" and not complete:
        raise ConstrainError("internal error: generation stopped in a non-accepting state")
    stats.total_s = time.perf_counter() - t_start
    text = vocab.decode(tokens)
    is_json = schema is not None or type is not None
    return GenerationResult(
        text=text,
        value=json.loads(text) if is_json and complete else None,
        tokens=tokens,
        finish_reason=finish_reason,
        complete=complete,
        log_weight=log_weight,
        stats=stats,
    )
