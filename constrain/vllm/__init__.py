"""constrain inside vLLM: a structured-output backend for the engine people serve at scale.

Installed next to vLLM, this package registers a general plugin (entry point group
``vllm.general_plugins``), which vLLM loads in each of its processes. Start the server with

    python -m vllm.entrypoints.openai.api_server --model DIR \\
        --structured-outputs-config.backend constrain

and every structured request (``response_format`` json_schema and json_object,
``structured_outputs`` json / regex / choice / grammar, ``tool_choice`` required or named) is
compiled and enforced by constrain, with vLLM's scheduler, batching, KV cache, reasoning
parsers and speculative decoding around it (docs/vllm.md). With another backend, nothing
changes.
"""

from __future__ import annotations

__all__ = ["register"]


def register() -> None:
    """The plugin's entry point: teach this vLLM process the ``constrain`` backend (see
    `constrain.vllm.patches`)."""
    from constrain.vllm import patches

    patches.apply()
