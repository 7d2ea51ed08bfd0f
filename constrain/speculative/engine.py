"""Speculative decoding under a constraint: draft cheaply, verify in one target forward.

Each iteration drafts up to k tokens (grammar-forced tokens, prompt-lookup copies, a draft
model), pruned by a forked Matcher; one forward scores the target (and every processor's term
stream) over the whole draft; each verified position's target distribution p~ is computed
exactly as the non-speculative sampler would (control processors, the constraint's mask,
temperature, truncation); then, position by position (Leviathan et al. 2023):

* a token drawn from a distribution q~ (the draft model's, masked) is kept with probability
  ``min(1, p~(x) / q~(x))``; on rejection the replacement comes from ``norm((p~ - q~)+)``;
* a deterministic guess (q~ a point mass) is kept when a draw from p~ equals it; otherwise
  that draw is the replacement (the same rule with q~ = delta);
* when the whole draft is kept, the row after it gives a bonus token.

So every emitted token has exactly the non-speculative distribution; in greedy mode a draft
token is kept iff it is the argmax, and the output tokens are identical. Target, term, draft
streams and the matcher then roll back to what was kept.
"""

from __future__ import annotations

import math
import time
import weakref
from dataclasses import dataclass, field

import torch

from constrain.processors.bound import BoundStack
from constrain.samplers.base import categorical
from constrain.samplers.lcd import LCD
from constrain.samplers.sequence import (
    Particle,
    StepStats,
    draw_next,
    finish_at_length,
)
from constrain.speculative.drafters import Draft, ModelDrafter, lookup_continuations

__all__ = ["Speculative", "SpeculativeStats", "decode_speculative"]


@dataclass
class Speculative:
    """Speculative decoding settings: ``cn.generate(..., speculative=cn.Speculative(...))``.

    Args:
        draft: a draft model sharing the tokenizer (e.g. ``model.with_layers(range(8))`` for
            self-speculation, see `choose_layers`); None: deterministic drafts only.
        k: the longest draft per target forward.
        forced: draft the tokens the grammar forces.
        lookup: prompt lookup: copy what followed the longest n-gram (n <= lookup) of the
            text's end found earlier in the prompt or the text; 0 turns it off.
        branches: prompt-lookup continuations verified together (a tree; 1: chains).
        adaptive: grow k by 2 after a fully kept draft, shrink it by 1 after a rejection.
        mask_drafts: the draft model draws among allowed tokens only (default; it never
            lowers acceptance). Unmasked, a forbidden draft token ends the draft and the
            replacement there comes from ``norm((p~ - q~)+)``.
        draft_confidence: the draft model stops drafting after a token it gave less than
            this probability (its next guesses would rarely survive).
        min_draft_acceptance: after 16 of its tokens were verified, a draft model kept less
            often than this is not asked again in this generation (its forwards cost more
            than they save).
    """

    draft: object = None
    k: int = 6
    forced: bool = True
    lookup: int = 3
    branches: int = 1
    adaptive: bool = True
    mask_drafts: bool = True
    draft_confidence: float = 0.4
    min_draft_acceptance: float = 0.3

    def __post_init__(self):
        if self.k < 1 or self.branches < 1 or self.lookup < 0:
            raise ValueError("k and branches must be >= 1, lookup >= 0")


@dataclass
class SpeculativeStats:
    """What speculation did: target forwards, drafted and kept tokens by source."""

    target_forwards: int = 0
    emitted: int = 0
    drafted: dict[str, int] = field(default_factory=dict)
    kept: dict[str, int] = field(default_factory=dict)

    @property
    def acceptance(self) -> float:
        drafted = sum(self.drafted.values())
        return sum(self.kept.values()) / drafted if drafted else float("nan")

    @property
    def tokens_per_forward(self) -> float:
        return self.emitted / self.target_forwards if self.target_forwards else float("nan")


_MASKS = LCD()  # device masks cached by automaton state


def _target(stack: BoundStack, row, matcher, prefix) -> tuple[torch.Tensor, float]:
    """The distribution the non-speculative sampler draws from at this position, from the
    control stage's `row` (masked, normalised log-probabilities), and log Z, the allowed mass
    (the LCD weight)."""
    mask = _MASKS.device_mask(matcher, row.device)[: row.shape[-1]]
    if not stack.truncates:
        row = stack.after_constraint(row, prefix)
    masked = row.double().masked_fill(~mask, -math.inf)
    log_z = float(torch.logsumexp(masked, dim=-1))
    dist = masked - log_z
    if stack.truncates:
        dist = stack.after_constraint(dist, prefix).double()
    return dist, log_z


def _uniform(generator) -> float:
    device = generator.device if generator is not None else "cpu"
    return float(torch.rand(1, generator=generator, device=device))


class _Engine:
    def __init__(
        self, model, stack: BoundStack, settings: Speculative, prompt_ids, temperature, sampler
    ):
        self.model = model
        self.stack = stack
        self.sampler = sampler
        # forced text -> the token the model chose for it last time: forced drafts follow the
        # model's own tokenization (`{"` or `{` then `"`), learnt across generations with the
        # same constraint
        self.preferred: dict[bytes, int] = {}
        self.settings = settings
        self.prompt_ids = list(prompt_ids)
        self.eos = set(model.vocab.eos_ids)
        self.k = settings.k
        self.drafter = (
            ModelDrafter(settings.draft, self.prompt_ids, temperature)
            if settings.draft is not None
            else None
        )
        self.stats = SpeculativeStats()
        self.drafter_s = 0.0  # the draft model's time within the current draft

    # -- drafting --------------------------------------------------------------------------------

    def draft(self, particle: Particle, k: int, generator, greedy: bool) -> list[Draft]:
        """One chain of at most k tokens, plus branches where prompt lookup finds several
        continuations (at its first use)."""
        main = Draft(particle.matcher)
        drafts = [main]
        while len(main) < k:
            if main.final.finished():  # a lookup continuation ended with EOS
                break
            if main.final.done():  # only EOS can follow
                main.add(min(self.eos), None, "forced")
                break
            if self.settings.forced and self._take_forced(main, k):
                continue
            if self.settings.lookup:
                context = self.prompt_ids + particle.tokens + main.tokens
                room = self.settings.branches - len(drafts) + 1
                found = lookup_continuations(context, self.settings.lookup, k - len(main), room)
                start = len(main)
                if found and self._take(main, found[0], k, "lookup"):
                    for other in found[1:]:
                        branch = main.prefix(start)
                        if self._take(branch, other, k, "lookup"):
                            drafts.append(branch)
                    continue
            if not self._drafter_pays():
                break
            self.drafter.sync(particle.tokens + main.tokens)
            masked = self.settings.mask_drafts
            mask = _MASKS.device_mask(main.final, torch.device("cpu")) if masked else None
            t_model = time.perf_counter()
            token, proposal = self.drafter.propose(mask, generator, greedy)
            self.drafter_s += time.perf_counter() - t_model
            if token is None:
                break
            if not main.final.check(token):  # an unmasked draft left the language
                main.refused = (token, proposal)
                break
            main.add(token, proposal, "model")
            if (
                token in self.eos
                or math.exp(float(proposal[token])) < self.settings.draft_confidence
            ):
                break
        return drafts

    def _drafter_pays(self) -> bool:
        if self.drafter is None:
            return False
        drafted = self.stats.drafted.get("model", 0)
        kept = self.stats.kept.get("model", 0)
        return drafted < 16 or kept >= self.settings.min_draft_acceptance * drafted

    def _take_forced(self, draft: Draft, k: int) -> bool:
        """Draft the forced text token by token: where the model tokenized the same forced
        text before, its token; else the canonical tokenization (backed off at the end)."""
        forced = draft.final.forced_bytes()
        taken = 0
        while forced and len(draft) < k:
            token = self.preferred.get(forced)
            if token is None:
                canonical = draft.final.forced()
                if not canonical:
                    break
                token = canonical[0]
            if not draft.final.check(token):
                break
            draft.add(token, None, "forced", forced)
            taken += 1
            forced = forced[len(self.model.vocab.token_bytes(token) or b"") :]
        return taken > 0

    def _take(self, draft: Draft, tokens: list[int], k: int, source: str) -> int:
        """Append the prefix of `tokens` the constraint allows (the draft at most k long,
        ending at an EOS); returns how many."""
        taken = 0
        for t in tokens:
            if len(draft) >= k or draft.tokens[-1:] and draft.tokens[-1] in self.eos:
                break
            if not draft.final.check(t):
                break
            draft.add(t, None, source)
            taken += 1
        return taken

    # -- verification ------------------------------------------------------------------------------

    def step(self, particle: Particle, k: int, generator, greedy: bool, stats: StepStats) -> None:
        """One draft, one target forward, the kept tokens and one more, emitted on `particle`."""
        t0 = time.perf_counter()
        self.drafter_s = 0.0
        drafts = self.draft(particle, k, generator, greedy)
        constraint_s = time.perf_counter() - t0 - self.drafter_s  # checks, forced text
        branches = [particle] + [particle.fork(self.model, self.stack) for _ in drafts[1:]]
        scored = self.stack.score(
            [b.stream for b in branches], [b.terms for b in branches], [d.tokens for d in drafts]
        )
        self.stats.target_forwards += 1
        stats.forwards += 1
        emitted: list[int] = []
        alive = list(range(len(drafts)))  # branches that agree with what was emitted
        while True:
            i = len(emitted)
            draft, (main, term_rows) = drafts[alive[0]], scored[alive[0]]
            matcher = draft.matchers[i] if i < len(draft) else draft.final
            prefix = particle.tokens + emitted
            row = self.stack.before_constraint(main[i], [r[i] for r in term_rows], prefix)
            row = particle.without_banned(row, len(prefix))
            candidates = [c for c in alive if i < len(drafts[c])]
            guess = None if greedy else self._sampled_guess(drafts[0], i, alive)
            if guess is not None:
                y, log_w = self._leviathan(row, matcher, prefix, *guess, generator)
            else:  # draw from p~ itself; a deterministic draft is kept when the draw equals it
                d = draw_next(row, matcher, prefix, self.sampler, self.stack, generator, greedy)
                y, log_w = d.token, d.log_weight
                particle.checks += d.checks
                particle.masks += d.masks
                constraint_s += d.constraint_s
            if log_w == -math.inf:
                if emitted:  # keep what came before; the next step starts at the dead end
                    break
                self._keep(particle, particle, drafts[0], drafts[0], [])
                if not particle.backtrack(self.model, self.stack):
                    particle.log_weight = -math.inf
                    particle.finish("dead", "every allowed token has probability 0")
                return
            particle.log_weight += log_w
            emitted.append(y)
            if i < len(draft) and draft.forced[i] and y != draft.tokens[i]:
                data = self.model.vocab.token_bytes(y) or b""
                if data and draft.forced[i].startswith(data):
                    self.preferred[draft.forced[i]] = y
            matching = [c for c in candidates if drafts[c].tokens[i] == y]
            if not matching or y in self.eos:
                break
            alive = matching
        t_keep = time.perf_counter()
        kept = self._keep(particle, branches[alive[0]], drafts[alive[0]], drafts[0], emitted)
        constraint_s += time.perf_counter() - t_keep  # matcher advances (and stream rollbacks)
        stats.constraint_s += constraint_s
        particle.constraint_s += constraint_s
        elapsed = time.perf_counter() - t0
        stats.step_s.append(elapsed)
        particle.step_s.append(elapsed)
        if particle.first_token_at is None:
            particle.first_token_at = time.perf_counter()
        if self.settings.adaptive:
            grown = min(self.k + 2, 4 * self.settings.k)
            self.k = grown if kept == len(drafts[alive[0]]) else max(1, self.k - 1)

    @staticmethod
    def _sampled_guess(chain: Draft, i: int, alive: list[int]):
        """The draft model's token at position i of the chain and its proposal q~, when the
        chain still agrees with what was emitted (a refused token counts: it is rejected).

        Which rule decides position i must not depend on the token drawn there: lookup
        branches may start after that token (their tokens depend on it), so the chain's
        sampled token is always verified by the Leviathan rule, whatever the branches hold;
        a rejection's replacement may still continue a branch."""
        if alive[0] != 0:
            return None
        if i < len(chain):
            q = chain.proposals[i]
            return None if q is None else (chain.tokens[i], q)
        return chain.refused if i == len(chain) else None

    def _leviathan(self, row, matcher, prefix, x: int, q: torch.Tensor, generator):
        """A draft model's token x ~ q~ is kept with probability min(1, p~(x) / q~(x)) (0 for
        a token the constraint forbids); else the replacement comes from norm((p~ - q~)+).
        Returns (token, log Z)."""
        dist, log_z = _target(self.stack, row, matcher, prefix)
        if log_z == -math.inf:
            return None, -math.inf
        q = q.to(dist.device)
        if _uniform(generator) < math.exp(min(0.0, float(dist[x] - q[x]))):
            return x, log_z
        token, _ = categorical(torch.log((torch.exp(dist) - torch.exp(q)).clamp_min(0)), generator)
        if token < 0:  # p~ and q~ equal up to rounding: any draw from p~ will do
            token, _ = categorical(dist, generator)
        return token, log_z

    def _keep(self, particle, branch: Particle, draft: Draft, chain: Draft, emitted) -> int:
        """Move `particle` to the emitted tokens: it takes the streams of the branch that
        matched, rolled back to the kept part of the draft, then the rest appended. Returns
        how many drafted tokens were kept."""
        kept = 0
        while kept < min(len(draft), len(emitted)) and draft.tokens[kept] == emitted[kept]:
            kept += 1
        for source in chain.sources:
            self.stats.drafted[source] = self.stats.drafted.get(source, 0) + 1
        for source in draft.sources[:kept]:
            self.stats.kept[source] = self.stats.kept.get(source, 0) + 1
        self.stats.emitted += len(emitted)
        particle.stream, particle.terms = branch.stream, branch.terms
        streams = [(self.model, particle.stream)] + [
            (m, s) for m, s in zip(self.stack.term_models, particle.terms) if s is not None
        ]
        for model, stream in streams:
            if len(draft) > kept:
                model.rollback(stream, len(draft) - kept)
        for t in emitted:
            particle.matcher.advance(t)
            if t in self.eos:
                particle.finish("stop")
                return kept
            particle.tokens.append(t)
        for t in emitted[kept:]:
            for model, stream in streams:
                model.append(stream, t)
        return kept


_PREFERRED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # constraint -> model -> map


def decode_speculative(
    model,
    particle: Particle,
    stack: BoundStack,
    settings: Speculative,
    sampler,
    *,
    prompt_ids: list[int],
    max_tokens: int,
    temperature: float,
    generator,
    greedy: bool,
    stats: StepStats,
    score_eos: bool,
    timeout: float | None = None,
    fit_deadline: bool = False,
) -> SpeculativeStats:
    """Run `particle` to the end with speculation (see the module docstring); with
    `timeout`, stop (finish reason "timeout") once that many seconds have passed, and with
    `fit_deadline` lower the token budget to what fits before then (`Particle.fit_deadline`)."""
    engine = _Engine(model, stack, settings, prompt_ids, temperature, sampler)
    per_model = _PREFERRED.setdefault(particle.matcher.constraint, {})
    engine.preferred = per_model.setdefault(id(model), {})
    eos = model.vocab.eos_ids[0]
    started = time.perf_counter()
    while particle.running:
        if timeout is not None:
            elapsed = time.perf_counter() - started
            if elapsed > timeout:
                particle.finish("timeout", f"decoding took more than {timeout} s")
                break
            if fit_deadline:
                particle.fit_deadline(elapsed, timeout, max_tokens)
        budget = max_tokens - len(particle.tokens)
        if budget <= 0:
            finish_at_length(model, [particle], stack=stack, score_eos=score_eos, stats=stats)
            break
        if not score_eos and particle.matcher.done():
            particle.matcher.advance(eos)
            particle.finish("stop")
            break
        engine.step(particle, min(engine.k, budget - 1), generator, greedy, stats)
    return engine.stats
