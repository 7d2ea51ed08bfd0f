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
from dataclasses import dataclass

import torch

from constrain.decoding import target
from constrain.decoding.drafters import Draft, ModelDrafter, lookup_continuations
from constrain.decoding.loop import Sampling, forward, record
from constrain.decoding.sequence import Sequence
from constrain.results import DecodeStats
from constrain.samplers.base import Draw, TokenSampler, categorical

__all__ = ["Speculative", "SpeculativeSampling"]


@dataclass
class Speculative:
    """Speculative decoding settings: ``cn.generate(..., speculative=cn.Speculative(...))``.

    Args:
        draft: a draft model sharing the tokenizer (e.g. ``model.with_layers(range(8))`` for
            self-speculation, see `constrain.models.layers`); None: deterministic drafts only.
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


class _Drafting:
    """What speculation keeps per sequence: its draft length and its draft model's stream."""

    __slots__ = ("k", "drafter")

    def __init__(self, k: int, drafter: ModelDrafter | None):
        self.k = k
        self.drafter = drafter


class SpeculativeSampling(Sampling):
    """Propose drafts for every sequence, verify them all in one batched forward."""

    def __init__(
        self,
        settings: Speculative,
        sampler: TokenSampler,
        generator: torch.Generator | None,
        stats: DecodeStats,
        *,
        greedy: bool,
        scores_eos: bool,
        max_tokens: int,
        temperature: float,
    ):
        super().__init__(sampler, generator, stats, greedy=greedy, scores_eos=scores_eos)
        self.settings = settings
        self.max_tokens = max_tokens
        self.temperature = temperature
        self._drafting: dict[int, _Drafting] = {}  # by id() of the running sequences

    def finished(self, sequence: Sequence) -> None:
        self._drafting.pop(id(sequence), None)

    def step(self, sequences: list[Sequence]) -> None:
        states = [self._state(s) for s in sequences]
        drafts, spent = [], []
        for s, state in zip(sequences, states):
            t_draft = time.perf_counter()
            proposed, model_s = self.propose(s, min(state.k, self.max_tokens - len(s.tokens) - 1))
            drafts.append(proposed)
            spent.append(time.perf_counter() - t_draft - model_s)  # checks, forced text
        branches = [[s] + [s.fork() for _ in d[1:]] for s, d in zip(sequences, drafts)]
        flat = [b for group in branches for b in group]
        scored = iter(forward(flat, [d.tokens for group in drafts for d in group], self.stats))
        for s, state, group, ds, seconds in zip(sequences, states, branches, drafts, spent):
            rows = [next(scored) for _ in group]
            self.verify(s, state, group, ds, rows, seconds)

    def _state(self, s: Sequence) -> _Drafting:
        state = self._drafting.get(id(s))
        if state is None:
            draft = self.settings.draft
            drafter = None
            if draft is not None:
                drafter = ModelDrafter(draft, list(s.stack.prompt_ids), self.temperature)
            state = self._drafting[id(s)] = _Drafting(self.settings.k, drafter)
        return state

    # -- drafting --------------------------------------------------------------------------------

    def propose(self, s: Sequence, k: int) -> tuple[list[Draft], float]:
        """Drafts after `s`: one chain of at most k tokens, plus branches where prompt lookup
        finds several continuations (at its first use); and the draft model's seconds."""
        settings, eos = self.settings, s.matcher.constraint.vocab.eos_ids
        state, model_s = self._state(s), 0.0
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
            if not self._drafter_pays(s, state):
                break
            state.drafter.sync(s.tokens + main.tokens)
            final = main.final
            mask = final.constraint.device_mask(final, "cpu") if settings.mask_drafts else None
            t_model = time.perf_counter()
            token, proposal = state.drafter.propose(mask, self.generator, self.greedy)
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

    def _drafter_pays(self, s: Sequence, state: _Drafting) -> bool:
        if state.drafter is None:
            return False
        drafted, kept = s.stats.drafted.get("model", 0), s.stats.kept.get("model", 0)
        return drafted < 16 or kept >= self.settings.min_draft_acceptance * drafted

    def _take_forced(self, s: Sequence, draft: Draft, k: int) -> bool:
        """Draft the forced text token by token: where the model tokenized the same forced
        text before, its token; else the canonical tokenization (backed off at the end)."""
        choices = draft.final.constraint.forced_choices
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

    def verify(self, s: Sequence, state, branches, drafts, scored, constraint_s: float) -> None:
        """Emit on `s` the kept tokens of its drafts and one more (see the module docstring)."""
        emitted: list[int] = []
        eos = set(s.matcher.constraint.vocab.eos_ids)
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
                    s.matcher.constraint.forced_choices[(s.model.name, draft.forced[i])] = d.token
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
            grown = min(state.k + 2, 4 * self.settings.k)
            state.k = grown if kept == len(drafts[alive[0]]) else max(1, state.k - 1)

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
