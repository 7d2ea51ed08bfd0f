"""A 2-layer Llama with random weights: a real transformers model that loads in milliseconds."""

from __future__ import annotations


def tiny_llama(vocab_size: int, dtype=None):
    """The tiny Llama for `vocab_size` tokens, seeded, in `dtype` (default float32)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        eos_token_id=2,
        bos_token_id=1,
    )
    return LlamaForCausalLM(config).to(dtype or torch.float32)
