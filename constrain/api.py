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

import numpy as np
import torch

from constrain.errors import ConstrainError
from constrain.grammar import Grammar
from constrain.matcher import Constraint
from constrain.samplers import TokenSampler, token_sampler
from constrain.samplers.asap import ASAp
from constrain.samplers.sequence import Particle, StepStats, decode, tempered
from constrain.samplers.smc import SMC, SMCResult, WeightedText
from constrain.vocab import Vocabulary

__all__ = ["generate", "smc", "GenerationResult", "GenerationStats"]


@dataclass
class GenerationStats:
    """Where the time went, in seconds."""

    prefill_s: float = 0.0
    token_s: list[float] = field(default_factory=list)  # wall time of each decoding step
    constraint_s: float = 0.0  # masks, checks and matcher updates
    checks: int = 0  # Matcher.check calls by the token sampler
    masks: int = 0  # full masks used (LCD: one per step; AWRS: only its fallbacks)
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
        log_weight: the sequence's importance weight for the model conditioned on the
            constraint: the sum of the token sampler's log-weights (LCD: log Z, the mass the
            constraint allowed; AWRS: an unbiased estimate of it); 0 for greedy decoding and
            ASAp; for SMC, the log marginal likelihood estimate. (Greedy decoding spends no
            forward on an EOS the grammar forces; sampling does, to weigh it.)
        particles: for SMC, every particle with its normalised weight.
    """

    text: str
    value: Any
    tokens: list[int]
    finish_reason: str
    complete: bool
    log_weight: float
    stats: GenerationStats
    particles: list[WeightedText] | None = None

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
    ((kind, spec),) = given.items()
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
    sampler: str | TokenSampler | SMC | ASAp = "awrs",
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
        sampler: "awrs" (default: adaptive weighted rejection sampling, a few checks per
            token), "lcd" (a full mask per state), "awrs-two-pass", a token sampler object,
            `cn.SMC(...)` (particles; the result is drawn from the weighted particles) or a
            `cn.ASAp()` (grammar-aligned; reuse the object across calls).
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
    if constraint is None:
        constraint = _free_text(vocab)
    stats.compile_s = time.perf_counter() - t_start
    hook = tempered(temperature)
    seed = seed if seed is not None else random.getrandbits(63)
    prompt_ids = model.encode_prompt(prompt, chat=chat, system=system)

    particles = None
    if isinstance(sampler, SMC):
        if greedy:
            raise ValueError("SMC samples; greedy=True needs a token sampler such as 'awrs'")
        result = sampler.run(
            model, prompt_ids, constraint, max_tokens=max_tokens, temperature=temperature, seed=seed
        )
        particles = result.particles
        chosen = result.choice(np.random.default_rng(seed))
        if chosen is None:
            chosen = particles[0]
        tokens, finish_reason, complete = chosen.tokens, chosen.finish_reason, chosen.complete
        log_weight, steps = result.log_ml, result.stats
    else:
        generator = torch.Generator(device=model.device)
        generator.manual_seed(seed)
        steps = StepStats()
        t0 = time.perf_counter()
        if isinstance(sampler, ASAp):
            if greedy:
                raise ValueError("ASAp samples; greedy=True needs a token sampler such as 'awrs'")
            particle = sampler.run(
                model,
                prompt_ids,
                constraint,
                max_tokens=max_tokens,
                temperature=temperature,
                generator=generator,
                stats=steps,
            )
        else:
            particle = Particle(model.start(prompt_ids), constraint.start())
            stats.prefill_s = time.perf_counter() - t0
            (particle,) = decode(
                model,
                [particle],
                token_sampler(sampler),
                max_tokens=max_tokens,
                hook=hook,
                generator=generator,
                greedy=greedy,
                stats=steps,
                score_eos=not greedy,  # greedy has no weight to complete: save the forward
            )
        tokens, finish_reason, log_weight = (
            particle.tokens,
            particle.finish_reason,
            particle.log_weight,
        )
        complete = particle.matcher.finished()
        if finish_reason == "dead":
            raise ConstrainError(f"generation cannot continue: {particle.reason}")
    stats.token_s = steps.step_s
    stats.constraint_s = steps.constraint_s
    stats.checks = steps.checks
    stats.masks = steps.masks
    stats.total_s = time.perf_counter() - t_start
    text = vocab.decode(tokens)
    is_json = schema is not None or type is not None
    return GenerationResult(
        text=text,
        value=json.loads(text) if is_json and complete else None,
        tokens=list(tokens),
        finish_reason=finish_reason,
        complete=complete,
        log_weight=log_weight,
        stats=stats,
        particles=particles,
    )


def smc(
    model,
    prompt: str | Sequence[dict],
    *,
    particles: int = 8,
    ess_threshold: float = 0.5,
    resampling: str = "stratified",
    token_sampler: str | TokenSampler = "awrs",
    regex: str | None = None,
    choices: Sequence[str] | None = None,
    grammar: Grammar | str | os.PathLike | None = None,
    schema: dict | bool | str | None = None,
    type: Any = None,
    schema_options: Mapping[str, Any] | None = None,
    max_tokens: int = 256,
    temperature: float = 1.0,
    seed: int | None = None,
    chat: bool | None = None,
    system: str | None = None,
) -> SMCResult:
    """Sequential Monte Carlo: `particles` weighted generations that together approximate the
    model conditioned on the constraint. Returns `.particles` (text, tokens, normalised
    `weight`, `log_weight`, `finish_reason`), `.log_ml` and `.best`. Arguments as `generate`
    and `cn.SMC`."""
    config = SMC(particles, ess_threshold, resampling, token_sampler)
    constraint = _constraint(
        model.vocab, regex, choices, grammar, schema, type, dict(schema_options or {})
    )
    return config.run(
        model,
        model.encode_prompt(prompt, chat=chat, system=system),
        constraint if constraint is not None else _free_text(model.vocab),
        max_tokens=max_tokens,
        temperature=temperature,
        seed=seed,
    )


def _free_text(vocab: Vocabulary) -> Constraint:
    """The constraint of unconstrained generation: any text (valid UTF-8), EOS anywhere."""
    per_vocab = _constraint_cache.setdefault(vocab, {})
    if ("free",) not in per_vocab:
        per_vocab[("free",)] = Constraint(Grammar.from_regex(r"(?:.|\n)*"), vocab)
    return per_vocab[("free",)]
