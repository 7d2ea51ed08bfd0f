"""ASAp: adaptive sampling with approximate expected futures (Park et al., NeurIPS 2024).

Grammar-constrained decoding samples each token from ``p(t | u) c(u t)``, the model restricted
to tokens that keep the prefix u completable. The grammar-conditional distribution wants
``p(t | u) EFG(u t)`` instead, where ``EFG(v) = sum over complete texts x extending v of
p(x EOS | v)`` is the expected future grammaticality: the probability that the model, left
alone, finishes v inside the language. EFG is intractable; ASAp keeps an over-approximation
``theta(v) >= EFG(v)`` in a persistent trie of the prefixes it has sampled:

* an unvisited prefix has ``theta = c(v)`` (1 if completable, else 0; the mask gives it);
* after each sample, along its path from the leaf up,
  ``theta(u) = sum over allowed t of p(t | u) theta(u t)
  = Z(u) - sum over visited children t of p(t | u) (1 - theta(u t))``;
* the next sample draws ``t`` in proportion to ``p(t | u) theta(u t)``.

So the first sample is plain constrained decoding, and every sample makes theta tighter
(it never increases and never drops below EFG); repeated samples converge to
``p(x | x in L)``. Samples are unweighted; exactness is asymptotic (see the tests for the
17-string example of the paper). The trie belongs to one (model, prompt, constraint,
temperature) and can be saved and loaded.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field

import torch

from constrain.decoding import target
from constrain.decoding.loop import Sampling
from constrain.decoding.sequence import Sequence
from constrain.results import DecodeStats
from constrain.samplers.base import Draw, categorical

__all__ = ["ASAp", "ASApSampling"]

_FORMAT = "constrain.asap/1"


@dataclass
class _Node:
    """A sampled prefix: the allowed mass Z (once visited) and the sampled children."""

    log_z: float | None = None
    theta: float = 1.0
    children: dict[int, tuple[float, _Node]] = field(default_factory=dict)  # token -> (log p, node)

    def update(self) -> None:
        if self.log_z is None:
            return
        lost = sum(math.exp(lp) * (1.0 - child.theta) for lp, child in self.children.values())
        self.theta = min(self.theta, max(0.0, math.exp(self.log_z) - lost))


class ASAp:
    """Grammar-aligned sampling: a persistent sampler whose repeated samples converge to the
    model conditioned on the constraint.

    Use one ASAp object per (model, prompt, constraint, temperature) and call
    ``cn.generate(..., sampler=asap)`` repeatedly; `save` / `load` keep its trie.
    """

    name = "asap"

    def __init__(self) -> None:
        self.root = _Node()
        self.samples = 0
        self.signature: dict | None = None

    def bind(self, sequence: Sequence) -> None:
        """Check that `sequence` samples what this trie describes (the first one sets it)."""
        grammar = sequence.matcher.constraint.grammar
        signature = {
            "model": getattr(sequence.model, "name", ""),
            "vocab_size": sequence.model.vocab.size,
            "prompt_ids": list(sequence.stack.prompt_ids),
            "grammar": f"{grammar.kind}:{grammar.source}",
            "processors": repr(sequence.stack.stack),  # temperature included
        }
        if self.signature is None:
            self.signature = signature
        elif self.signature != signature:
            changed = [k for k in signature if signature[k] != self.signature[k]]
            raise ValueError(
                f"this ASAp trie was built for another {', '.join(changed)}; "
                f"use a new cn.ASAp() for a new prompt, constraint, model or processors"
            )

    # -- inspection and persistence ----------------------------------------------------------------

    def theta(self, tokens: list[int]) -> float:
        """The current over-approximation of the expected future grammaticality after
        `tokens` (1.0 for a prefix never sampled)."""
        node = self.root
        for t in tokens:
            if t not in node.children:
                return 1.0
            node = node.children[t][1]
        return node.theta

    def nodes(self) -> list[tuple[tuple[int, ...], float]]:
        """Every sampled prefix with its theta (depth first)."""
        out, stack = [], [((), self.root)]
        while stack:
            prefix, node = stack.pop()
            out.append((prefix, node.theta))
            stack.extend((prefix + (t,), child) for t, (_, child) in node.children.items())
        return out

    def save(self, path: str | os.PathLike) -> None:
        """Write the trie and its signature as JSON (flat node list: no recursion limit)."""
        index: dict[int, int] = {}
        order: list[_Node] = []
        stack = [self.root]
        while stack:
            node = stack.pop()
            index[id(node)] = len(order)
            order.append(node)
            stack.extend(child for _, child in node.children.values())
        nodes = [
            [n.log_z, n.theta, [[t, lp, index[id(c)]] for t, (lp, c) in n.children.items()]]
            for n in order
        ]
        data = {"format": _FORMAT, "signature": self.signature, "samples": self.samples}
        data["nodes"] = nodes
        with open(path, "w") as f:
            json.dump(data, f)

    @classmethod
    def load(cls, path: str | os.PathLike) -> ASAp:
        """Read a trie written by `save`."""
        with open(path) as f:
            data = json.load(f)
        if data.get("format") != _FORMAT:
            raise ValueError(f"{path} is not an ASAp trie ({_FORMAT})")
        nodes = [_Node(log_z, theta) for log_z, theta, _ in data["nodes"]]
        for node, (_, _, children) in zip(nodes, data["nodes"]):
            node.children = {t: (lp, nodes[i]) for t, lp, i in children}
        asap = cls()
        asap.root, asap.samples, asap.signature = nodes[0], data["samples"], data["signature"]
        return asap


class ASApSampling(Sampling):
    """Each sequence draws from ``p(t | u) theta(u t)`` over the allowed tokens, following its
    path in the trie; an ended sequence tightens theta along its path. Samples are unweighted
    (log-weight 0, -inf when dead)."""

    def __init__(self, asap: ASAp, generator: torch.Generator | None, stats: DecodeStats):
        super().__init__(None, generator, stats, scores_eos=True)
        self.asap = asap
        self._paths: dict[int, list[_Node]] = {}  # by id() of the running sequences

    def draw(self, row: torch.Tensor, sequence: Sequence) -> Draw:
        path = self._paths.get(id(sequence))
        if path is None:
            self.asap.bind(sequence)
            path = self._paths[id(sequence)] = [self.asap.root]
        node = path[-1]
        dist, log_z = target.distribution(row, sequence.matcher, sequence.tokens, sequence.stack)
        if node.log_z is None:
            node.log_z = log_z
        if log_z > -math.inf:
            for token, (_, child) in node.children.items():
                dist[token] += math.log(child.theta) if child.theta > 0 else -math.inf
        token, _ = categorical(dist, self.generator) if log_z > -math.inf else (-1, 0.0)
        if token < 0:
            return Draw(0, -math.inf, masks=1, reason=target.NOTHING_ALLOWED)
        if token not in node.children:  # p(t | u), the allowed mass log_z times p~
            node.children[token] = (float(dist[token]) + log_z, _Node())
        path.append(node.children[token][1])
        return Draw(token, 0.0, masks=1)

    def finished(self, sequence: Sequence) -> None:
        for visited in reversed(self._paths.pop(id(sequence), [])):
            visited.update()
        self.asap.samples += 1
        if sequence.log_weight != -math.inf:
            sequence.log_weight = 0.0  # at max_tokens the loop weighs EOS: samples are unweighted
