"""Model arithmetic (Dekoninck et al., ICLR 2024): formulas over prompted models.

    child = cn.M(model, "You are a child.")         # a term: the model with a system prompt
    adult = cn.M(model, "You are an adult.")
    formula = child - 0.6 * adult                     # a Processor: processors=[formula]

A formula's value is normalised by the sum of its coefficients times the terms' norms, then
softmaxed: ``child - 0.6 adult`` is ``(l_child - 0.6 l_adult) / 0.4 = 2.5 l_child - 1.5
l_adult``. Operators: ``+``, ``-``, scalar ``*``, `Union` (elementwise max: a token likely
under either), `Intersection` (min: likely under both), and `Classifier` terms (norm 0: a
Bayes-rule reweighting by an attribute classifier on the top tokens). A term's prompt is a
system message for the generation's prompt; ``cn.M(model)`` alone is plain decoding of it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from constrain.errors import ArgumentTypeError, ConfigError
from constrain.processors.base import Processor, Step, Term

__all__ = ["Classifier", "Formula", "Intersection", "M", "Union"]


class Formula(Processor):
    """An expression over terms; as a processor it replaces the row by its normalised value."""

    def leaves(self) -> list[Term]:
        raise NotImplementedError

    def evaluate(self, rows: dict[int, torch.Tensor], step: Step) -> tuple[torch.Tensor, object]:
        """(value, norm): the unnormalised value and its norm (a number or a tensor)."""
        raise NotImplementedError

    # -- as a processor -------------------------------------------------------------------------

    def terms(self) -> list[Term]:
        seen: dict[int, Term] = {}
        for term in self.leaves():
            seen.setdefault(id(term), term)
        return list(seen.values())

    def __call__(self, logprobs, term_rows, step: Step):
        rows = {id(t): row for t, row in zip(self.terms(), term_rows)}
        value, norm = self.evaluate(rows, step)
        if isinstance(norm, torch.Tensor):
            if bool((norm == 0).any()):
                raise ConfigError(f"{self!r}: the coefficients of some token's terms sum to 0")
        elif norm == 0:
            raise ConfigError(f"{self!r}: the coefficients of the model terms sum to 0")
        return torch.log_softmax(value / norm, dim=-1)

    # -- operators ------------------------------------------------------------------------------

    def __add__(self, other: Formula) -> Formula:
        return _Sum([self, _formula(other)])

    def __radd__(self, other: Formula) -> Formula:
        return _Sum([_formula(other), self])

    def __sub__(self, other: Formula) -> Formula:
        return _Sum([self, _Scaled(-1.0, _formula(other))])

    def __rsub__(self, other: Formula) -> Formula:
        return _Sum([_formula(other), _Scaled(-1.0, self)])

    def __mul__(self, factor: float) -> Formula:
        return _Scaled(float(factor), self)

    __rmul__ = __mul__

    def __neg__(self) -> Formula:
        return _Scaled(-1.0, self)


def _formula(x) -> Formula:
    if not isinstance(x, Formula):
        raise ArgumentTypeError(f"model arithmetic combines formulas (cn.M(...)), not {x!r}")
    return x


class M(Formula):
    """A prompted model: `model` answering the generation's prompt with `system` as its system
    message (None: the prompt alone, i.e. plain decoding)."""

    def __init__(self, model, system: str | None = None):
        self.term = Term(model, system=system)

    def leaves(self) -> list[Term]:
        return [self.term]

    def evaluate(self, rows, step):
        return rows[id(self.term)], 1.0

    def __repr__(self) -> str:
        return f"M({getattr(self.term.model, 'name', 'model')!r}, {self.term.system!r})"


class _Scaled(Formula):
    def __init__(self, factor: float, inner: Formula):
        self.factor, self.inner = factor, inner

    def leaves(self):
        return self.inner.leaves()

    def evaluate(self, rows, step):
        value, norm = self.inner.evaluate(rows, step)
        return self.factor * value, self.factor * norm

    def __repr__(self) -> str:
        return f"{self.factor} * {self.inner!r}"


class _Sum(Formula):
    def __init__(self, parts: Sequence[Formula]):
        self.parts = list(parts)

    def leaves(self):
        return [leaf for p in self.parts for leaf in p.leaves()]

    def evaluate(self, rows, step):
        value, norm = self.parts[0].evaluate(rows, step)
        for part in self.parts[1:]:
            v, n = part.evaluate(rows, step)
            value, norm = value + v, norm + n
        return value, norm

    def __repr__(self) -> str:
        return " + ".join(f"({p!r})" for p in self.parts)


class Union(Formula):
    """Likely under either: the elementwise max of the values (norm of the larger side)."""

    _pick = staticmethod(torch.ge)

    def __init__(self, a: Formula, b: Formula):
        self.a, self.b = _formula(a), _formula(b)

    def leaves(self):
        return self.a.leaves() + self.b.leaves()

    def evaluate(self, rows, step):
        va, na = self.a.evaluate(rows, step)
        vb, nb = self.b.evaluate(rows, step)
        first = self._pick(va, vb)
        norm_a = torch.as_tensor(na, dtype=va.dtype, device=va.device)
        norm_b = torch.as_tensor(nb, dtype=va.dtype, device=va.device)
        return torch.where(first, va, vb), torch.where(first, norm_a, norm_b)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.a!r}, {self.b!r})"


class Intersection(Union):
    """Likely under both: the elementwise min of the values (norm of the smaller side)."""

    _pick = staticmethod(torch.le)


class Classifier(Formula):
    """An attribute classifier as a term (norm 0, so it reweights without renormalising the
    mixture): for the `top_n` most likely tokens x of `formula`, ``log c(prefix x) - log
    c(prefix)``, where ``c(text)`` is the probability of the attribute; 0 for other tokens.

    Args:
        classify: texts -> log-probabilities of the attribute (one float per text).
        formula: whose top tokens are classified.
        top_n: how many tokens are classified per step.
        decode: token ids -> text (default: the formula's first model's vocabulary).
    """

    def __init__(
        self,
        classify: Callable[[list[str]], Sequence[float]],
        formula: Formula,
        *,
        top_n: int = 20,
        decode: Callable[[list[int]], str] | None = None,
    ):
        self.classify, self.formula, self.top_n = classify, _formula(formula), top_n
        self._decode = decode

    def leaves(self):
        return self.formula.leaves()

    def evaluate(self, rows, step):
        value, norm = self.formula.evaluate(rows, step)
        decode = self._decode or self.formula.leaves()[0].model.vocab.decode
        candidates = torch.topk(value / norm, min(self.top_n, value.shape[-1])).indices.tolist()
        texts = [decode(list(step.prefix))] + [decode([*step.prefix, t]) for t in candidates]
        scores = [float(s) for s in self.classify(texts)]
        out = torch.zeros_like(value)
        for token, score in zip(candidates, scores[1:]):
            out[token] = score - scores[0]
        return out, 0.0

    def __repr__(self) -> str:
        return f"Classifier(top_n={self.top_n})"
