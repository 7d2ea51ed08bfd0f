"""Constrained generation for users: `generate()`, `Generator`, `stream()` and `smc()`.

    gen = cn.Generator(model, schema=schema)     # compiles once (and caches by schema)
    out = gen("Extract the person: ...")         # .text, .value, .finish_reason, .stats
    outs = gen.batch(["...", "..."])             # all prompts advance in one forward per step
    for piece in gen.stream("..."): print(piece, end="")

`generate()`, `stream()` and `smc()` are the one-call forms. Every call is a `Run` of the one
decoding loop (`constrain.decoding`), whatever the sampler, speculation or batch.
"""

from __future__ import annotations

import math
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
from constrain.constraints import Constraint, ConstraintSpec, warm_up
from constrain.decoding import Deadline
from constrain.engine.grammar import Grammar
from constrain.errors import ConfigError, ContextLengthError
from constrain.models.base import LanguageModel, PromptIds
from constrain.options import SMC, DecodingConfig
from constrain.processors import ProcessorStack
from constrain.processors.bound import BoundStack
from constrain.results import DecodeStats, GenerationResult, GenerationStats, SMCResult
from constrain.samplers import token_sampler

__all__ = ["Generator", "Prompt", "Run", "TextStream", "generate", "smc", "stream"]

Prompt = str | Sequence[dict] | PromptIds  # a user message, chat messages, or token ids


class Generator:
    """A model bound to a constraint and decoding settings: compile once, generate many times.

    Args:
        model: a loaded model (`cn.load_model()`, `cn.from_transformers(...)`, a toy model).
        regex / choices / grammar / schema / type / schema_options: the constraint (at most
            one; none means free text), see `ConstraintSpec`; compiled ones are kept per
            vocabulary by their specification.
        config: a `DecodingConfig`; `options` (its field names: `sampler`, `max_tokens`,
            `greedy`, `speculative`, ...) replace its fields.
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
        _check_model(model)
        config = _config(config, options)
        spec = ConstraintSpec(regex, choices, grammar, schema, type, schema_options)
        warm_up(model.vocab)  # the vocabulary's own work, once: not this compile's
        t0 = time.perf_counter()
        constraint = spec.constraint(model.vocab)
        self._bind(model, spec, constraint, config, time.perf_counter() - t0)

    @classmethod
    def compiled(
        cls, model: LanguageModel, spec: ConstraintSpec, constraint: Constraint,
        config: DecodingConfig,
    ) -> Generator:  # fmt: skip
        """A generator over `constraint`, already compiled from `spec` for `model`'s
        vocabulary (a server compiles each request's constraint in a worker thread and hands
        it on with the request)."""
        generator = cls.__new__(cls)
        generator._bind(model, spec, constraint, _config(config, {}), 0.0)
        generator._budget_checked = True  # a server answers "length" itself, no warning
        return generator

    def _bind(self, model, spec, constraint, config: DecodingConfig, compile_s: float) -> None:
        self.model, self.spec, self.constraint, self.compile_s = model, spec, constraint, compile_s
        self.config = c = config
        if c.token_samples:
            token_sampler(c.sampler)  # a sampler object must have `.sample`
        self.stack = ProcessorStack(c.processors, c.temperature)
        # free text is complete after any token: no budget to fit
        self.fits_budget = c.fit_max_tokens and self.spec.kind != "free" and c.token_samples
        self._budget_checked = not self.fits_budget

    def __call__(self, prompt: Prompt, *, seed: int | None = None) -> GenerationResult:
        """One generation for `prompt`."""
        return self.batch([prompt], seed=seed)[0]

    def batch(
        self, prompts: Sequence[Prompt], *, seed: int | None = None
    ) -> list[GenerationResult]:
        """One generation per prompt, all advancing in one batched forward per step."""
        run = self.start(prompts, seed)
        for _ in run.steps():
            pass
        return run.results()

    def stream(self, prompt: Prompt, *, seed: int | None = None) -> TextStream:
        """The text of one generation as it is produced (token samplers, speculative or not);
        the stream's `.result` holds the `GenerationResult` once it is exhausted."""
        if not self.config.token_samples:
            raise ConfigError("streaming needs a token sampler ('awrs', 'lcd'), not SMC or ASAp")
        return TextStream(self, prompt, seed)

    def start(self, prompts: Sequence[Prompt], seed: int | None = None, *,
              prefill: bool = True) -> Run:  # fmt: skip
        """The generations of `prompts`, prefilled and ready to step (with `prefill` False:
        `Run.prefill` feeds the prompts, in chunks, before the first step)."""
        if isinstance(prompts, (str, bytes)) or not isinstance(prompts, Sequence):
            raise ConfigError(
                f"prompts must be a list of prompts, got {type(prompts).__name__} (one prompt "
                f"goes in prompt=)"
            )
        if not self._budget_checked:
            self._budget_checked = True
            self._warn_if_nothing_fits()
        if seed is None:
            seed = random.getrandbits(63)
        elif not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**63:
            raise ConfigError(f"seed must be an integer in [0, 2**63), got {seed!r}")
        return Run(self, prompts, seed, prefill)

    def bound_stack(self, prompt: Prompt) -> BoundStack:
        """The processor stack bound to a generation for `prompt` (its encoded prompt too).

        Raises:
            ContextLengthError: the prompt (or a processor's prompt) and `max_tokens` do not
                fit in the model's context; nothing has run yet.
        """
        c = self.config
        encoding = dict(chat=c.chat, system=c.system, special_tokens=c.prompt_special_tokens)
        if isinstance(prompt, PromptIds):
            ids = list(prompt.ids)
        else:
            ids = self.model.encode_prompt(prompt, **encoding)
        bound = BoundStack(self.stack, self.model, ids, prompt, **encoding)
        fits_context(self.model, len(ids), c.max_tokens)
        for model, term_ids in zip(bound.term_models, bound.term_prompts):
            if term_ids is not None:
                fits_context(model, len(term_ids), c.max_tokens, "a processor's prompt")
        return bound

    def _warn_if_nothing_fits(self) -> None:
        """Say before the first generation when the shortest text the automaton finds is
        longer than `max_tokens`: every generation would end "length" after spending the
        whole budget (a warning: another spelling could need fewer tokens)."""
        shortest, max_tokens = self.constraint.shortest_tokens(), self.config.max_tokens
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

    def __init__(self, generator: Generator, prompts: Sequence[Prompt], seed: int,
                 prefill: bool = True):  # fmt: skip
        """With `prefill` False the prompts are not fed yet: `prefill` feeds them in chunks,
        and the run steps once it says none is left."""
        self.t_call = time.perf_counter()
        self.generator, self.seed, self.prompts = generator, seed, len(prompts)
        c = generator.config
        self.smc = c.sampler if isinstance(c.sampler, SMC) else None
        rng = np.random.default_rng(seed)
        torch_seed = int(rng.integers(2**63 - 1)) if self.smc is not None else seed
        torch_generator = torch.Generator(device=generator.model.device).manual_seed(torch_seed)
        self.stats = DecodeStats()
        self.strategy = strategy(c, torch_generator, self.stats, rng)
        budget = c.max_tokens if generator.fits_budget else None
        backtracks = c.backtracks if c.token_samples else 0
        self.sequences: list[decoding.Sequence] = []
        self._copies = self.smc.particles - 1 if self.smc is not None else 0  # SMC's forks
        self._unforked: list[decoding.Sequence] = []  # firsts whose forks wait for the prompt
        stacks = [generator.bound_stack(prompt) for prompt in prompts]  # all checked, then run
        for i, stack in enumerate(stacks):
            matcher = generator.constraint.start(budget)
            first = decoding.Sequence(
                generator.model, stack, matcher, generator.constraint, backtracks=backtracks,
                group=i, prefill=prefill,
            )
            self.sequences.append(first)
            self._unforked.append(first)
        if prefill:
            self.prefill(None)
        self.decode_started = time.perf_counter()

    def prefill(self, max_tokens: int | None) -> int:
        """Feed at most `max_tokens` (None: all) of the prompts not fed yet, a sequence at a
        time (a later sequence of the same prompt then finds it cached), and fork SMC's
        particles from each sequence whose prompt is in; returns the prompt tokens left."""
        budget = math.inf if max_tokens is None else max_tokens
        left = 0
        for first in list(self._unforked):
            pending = first.prefill(0)
            take = int(min(pending, budget))
            if take:
                first.prefill(take)
                budget -= take
            if pending - take:
                left += pending - take
                continue
            self._unforked.remove(first)
            at = self.sequences.index(first) + 1
            self.sequences[at:at] = [first.fork() for _ in range(self._copies)]
        if not left:
            self.prefill_s = time.perf_counter() - self.t_call
        return left

    def job(self) -> decoding.Job:
        """The run as a job of the decoding loop, its deadline starting now (a server adds it
        to the `decoding.Batch` it shares with other requests)."""
        c = self.generator.config
        deadline = (
            Deadline(c.timeout, self.generator.fits_budget) if c.timeout is not None else None
        )
        self.decode_started = time.perf_counter()
        return decoding.Job(self.sequences, self.strategy, c.max_tokens, deadline)

    def steps(self) -> Iterator[list[decoding.Sequence]]:
        """Decode to the end, alone, yielding the sequences after every step."""
        for current in self.job().steps():
            self.sequences = current
            yield current

    def results(self) -> list[GenerationResult]:
        """One result per prompt (SMC: a particle drawn by weight, with all particles)."""
        if self.smc is None:
            return [self._result(s) for s in self.sequences]
        out = []
        for group in range(self.prompts):
            result = self.smc_result(group)
            chosen = result.choice(np.random.default_rng(self.seed + group)) or result.particles[0]
            out.append(
                self._finish(chosen, result.log_ml, self._stats(self.stats, 0), result.particles)
            )
        return out

    def smc_result(self, group: int) -> SMCResult:
        """The particles of prompt `group` with their weights and log marginal likelihood."""
        return self.strategy.result(group, [s for s in self.sequences if s.group == group])

    def _result(self, s: decoding.Sequence) -> GenerationResult:
        stats = self._stats(s.stats, s.matcher.count_forced(s.tokens))
        reason = s.reason
        if s.finish_reason == "dead":  # the text is in the language's prefixes, cut short
            backtracks = self.generator.config.backtracks
            left = s.backtracker.left if s.backtracker is not None else 0
            reason = (
                f"generation cannot continue after {len(s.tokens)} tokens (text ends "
                f"{s.model.vocab.decode(s.tokens)[-80:]!r}, {backtracks - left} of {backtracks} "
                f"backtracks used): {s.reason}"
            )
        return self._finish(s, s.log_weight, stats, reason=reason)

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

    def _finish(self, ended, log_weight: float, stats: GenerationStats, particles=None,
                reason: str = ""):  # fmt: skip
        """The result of `ended`, a sequence or an SMC particle (`WeightedText`): a dead end
        finishes "length", incomplete, saying why in `reason`."""
        complete = ended.complete if particles is not None else ended.matcher.finished()
        text = self.generator.model.vocab.decode(ended.tokens)
        value = self.generator.spec.value(text) if complete else None
        finish = ended.finish_reason if ended.finish_reason not in (None, "dead") else "length"
        if not complete and not reason:
            reason = "the text was cut before it was complete"
        return GenerationResult(
            text, value, list(ended.tokens), finish, complete, log_weight, stats, particles,
            "" if complete else reason,
        )  # fmt: skip


def _check_model(model: Any) -> None:
    """Refuse what is not a loaded model, saying how to get one."""
    if isinstance(model, LanguageModel):
        return
    if isinstance(model, str):
        raise ConfigError(
            f"model must be a loaded model, got the name {model!r}: load it once with "
            f"cn.load_model({model!r}) and pass that"
        )
    raise ConfigError(
        f"model must be a loaded model (cn.load_model(...), cn.from_transformers(...)), got "
        f"{type(model).__name__}"
    )


def _config(config: DecodingConfig | None, options: Mapping[str, Any]) -> DecodingConfig:
    """`config` (default: `DecodingConfig()`) with `options` replacing its fields."""
    if config is not None and not isinstance(config, DecodingConfig):
        raise ConfigError(f"config must be a cn.DecodingConfig, got {type(config).__name__}")
    known = {f.name for f in fields(DecodingConfig)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ConfigError(
            f"unknown option{'s' * (len(unknown) > 1)} {', '.join(unknown)}; the constraint "
            f"options are regex, choices, grammar, schema, type, schema_options, and the "
            f"decoding options {', '.join(sorted(known))}"
        )
    return replace(config or DecodingConfig(), **options)


def fits_context(
    model: LanguageModel, prompt_tokens: int, max_tokens: int, what: str = "the prompt"
) -> None:
    """Raise `ContextLengthError` unless `prompt_tokens` and `max_tokens` more fit in the
    model's context (a model with no `context_length` always fits)."""
    limit = getattr(model, "context_length", None)
    if limit is None or prompt_tokens + max_tokens <= limit:
        return
    room = limit - prompt_tokens
    if room > 0:
        message = (
            f"{what} has {prompt_tokens} tokens and max_tokens={max_tokens}, "
            f"{prompt_tokens + max_tokens} in all, but {model.name}'s context holds {limit} "
            f"tokens: lower max_tokens to at most {room}, or shorten the prompt"
        )
    else:
        message = (
            f"{what} has {prompt_tokens} tokens but {model.name}'s context holds {limit} "
            f"(and max_tokens={max_tokens} more were asked for): shorten the prompt"
        )
    raise ContextLengthError(message, prompt_tokens, max_tokens, limit)


def strategy(
    config: DecodingConfig, generator: torch.Generator, stats: DecodeStats, rng
) -> decoding.Strategy:
    """The decoding loop's strategy for `config`."""
    if isinstance(config.sampler, SMC):
        return decoding.SMCSampling(config.sampler, generator, stats, rng)
    if isinstance(config.sampler, decoding.ASAp):
        return decoding.ASApSampling(config.sampler, generator, stats)
    if config.speculative is not None:
        return decoding.SpeculativeSampling(config, generator, stats)
    # greedy has no weight to complete: it saves the forward that weighs EOS
    sampler, greedy = token_sampler(config.sampler), config.greedy
    return decoding.Sampling(sampler, generator, stats, greedy=greedy, scores_eos=not greedy)


class TextStream:
    """Iterate over the text of a generation as it is produced; afterwards `.result` holds
    the `GenerationResult`. Pieces are whole UTF-8 characters (a token that ends inside a
    character waits for the next)."""

    def __init__(self, generator: Generator, prompt: Prompt, seed: int | None):
        self.generator, self.prompt, self.seed = generator, prompt, seed
        self.result: GenerationResult | None = None

    def __iter__(self) -> Iterator[str]:
        run = self.generator.start([self.prompt], self.seed)
        sent = 0  # characters
        for (sequence,) in run.steps():
            if piece := sequence.text.between(sent):
                sent = sequence.text.chars
                yield piece
        (self.result,) = run.results()
        if tail := self.result.text[sent:]:  # a character the last token left unfinished
            yield tail


# -- one-call forms ---------------------------------------------------------------------------------


def generate(
    model: LanguageModel,
    prompt: Prompt | None = None,
    *,
    prompts: Sequence[Prompt] | None = None,
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
        raise ConfigError("pass either prompt or prompts=[...]")
    generator = Generator(model, **options)
    return generator(prompt, seed=seed) if prompts is None else generator.batch(prompts, seed=seed)


def stream(
    model: LanguageModel, prompt: Prompt, *, seed: int | None = None, **options: Any
) -> TextStream:
    """The text of one generation as it is produced: ``for piece in cn.stream(...)``.
    Options as `generate`; the stream's `.result` is set when it is exhausted."""
    return Generator(model, **options).stream(prompt, seed=seed)


def smc(
    model: LanguageModel,
    prompt: Prompt,
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
