"""Save and load in the Hugging Face DeepSeek-V3 layout (safetensors + config.json).

On disk every routed expert is its own set of `nn.Linear` weights
(`model.layers.{i}.mlp.experts.{e}.{gate,up,down}_proj.weight`, [out, in]) and MTP module k
is stored as layer `num_hidden_layers + k` with its own copies of the embedding and head,
exactly as DeepSeek-V3 and Kimi K2 publish them. In memory the experts are stacked in
grouped-GEMM layout ([E, in, out]) and the MTP modules share the main embedding and head.

Block-FP8 checkpoints (`weight_scale_inv` next to an FP8 weight, 128x128 blocks, as the
official DeepSeek-V3 / Kimi K2 releases are) are dequantised on load.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from composer_model.config import ModelConfig
from composer_model.model import ComposerModel, initialise

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
INDEX_NAME = "model.safetensors.index.json"

_EXPERT = re.compile(
    r"^model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$"
)
_MTP_ONLY = ("enorm.", "hnorm.", "eh_proj.", "shared_head.norm.")
_MTP_SHARED = ("embed_tokens.weight", "shared_head.head.weight")


logger = logging.getLogger(__name__)


class WeightsError(RuntimeError):
    """A weights directory (HF layout) that cannot be read into this model; names what is wrong.

    Not a training checkpoint: resumable training state (optimizer, RNG, step) is
    composer-infra's `StepCheckpointer`, whose error is `composer_infra.checkpoint.CheckpointError`.
    """


def _layer_prefix(config: ModelConfig, name: str) -> tuple[str, str]:
    """Map one of our parameter names to (HF prefix, rest)."""
    if name.startswith("mtp."):
        _, depth, rest = name.split(".", 2)
        layer = config.num_hidden_layers + int(depth)
        if rest.startswith("layer."):
            rest = rest[len("layer.") :]
        return f"model.layers.{layer}.", rest
    if name == "lm_head.weight":
        return "", name
    return "model.", name


def to_hf_state_dict(model: ComposerModel) -> dict[str, torch.Tensor]:
    """Our parameters under DeepSeek-V3 names, experts unstacked into [out, in] matrices."""
    config = model.config
    out: dict[str, torch.Tensor] = {}
    tensors = dict(model.state_dict())
    for name, tensor in tensors.items():
        if config.tie_word_embeddings and name == "lm_head.weight":
            continue
        prefix, rest = _layer_prefix(config, name)
        key = prefix + rest
        if rest.endswith("experts.w_gate_up"):
            base = key[: -len("w_gate_up")]
            gate, up = tensor.split(config.moe_intermediate_size, dim=-1)
            for e in range(tensor.shape[0]):
                out[f"{base}{e}.gate_proj.weight"] = gate[e].t().contiguous()
                out[f"{base}{e}.up_proj.weight"] = up[e].t().contiguous()
        elif rest.endswith("experts.w_down"):
            base = key[: -len("w_down")]
            for e in range(tensor.shape[0]):
                out[f"{base}{e}.down_proj.weight"] = tensor[e].t().contiguous()
        else:
            out[key] = tensor.contiguous()
    for depth in range(config.num_nextn_predict_layers):
        layer = config.num_hidden_layers + depth
        out[f"model.layers.{layer}.embed_tokens.weight"] = tensors["embed_tokens.weight"].clone()
        out[f"model.layers.{layer}.shared_head.head.weight"] = tensors["lm_head.weight"].clone()
    return out


def save_pretrained(
    model: ComposerModel, directory: str | Path, max_shard_bytes: int = 4 << 30
) -> Path:
    """Write config.json and safetensors shard(s) (with an index when there is more than one)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / CONFIG_NAME).write_text(json.dumps(model.config.to_hf_dict(), indent=2) + "\n")
    tensors = to_hf_state_dict(model)
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for key in sorted(tensors):
        nbytes = tensors[key].numel() * tensors[key].element_size()
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][key] = tensors[key]
        size += nbytes
    metadata = {"format": "pt"}
    if len(shards) == 1:
        save_file(shards[0], str(directory / WEIGHTS_NAME), metadata=metadata)
        return directory
    weight_map: dict[str, str] = {}
    for i, shard in enumerate(shards, start=1):
        filename = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(directory / filename), metadata=metadata)
        weight_map.update(dict.fromkeys(shard, filename))
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (directory / INDEX_NAME).write_text(json.dumps(index, indent=2) + "\n")
    return directory


def _weight_files(directory: Path) -> list[Path]:
    if (directory / INDEX_NAME).exists():
        index = json.loads((directory / INDEX_NAME).read_text())
        return [directory / name for name in sorted(set(index["weight_map"].values()))]
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise WeightsError(f"no *.safetensors files in {directory}")
    return files


def _iter_tensors(directory: Path) -> Iterator[tuple[str, torch.Tensor]]:
    for path in _weight_files(directory):
        if not path.exists():
            raise WeightsError(f"the index names {path.name}, which is missing from {directory}")
        try:
            with safe_open(str(path), framework="pt") as handle:
                for key in handle.keys():  # noqa: SIM118 (safe_open is not a dict)
                    yield key, handle.get_tensor(key)
        except SafetensorError as error:
            raise WeightsError(f"{path} is not a readable safetensors file: {error}") from error


def _dequantize_fp8(
    weight: torch.Tensor, scale_inv: torch.Tensor, block: int = 128
) -> torch.Tensor:
    rows, cols = weight.shape
    scale = (
        scale_inv.float().repeat_interleave(block, 0)[:rows].repeat_interleave(block, 1)[:, :cols]
    )
    return weight.float() * scale


def from_hf_state_dict(config: ModelConfig, hf: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Invert `to_hf_state_dict`: stack experts, rename, drop MTP copies of shared weights."""
    for key in [k for k in hf if k.endswith(".weight_scale_inv")]:
        weight_key = key[: -len("_scale_inv")]
        hf[weight_key] = _dequantize_fp8(hf[weight_key], hf.pop(key))
    ours: dict[str, torch.Tensor] = {}
    experts: dict[tuple[int, str], dict[int, torch.Tensor]] = {}
    num_layers = config.num_hidden_layers
    for key, tensor in hf.items():
        match = _EXPERT.match(key)
        if match:
            layer, expert, proj = int(match[1]), int(match[2]), match[3]
            experts.setdefault((layer, proj), {})[expert] = tensor
            continue
        if key == "lm_head.weight":
            ours[key] = tensor
            continue
        if not key.startswith("model."):
            raise WeightsError(f"unexpected tensor {key!r} in a DeepSeek-V3-format checkpoint")
        rest = key[len("model.") :]
        layer_match = re.match(r"^layers\.(\d+)\.(.*)$", rest)
        if layer_match and int(layer_match[1]) >= num_layers:
            depth = int(layer_match[1]) - num_layers
            if depth >= config.num_nextn_predict_layers:
                continue  # an MTP module this config does not use
            inner = layer_match[2]
            if inner in _MTP_SHARED:
                continue
            name = (
                f"mtp.{depth}.{inner}"
                if inner.startswith(_MTP_ONLY)
                else f"mtp.{depth}.layer.{inner}"
            )
            ours[name] = tensor
            continue
        ours[rest] = tensor
    stacks: dict[int, dict[str, torch.Tensor]] = {}
    for (layer, proj), per_expert in experts.items():
        if layer >= num_layers + config.num_nextn_predict_layers:
            continue
        if sorted(per_expert) != list(range(config.n_routed_experts)):
            raise WeightsError(
                f"layer {layer} {proj}: found {len(per_expert)} experts, config says n_routed_experts="
                f"{config.n_routed_experts}"
            )
        stacks.setdefault(layer, {})[proj] = torch.stack(
            [per_expert[e].t() for e in range(len(per_expert))]
        )
    for layer, projs in stacks.items():
        if set(projs) != {"gate_proj", "up_proj", "down_proj"}:
            raise WeightsError(f"layer {layer}: experts have only {sorted(projs)}")
        prefix = f"layers.{layer}." if layer < num_layers else f"mtp.{layer - num_layers}.layer."
        ours[prefix + "mlp.experts.w_gate_up"] = torch.cat(
            [projs["gate_proj"], projs["up_proj"]], dim=-1
        )
        ours[prefix + "mlp.experts.w_down"] = projs["down_proj"]
    if config.tie_word_embeddings:
        ours.pop("lm_head.weight", None)
    return ours


def _initialise_absent_mtp(
    config: ModelConfig,
    state: dict[str, torch.Tensor],
    expected: dict[str, torch.Tensor],
    directory: Path,
) -> None:
    """Fill in MTP modules that the checkpoint lacks entirely, as a fresh model would have them.

    transformers' `DeepseekV3ForCausalLM.save_pretrained` keeps `num_nextn_predict_layers` in
    config.json but writes no MTP weights, and the report trains the MTP heads by
    self-distillation anyway, so an absent module is initialised as a fresh model's
    (`initialise`) and said in one log line. A module that is only
    partly present is a damaged checkpoint and is left for the caller to refuse.
    """
    absent = [
        depth
        for depth in range(config.num_nextn_predict_layers)
        if not any(key.startswith(f"mtp.{depth}.") for key in state)
    ]
    if not absent:
        return
    generator = torch.Generator().manual_seed(0)
    reference = state.get("embed_tokens.weight")
    dtype = reference.dtype if reference is not None else torch.float32
    for key, meta in expected.items():
        if not any(key.startswith(f"mtp.{depth}.") for depth in absent):
            continue
        fresh = torch.empty(meta.shape, dtype=torch.float32)
        initialise(key, fresh, config, generator)
        state[key] = fresh if key.endswith("e_score_correction_bias") else fresh.to(dtype)
    logger.warning(
        "%s has no weights for MTP module(s) %s although config.json sets "
        "num_nextn_predict_layers=%d (transformers saves none); initialised them fresh: train "
        "them (e.g. mtp_target='self_distill') before using them for speculative decoding",
        directory,
        absent,
        config.num_nextn_predict_layers,
    )


def load_pretrained(
    directory: str | Path,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
    config: ModelConfig | None = None,
) -> ComposerModel:
    """Build a ComposerModel from a DeepSeek-V3-format directory (ours, HF's or an official release)."""
    directory = Path(directory)
    if not (directory / CONFIG_NAME).exists():
        raise WeightsError(f"{directory} has no {CONFIG_NAME}; is this a checkpoint directory?")
    if config is None:
        config = ModelConfig.from_hf_dict(json.loads((directory / CONFIG_NAME).read_text()))
    state = from_hf_state_dict(config, dict(_iter_tensors(directory)))
    if config.tie_word_embeddings and "embed_tokens.weight" in state:
        # A tied checkpoint stores the table once; the head is the same tensor (re-tied below).
        state["lm_head.weight"] = state["embed_tokens.weight"]
    with torch.device("meta"):
        model = ComposerModel(config)
    expected = model.state_dict()
    _initialise_absent_mtp(config, state, expected, directory)
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise WeightsError(
            f"checkpoint in {directory} does not fit the config: missing {missing[:8]}"
            f"{'...' if len(missing) > 8 else ''}, unexpected {unexpected[:8]}{'...' if len(unexpected) > 8 else ''}"
        )
    for key, tensor in state.items():
        if tensor.shape != expected[key].shape:
            raise WeightsError(
                f"{key}: checkpoint shape {tuple(tensor.shape)} but the config implies {tuple(expected[key].shape)}"
            )
        if (
            dtype is not None
            and tensor.is_floating_point()
            and not key.endswith("e_score_correction_bias")
        ):
            state[key] = tensor.to(dtype)
        elif key.endswith("e_score_correction_bias"):
            state[key] = tensor.float()  # the balancing bias stays fp32 (see Router._apply)
    model.load_state_dict(state, assign=True)
    if config.tie_word_embeddings:
        model.lm_head.weight = model.embed_tokens.weight
    target = torch.device(device) if device is not None else torch.device("cpu")
    model.init_buffers()
    return model.to(target)


__all__ = [
    "WeightsError",
    "from_hf_state_dict",
    "load_pretrained",
    "save_pretrained",
    "to_hf_state_dict",
]
