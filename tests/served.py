"""What the server's tests share: the name they serve the model under, a small schema, an
`openai` client of a live server, and the bundled weights under another chat template."""

from __future__ import annotations

import copy

NAME = "smollm2"
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


def client(url: str, retries: int = 0):
    """The official client of the server at `url` (no retries unless asked: a failure
    shows; a client sending many new schemas at once retries the 429 of a busy compiler, as
    the SDK does by default)."""
    import openai

    return openai.OpenAI(base_url=f"{url}/v1", api_key="none", timeout=120, max_retries=retries)


def with_template(model, template: str):
    """The same weights with a copy of the tokenizer that uses `template`."""
    from constrain.models.transformers_lm import TransformersLM

    tokenizer = copy.deepcopy(model.tokenizer)
    tokenizer.chat_template = template
    return TransformersLM(model.hf_model, tokenizer, name=model.name, device=None)
