"""Invalid options are `cn.ConfigError`s (a `ConstrainError`, and a `ValueError`) naming the
option and the value, wherever they are given: `DecodingConfig`, `generate`'s keywords,
`SMC`, `Speculative`, the processors."""

from __future__ import annotations

import math

import pytest

import constrain as cn
from constrain.processors.base import ProcessorStack


def _refused(call, *needles):
    with pytest.raises(cn.ConstrainError) as info:
        call()
    assert isinstance(info.value, cn.ConfigError) and isinstance(info.value, ValueError)
    for needle in needles:
        assert needle in str(info.value), (needle, str(info.value))


@pytest.mark.parametrize("temperature", [0, -1.0, math.nan, math.inf, "hot", None])
def test_invalid_temperatures(temperature):
    _refused(lambda: cn.DecodingConfig(temperature=temperature), "temperature", repr(temperature))
    _refused(lambda: cn.Temperature(temperature), "temperature")


@pytest.mark.parametrize(
    "options, needle",
    [
        (dict(max_tokens=0), "max_tokens"),
        (dict(max_tokens=2.5), "max_tokens"),
        (dict(max_tokens=True), "max_tokens"),
        (dict(backtracks=-1), "backtracks"),
        (dict(timeout=-1), "timeout"),
        (dict(timeout=math.nan), "timeout"),
        (dict(greedy="yes"), "greedy"),
        (dict(chat="no"), "chat"),
        (dict(system=3), "system"),
        (dict(sampler="beam"), "beam"),
        (dict(sampler=3), "sampler"),
        (dict(processors=[3]), "not a processor"),
        (dict(processors=cn.TopK(3)), "processors"),
        (dict(speculative=True), "speculative"),
    ],
)
def test_invalid_decoding_options(options, needle):
    _refused(lambda: cn.DecodingConfig(**options), needle)


def test_invalid_sampler_and_processor_settings():
    _refused(lambda: cn.SMC(particles=0), "SMC.particles")
    _refused(lambda: cn.SMC(ess_threshold=1.5), "SMC.ess_threshold")
    _refused(lambda: cn.SMC(resampling="best"), "SMC.resampling")
    _refused(lambda: cn.Speculative(k=0), "Speculative.k")
    _refused(lambda: cn.Speculative(lookup=-1), "Speculative.lookup")
    for make in (
        lambda: cn.TopK(0),
        lambda: cn.TopK(2.5),
        lambda: cn.TopP(0),
        lambda: cn.TopP("0.9"),
        lambda: cn.MinP(1.5),
        lambda: cn.Typical(1),
        lambda: cn.TopH(0),
        lambda: cn.RepetitionPenalty(0),
        lambda: cn.RepetitionPenalty(math.nan),
    ):
        _refused(make)


def test_generate_reports_bad_keywords_as_config_errors(tiny_model):
    _refused(lambda: cn.generate(tiny_model, "x", regex="a", temperature=0), "temperature")
    _refused(
        lambda: cn.generate(tiny_model, "x", regex="a", max_token=5), "max_token", "max_tokens"
    )
    _refused(lambda: cn.generate(tiny_model, "x", regex="a", choices=["a"]), "at most one")
    _refused(lambda: cn.generate(tiny_model, "x", prompts=["y"], regex="a"), "prompt")
    _refused(lambda: cn.generate(tiny_model, prompts="abc", regex="a"), "list of prompts")
    _refused(lambda: cn.generate(tiny_model, 3, regex="a"), "prompt", "int")
    _refused(lambda: cn.stream(tiny_model, "x", regex="a", sampler=cn.SMC()), "streaming")
    _refused(lambda: cn.generate(tiny_model, "x", regex="a", config={"greedy": True}), "config")


def test_wrong_kinds_of_objects_are_constrain_errors():
    """Objects of the wrong kind are `ArgumentTypeError`s (a `ConfigError` and a `TypeError`),
    unsupported Python types `AnnotationError`s; before, bare `TypeError`s."""
    for call, error, needle in [
        (lambda: ProcessorStack([cn.TopK(5), "top-p"]), cn.ArgumentTypeError, "HFProcessor"),
        (lambda: cn.M("a") + 3, cn.ArgumentTypeError, "formulas"),
        (lambda: cn.Grammar.from_type(complex), cn.AnnotationError, "complex"),
        (lambda: cn.Grammar.from_regex(5), cn.RegexError, "str"),
        (lambda: cn.Vocabulary([b"a", b"b"], eos_ids=[7]), cn.VocabularyError, "EOS"),
    ]:
        with pytest.raises(error, match=needle) as info:
            call()
        assert isinstance(info.value, cn.ConstrainError)
