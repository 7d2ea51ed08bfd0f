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
from pathlib import Path

import torch

from constrain.decoding import target
from constrain.decoding.loop import Sampling
from constrain.decoding.sequence import Sequence
from constrain.errors import ConfigError
from constrain.models.diskcache import write_atomically
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
        grammar = sequence.constraint.grammar
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
            raise ConfigError(
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
        """Write the trie and its signature as JSON (flat node list: no recursion limit),
        atomically: a reader finds the previous file or the new one, never a partial one."""
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
        write_atomically(Path(path), json.dumps(data))

    @classmethod
    def load(cls, path: str | os.PathLike) -> ASAp:
        """Read a trie written by `save`, checked to be one.

        Raises:
            ConfigError: the file cannot be read, is not JSON, or does not hold a trie:
                every node but the root is the child of exactly one node and reachable from
                the root (no cycle, no sharing), token ids are distinct non-negative
                integers (below the signature's vocabulary size), log-probabilities are at
                most 0, and each theta is in [0, 1].
        """
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise ConfigError(f"cannot read the ASAp trie {path}: {exc}") from exc
        try:
            nodes, samples, signature = _checked(data)
        except _Malformed as exc:
            raise ConfigError(f"{path} is not a valid ASAp trie ({_FORMAT}): {exc}") from None
        asap = cls()
        asap.root, asap.samples, asap.signature = nodes[0], samples, signature
        return asap


class _Malformed(Exception):
    """What is wrong in a saved trie (becomes a ConfigError naming the file)."""


def _checked(data) -> tuple[list[_Node], int, dict | None]:
    """The nodes (root first), samples and signature of a saved trie, checked."""
    _expect(isinstance(data, dict) and data.get("format") == _FORMAT, f"format is not {_FORMAT}")
    samples, signature, raw = data.get("samples"), data.get("signature"), data.get("nodes")
    _expect(_integer(samples) and samples >= 0, f"samples: {samples!r} is not a count")
    _expect(signature is None or isinstance(signature, dict), "signature is not an object")
    size = signature.get("vocab_size") if isinstance(signature, dict) else None
    _expect(size is None or _integer(size), f"signature.vocab_size: {size!r}")
    _expect(isinstance(raw, list) and raw, "nodes is not a non-empty list")
    nodes, parents = [], [0] * len(raw)
    for i, entry in enumerate(raw):
        _expect(
            isinstance(entry, list) and len(entry) == 3,
            f"nodes[{i}] is not [log_z, theta, children]",
        )
        log_z, theta, children = entry
        _expect(log_z is None or _log_probability(log_z), f"nodes[{i}]: log_z {log_z!r}")
        _expect(_real(theta) and 0 <= theta <= 1, f"nodes[{i}]: theta {theta!r} not in [0, 1]")
        _expect(isinstance(children, list), f"nodes[{i}]: children is not a list")
        for child in children:
            _expect(isinstance(child, list) and len(child) == 3, f"nodes[{i}]: child {child!r}")
            token, lp, j = child
            _expect(
                _integer(token) and token >= 0 and (size is None or token < size),
                f"nodes[{i}]: token {token!r} is not a token id",
            )
            _expect(_log_probability(lp), f"nodes[{i}]: log-probability {lp!r}")
            _expect(_integer(j) and 0 < j < len(raw), f"nodes[{i}]: child index {j!r}")
            parents[j] += 1
            _expect(parents[j] == 1, f"nodes[{j}] has more than one parent")
        tokens = [c[0] for c in children]
        _expect(len(set(tokens)) == len(tokens), f"nodes[{i}]: a token appears twice")
        nodes.append(_Node(None if log_z is None else float(log_z), float(theta)))
    for node, (_, _, children) in zip(nodes, raw):
        node.children = {t: (float(lp), nodes[j]) for t, lp, j in children}
    # every node but the root has one parent, so if all are reachable from the root, no cycle
    # hides among them
    reached, stack = {0}, [0]
    while stack:
        for _, _, j in raw[stack.pop()][2]:
            reached.add(j)
            stack.append(j)
    unreached = len(raw) - len(reached)
    _expect(not unreached, f"{unreached} nodes are not reachable from the root (a cycle)")
    return nodes, samples, signature


def _expect(holds: bool, what: str) -> None:
    if not holds:
        raise _Malformed(what)


def _integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _real(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def _log_probability(value) -> bool:
    """A log-probability: a real number (or -inf) at most 0, give or take rounding."""
    return _real(value) and value <= 1e-6


class ASApSampling(Sampling):
    """Each sequence draws from ``p(t | u) theta(u t)`` over the allowed tokens, following its
    path in the trie; an ended sequence tightens theta along its path. Samples are unweighted
    (log-weight 0, -inf when dead)."""

    def __init__(self, asap: ASAp, generator: torch.Generator | None, stats: DecodeStats):
        super().__init__(None, generator, stats, scores_eos=True)
        self.asap = asap
        self._paths: dict[int, list[_Node]] = {}  # by id() of the running sequences

    def needing_masks(self, sequences: list[Sequence]) -> list[Sequence]:
        return sequences  # every draw reads the whole mask (`target.distribution`)

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
