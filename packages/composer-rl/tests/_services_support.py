"""Shared pieces of the services tests: a micro policy config, token batches, and a micro
agent that calls a tool every turn."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import torch

from composer_model import ComposerModel, ModelConfig, preset, save_pretrained, train_tokenizer
from composer_rl.agent.format import ASSISTANT, TOOL_CALL, TOOL_CALL_END, render_prompt
from composer_rl.tasks.model import Task

VOCAB = 128

AGENT_VOCAB = 400
AGENT_CALL = "list_files\n"
"""The body of the call `micro_agent`'s policy writes every turn (a well-formed call)."""


def micro_config(vocab_size: int = VOCAB, max_position_embeddings: int = 128) -> ModelConfig:
    """The tiny preset shrunk further (vocab 128, 2 layers, 4 experts): seconds on one CPU thread."""
    return preset(
        "tiny",
        vocab_size=vocab_size,
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
        max_position_embeddings=max_position_embeddings,
        eos_token_id=0,
    )


def micro_agent(directory: Path, tasks: list[Task]) -> Path:
    """A checkpoint directory (weights and tokenizer) of a micro policy whose greedy decoding
    writes ``<|tool_call|>list_files\n<|/tool_call|>`` every turn, so each turn of an episode
    is a real tool call in its sandbox.

    Attention and feed-forward outputs are scaled down so each hidden state is mostly its
    token's embedding; the chain's tokens get embeddings orthogonal to all others and the head
    maps each to the next token of the call (after `<|assistant|>` or `<|/tool_result|>`).
    """
    texts = [render_prompt(t.instruction) for t in tasks] + [TOOL_CALL + AGENT_CALL + TOOL_CALL_END]
    tokenizer = train_tokenizer(texts * 8, vocab_size=AGENT_VOCAB)
    special = tokenizer.special_ids
    body = tokenizer.encode(AGENT_CALL)
    chain = [special[ASSISTANT], special["<|/tool_result|>"]]
    steps = [(source, special[TOOL_CALL]) for source in chain]
    path = [special[TOOL_CALL], *body, special[TOOL_CALL_END]]
    steps += list(itertools.pairwise(path))
    keys = sorted({source for source, _ in steps})
    assert len(keys) == len(steps), f"the call's tokens repeat: {body}"
    torch.manual_seed(0)
    model = ComposerModel(
        micro_config(vocab_size=tokenizer.vocab_size, max_position_embeddings=1024)
    )
    with torch.no_grad():
        for layer in model.decoder_layers:
            layer.self_attn.o_proj.weight.mul_(0.01)
            for param in layer.mlp.parameters():
                param.mul_(0.01)
        model.embed_tokens.weight[:, : len(keys)] = 0.0
        model.lm_head.weight.zero_()
        for dim, token in enumerate(keys):
            model.embed_tokens.weight[token].zero_()
            model.embed_tokens.weight[token, dim] = 1.0
        for source, target in steps:
            model.lm_head.weight[target, keys.index(source)] = 50.0
    save_pretrained(model, directory)
    tokenizer.save(directory / "tokenizer.json")
    return directory


def token_batch(seed: int, rows: int = 4, length: int = 24) -> list[list[int]]:
    """Repeating patterns (learnable) of ids 1..VOCAB-1 (0 is end-of-text)."""
    rng = random.Random(seed)
    batch = []
    for _ in range(rows):
        period = rng.randint(2, 5)
        motif = [rng.randint(1, VOCAB - 1) for _ in range(period)]
        batch.append([motif[i % period] for i in range(length)])
    return batch
