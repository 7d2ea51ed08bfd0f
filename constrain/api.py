"""Constrained generation for users: `generate()`, `Generator`, `stream()` and `smc()`.

    gen = cn.Generator(model, schema=schema)     # compiles once (and caches by schema)
    out = gen("Extract the person: ...")         # .text, .value, .finish_reason, .stats
    outs = gen.batch(["...", "..."])             # all prompts advance in one forward per step
    for piece in gen.stream("..."): print(piece, end="")

`generate()`, `stream()` and `smc()` are the one-call forms.
"""

from __future__ import annotations

import codecs
import json
import os
import random
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonschema
import numpy as np
import torch

from constrain.errors import ConstrainError
from constrain.jsonschema.grammar import Grammar
from constrain.jsonschema.types import schema_from_type
from constrain.jsonschema.validation import draft_validator
from constrain.jsonschema.values import value_from_json
from constrain.processors import Processor, ProcessorStack
from constrain.processors.bound import BoundStack
from constrain.samplers import TokenSampler, token_sampler
from constrain.samplers.asap import ASAp
from constrain.samplers.sequence import Particle, StepStats, steps
from constrain.samplers.smc import SMC, SMCResult, WeightedText
from constrain.specs import constraint_for
from constrain.speculative import Speculative, SpeculativeStats, decode_speculative

__all__ = [
    "GenerationResult",
    "GenerationStats",
    "Generator",
    "TextStream",
    "generate",
    "smc",
    "stream",
]


@dataclass
class GenerationStats:
    """Where the time went (seconds) and what the constraint cost.

    `ttft_s` (time to first token) counts from the call: compilation (0 when the constraint was
    cached), prefill and the first step; `tpot_s` is the mean time per output token after it.
    """

    compile_s: float = 0.0  # grammar compilation and binding to the vocabulary
    prefill_s: float = 0.0
    ttft_s: float = 0.0
    token_s: list[float] = field(default_factory=list)  # wall time of each decoding step
    constraint_s: float = 0.0  # checks, masks and matcher updates
    checks: int = 0  # Matcher.check calls by the token sampler
    masks: int = 0  # full masks used (LCD: one per step; AWRS: only its fallbacks)
    forced: int = 0  # tokens whose bytes the grammar forced
    total_s: float = 0.0
    decode_s: float = 0.0  # from the first step to the end (speculative decoding)
    speculative: SpeculativeStats | None = None  # drafts, acceptance, tokens per forward

    @property
    def tpot_s(self) -> float:
        return sum(self.token_s[1:]) / (len(self.token_s) - 1) if len(self.token_s) > 1 else 0.0

    @property
    def tokens_per_s(self) -> float:
        spent = sum(self.token_s)
        return len(self.token_s) / spent if spent else 0.0


@dataclass
class GenerationResult:
    """The outcome of one generation.

    Attributes:
        text: the generated text (EOS excluded).
        value: for `schema=`, the parsed JSON value; for `type=`, an instance of the type
            (dataclass, pydantic model, Enum member, ...); None when the text is incomplete or
            the constraint is not JSON.
        tokens: the generated token ids (EOS excluded).
        finish_reason: "stop" (the text ended: EOS, or only EOS could follow), "length"
            (`max_tokens` ran out while the text could go on) or "timeout" (the `timeout`
            passed first).
        complete: True when the text is in the constraint's language; a text cut before it
            is complete is marked incomplete, never silently invalid.
        log_weight: the sequence's importance weight for the model conditioned on the
            constraint: the sum of the token sampler's log-weights (LCD: log Z, the mass the
            constraint allowed; AWRS: an unbiased estimate of it); 0 for greedy decoding and
            ASAp; for SMC, the log marginal likelihood estimate.
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


class Generator:
    """A model bound to a constraint and decoding settings: compile once, generate many times.

    Args:
        model: a loaded model (`constrain.load_model()`, or any model with the stream API).
        regex / choices / grammar / schema / type: the constraint (at most one; none means
            free text). `grammar` is a `Grammar`, a library grammar name ("json", "sql", ...), a
            ``.lark`` path or Lark grammar text; `schema` a JSON Schema (dict, bool or JSON
            text); `type` a Python type (`Grammar.from_type`). Compiled constraints are cached
            per vocabulary by their specification.
        schema_options: options of `Grammar.from_json_schema` (`whitespace`, `any_order`, ...).
        sampler: "awrs" (default: adaptive weighted rejection sampling, a few checks per
            token), "lcd" (a full mask per state), "awrs-two-pass", a token sampler object,
            `cn.SMC(...)` (particles; the result is drawn from the weighted particles) or a
            `cn.ASAp()` (grammar-aligned; reuse the object across calls).
        processors: the logits-processor stack (`cn.CFG`, `cn.Contrastive`, model arithmetic
            formulas `cn.M(...)`, `cn.CyclicReflex`, warpers such as `cn.TopP`, any
            transformers processor in `cn.HFProcessor`), applied in stage order: control ->
            constraint -> temperature -> truncation.
        max_tokens: generation stops after this many tokens (EOS not counted); if the text is
            not complete by then, `finish_reason == "length"` and `complete` is False.
        fit_max_tokens: near the end of `max_tokens`, allow only tokens after which a shortest
            completion of the text still fits (default True), so the text is closed within the
            budget instead of being cut open. A strengthening of the constraint: every text it
            allows is in the language. Applies to token samplers (not SMC or ASAp).
        temperature: softmax temperature; `greedy=True` takes the most likely allowed token.
        chat / system: apply the chat template (default: when the tokenizer has one), and an
            optional system message.
        timeout: seconds of decoding after which generation stops with finish reason
            "timeout" (checked between steps; token samplers only). With `fit_max_tokens`,
            the time left also bounds the token budget, so the text is closed in time.
        speculative: `cn.Speculative(...)`: draft tokens (grammar-forced, prompt lookup, a
            draft model) verified in one target forward; the output distribution is exactly
            the non-speculative one (greedy: the same tokens). A draft model's positions are
            verified against the full masked distribution (LCD's weight); elsewhere the token
            sampler draws as usual.
        backtracks: how many tokens a generation may undo at dead ends (default 32). A
            constraint checked on the text (uniqueItems over open-ended items, no duplicate
            keys) can allow a prefix it then closes off, e.g. an array item that can only end
            as a copy of an earlier one; the last token is then undone and forbidden there.
            0 makes a dead end fail with `ConstrainError`. The text stays in the language;
            the sampled distribution is no longer exactly the constrained one there. Token
            samplers only: SMC drops dead particles by their weight instead.
    """

    def __init__(
        self,
        model,
        *,
        regex: str | None = None,
        choices: Sequence[str] | None = None,
        grammar: Grammar | str | os.PathLike | None = None,
        schema: dict | bool | str | None = None,
        type: Any = None,
        schema_options: Mapping[str, Any] | None = None,
        sampler: str | TokenSampler | SMC | ASAp = "awrs",
        processors: Sequence[Processor] = (),
        max_tokens: int = 256,
        fit_max_tokens: bool = True,
        temperature: float = 1.0,
        greedy: bool = False,
        chat: bool | None = None,
        system: str | None = None,
        timeout: float | None = None,
        speculative: Speculative | None = None,
        backtracks: int = 32,
    ):
        if isinstance(sampler, (SMC, ASAp)) and speculative is not None:
            raise ValueError("speculative decoding works with token samplers, not SMC or ASAp")
        if isinstance(sampler, (SMC, ASAp)) and greedy:
            raise ValueError(
                f"{sampler.__class__.__name__} samples; greedy=True needs a token sampler ('awrs')"
            )
        self.model = model
        t0 = time.perf_counter()
        self.constraint = constraint_for(
            model.vocab,
            regex=regex,
            choices=choices,
            grammar=grammar,
            schema=schema,
            type=type,
            schema_options=schema_options,
        )
        self.compile_s = time.perf_counter() - t0
        self._validator = _validator(schema, type, (schema_options or {}).get("draft"))
        self._type = type
        self._json = schema is not None or type is not None
        self.sampler = sampler if isinstance(sampler, (SMC, ASAp)) else token_sampler(sampler)
        self.max_tokens = max_tokens
        # free text is complete after any token: no budget to fit
        constrained = any(x is not None for x in (regex, choices, grammar, schema, type))
        self.fit_max_tokens = fit_max_tokens and constrained
        self._budget_checked = not self.fit_max_tokens
        self.temperature = temperature
        self.stack = ProcessorStack(processors, temperature)
        self.greedy = greedy
        self.chat = chat
        self.system = system
        self.timeout = timeout
        self.speculative = speculative
        self.backtracks = backtracks

    # -- calls -------------------------------------------------------------------------------------

    def __call__(
        self, prompt: str | Sequence[dict], *, seed: int | None = None
    ) -> GenerationResult:
        """One generation for `prompt` (a user message or a list of chat messages)."""
        return self.batch([prompt], seed=seed)[0]

    def batch(
        self, prompts: Sequence[str | Sequence[dict]], *, seed: int | None = None
    ) -> list[GenerationResult]:
        """One generation per prompt; with a token sampler, all advance in one batched
        forward per step."""
        t_call = time.perf_counter()
        self._warn_if_nothing_fits()
        seed = seed if seed is not None else random.getrandbits(63)
        if isinstance(self.sampler, SMC):
            return [self._smc(p, seed + i, t_call) for i, p in enumerate(prompts)]
        if isinstance(self.sampler, ASAp):
            return [self._asap(p, seed + i, t_call) for i, p in enumerate(prompts)]
        if self.speculative is not None:
            return [self._speculate(p, seed + i, t_call) for i, p in enumerate(prompts)]
        started, options, prefill_s = self._start(prompts, seed)
        final = started
        for final in self._steps(started, options):  # noqa: B007 (the last step's particles)
            pass
        return [self._result(p, t_call, prefill_s) for p in final]

    def stream(self, prompt: str | Sequence[dict], *, seed: int | None = None) -> TextStream:
        """The text of one generation as it is produced (token samplers only); the stream's
        `.result` holds the `GenerationResult` once it is exhausted."""
        if isinstance(self.sampler, (SMC, ASAp)):
            raise ValueError("streaming needs a token sampler ('awrs', 'lcd'), not SMC or ASAp")
        self._warn_if_nothing_fits()
        return TextStream(self, prompt, seed if seed is not None else random.getrandbits(63))

    # -- internals ---------------------------------------------------------------------------------

    def _warn_if_nothing_fits(self) -> None:
        """Say before the first generation when the shortest text the automaton finds is
        longer than `max_tokens`: every generation would end with finish reason "length"
        after spending the whole budget. (A warning, not an error: that text is the shortest
        in bytes, and another spelling could need fewer tokens.) The budget searches that
        completion at the first step anyway."""
        if self._budget_checked:
            return
        self._budget_checked = True
        shortest = self.constraint.shortest_tokens()
        if shortest is not None and shortest > self.max_tokens:
            warnings.warn(
                f"the shortest text this constraint allows that the engine finds is {shortest} "
                f"tokens, more than max_tokens={self.max_tokens}: generations will likely end "
                f"with finish_reason 'length'; raise max_tokens",
                stacklevel=4,
            )

    def _prompt_ids(self, prompt) -> list[int]:
        return self.model.encode_prompt(prompt, chat=self.chat, system=self.system)

    def _generator(self, seed: int) -> torch.Generator:
        return torch.Generator(device=self.model.device).manual_seed(seed)

    def _bound(self, prompt, prompt_ids: list[int]) -> BoundStack:
        return BoundStack(
            self.stack, self.model, prompt_ids, prompt, chat=self.chat, system=self.system
        )

    def _start(self, prompts, seed: int) -> tuple[list[Particle], dict, float]:
        """Prefilled particles and the options of `steps` / `decode`."""
        if len(prompts) > 1 and self.stack.terms:
            raise ValueError(
                "processors with auxiliary prompts (CFG, ...) run one prompt at a time"
            )
        t0 = time.perf_counter()
        particles, stack = [], None
        for prompt in prompts:
            ids = self._prompt_ids(prompt)
            stack = self._bound(prompt, ids)
            particles.append(
                Particle(
                    self.model.start(ids),
                    self.constraint.start(self.max_tokens if self.fit_max_tokens else None),
                    stack.start_terms(),
                    backtracks_left=self.backtracks,
                    max_tokens=self.max_tokens,
                )
            )
        options = dict(
            max_tokens=self.max_tokens,
            stack=stack,
            generator=self._generator(seed),
            greedy=self.greedy,
            stats=StepStats(),
            score_eos=not self.greedy,  # greedy has no weight to complete: save the forward
        )
        return particles, options, time.perf_counter() - t0

    def _steps(self, particles: list[Particle], options: dict) -> Iterator[list[Particle]]:
        """`steps`, stopped with finish reason "timeout" once `timeout` seconds have passed.

        With `fit_max_tokens`, the time left is also a token budget: each matcher's budget is
        lowered to the steps that still fit before the deadline (at the recent step time), so
        the text is closed in time instead of being cut by the timeout.
        """
        t0 = time.perf_counter()
        for current in steps(self.model, particles, self.sampler, **options):
            yield current
            if self.timeout is None:
                continue
            elapsed = time.perf_counter() - t0
            if elapsed > self.timeout:
                for p in current:
                    if p.running:
                        p.finish("timeout", f"decoding took more than {self.timeout} s")
                return
            if self.fit_max_tokens:
                for p in current:
                    p.fit_deadline(elapsed, self.timeout, self.max_tokens)

    def _result(self, particle: Particle, t_call: float, prefill_s: float) -> GenerationResult:
        if particle.finish_reason == "dead":
            tail = self.model.vocab.decode(particle.tokens)[-80:]
            raise ConstrainError(
                f"generation cannot continue after {len(particle.tokens)} tokens (text ends "
                f"{tail!r}, {self.backtracks - particle.backtracks_left} of {self.backtracks} "
                f"backtracks used): {particle.reason}"
            )
        complete = particle.matcher.finished()
        stats = GenerationStats(
            compile_s=self.compile_s,
            prefill_s=prefill_s,
            ttft_s=(particle.first_token_at or time.perf_counter()) - t_call + self.compile_s,
            token_s=particle.step_s,
            constraint_s=particle.constraint_s,
            checks=particle.checks,
            masks=particle.masks,
            forced=particle.matcher.count_forced(particle.tokens),
            total_s=time.perf_counter() - t_call + self.compile_s,
        )
        return self._finish(
            particle.tokens, particle.finish_reason, complete, particle.log_weight, stats
        )

    def _finish(self, tokens, finish_reason, complete, log_weight, stats, particles=None):
        text = self.model.vocab.decode(tokens)
        return GenerationResult(
            text=text,
            value=self._value(text) if complete else None,
            tokens=list(tokens),
            finish_reason=finish_reason,
            complete=complete,
            log_weight=log_weight,
            stats=stats,
            particles=particles,
        )

    def _value(self, text: str) -> Any:
        """The parsed JSON (an instance of `type=`), validated again as a safety net."""
        if not self._json:
            return None
        data = json.loads(text)
        error = jsonschema.exceptions.best_match(self._validator.iter_errors(data))
        if error is not None:  # the compiler promises exactness: this is a bug, say so
            raise ConstrainError(
                f"internal error: the output does not validate ({error.message} at "
                f"{error.json_path}); please report it with the schema: {text[:200]}"
            )
        return value_from_json(self._type, data) if self._type is not None else data

    def _smc(self, prompt, seed: int, t_call: float) -> GenerationResult:
        ids = self._prompt_ids(prompt)
        result = self.sampler.run(
            self.model,
            ids,
            self.constraint,
            max_tokens=self.max_tokens,
            seed=seed,
            stack=self._bound(prompt, ids),
        )
        chosen = result.choice(np.random.default_rng(seed)) or result.particles[0]
        stats = GenerationStats(
            compile_s=self.compile_s,
            token_s=result.stats.step_s,
            constraint_s=result.stats.constraint_s,
            checks=result.stats.checks,
            masks=result.stats.masks,
            total_s=time.perf_counter() - t_call + self.compile_s,
        )
        return self._finish(
            chosen.tokens,
            chosen.finish_reason,
            chosen.complete,
            result.log_ml,
            stats,
            particles=result.particles,
        )

    def _speculate(self, prompt, seed: int, t_call: float) -> GenerationResult:
        (particle,), options, prefill_s = self._start([prompt], seed)
        t0 = time.perf_counter()
        report = decode_speculative(
            self.model,
            particle,
            options["stack"],
            self.speculative,
            self.sampler,
            prompt_ids=list(options["stack"].prompt_ids),
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            generator=options["generator"],
            greedy=self.greedy,
            stats=options["stats"],
            score_eos=options["score_eos"],
            timeout=self.timeout,
            fit_deadline=self.fit_max_tokens,
        )
        result = self._result(particle, t_call, prefill_s)
        result.stats.speculative = report
        result.stats.decode_s = time.perf_counter() - t0
        return result

    def _asap(self, prompt, seed: int, t_call: float) -> GenerationResult:
        ids = self._prompt_ids(prompt)
        particle = self.sampler.run(
            self.model,
            ids,
            self.constraint,
            max_tokens=self.max_tokens,
            generator=self._generator(seed),
            stack=self._bound(prompt, ids),
        )
        return self._result(particle, t_call, 0.0)


class TextStream:
    """Iterate over the text of a generation as it is produced; afterwards `.result` holds
    the `GenerationResult`. Pieces are whole UTF-8 characters (a token that ends inside a
    character waits for the next)."""

    def __init__(self, generator: Generator, prompt, seed: int):
        self._generator = generator
        self._prompt = prompt
        self._seed = seed
        self.result: GenerationResult | None = None

    def __iter__(self) -> Iterator[str]:
        gen = self._generator
        t_call = time.perf_counter()
        particles, options, prefill_s = gen._start([self._prompt], self._seed)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        sent = 0
        vocab = gen.model.vocab
        for current in gen._steps(particles, options):
            (particle,) = current
            fresh = particle.tokens[sent:]
            sent = len(particle.tokens)
            piece = decoder.decode(vocab.decode_bytes(fresh))
            if piece:
                yield piece
        tail = decoder.decode(b"", final=True)
        if tail:
            yield tail
        self.result = gen._result(particle, t_call, prefill_s)


def _validator(schema, type_, draft: str | None = None):
    """A jsonschema validator for the output (in `draft`, else the schema's own dialect), or
    None for constraints that are not JSON."""
    if type_ is not None:
        schema = schema_from_type(type_)
    if schema is None:
        return None
    if isinstance(schema, str):
        schema = json.loads(schema)
    cls = draft_validator(draft) if draft else None
    if cls is None:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


# -- one-call forms ---------------------------------------------------------------------------------


def generate(
    model,
    prompt: str | Sequence[dict] | None = None,
    *,
    prompts: Sequence[str | Sequence[dict]] | None = None,
    seed: int | None = None,
    **options: Any,
) -> GenerationResult | list[GenerationResult]:
    """Generate for `prompt` (or for each of `prompts`, batched) under a constraint.

    `options` are those of `Generator`: ``regex= | choices= | grammar= | schema= | type=``,
    ``schema_options=``, ``sampler=``, ``max_tokens=``, ``temperature=``, ``greedy=``,
    ``chat=``, ``system=``. Returns one `GenerationResult`, or a list for `prompts`.
    """
    if (prompt is None) == (prompts is None):
        raise ValueError("pass either prompt or prompts=[...]")
    generator = Generator(model, **options)
    return generator(prompt, seed=seed) if prompts is None else generator.batch(prompts, seed=seed)


def stream(
    model, prompt: str | Sequence[dict], *, seed: int | None = None, **options
) -> TextStream:
    """The text of one generation as it is produced: ``for piece in cn.stream(...)``.
    Options as `generate`; the stream's `.result` is set when it is exhausted."""
    return Generator(model, **options).stream(prompt, seed=seed)


def smc(
    model,
    prompt: str | Sequence[dict],
    *,
    particles: int = 8,
    ess_threshold: float = 0.5,
    resampling: str = "stratified",
    token_sampler: str | TokenSampler = "awrs",
    seed: int | None = None,
    **options: Any,
) -> SMCResult:
    """Sequential Monte Carlo: `particles` weighted generations that together approximate the
    model conditioned on the constraint. Returns `.particles` (text, tokens, normalised
    `weight`, `log_weight`, `finish_reason`), `.log_ml` and `.best`. `options` are those of
    `Generator` (constraint, `max_tokens`, `temperature`, `chat`, `system`)."""
    config = SMC(particles, ess_threshold, resampling, token_sampler)
    generator = Generator(model, sampler=config, **options)
    ids = generator._prompt_ids(prompt)
    return config.run(
        model,
        ids,
        generator.constraint,
        max_tokens=generator.max_tokens,
        seed=seed,
        stack=generator._bound(prompt, ids),
    )
