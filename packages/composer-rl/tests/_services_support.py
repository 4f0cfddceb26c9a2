"""Shared pieces of the services tests: a micro policy config and token batches."""

from __future__ import annotations

import random

from composer_model import ModelConfig, preset

VOCAB = 128


def micro_config() -> ModelConfig:
    """The tiny preset shrunk further (vocab 128, 2 layers, 4 experts): seconds on one CPU thread."""
    return preset(
        "tiny",
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        moe_intermediate_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        n_routed_experts=4,
        n_group=2,
        topk_group=1,
        num_experts_per_tok=2,
        kv_lora_rank=16,
        q_lora_rank=16,
        qk_rope_head_dim=8,
        qk_nope_head_dim=8,
        v_head_dim=8,
        max_position_embeddings=128,
        eos_token_id=0,
    )


def token_batch(seed: int, rows: int = 4, length: int = 24) -> list[list[int]]:
    """Repeating patterns (learnable) of ids 1..VOCAB-1 (0 is end-of-text)."""
    rng = random.Random(seed)
    batch = []
    for _ in range(rows):
        period = rng.randint(2, 5)
        motif = [rng.randint(1, VOCAB - 1) for _ in range(period)]
        batch.append([motif[i % period] for i in range(length)])
    return batch
