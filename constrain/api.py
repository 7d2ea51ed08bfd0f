"""Constrained generation for users: `generate()`, `Generator`, `stream()` and `smc()`.

    gen = cn.Generator(model, schema=schema)     # compiles once (and caches by schema)
    out = gen("Extract the person: ...")         # .text, .value, .finish_reason, .stats
    outs = gen.batch(["...", "..."])             # all prompts advance in one forward per step
    for piece in gen.stream("..."): print(piece, end="")

`generate()`, `stream()` and `smc()` are the one-call forms. Every call is a `Run` of the one
decoding loop (`constrain.decoding`), whatever the sampler, speculation or batch.
"""

from __future__ import annotations

import codecs
import os
import random
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import fields, replace
from typing import Any

import numpy as np
import torch

from constrain import decoding
from constrain.constraints import ConstraintSpec
from constrain.decoding import SMC, Deadline, DecodingConfig
from constrain.engine.grammar import Grammar
from constrain.errors import ConstrainError
from constrain.models.base import LanguageModel
from constrain.processors import ProcessorStack
from constrain.processors.bound import BoundStack
from constrain.results import DecodeStats, GenerationResult, GenerationStats, SMCResult

__all__ = ["Generator", "Run", "TextStream", "generate", "smc", "stream"]


class Generator:
    """A model bound to a constraint and decoding settings: compile once, generate many times.

    Args:
        model: a loaded model (`cn.load_model()`, `cn.from_transformers(...)`, a toy model).
        regex / choices / grammar / schema / type: the constraint (at most one; none means
            free text), see `ConstraintSpec`. Compiled constraints are kept per vocabulary by
            their specification.
        schema_options: options of `Grammar.from_json_schema` (`whitespace`, `any_order`, ...).
        config: a `DecodingConfig`; `options` (its field names: `sampler`, `processors`,
            `max_tokens`, `fit_max_tokens`, `temperature`, `greedy`, `timeout`,
            `speculative`, `backtracks`, `chat`, `system`) replace its fields. See
            `DecodingConfig` for what each does.
    """

    def __init__(
        self,
        model: LanguageModel,
        *,
        regex: str | None = None,
        choices: Sequence[str] | None = None,
        grammar: Grammar | str | os.PathLike | None = None,
        schema: dict | bool | str | None = None,
        type: Any = None,
        schema_options: Mapping[str, Any] | None = None,
        config: DecodingConfig | None = None,
        **options: Any,
    ):
        self.model = model
        self.config = replace(config or DecodingConfig(), **options)
        self.spec = ConstraintSpec(regex, choices, grammar, schema, type, schema_options)
        t0 = time.perf_counter()
        self.constraint = self.spec.constraint(model.vocab)
        self.compile_s = time.perf_counter() - t0
        self.stack = ProcessorStack(self.config.processors, self.config.temperature)
        # free text is complete after any token: no budget to fit
        self.fits_budget = (
            self.config.fit_max_tokens and self.spec.kind != "free" and self.config.token_samples
        )
        self._budget_checked = not self.fits_budget

    def __call__(
        self, prompt: str | Sequence[dict], *, seed: int | None = None
    ) -> GenerationResult:
        """One generation for `prompt` (a user message or a list of chat messages)."""
        return self.batch([prompt], seed=seed)[0]

    def batch(
        self, prompts: Sequence[str | Sequence[dict]], *, seed: int | None = None
    ) -> list[GenerationResult]:
        """One generation per prompt, all advancing in one batched forward per step."""
        run = self.start(prompts, seed)
        for _ in run.steps():
            pass
        return run.results()

    def stream(self, prompt: str | Sequence[dict], *, seed: int | None = None) -> TextStream:
        """The text of one generation as it is produced (token samplers, with or without
        speculation); the stream's `.result` holds the `GenerationResult` once it is
        exhausted."""
        if not self.config.token_samples:
            raise ValueError("streaming needs a token sampler ('awrs', 'lcd'), not SMC or ASAp")
        return TextStream(self, prompt, seed)

    def start(self, prompts: Sequence[str | Sequence[dict]], seed: int | None = None) -> Run:
        """The generations of `prompts`, prefilled and ready to step."""
        self._warn_if_nothing_fits()
        return Run(self, prompts, seed if seed is not None else random.getrandbits(63))

    def bound_stack(self, prompt: str | Sequence[dict]) -> BoundStack:
        """The processor stack bound to a generation for `prompt` (its encoded prompt too)."""
        c = self.config
        ids = self.model.encode_prompt(prompt, chat=c.chat, system=c.system)
        return BoundStack(self.stack, self.model, ids, prompt, chat=c.chat, system=c.system)

    def _warn_if_nothing_fits(self) -> None:
        """Say before the first generation when the shortest text the automaton finds is
        longer than `max_tokens`: every generation would end with finish reason "length"
        after spending the whole budget. (A warning, not an error: that text is the shortest
        in bytes, and another spelling could need fewer tokens.)"""
        if self._budget_checked:
            return
        self._budget_checked = True
        shortest = self.constraint.shortest_tokens()
        max_tokens = self.config.max_tokens
        if shortest is not None and shortest > max_tokens:
            warnings.warn(
                f"the shortest text this constraint allows that the engine finds is {shortest} "
                f"tokens, more than max_tokens={max_tokens}: generations will likely end "
                f"with finish_reason 'length'; raise max_tokens",
                stacklevel=5,
            )


class Run:
    """One call's generations in flight: the sequences (SMC: N particles per prompt), the
    strategy that steps them, and the counters, from prefill to results."""

    def __init__(self, generator: Generator, prompts: Sequence[str | Sequence[dict]], seed: int):
        self.t_call = time.perf_counter()
        self.generator = generator
        self.seed = seed
        config = generator.config
        self.rng = np.random.default_rng(seed)
        smc = config.sampler if isinstance(config.sampler, SMC) else None
        torch_seed = int(self.rng.integers(2**63 - 1)) if smc is not None else seed
        torch_generator = torch.Generator(device=generator.model.device).manual_seed(torch_seed)
        self.stats = DecodeStats()
        self.strategy = config.strategy(torch_generator, self.stats, self.rng)
        budget = config.max_tokens if generator.fits_budget else None
        self.sequences: list[decoding.Sequence] = []
        for i, prompt in enumerate(prompts):
            first = decoding.Sequence.start(
                generator.model,
                generator.bound_stack(prompt),
                generator.constraint.start(budget),
                backtracks=config.backtracks if config.token_samples else 0,
                group=i,
            )
            particles = smc.particles if smc is not None else 1
            self.sequences += [first] + [first.fork() for _ in range(particles - 1)]
        self.prompts = len(prompts)
        self.prefill_s = time.perf_counter() - self.t_call
        self.decode_started = 0.0

    def steps(self) -> Iterator[list[decoding.Sequence]]:
        """Decode to the end, yielding the sequences after every step."""
        config = self.generator.config
        timeout = config.timeout
        deadline = Deadline(timeout, self.generator.fits_budget) if timeout is not None else None
        self.decode_started = time.perf_counter()
        for current in decoding.decode(
            self.sequences,
            self.strategy,
            max_tokens=config.max_tokens,
            deadline=deadline,
        ):
            self.sequences = current
            yield current

    def results(self) -> list[GenerationResult]:
        """One result per prompt (SMC: a particle drawn by weight, with all particles)."""
        if isinstance(self.generator.config.sampler, SMC):
            return [self._smc_result(i) for i in range(self.prompts)]
        return [self._result(s) for s in self.sequences]

    def smc_result(self, group: int) -> SMCResult:
        """The particles of prompt `group` with their weights and log marginal likelihood."""
        return self.strategy.result(group, [s for s in self.sequences if s.group == group])

    def _smc_result(self, group: int) -> GenerationResult:
        result = self.smc_result(group)
        chosen = result.choice(np.random.default_rng(self.seed + group)) or result.particles[0]
        stats = self._stats(self.stats, forced=0)
        return self._finish(
            chosen.tokens,
            chosen.complete,
            chosen.finish_reason,
            result.log_ml,
            stats,
            result.particles,
        )

    def _result(self, sequence: decoding.Sequence) -> GenerationResult:
        if sequence.finish_reason == "dead":
            backtracks = self.generator.config.backtracks
            left = sequence.backtracker.left if sequence.backtracker is not None else 0
            tail = sequence.model.vocab.decode(sequence.tokens)[-80:]
            raise ConstrainError(
                f"generation cannot continue after {len(sequence.tokens)} tokens (text ends "
                f"{tail!r}, {backtracks - left} of {backtracks} backtracks used): {sequence.reason}"
            )
        stats = self._stats(sequence.stats, sequence.matcher.count_forced(sequence.tokens))
        complete = sequence.matcher.finished()
        return self._finish(
            sequence.tokens, complete, sequence.finish_reason, sequence.log_weight, stats
        )

    def _stats(self, counters: DecodeStats, forced: int) -> GenerationStats:
        now, compile_s = time.perf_counter(), self.generator.compile_s
        return GenerationStats(
            **{f.name: getattr(counters, f.name) for f in fields(DecodeStats)},
            compile_s=compile_s,
            prefill_s=self.prefill_s,
            ttft_s=(counters.first_token_at or now) - self.t_call + compile_s,
            total_s=now - self.t_call + compile_s,
            decode_s=now - self.decode_started,
            forced=forced,
        )

    def _finish(self, tokens, complete, finish_reason, log_weight, stats, particles=None):
        text = self.generator.model.vocab.decode(tokens)
        value = self.generator.spec.value(text) if complete else None
        return GenerationResult(
            text, value, list(tokens), finish_reason, complete, log_weight, stats, particles
        )


class TextStream:
    """Iterate over the text of a generation as it is produced; afterwards `.result` holds
    the `GenerationResult`. Pieces are whole UTF-8 characters (a token that ends inside a
    character waits for the next)."""

    def __init__(self, generator: Generator, prompt: str | Sequence[dict], seed: int | None):
        self.generator = generator
        self.prompt = prompt
        self.seed = seed
        self.result: GenerationResult | None = None

    def __iter__(self) -> Iterator[str]:
        run = self.generator.start([self.prompt], self.seed)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        vocab = self.generator.model.vocab
        sent = 0
        for (sequence,) in run.steps():
            piece = decoder.decode(vocab.decode_bytes(sequence.tokens[sent:]))
            sent = len(sequence.tokens)
            if piece:
                yield piece
        tail = decoder.decode(b"", final=True)
        if tail:
            yield tail
        (self.result,) = run.results()


# -- one-call forms ---------------------------------------------------------------------------------


def generate(
    model: LanguageModel,
    prompt: str | Sequence[dict] | None = None,
    *,
    prompts: Sequence[str | Sequence[dict]] | None = None,
    seed: int | None = None,
    **options: Any,
) -> GenerationResult | list[GenerationResult]:
    """Generate for `prompt` (or for each of `prompts`, batched) under a constraint.

    `options` are those of `Generator`: ``regex= | choices= | grammar= | schema= | type=``,
    ``schema_options=``, ``config=`` and the `DecodingConfig` fields (``sampler=``,
    ``max_tokens=``, ``temperature=``, ``greedy=``, ``speculative=``, ...). Returns one
    `GenerationResult`, or a list for `prompts`.
    """
    if (prompt is None) == (prompts is None):
        raise ValueError("pass either prompt or prompts=[...]")
    generator = Generator(model, **options)
    return generator(prompt, seed=seed) if prompts is None else generator.batch(prompts, seed=seed)


def stream(
    model: LanguageModel, prompt: str | Sequence[dict], *, seed: int | None = None, **options: Any
) -> TextStream:
    """The text of one generation as it is produced: ``for piece in cn.stream(...)``.
    Options as `generate`; the stream's `.result` is set when it is exhausted."""
    return Generator(model, **options).stream(prompt, seed=seed)


def smc(
    model: LanguageModel,
    prompt: str | Sequence[dict],
    *,
    particles: int = 8,
    ess_threshold: float = 0.5,
    resampling: str = "stratified",
    token_sampler: str = "awrs",
    seed: int | None = None,
    **options: Any,
) -> SMCResult:
    """Sequential Monte Carlo: `particles` weighted generations that together approximate the
    model conditioned on the constraint. Returns `.particles` (text, tokens, normalised
    `weight`, `log_weight`, `finish_reason`), `.log_ml` and `.best`. `options` are those of
    `Generator` (constraint, `max_tokens`, `temperature`, `processors`, `chat`, `system`)."""
    settings = SMC(particles, ess_threshold, resampling, token_sampler)
    run = Generator(model, sampler=settings, **options).start([prompt], seed)
    for _ in run.steps():
        pass
    return run.smc_result(0)
