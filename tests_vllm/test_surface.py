"""The vLLM surface the plugin patches is where it was tested: this fails loudly when a new
vLLM release moves it (then `constrain.vllm.patches` needs a look, and TESTED_VERSIONS too)."""

from __future__ import annotations

import typing

import pytest


def test_the_installed_vllm_is_a_tested_release_with_the_expected_surface():
    from constrain.vllm import patches

    assert patches.surface_problems() == []


def test_the_plugin_is_registered_and_admits_the_backend_name():
    from importlib.metadata import entry_points

    plugins = {e.name: e.value for e in entry_points(group="vllm.general_plugins")}
    assert plugins.get("constrain") == "constrain.vllm:register"

    from constrain.vllm import register

    register()
    register()  # vLLM may load plugins more than once per process
    from vllm.config.structured_outputs import StructuredOutputsConfig

    assert StructuredOutputsConfig(backend="constrain").backend == "constrain"
    backend = typing.get_args(StructuredOutputsConfig.__annotations__["backend"])
    assert backend.count("constrain") == 1
    with pytest.raises(Exception, match="literal"):
        StructuredOutputsConfig(backend="no-such-backend")


def test_the_command_line_takes_the_backend():
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    from constrain.vllm import register

    register()
    parser = AsyncEngineArgs.add_cli_args(FlexibleArgumentParser())
    args = parser.parse_args(["--structured-outputs-config.backend", "constrain"])
    assert args.structured_outputs_config.backend == "constrain"


def test_other_backends_are_left_alone():
    """With xgrammar configured, a request is validated by vLLM's own code, not ours."""
    from vllm.config.structured_outputs import StructuredOutputsConfig
    from vllm.sampling_params import SamplingParams, StructuredOutputsParams

    from constrain.vllm import register

    register()
    params = SamplingParams(structured_outputs=StructuredOutputsParams(regex="[a-z]+"))
    config = StructuredOutputsConfig(backend="xgrammar")
    model_config = type("M", (), {"is_diffusion": False})()
    params._validate_structured_outputs(model_config, config, tokenizer=object())
    assert params.structured_outputs._backend == "xgrammar"
