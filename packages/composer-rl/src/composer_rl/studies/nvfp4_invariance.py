"""nvfp4-invariance: does a token's NVFP4 encoding depend on what else is in the batch?

The report quantizes the MoE forward to NVFP4 (E2M1 in blocks of 16, an E4M3 scale per
block) with an FP32 second-level scale *per token*: with one scale per tensor the bits of a
token depended on the batch it was in, RL diverged, and information leaked across
sequences. Two measurements:

1. **Bits.** The same token rows are quantized alone and inside batches of different
   content (quieter tokens, louder tokens, one outlier token, the rows scattered among
   others) with `composer_kernels.nvfp4_quantize` in both second-level scale modes; we
   count the FP4 codes, block scales and bits of those rows that differ from alone.
2. **Logprobs.** The tiny MoE policy (composer-model, random init or `--checkpoint`) scores
   one sequence alone and packed with other sequences (`cu_seqlens`, so attention never
   crosses documents). Its routed experts run in three ways: high precision (the control:
   what batching alone changes on this CPU), the NVFP4 forward recipe the model ships
   (`expert_precision="nvfp4_mxfp8"`: per-token activations, per-expert weights), and the
   same recipe with a per-tensor activation scale over all tokens of the GEMM. We report
   the largest change of the sequence's next-token logprobs and of its expert choices.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from composer_kernels import NVFP4Tensor, grouped_mm, nvfp4_fake_quantize, nvfp4_quantize
from composer_kernels import quantized_grouped_mm as recipe_grouped_mm
from composer_kernels.formats.nvfp4 import NVFP4_BLOCK_SIZE, ScaleMode
from composer_kernels.formats.packing import unpack_fp4
from composer_kernels.gemm.recipe import nvfp4_expert_weights
from composer_kernels.grouped_mm import grouped_mm_loop
from composer_model import ComposerModel, load_pretrained, preset
from composer_model.layers.moe import RoutedExperts
from composer_rl.studies.base import StudyOptions, StudyOutcome, Verdict

MODES: tuple[ScaleMode, ...] = ("per_token", "per_tensor")
# The model verdict's thresholds, relative to the high-precision control's own change:
ROUNDOFF_FACTOR = 10.0  # per-token may be this much above the control and still be round-off
SIGNAL_FACTOR = 1000.0  # per-tensor must exceed the control by this much to count as an effect
FLOAT32_FLOOR = 1e-6
"""Nats: about one float32 ulp of a logprob of a few nats, the least the control's round-off
counts for. On some CPUs the high-precision control is bit-identical alone and packed (its
round-off is 0), while the per-token path's dequantized GEMMs over a different number of rows
still round differently (1.5e-7 nats seen): round-off, not the quantizer seeing the batch."""
EXPERT_PATHS = ("high precision", "NVFP4 per-token", "NVFP4 per-tensor")

LOG_FLOOR = 1e-10  # where the figure's log axis draws a change of exactly 0

Matmul = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class Sizes:
    rows: int  # target token rows
    width: int  # hidden size of a row (multiple of 16)
    seq_len: int  # the scored sequence's length
    context_lens: tuple[tuple[int, ...], ...]  # other sequences' lengths, per batch


QUICK = Sizes(rows=64, width=256, seq_len=48, context_lens=((64,), (24, 40), (16,) * 6))
FULL = Sizes(
    rows=512, width=1024, seq_len=256, context_lens=((384,), (96, 160), (32,) * 12, (512, 64))
)


# --- 1. bits of token rows -------------------------------------------------------------


def _popcount(x: torch.Tensor) -> int:
    """Number of set bits in a uint8 tensor."""
    table = torch.tensor([bin(i).count("1") for i in range(256)], dtype=torch.int64)
    return int(table[x.long()].sum())


def _row_bytes(
    q: NVFP4Tensor, rows: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The packed codes, block-scale bytes and global-scale bytes of `rows` (per row)."""
    data = q.data[rows]
    scales = q.block_scales[rows].view(torch.uint8)
    g = q.global_scale.expand(q.data.shape[0], 1)[rows].contiguous()
    return data, scales, g.view(torch.uint8).reshape(len(rows), -1)


def bit_differences(alone: NVFP4Tensor, batched: NVFP4Tensor, rows: torch.Tensor) -> dict[str, int]:
    """How the target rows' encoding inside a batch differs from their encoding alone."""
    own = torch.arange(alone.data.shape[0])
    a_data, a_scales, a_g = _row_bytes(alone, own)
    b_data, b_scales, b_g = _row_bytes(batched, rows)
    return {
        "codes_differing": int((unpack_fp4(a_data) != unpack_fp4(b_data)).sum()),
        "codes": int(unpack_fp4(a_data).numel()),
        "block_scales_differing": int((a_scales != b_scales).sum()),
        "block_scales": int(a_scales.numel()),
        "rows_global_scale_differing": int((a_g != b_g).any(-1).sum()),
        "bits_differing": _popcount(a_data ^ b_data)
        + _popcount(a_scales ^ b_scales)
        + _popcount(a_g ^ b_g),
        "bits": 8 * (a_data.numel() + a_scales.numel() + a_g.numel()),
    }


def token_contexts(
    target: torch.Tensor, gen: torch.Generator
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Batches holding the target rows among other content: name -> (batch, target row ids).

    Rows look like activations: Gaussian entries times a per-row log-normal magnitude."""
    n, k = target.shape

    def tokens(count: int, scale: float) -> torch.Tensor:
        mags = torch.exp(torch.randn(count, 1, generator=gen))
        return scale * mags * torch.randn(count, k, generator=gen)

    at_start = torch.arange(n)
    contexts: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    contexts["with quieter tokens"] = (torch.cat([target, tokens(n, 0.1)]), at_start)
    contexts["with louder tokens"] = (torch.cat([tokens(n, 10.0), target]), at_start + n)
    outlier = torch.zeros(1, k)
    outlier[0, 0] = 50.0 * float(target.abs().max())
    contexts["with one outlier token"] = (torch.cat([target, outlier]), at_start)
    others = tokens(3 * n, 1.0)
    total = 4 * n
    where = torch.randperm(total, generator=gen)[:n].sort().values
    batch = torch.empty(total, k)
    mask = torch.zeros(total, dtype=torch.bool)
    mask[where] = True
    batch[mask] = target
    batch[~mask] = others
    contexts["scattered among similar tokens"] = (batch, where)
    return contexts


def measure_bits(sizes: Sizes, gen: torch.Generator) -> list[dict[str, Any]]:
    target = torch.exp(torch.randn(sizes.rows, 1, generator=gen)) * torch.randn(
        sizes.rows, sizes.width, generator=gen
    )
    results = []
    contexts = token_contexts(target, gen)
    for mode in MODES:
        alone = nvfp4_quantize(target, scale_mode=mode)
        for name, (batch, rows) in contexts.items():
            if not torch.equal(batch[rows], target):
                raise RuntimeError(f"context {name!r} does not hold the target rows unchanged")
            batched = nvfp4_quantize(batch, scale_mode=mode)
            diff: dict[str, Any] = dict(bit_differences(alone, batched, rows))
            deq = (alone.dequantize() - batched.dequantize()[rows]).abs().max()
            diff["max_dequant_change_rel"] = float(deq / target.abs().max())
            results.append({"mode": mode, "context": name, **diff})
    return results


# --- 2. logprobs of the tiny model -------------------------------------------------------


def per_tensor_recipe(x: torch.Tensor, w: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """The recipe's forward with one activation scale for all tokens of the GEMM (the
    variant the report abandoned); weights exactly as the recipe quantizes them."""
    if x.shape[-1] % NVFP4_BLOCK_SIZE:
        raise ValueError(f"hidden size {x.shape[-1]} is not a multiple of {NVFP4_BLOCK_SIZE}")
    xq = nvfp4_fake_quantize(x, scale_mode="per_tensor")
    return grouped_mm_loop(xq, nvfp4_expert_weights(w), offsets).to(x.dtype)


def _recipe(x: torch.Tensor, w: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    out: torch.Tensor = recipe_grouped_mm(x, w, offsets)
    return out


MATMULS: dict[str, Matmul] = {
    "high precision": grouped_mm,
    "NVFP4 per-token": _recipe,
    "NVFP4 per-tensor": per_tensor_recipe,
}


def _set_expert_matmul(model: ComposerModel, matmul: Matmul) -> None:
    for module in model.modules():
        if isinstance(module, RoutedExperts):
            module._mm = matmul


@torch.no_grad()
def _score(
    model: ComposerModel, docs: list[torch.Tensor], index: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Next-token logprobs of document `index` when `docs` are packed into one row, and its
    expert choices [tokens, layers, top_k] (sorted within top_k)."""
    ids = torch.cat(docs)[None]
    lens = torch.tensor([0] + [len(d) for d in docs])
    cu = lens.cumsum(0)
    out = model(ids, cu_seqlens=cu, return_routing=True)
    start, end = int(cu[index]), int(cu[index + 1])
    logp = torch.log_softmax(out.logits[0, start : end - 1].double(), -1)
    target = docs[index][1:]
    chosen = logp.gather(-1, target[:, None])[:, 0]
    routing = torch.stack([r[start:end] for r in out.routing or []], 1).sort(-1).values
    return chosen, routing


def build_model(options: StudyOptions) -> ComposerModel:
    if options.checkpoint is not None:
        return load_pretrained(options.checkpoint, dtype=torch.float32).eval()
    torch.manual_seed(options.seed)
    return ComposerModel(preset("tiny")).eval()


def measure_logprobs(
    model: ComposerModel, sizes: Sizes, gen: torch.Generator
) -> list[dict[str, Any]]:
    vocab = model.config.vocab_size
    seq = torch.randint(1, vocab, (sizes.seq_len,), generator=gen)
    contexts = []
    for lens in sizes.context_lens:
        others = [torch.randint(1, vocab, (n,), generator=gen) for n in lens]
        at = len(others) // 2  # the sequence sits in the middle of the row
        docs = [*others[:at], seq, *others[at:]]
        name = f"packed with {len(others)} other(s), {sum(lens)} tokens"
        contexts.append((name, docs, at))
    results = []
    for path in EXPERT_PATHS:
        _set_expert_matmul(model, MATMULS[path])
        alone_lp, alone_routes = _score(model, [seq], 0)
        for name, docs, at in contexts:
            lp, routes = _score(model, docs, at)
            delta = (lp - alone_lp).abs()
            results.append(
                {
                    "path": path,
                    "context": name,
                    "positions": int(delta.numel()),
                    "positions_changed": int((delta > 0).sum()),
                    "changed_at": (delta > 0).nonzero().flatten().tolist(),
                    "max_logprob_change": float(delta.max()),
                    "mean_logprob_change": float(delta.mean()),
                    "expert_choices_changed": int((routes != alone_routes).any(-1).sum()),
                    "expert_choices": int(routes.shape[0] * routes.shape[1]),
                }
            )
    _set_expert_matmul(model, MATMULS["NVFP4 per-token"])
    return results


# --- verdict, table, figure --------------------------------------------------------------


def _figure(bits: list[dict[str, Any]], logprobs: list[dict[str, Any]]) -> Figure:
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.2))
    contexts = list(dict.fromkeys(b["context"] for b in bits))
    width = 0.38
    for i, mode in enumerate(MODES):
        share = [
            100.0 * b["bits_differing"] / b["bits"]
            for c in contexts
            for b in bits
            if b["mode"] == mode and b["context"] == c
        ]
        xs = [j + (i - 0.5) * width for j in range(len(contexts))]
        bars = left.bar(xs, share, width, label=f"{mode} scale")
        left.bar_label(bars, fmt="%.2g", fontsize=7)
    left.set_xticks(range(len(contexts)), contexts, rotation=15, fontsize=7)
    left.set_ylabel("% of the rows' bits that differ from alone")
    left.set_title("NVFP4 bits of the same token rows inside other batches", fontsize=9)
    left.legend(fontsize=8)
    left.grid(alpha=0.3, axis="y")
    lp_contexts = list(dict.fromkeys(r["context"] for r in logprobs))
    width = 0.8 / len(EXPERT_PATHS)
    top = LOG_FLOOR
    for i, path in enumerate(EXPERT_PATHS):
        vals = [
            max(r["max_logprob_change"], LOG_FLOOR)
            for c in lp_contexts
            for r in logprobs
            if r["path"] == path and r["context"] == c
        ]
        xs = [j + (i - 1) * width for j in range(len(lp_contexts))]
        bars = right.bar(xs, vals, width, label=f"experts: {path}")
        labels = ["0" if v <= LOG_FLOOR else f"{v:.1g}" for v in vals]
        right.bar_label(bars, labels=labels, fontsize=6, rotation=90, padding=2)
        top = max(top, *vals)
    right.set_xticks(range(len(lp_contexts)), lp_contexts, rotation=15, fontsize=7)
    right.set_yscale("log")
    right.set_ylim(LOG_FLOOR / 3, top * 1e5)
    right.set_ylabel("max |Δ logprob| vs alone [nats] (0 drawn at 1e-10)")
    right.set_title("tiny MoE: the same sequence's logprobs, alone vs packed", fontsize=9)
    right.legend(fontsize=7, ncol=3, loc="upper center")
    right.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    return fig


def run(options: StudyOptions) -> StudyOutcome:
    sizes = QUICK if options.quick else FULL
    gen = torch.Generator().manual_seed(options.seed)
    bits = measure_bits(sizes, gen)
    model = build_model(options)
    logprobs = measure_logprobs(model, sizes, gen)

    columns = ["measurement", "variant", "context", "differs from alone", "max change"]
    table = []
    for b in bits:
        table.append(
            [
                "token-row bits",
                f"NVFP4 {b['mode']} scale",
                b["context"],
                f"{b['bits_differing']} of {b['bits']} bits; {b['codes_differing']} of "
                f"{b['codes']} FP4 codes; {b['block_scales_differing']} of {b['block_scales']} "
                f"block scales",
                f"{b['max_dequant_change_rel']:.3g} × amax",
            ]
        )
    for r in logprobs:
        table.append(
            [
                "model logprobs",
                f"experts {r['path']}",
                r["context"],
                f"{r['positions_changed']} of {r['positions']} logprobs; "
                f"{r['expert_choices_changed']} of {r['expert_choices']} expert choices",
                f"{r['max_logprob_change']:.3g} nats",
            ]
        )

    def worst(path: str) -> float:
        return max(r["max_logprob_change"] for r in logprobs if r["path"] == path)

    # Where the per-token path changes a logprob, does the control change it too? Then the
    # change came from upstream round-off, not from the quantizer seeing the batch.
    control_at = {
        r["context"]: set(r.pop("changed_at")) for r in logprobs if r["path"] == EXPERT_PATHS[0]
    }
    only_where_control = True
    # A change where the control has none is still round-off when it is within the float32
    # floor: an FP4 code that moved would cost orders of magnitude more.
    beyond_control_is_roundoff = True
    for r in logprobs:
        changed = set(r.pop("changed_at", []))
        if r["path"] == "NVFP4 per-token":
            inside = changed <= control_at[r["context"]]
            only_where_control &= inside
            beyond_control_is_roundoff &= inside or (
                r["max_logprob_change"] <= ROUNDOFF_FACTOR * FLOAT32_FLOOR
            )
    token_bits = sum(b["bits_differing"] for b in bits if b["mode"] == "per_token")
    tensor_bits = sum(b["bits_differing"] for b in bits if b["mode"] == "per_tensor")
    tensor_contexts = sum(1 for b in bits if b["mode"] == "per_tensor" and b["bits_differing"])
    n_contexts = sum(1 for b in bits if b["mode"] == "per_tensor")
    high, per_token, per_tensor = (worst(p) for p in EXPERT_PATHS)
    bits_hold = token_bits == 0 and tensor_bits > 0
    # The control is not bit-invariant itself (float32 attention and GEMMs over a different
    # number of rows round differently, ~1e-7 nats), so "independent of the batch" for the
    # model means: the per-token path stays at the control's round-off (no FP4 code moved,
    # which would cost orders of magnitude more), and the per-tensor path leaves it.
    noise = max(high, FLOAT32_FLOOR)
    model_holds = (
        per_token <= ROUNDOFF_FACTOR * noise
        and per_tensor > SIGNAL_FACTOR * noise
        and beyond_control_is_roundoff
    )
    held = bits_hold and model_holds
    strength = (
        f"per-token: {token_bits} bits differ in any context; per-tensor: {tensor_bits} bits "
        f"differ, in {tensor_contexts} of {n_contexts} contexts; model max |Δ logprob| "
        f"per-token {per_token:.3g} vs per-tensor {per_tensor:.3g} (high-precision control "
        f"{high:.3g}; per-tensor {per_tensor / max(high, 1e-12):.2g}x the control)"
    )
    summary = (
        (
            "Per-token scaling gave identical bits for the same rows in every batch; "
            if token_bits == 0
            else "Per-token scaling changed bits with the batch (unexpected); "
        )
        + (
            "a per-tensor scale changed them whenever the batch moved the tensor's amax. "
            if tensor_bits > 0
            else "a per-tensor scale did not change them here. "
        )
        + (
            f"In the model, the NVFP4 per-token path changed the packed sequence's logprobs "
            f"by at most {per_token:.3g} nats, against {high:.3g} for high precision and "
            f"{per_tensor:.3g} with a per-tensor activation scale (the high-precision "
            f"control is float32 round-off from packing: attention and GEMMs over more rows). "
            + (
                "The per-token path changed logprobs only at positions the control changed too."
                if only_where_control
                else "The per-token path changed logprobs at positions the control left alone."
            )
        )
    )
    notes = [
        f"token rows: {sizes.rows} x {sizes.width} float32, Gaussian times a log-normal row "
        f"magnitude; model: {'checkpoint ' + str(options.checkpoint) if options.checkpoint else 'tiny preset, random init'}"
        f" (float32), sequence of {sizes.seq_len} random tokens; seed {options.seed}",
        "bits compared: the rows' packed FP4 codes, their E4M3 block scales and their FP32 "
        "second-level scale; the per-tensor variant of the model quantizes the activations "
        "of each expert GEMM (all tokens routed in the batch) with one scale",
    ]
    return StudyOutcome(
        columns=columns,
        rows=table,
        figure=_figure(bits, logprobs),
        verdict=Verdict("held" if held else "did not hold", strength, summary),
        numbers={
            "bits": bits,
            "logprobs": logprobs,
            "per_token_bits_differing": token_bits,
            "per_tensor_bits_differing": tensor_bits,
            "max_logprob_change": {"high": high, "per_token": per_token, "per_tensor": per_tensor},
            "bits_hold": bits_hold,
            "per_token_changes_only_where_control_does": only_where_control,
            "per_token_changes_beyond_control_are_roundoff": beyond_control_is_roundoff,
            "thresholds": {"roundoff_factor": ROUNDOFF_FACTOR, "signal_factor": SIGNAL_FACTOR},
            "model_holds": model_holds,
        },
        notes=notes,
    )


__all__ = ["bit_differences", "measure_bits", "measure_logprobs", "per_tensor_recipe", "run"]
