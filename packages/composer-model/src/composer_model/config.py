"""Typed model configuration with the field names of DeepSeek-V3's Hugging Face config.json.

Using the same names means a checkpoint directory from DeepSeek-V3 or Kimi K2 can be read
directly (`ModelConfig.from_hf_dict`), and what we write can be read by `transformers`.
Fields that only Composer uses (expert precision, MTP loss settings, balancing-bias rate)
sit next to them and are dropped when writing the HF file.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

MHA_MODEL_TYPE = "composer_mha"
"""config.json's model_type for `attention="mha"`: Composer reads it, transformers refuses it."""


class YarnScaling(BaseModel):
    """YaRN rope scaling, as DeepSeek-V3 writes it under `rope_scaling`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["yarn"] = "yarn"
    factor: float = Field(gt=0)
    original_max_position_embeddings: int = Field(gt=0)
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float = 1.0
    mscale_all_dim: float = 1.0


class ModelConfig(BaseModel):
    """Shape and behaviour of a DeepSeek-V3 / Kimi K2 style decoder."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    vocab_size: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    intermediate_size: int = Field(gt=0, description="Width of the dense SwiGLU layers.")
    moe_intermediate_size: int = Field(gt=0, description="Width of each routed/shared expert.")
    num_hidden_layers: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    num_key_value_heads: int | None = None
    n_shared_experts: int = Field(default=1, ge=0)
    n_routed_experts: int = Field(gt=0)
    routed_scaling_factor: float = 1.0
    kv_lora_rank: int = Field(gt=0)
    q_lora_rank: int | None = None
    qk_rope_head_dim: int = Field(gt=0)
    v_head_dim: int = Field(gt=0)
    qk_nope_head_dim: int = Field(gt=0)
    n_group: int = Field(default=1, gt=0)
    topk_group: int = Field(default=1, gt=0)
    num_experts_per_tok: int = Field(gt=0)
    first_k_dense_replace: int = Field(default=1, ge=0)
    norm_topk_prob: bool = True
    scoring_func: Literal["sigmoid"] = "sigmoid"
    topk_method: Literal["noaux_tc"] = "noaux_tc"
    hidden_act: Literal["silu"] = "silu"
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: YarnScaling | None = None
    max_position_embeddings: int = Field(default=4096, gt=0)
    tie_word_embeddings: bool = False
    num_nextn_predict_layers: int = Field(default=0, ge=0)
    initializer_range: float = 0.02
    attention_bias: bool = False
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None

    # Composer's own fields (not part of the HF file).
    expert_precision: Literal["high", "nvfp4_mxfp8"] = Field(
        default="high",
        description="'high': experts in the parameter dtype through grouped_mm; 'nvfp4_mxfp8': "
        "NVFP4 forward / MXFP8 backward through composer_kernels.quantized_grouped_mm.",
    )
    high_precision_wgrad: bool = False
    mtp_loss_weight: float = Field(default=0.3, ge=0)
    mtp_target: Literal["next_next", "self_distill"] = "self_distill"
    bias_update_rate: float = Field(default=1e-3, ge=0)
    attention: Literal["mla", "mha"] = Field(
        default="mla",
        description="'mla': multi-head latent attention (DeepSeek-V3, Kimi K2); 'mha': plain "
        "per-head attention with RoPE over the whole key (qk_rope_head_dim wide; kv_lora_rank, "
        "q_lora_rank and qk_nope_head_dim unused), an option for small models, which form an "
        "induction circuit with it and not with MLA (docs/model/2026-12-06-induction-formation.md).",
    )
    attention_initializer_range: float | None = Field(
        default=None,
        gt=0,
        description="Std of the attention's matrices at init (None: initializer_range). The "
        "tiny 'mha' model forms its induction circuit at 0.051 (nn.Linear's scale at width 128) "
        "and not at 0.02.",
    )

    @model_validator(mode="after")
    def _check_shapes(self) -> ModelConfig:
        if self.n_routed_experts % self.n_group:
            raise ValueError(
                f"n_routed_experts ({self.n_routed_experts}) must be divisible by n_group ({self.n_group})"
            )
        if self.topk_group > self.n_group:
            raise ValueError(
                f"topk_group ({self.topk_group}) cannot exceed n_group ({self.n_group})"
            )
        per_group = self.n_routed_experts // self.n_group
        if self.n_group > 1 and per_group < 2:
            raise ValueError(
                "group-limited routing scores a group by its top-2 experts: use >= 2 experts per group"
            )
        if self.num_experts_per_tok > self.topk_group * per_group:
            raise ValueError(
                f"num_experts_per_tok ({self.num_experts_per_tok}) exceeds the experts reachable in "
                f"topk_group={self.topk_group} groups of {per_group}"
            )
        if self.qk_rope_head_dim % 2:
            raise ValueError(
                f"qk_rope_head_dim must be even (rotary pairs); got {self.qk_rope_head_dim}"
            )
        if self.first_k_dense_replace > self.num_hidden_layers:
            raise ValueError(
                f"first_k_dense_replace ({self.first_k_dense_replace}) exceeds num_hidden_layers "
                f"({self.num_hidden_layers})"
            )
        return self

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def attention_qk_dim(self) -> int:
        """Width of one head's query and key: MLA's nope + rope part, plain attention's rope."""
        return self.qk_rope_head_dim if self.attention == "mha" else self.qk_head_dim

    def attention_parameters(self, norms: bool = True) -> int:
        """One layer's attention weights: its matrices, biases and (MLA) its latents' norms."""
        hidden, heads, v = self.hidden_size, self.num_attention_heads, self.v_head_dim
        bias = self.attention_bias
        if self.attention == "mha":
            qk = heads * self.qk_rope_head_dim
            matrices = 2 * hidden * qk + 2 * hidden * heads * v
            return matrices + bias * (2 * qk + heads * v + hidden)
        kv, rope, q_rank = self.kv_lora_rank, self.qk_rope_head_dim, self.q_lora_rank
        if q_rank is None:
            q, q_extra = hidden * heads * self.qk_head_dim, 0
        else:
            q = hidden * q_rank + q_rank * heads * self.qk_head_dim
            q_extra = norms * q_rank + bias * q_rank
        matrices = q + hidden * (kv + rope) + kv * heads * (self.qk_nope_head_dim + v)
        matrices += heads * v * hidden
        return matrices + q_extra + norms * kv + bias * (kv + rope + hidden)

    @property
    def cache_width(self) -> int:
        """Numbers an inference cache keeps per token per layer."""
        if self.attention == "mha":
            return self.num_attention_heads * (self.qk_rope_head_dim + self.v_head_dim)
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def num_moe_layers(self) -> int:
        return self.num_hidden_layers - self.first_k_dense_replace

    def is_moe_layer(self, layer_idx: int) -> bool:
        return layer_idx >= self.first_k_dense_replace

    # --- Hugging Face config.json -------------------------------------------------------

    def to_hf_dict(self) -> dict[str, Any]:
        """The DeepSeek-V3 config.json (readable by `transformers` and DeepSeek's own code)."""
        own = {
            "expert_precision",
            "high_precision_wgrad",
            "mtp_loss_weight",
            "mtp_target",
            "bias_update_rate",
            "attention",
            "attention_initializer_range",
        }
        data = self.model_dump(exclude=own)
        data["architectures"] = ["DeepseekV3ForCausalLM"]
        data["model_type"] = "deepseek_v3"
        if self.attention == "mha":  # not DeepSeek-V3's shape: transformers must not load it
            data["architectures"] = ["ComposerMHAForCausalLM"]
            data["model_type"] = MHA_MODEL_TYPE
        data["rope_interleave"] = True
        data["composer"] = self.model_dump(include=own)
        return data

    @classmethod
    def from_hf_dict(cls, data: dict[str, Any]) -> ModelConfig:
        """Read a DeepSeek-V3 / Kimi K2 config.json (older `rope_scaling` or newer `rope_parameters`)."""
        data = dict(data)
        model_type = data.get("model_type", "deepseek_v3")
        if model_type not in {"deepseek_v3", "kimi_k2", MHA_MODEL_TYPE}:
            raise ValueError(
                f"config.json has model_type={model_type!r}; Composer reads DeepSeek-V3-format "
                "checkpoints (model_type 'deepseek_v3' or 'kimi_k2') and its own plain-attention "
                f"ones ({MHA_MODEL_TYPE!r})"
            )
        if data.get("rope_interleave") is False:
            raise ValueError(
                "rope_interleave=false is not supported: DeepSeek-V3 checkpoints interleave rope pairs"
            )
        rope_parameters = data.pop("rope_parameters", None)
        if rope_parameters:
            data.setdefault("rope_theta", rope_parameters.get("rope_theta", 10000.0))
            if rope_parameters.get("rope_type", "default") == "yarn":
                data["rope_scaling"] = rope_parameters
        scaling = data.get("rope_scaling")
        if scaling:
            kind = scaling.get("type", scaling.get("rope_type"))
            if kind != "yarn":
                raise ValueError(f"rope_scaling type {kind!r} is not supported (only 'yarn')")
            keep = set(YarnScaling.model_fields)
            data["rope_scaling"] = {k: v for k, v in scaling.items() if k in keep and v is not None}
            data["rope_scaling"]["type"] = "yarn"
        own = data.pop("composer", {}) or {}
        known = set(cls.model_fields)
        fields = {k: v for k, v in data.items() if k in known}
        fields.update(own)
        if model_type == MHA_MODEL_TYPE and fields.get("attention") != "mha":
            raise ValueError(
                f"config.json has model_type={MHA_MODEL_TYPE!r} without attention='mha'"
            )
        if fields.get("n_group") is None:
            fields["n_group"] = 1
        if fields.get("topk_group") is None:
            fields["topk_group"] = 1
        return cls.model_validate(fields)


def _tiny() -> ModelConfig:
    return ModelConfig(
        vocab_size=4096,
        hidden_size=128,
        intermediate_size=384,
        moe_intermediate_size=96,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        n_shared_experts=1,
        n_routed_experts=8,
        routed_scaling_factor=2.5,
        kv_lora_rank=32,
        q_lora_rank=64,
        qk_rope_head_dim=16,
        v_head_dim=32,
        qk_nope_head_dim=32,
        n_group=2,
        topk_group=1,
        num_experts_per_tok=2,
        first_k_dense_replace=1,
        rope_theta=10000.0,
        max_position_embeddings=2048,
        num_nextn_predict_layers=1,
        bos_token_id=None,
        eos_token_id=0,
    )


def _small() -> ModelConfig:
    return ModelConfig(
        vocab_size=32768,
        hidden_size=512,
        intermediate_size=1536,
        moe_intermediate_size=256,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=8,
        n_shared_experts=1,
        n_routed_experts=32,
        routed_scaling_factor=2.5,
        kv_lora_rank=128,
        q_lora_rank=256,
        qk_rope_head_dim=32,
        v_head_dim=64,
        qk_nope_head_dim=64,
        n_group=4,
        topk_group=2,
        num_experts_per_tok=4,
        first_k_dense_replace=1,
        rope_theta=10000.0,
        max_position_embeddings=8192,
        num_nextn_predict_layers=1,
        eos_token_id=0,
    )


def _kimi_k2() -> ModelConfig:
    # moonshotai/Kimi-K2 config.json (256k-context variant).
    return ModelConfig(
        vocab_size=163840,
        hidden_size=7168,
        intermediate_size=18432,
        moe_intermediate_size=2048,
        num_hidden_layers=61,
        num_attention_heads=64,
        num_key_value_heads=64,
        n_shared_experts=1,
        n_routed_experts=384,
        routed_scaling_factor=2.827,
        kv_lora_rank=512,
        q_lora_rank=1536,
        qk_rope_head_dim=64,
        v_head_dim=128,
        qk_nope_head_dim=128,
        n_group=1,
        topk_group=1,
        num_experts_per_tok=8,
        first_k_dense_replace=1,
        rope_theta=50000.0,
        rope_scaling=YarnScaling(
            factor=64.0,
            original_max_position_embeddings=4096,
            beta_fast=1.0,
            beta_slow=1.0,
            mscale=1.0,
            mscale_all_dim=1.0,
        ),
        max_position_embeddings=262144,
        num_nextn_predict_layers=0,
        bos_token_id=163584,
        eos_token_id=163585,
    )


def _deepseek_v3() -> ModelConfig:
    # deepseek-ai/DeepSeek-V3 config.json.
    return ModelConfig(
        vocab_size=129280,
        hidden_size=7168,
        intermediate_size=18432,
        moe_intermediate_size=2048,
        num_hidden_layers=61,
        num_attention_heads=128,
        num_key_value_heads=128,
        n_shared_experts=1,
        n_routed_experts=256,
        routed_scaling_factor=2.5,
        kv_lora_rank=512,
        q_lora_rank=1536,
        qk_rope_head_dim=64,
        v_head_dim=128,
        qk_nope_head_dim=128,
        n_group=8,
        topk_group=4,
        num_experts_per_tok=8,
        first_k_dense_replace=3,
        rope_theta=10000.0,
        rope_scaling=YarnScaling(
            factor=40.0,
            original_max_position_embeddings=4096,
            beta_fast=32.0,
            beta_slow=1.0,
            mscale=1.0,
            mscale_all_dim=1.0,
        ),
        max_position_embeddings=163840,
        num_nextn_predict_layers=1,
        bos_token_id=0,
        eos_token_id=1,
    )


PRESETS = {
    "tiny": _tiny,
    "small": _small,
    "kimi-k2": _kimi_k2,
    "deepseek-v3": _deepseek_v3,
}


def preset(name: str, **overrides: Any) -> ModelConfig:
    """A named configuration; keyword overrides replace fields (and are validated)."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    config = PRESETS[name]()
    if overrides:
        config = ModelConfig.model_validate({**config.model_dump(), **overrides})
    return config


__all__ = ["PRESETS", "ModelConfig", "YarnScaling", "preset"]
