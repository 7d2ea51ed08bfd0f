"""Speculative decoding under a constraint, a strategy of the decoding loop: propose, verify.

Each step drafts up to k tokens per sequence (grammar-forced tokens, prompt-lookup copies, a
draft model), pruned by a forked matcher; one batched forward scores the targets (and every
processor's term stream) over every sequence's drafts; each verified position's target
distribution p~ is the plain step's (`constrain.decoding.target`); then, position by position
(Leviathan et al. 2023):

* a token drawn from a distribution q~ (the draft model's, masked) is kept with probability
  ``min(1, p~(x) / q~(x))``; on rejection the replacement comes from ``norm((p~ - q~)+)``;
* a deterministic guess (q~ a point mass) is kept when a draw from p~ equals it; otherwise
  that draw is the replacement (the same rule with q~ = delta);
* when the whole draft is kept, the row after it gives a bonus token.

So every emitted token has exactly the non-speculative distribution; in greedy mode a draft
token is kept iff it is the argmax, and the output tokens are identical. The sequence then
keeps the streams of the branch that matched, rolled back to what was kept.
"""

from __future__ import annotations

import math
import time

import torch

from constrain.decoding import target
from constrain.decoding.drafters import Draft, ModelDrafter, lookup_continuations
from constrain.decoding.loop import Sampling, forward, record
from constrain.decoding.sequence import Sequence
from constrain.options import DecodingConfig, Speculative
from constrain.results import DecodeStats
from constrain.samplers import token_sampler
from constrain.samplers.base import Draw, categorical

__all__ = ["SpeculativeSampling"]


class SpeculativeSampling(Sampling):
    """Propose drafts for every sequence, verify them all in one batched forward."""

    def __init__(
        self, config: DecodingConfig, generator: torch.Generator | None, stats: DecodeStats
    ):
        sampler, greedy = token_sampler(config.sampler), config.greedy
        super().__init__(sampler, generator, stats, greedy=greedy, scores_eos=not greedy)
        self.settings: Speculative = config.speculative
        self.max_tokens, self.temperature = config.max_tokens, config.temperature
        # by id() of the running sequences: the draft length, the draft model's stream
        self._k: dict[int, int] = {}
        self._drafters: dict[int, ModelDrafter] = {}

    def finished(self, sequence: Sequence) -> None:
        self._k.pop(id(sequence), None)
        self._drafters.pop(id(sequence), None)

    def step(self, sequences: list[Sequence]) -> None:
        drafts, spent = [], []
        for s in sequences:
            t_draft = time.perf_counter()
            k = self._k.setdefault(id(s), self.settings.k)
            proposed, model_s = self.propose(s, min(k, self.max_tokens - len(s.tokens) - 1))
            drafts.append(proposed)
            spent.append(time.perf_counter() - t_draft - model_s)  # checks, forced text
        branches = [[s] + [s.fork() for _ in d[1:]] for s, d in zip(sequences, drafts)]
        flat = [b for group in branches for b in group]
        scored = iter(forward(flat, [d.tokens for group in drafts for d in group], self.stats))
        for s, group, ds, seconds in zip(sequences, branches, drafts, spent):
            self.verify(s, group, ds, [next(scored) for _ in group], seconds)

    # -- drafting --------------------------------------------------------------------------------

    def propose(self, s: Sequence, k: int) -> tuple[list[Draft], float]:
        """Drafts after `s`: one chain of at most k tokens, plus branches where prompt lookup
        finds several continuations (at its first use); and the draft model's seconds."""
        settings, eos = self.settings, s.model.vocab.eos_ids
        model_s = 0.0
        main = Draft(s.matcher)
        drafts = [main]
        while len(main) < k:
            if main.final.finished():  # a lookup continuation ended with EOS
                break
            if main.final.done():  # only EOS can follow
                main.add(eos[0], None, "forced")
                break
            if settings.forced and self._take_forced(s, main, k):
                continue
            if settings.lookup:
                context = [*s.stack.prompt_ids, *s.tokens, *main.tokens]
                room = settings.branches - len(drafts) + 1
                found = lookup_continuations(context, settings.lookup, k - len(main), room)
                start = len(main)
                if found and _take(main, found[0], k, "lookup", eos):
                    for other in found[1:]:
                        branch = main.prefix(start)
                        if _take(branch, other, k, "lookup", eos):
                            drafts.append(branch)
                    continue
            drafter = self._drafter(s)
            if drafter is None:
                break
            drafter.sync(s.tokens + main.tokens)
            final = main.final
            mask = s.constraint.device_mask(final, "cpu") if settings.mask_drafts else None
            t_model = time.perf_counter()
            token, proposal = drafter.propose(mask, self.generator, self.greedy)
            model_s += time.perf_counter() - t_model
            if token is None:
                break
            if not final.check(token):  # an unmasked draft left the language
                main.refused = (token, proposal)
                break
            main.add(token, proposal, "model")
            if token in eos or math.exp(float(proposal[token])) < settings.draft_confidence:
                break
        return drafts, model_s

    def _drafter(self, s: Sequence) -> ModelDrafter | None:
        """The draft model's stream for `s`, while the draft model pays for itself."""
        if self.settings.draft is None:
            return None
        drafted, kept = s.stats.drafted.get("model", 0), s.stats.kept.get("model", 0)
        if drafted >= 16 and kept < self.settings.min_draft_acceptance * drafted:
            return None
        if id(s) not in self._drafters:
            prompt = list(s.stack.prompt_ids)
            self._drafters[id(s)] = ModelDrafter(self.settings.draft, prompt, self.temperature)
        return self._drafters[id(s)]

    def _take_forced(self, s: Sequence, draft: Draft, k: int) -> bool:
        """Draft the forced text token by token: where the model tokenized the same forced
        text before, its token; else the canonical tokenization (backed off at the end)."""
        choices = s.constraint.forced_choices
        forced = draft.final.forced_bytes()
        taken = 0
        while forced and len(draft) < k:
            token = choices.get((s.model.name, forced))
            if token is None:
                canonical = draft.final.forced()
                if not canonical:
                    break
                token = canonical[0]
            if not draft.final.check(token):
                break
            draft.add(token, None, "forced", forced)
            taken += 1
            forced = forced[len(s.model.vocab.token_bytes(token) or b"") :]
        return taken > 0

    # -- verification ------------------------------------------------------------------------------

    def verify(self, s: Sequence, branches, drafts, scored, constraint_s: float) -> None:
        """Emit on `s` the kept tokens of its drafts and one more (see the module docstring)."""
        emitted: list[int] = []
        eos = set(s.model.vocab.eos_ids)
        alive = list(range(len(drafts)))  # branches that agree with what was emitted
        while True:
            i = len(emitted)
            draft, (main, term_rows) = drafts[alive[0]], scored[alive[0]]
            matcher = draft.matchers[i] if i < len(draft) else draft.final
            prefix = s.tokens + emitted
            row = s.control_row(main, term_rows, i, emitted)
            guess = None if self.greedy else _sampled_guess(drafts[0], i, alive)
            if guess is not None:
                d = self._leviathan(row, matcher, prefix, s, *guess)
            else:  # draw from p~ itself; a deterministic draft is kept when the draw equals it
                d = target.draw(
                    row, matcher, prefix, s.stack, self.sampler, self.generator, self.greedy
                )
            record(d, s, self.stats, d.constraint_s)
            if d.log_weight == -math.inf:
                if emitted:  # keep what came before; the next step starts at the dead end
                    break
                self._keep(s, branches[0], drafts[0], drafts[0], [])
                s.dead_end(d.reason)
                return
            s.log_weight += d.log_weight
            emitted.append(d.token)
            if i < len(draft) and draft.forced[i] and d.token != draft.tokens[i]:
                data = s.model.vocab.token_bytes(d.token) or b""
                if data and draft.forced[i].startswith(data):
                    s.constraint.forced_choices[(s.model.name, draft.forced[i])] = d.token
            matching = [c for c in alive if i < len(drafts[c]) and drafts[c].tokens[i] == d.token]
            if not matching or d.token in eos:
                break
            alive = matching
        t_keep = time.perf_counter()
        kept = self._keep(s, branches[alive[0]], drafts[alive[0]], drafts[0], emitted)
        seconds = constraint_s + time.perf_counter() - t_keep  # matcher advances, rollbacks
        s.stats.constraint_s += seconds
        self.stats.constraint_s += seconds
        if self.settings.adaptive:
            k = self._k[id(s)]
            self._k[id(s)] = (
                min(k + 2, 4 * self.settings.k) if kept == len(drafts[alive[0]]) else max(1, k - 1)
            )

    def _leviathan(self, row, matcher, prefix, s: Sequence, x: int, q: torch.Tensor) -> Draw:
        """A draft model's token x ~ q~ is kept with probability min(1, p~(x) / q~(x)) (0 for
        a token the constraint forbids); else the replacement comes from norm((p~ - q~)+).
        The weight is log Z, as LCD's."""
        t0 = time.perf_counter()
        dist, log_z = target.distribution(row, matcher, prefix, s.stack)
        spent = time.perf_counter() - t0
        if log_z == -math.inf:
            return Draw(0, -math.inf, masks=1, reason=target.NOTHING_ALLOWED, constraint_s=spent)
        q = q.to(dist.device)
        device = self.generator.device if self.generator is not None else "cpu"
        u = float(torch.rand(1, generator=self.generator, device=device))
        if u < math.exp(min(0.0, float(dist[x] - q[x]))):
            return Draw(x, log_z, masks=1, constraint_s=spent)
        residual = torch.log((torch.exp(dist) - torch.exp(q)).clamp_min(0))
        token, _ = categorical(residual, self.generator)
        if token < 0:  # p~ and q~ equal up to rounding: any draw from p~ will do
            token, _ = categorical(dist, self.generator)
        return Draw(token, log_z, masks=1, constraint_s=spent)

    def _keep(self, s: Sequence, branch: Sequence, draft: Draft, chain: Draft, emitted) -> int:
        """Move `s` to the emitted tokens: it takes the streams of the branch that matched,
        rolled back to the kept part of the draft, then the rest appended. Returns how many
        drafted tokens were kept."""
        kept = 0
        while kept < min(len(draft), len(emitted)) and draft.tokens[kept] == emitted[kept]:
            kept += 1
        for source in chain.sources:
            s.stats.drafted[source] = s.stats.drafted.get(source, 0) + 1
        for source in draft.sources[:kept]:
            s.stats.kept[source] = s.stats.kept.get(source, 0) + 1
        s.stats.emitted += len(emitted)
        s.stream, s.terms = branch.stream, branch.terms
        if len(draft) > kept:
            for model, stream in s.streams():
                model.rollback(stream, len(draft) - kept)
        s.emit(emitted, in_streams=kept)
        return kept


def _take(draft: Draft, tokens: list[int], k: int, source: str, eos) -> int:
    """Append the prefix of `tokens` the constraint allows (the draft at most k long, ending
    at an EOS); returns how many."""
    taken = 0
    for t in tokens:
        if len(draft) >= k or draft.tokens[-1:] and draft.tokens[-1] in eos:
            break
        if not draft.final.check(t):
            break
        draft.add(t, None, source)
        taken += 1
    return taken


def _sampled_guess(chain: Draft, i: int, alive: list[int]):
    """The draft model's token at position i of the chain and its proposal q~, when the chain
    still agrees with what was emitted (a refused token counts: it is rejected).

    Which rule decides position i must not depend on the token drawn there: lookup branches
    may start after that token (their tokens depend on it), so the chain's sampled token is
    always verified by the Leviathan rule, whatever the branches hold; a rejection's
    replacement may still continue a branch."""
    if alive[0] != 0:
        return None
    if i < len(chain):
        q = chain.proposals[i]
        return None if q is None else (chain.tokens[i], q)
    return chain.refused if i == len(chain) else None
