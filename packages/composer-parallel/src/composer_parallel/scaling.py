"""Per-rank memory and communication per step for a layout, computed from a model config.

A paper model, for checking that a layout fits before renting the machines. It counts
what our code moves and stores under the production recipe (FSDP2 sharding, bf16
weights and activations on the wire, fp32 master weights, gradients and Adam moments):

- parameter state: 18 bytes a parameter (bf16 weight 2, fp32 master 4, fp32 gradient 4,
  Adam moments 8), dense parameters sharded over all dp x cp ranks, routed experts over
  ep x expert-dp (i.e. also over all ranks);
- context-parallel attention per layer: the gathered latents (kv_lora_rank + rope dims a
  token, bf16) and the locally projected per-head keys/values of the whole sequence (the
  all-gather mode's transient peak), versus one ring block (1/cp of it);
- traffic a rank sends per step, forward + backward, without activation recomputation
  (recomputing the forward adds the forward's share again): the latent all-gather and its
  reduce-scatter, the expert all-to-all (MXFP8 dispatch = 1 + 1/32 bytes an element, bf16
  combine, bf16 both ways in backward) under uniform routing ((ep-1)/ep of the rows leave
  the rank), FSDP's all-gathers (forward and backward) and gradient reduce-scatter (fp32),
  and the balancing-bias all-reduce.

Activations other than attention's are not modelled (they depend on recomputation policy).
"""

from __future__ import annotations

from dataclasses import dataclass

from composer_model.config import ModelConfig
from composer_parallel.mesh import ParallelDims

GiB = 1024**3
STATE_BYTES = 18


@dataclass(frozen=True)
class LayoutEstimate:
    dims: ParallelDims
    seq_len: int
    tokens_per_rank: int
    dense_params: int
    expert_params: int
    state_gib: float  # sharded parameter state a rank holds
    latent_gather_gib: float  # one layer's gathered latents (whole sequence)
    kv_projected_gib: float  # one layer's per-head k and v for the whole sequence (all-gather peak)
    ring_block_gib: float  # one layer's k and v of one ring block
    cp_send_gib: float
    ep_send_gib: float
    fsdp_send_gib: float
    bias_send_gib: float

    @property
    def total_send_gib(self) -> float:
        return self.cp_send_gib + self.ep_send_gib + self.fsdp_send_gib + self.bias_send_gib


def parameter_counts(config: ModelConfig) -> tuple[int, int]:
    """(dense, routed-expert) parameter counts of the main model (MTP modules excluded)."""
    h = config.hidden_size
    attn = config.attention_parameters() + 2 * h  # + the layer's two norms
    moe_layers = config.num_moe_layers
    dense_layers = config.num_hidden_layers - moe_layers
    shared = 3 * h * config.moe_intermediate_size * config.n_shared_experts
    router = config.n_routed_experts * h
    dense = (
        config.num_hidden_layers * attn
        + dense_layers * 3 * h * config.intermediate_size
        + moe_layers * (shared + router)
        + config.vocab_size * h * (1 if config.tie_word_embeddings else 2)
        + h
    )
    experts = moe_layers * config.n_routed_experts * 3 * h * config.moe_intermediate_size
    return dense, experts


def estimate(config: ModelConfig, dims: ParallelDims, seq_len: int) -> LayoutEstimate:
    """One packed row of `seq_len` tokens per dp replica, split over cp ranks."""
    dims.check_experts(config.n_routed_experts)
    if seq_len % (2 * dims.cp):
        raise ValueError(f"seq_len={seq_len} should be a multiple of 2 x cp = {2 * dims.cp}")
    world, cp, ep = dims.world_size, dims.cp, dims.ep
    dense, experts = parameter_counts(config)
    tokens = seq_len // cp
    layers, moe_layers = config.num_hidden_layers, config.num_moe_layers
    latent = config.kv_lora_rank + config.qk_rope_head_dim
    heads = config.num_attention_heads
    kv_width = heads * (config.attention_qk_dim + config.v_head_dim)
    bf16 = 2
    # CP: all-gather sends our latents to cp-1 peers; the backward reduce-scatter sends
    # (cp-1)/cp of the whole sequence's latent gradient (bf16).
    cp_send = layers * ((cp - 1) * tokens * latent * bf16 + (cp - 1) / cp * seq_len * latent * bf16)
    # EP: every token's top-k rows, (ep-1)/ep of them leaving the rank.
    rows_out = tokens * config.num_experts_per_tok * (ep - 1) / ep
    h = config.hidden_size
    ep_forward = rows_out * h * (1 + 1 / 32) + rows_out * h * bf16  # MXFP8 dispatch + bf16 combine
    ep_backward = 2 * rows_out * h * bf16
    ep_send = moe_layers * (ep_forward + ep_backward)

    # FSDP: ring all-gather sends (w-1)/w of the bf16 weights, twice (forward, backward);
    # the gradient reduce-scatter (fp32) once.
    def fsdp(params: int, group: int) -> float:
        return (group - 1) / group * params * (2 * bf16 + 4) if group > 1 else 0.0

    fsdp_send = fsdp(dense, world) + fsdp(experts // ep, dims.expert_dp)
    bias_send = 2 * (world - 1) / world * moe_layers * config.n_routed_experts * 4
    return LayoutEstimate(
        dims=dims,
        seq_len=seq_len,
        tokens_per_rank=tokens,
        dense_params=dense,
        expert_params=experts,
        state_gib=STATE_BYTES * (dense + experts) / world / GiB,
        latent_gather_gib=seq_len * latent * bf16 / GiB,
        kv_projected_gib=seq_len * kv_width * bf16 / GiB,
        ring_block_gib=tokens * kv_width * bf16 / GiB,
        cp_send_gib=cp_send / GiB,
        ep_send_gib=ep_send / GiB,
        fsdp_send_gib=fsdp_send / GiB,
        bias_send_gib=bias_send / GiB,
    )


def markdown(rows: list[tuple[str, LayoutEstimate]]) -> str:
    """The README table: one column per layout."""
    fields = [
        (
            "ranks (dp x cp), ep x expert-dp",
            lambda e: f"{e.dims.dp} x {e.dims.cp}, {e.dims.ep} x {e.dims.expert_dp}",
        ),
        ("sequence / tokens per rank", lambda e: f"{e.seq_len} / {e.tokens_per_rank}"),
        (
            "parameters dense / routed experts",
            lambda e: f"{e.dense_params / 1e9:.2f} B / {e.expert_params / 1e9:.1f} B",
        ),
        ("parameter state per rank (18 B/param, FSDP)", lambda e: f"{e.state_gib:.2f} GiB"),
        ("gathered latents, one layer", lambda e: f"{e.latent_gather_gib:.3f} GiB"),
        (
            "projected k+v of the whole sequence, one layer (all-gather peak)",
            lambda e: f"{e.kv_projected_gib:.2f} GiB",
        ),
        ("k+v of one ring block, one layer", lambda e: f"{e.ring_block_gib:.2f} GiB"),
        (
            "sent per step: CP latents (all-gather + reduce-scatter)",
            lambda e: f"{e.cp_send_gib:.2f} GiB",
        ),
        (
            "sent per step: EP all-to-all (MXFP8 dispatch, bf16 combine)",
            lambda e: f"{e.ep_send_gib:.2f} GiB",
        ),
        (
            "sent per step: FSDP (weights x2 bf16, grads fp32)",
            lambda e: f"{e.fsdp_send_gib:.2f} GiB",
        ),
        (
            "sent per step: balancing-bias all-reduce",
            lambda e: f"{e.bias_send_gib * GiB / 1024:.1f} KiB",
        ),
        ("sent per step: total", lambda e: f"{e.total_send_gib:.2f} GiB"),
    ]
    head = "| per rank | " + " | ".join(name for name, _ in rows) + " |"
    sep = "| --- |" + " --- |" * len(rows)
    body = [f"| {label} | " + " | ".join(f(e) for _, e in rows) + " |" for label, f in fields]
    return "\n".join([head, sep, *body])


__all__ = ["LayoutEstimate", "estimate", "markdown", "parameter_counts"]
