"""How soon a model shape learns to copy a sequence it has never seen: the induction task.

The SFT policy writes a name it knows whole at ~0.99 of its later tokens and a new word's
later tokens at ~0.58 (`composer-rl`'s `name_copy.py`): what fails on new words is copying,
not choosing. Copying an unseen sequence is the induction circuit (a previous-token head
feeding a head that looks up "what followed this token last time"). This trains each model
shape from scratch on that circuit alone and reports when it forms, beside a plain
`torch.nn.TransformerEncoder` of the same width and depth (the named peer), so a shape or
init that forms it sooner can be tried in stage one with evidence rather than a guess.

Each row is 64 tokens: random filler, a random sequence of 8-24 tokens from an alphabet of
`--alphabet` tokens, 0-16 filler tokens, the same sequence again, filler. The loss is on the
second copy's tokens after its first, which nothing but copying can predict; the score is
greedy accuracy there on 256 fixed rows no step trains on. Variants are `name:key=value,...`
fields of the `tiny` preset (`initializer_range`, `num_attention_heads`, ...), or of
`SWAPS`, which replace a part of the built model.

    uv run python packages/composer-model/benchmarks/induction_formation.py \
        --variant base: --variant init088:initializer_range=0.088 --steps 2000

`--quick` runs two variants for 20 steps (for CI: it checks the script, not the figures).
"""

from __future__ import annotations

import argparse
import math
import time

import torch
from torch import nn
from torch.nn import functional as F

from composer_kernels import attention
from composer_model import ComposerModel, ModelConfig, preset
from composer_model.layers.attention import MultiHeadLatentAttention
from composer_model.layers.norm import RMSNorm
from composer_model.layers.rope import apply_rope

ROW = 64

SWAPS = {
    "embed_std": "the token embedding's init alone, N(0, value) (the peer's is N(0, 1))",
    "smear": "each input embedding plus the previous token's",
    "abspos": "learned positions added, as the peer's",
    "layernorm": "every RMSNorm swapped for LayerNorm",
    "linear_init": "the attention's layers at nn.Linear's own init (uniform, 1/sqrt(fan_in))",
    "attn_std": "the attention's matrices alone N(0, value), its biases zero (norms kept)",
    "gelu_mlp": "a plain MLP for each dense SwiGLU",
    "no_latent_norm": "MLA without its latent's RMSNorm",
    "head_rope": "MLA with a rope key per head",
}
"""Variant fields that are not config fields: what each swaps in the built model."""


def induction_rows(
    count: int, alphabet: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows [count, ROW] of token ids 1..alphabet and the mask of their scored targets.

    `mask[r, t]` marks that position t's logits are scored: they predict the token at t + 1,
    a token of the second copy after its first."""
    rows = torch.randint(1, alphabet + 1, (count, ROW), generator=generator)
    mask = torch.zeros(count, ROW, dtype=torch.bool)
    for r in range(count):
        length = int(torch.randint(8, 25, (1,), generator=generator))
        gap = int(torch.randint(0, 17, (1,), generator=generator))
        start = int(torch.randint(0, ROW - 2 * length - gap + 1, (1,), generator=generator))
        again = start + length + gap
        rows[r, again : again + length] = rows[r, start : start + length]
        mask[r, again : again + length - 1] = True
    return rows, mask


class PlainTransformer(nn.Module):
    """The peer: learned positions, `nn.TransformerEncoder` layers with a causal mask."""

    def __init__(self, vocab: int, width: int, layers: int, heads: int, positions: bool) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.position = nn.Embedding(ROW, width) if positions else None
        layer = nn.TransformerEncoderLayer(
            width, heads, 3 * width, dropout=0.0, batch_first=True, norm_first=True
        )
        self.layers = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        if self.position is not None:
            x = x + self.position(torch.arange(ids.shape[1]))
        causal = nn.Transformer.generate_square_subsequent_mask(ids.shape[1])
        return self.head(self.layers(x, mask=causal, is_causal=True))


def build(variant: str, vocab: int) -> tuple[str, nn.Module]:
    """`name:key=value,...` as (name, model); the name `plain` is the peer (`plain-nopos`:
    the peer without position embeddings, causal attention alone)."""
    name, _, fields = variant.partition(":")
    if name in ("plain", "plain-nopos"):
        config = preset("tiny")
        return name, PlainTransformer(
            vocab,
            config.hidden_size,
            config.num_hidden_layers,
            config.num_attention_heads,
            positions=name == "plain",
        )
    overrides: dict[str, object] = {"vocab_size": vocab, "num_nextn_predict_layers": 0}
    swaps: dict[str, str] = {}  # the fields that are not config fields (`SWAPS`)
    for field in filter(None, fields.split(",")):
        key, _, value = field.partition("=")
        if key in SWAPS:
            swaps[key] = value
        elif value.lower() == "none":
            overrides[key] = None
        else:
            overrides[key] = _number_or_text(value)
    config = preset("tiny", **overrides)
    model = ComposerModel(config)
    model.reset_parameters()
    model.init_buffers()
    if "embed_std" in swaps:
        with torch.no_grad():
            model.embed_tokens.weight.normal_(0.0, float(swaps["embed_std"]))
    if "smear" in swaps:
        model.embed_tokens = SmearedEmbedding(model.embed_tokens)
    if "abspos" in swaps:
        model.embed_tokens = PositionedEmbedding(model.embed_tokens)
    if "layernorm" in swaps:
        for parent in list(model.modules()):
            for child_name, child in list(parent.named_children()):
                if isinstance(child, RMSNorm):
                    setattr(parent, child_name, nn.LayerNorm(child.weight.shape[0]))
    for layer in model.decoder_layers:
        if "no_latent_norm" in swaps:
            layer.self_attn.kv_a_layernorm = nn.Identity()  # type: ignore[assignment]
        if "linear_init" in swaps:
            for module in layer.self_attn.modules():
                if isinstance(module, nn.Linear):
                    module.reset_parameters()
        if "head_rope" in swaps:
            layer.self_attn = HeadRopeLatentAttention(config, layer.layer_idx)
        if "attn_std" in swaps:
            with torch.no_grad():
                for param_name, param in layer.self_attn.named_parameters():
                    if param_name.endswith("bias"):
                        param.zero_()
                    elif param.dim() > 1:
                        param.normal_(0.0, float(swaps["attn_std"]))
        if "gelu_mlp" in swaps and not layer.is_moe:
            width = config.hidden_size
            layer.mlp = nn.Sequential(  # type: ignore[assignment]
                nn.Linear(width, 3 * width), nn.GELU(), nn.Linear(3 * width, width)
            )
    return name, model


def _number_or_text(value: str) -> int | float | str:
    """A variant field's value as the config field wants it: 3, 0.051, 1e-3 or mha."""
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


class HeadRopeLatentAttention(MultiHeadLatentAttention):
    """MLA with a rope key of its own for every head, in place of the one they share."""

    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__(config, layer_idx)
        self.kv_a_proj_with_mqa = nn.Linear(
            config.hidden_size, self.kv_rank + self.num_heads * self.rope_dim, bias=False
        )
        with torch.no_grad():
            for param in self.parameters():
                if param.dim() > 1:
                    param.normal_(0.0, config.initializer_range)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cu_seqlens: torch.Tensor
    ) -> torch.Tensor:
        tokens = x.shape[0]
        q_nope, q_rope = self._queries(x, cos, sin)
        c_kv, k_rope = self.kv_a_proj_with_mqa(x).split(
            [self.kv_rank, self.num_heads * self.rope_dim], dim=-1
        )
        k_rope = apply_rope(k_rope.view(tokens, self.num_heads, self.rope_dim), cos, sin)
        kv = self.kv_b_proj(self.kv_a_layernorm(c_kv))
        k_nope, v = kv.view(tokens, self.num_heads, -1).split([self.nope_dim, self.v_dim], -1)
        out = attention(
            torch.cat([q_nope, q_rope], -1),
            torch.cat([k_nope, k_rope], -1),
            v,
            cu_seqlens=cu_seqlens,
            causal=True,
            softmax_scale=self.scale,
        )
        assert isinstance(out, torch.Tensor)
        return self.o_proj(out.reshape(tokens, self.num_heads * self.v_dim))


class PositionedEmbedding(nn.Module):
    """A token's embedding plus a learned one of its position in its row (rows are `ROW`
    long), as the peer has, beside our RoPE."""

    def __init__(self, embedding: nn.Embedding) -> None:
        super().__init__()
        self.embedding = embedding
        self.weight = embedding.weight
        self.position = nn.Embedding(ROW, embedding.weight.shape[1])

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embedding(ids) + self.position(torch.arange(ids.shape[0]) % ROW)


class SmearedEmbedding(nn.Module):
    """A token's embedding plus the previous token's (the packed stream's, so a row's first
    token gets the last row's: 1 in 64 here): the previous-token signal an induction head
    otherwise needs an attention head to fetch."""

    def __init__(self, embedding: nn.Embedding) -> None:
        super().__init__()
        self.embedding = embedding
        self.weight = embedding.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embedding(ids)
        return x + torch.cat([torch.zeros_like(x[:1]), x[:-1]])


def logits_of(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    out = model(ids)
    return out if isinstance(out, torch.Tensor) else out.logits


def accuracy(model: nn.Module, rows: torch.Tensor, mask: torch.Tensor) -> float:
    with torch.no_grad():
        guess = logits_of(model, rows)[:, :-1].argmax(-1)
    scored = mask[:, :-1]
    return float((guess == rows[:, 1:])[scored].float().mean())


def train(
    model: nn.Module,
    args: argparse.Namespace,
    probe: tuple[torch.Tensor, torch.Tensor],
) -> list[tuple[int, float]]:
    """Accuracy on the probe every `--every` steps, from step 0."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    generator = torch.Generator().manual_seed(args.seed)
    curve = [(0, accuracy(model, *probe))]
    for step in range(1, args.steps + 1):
        rows, mask = induction_rows(args.batch, args.alphabet, generator)
        logits = logits_of(model, rows)[:, :-1]
        targets = rows[:, 1:].masked_fill(~mask[:, :-1], -100)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if step % args.every == 0 or step == args.steps:
            curve.append((step, accuracy(model, *probe)))
    return curve


def first_step_at(curve: list[tuple[int, float]], level: float) -> int | None:
    return next((step for step, acc in curve if acc >= level), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variant", action="append", default=[], help="name:key=value,...")
    parser.add_argument("--no-plain", action="store_true", help="leave out the peer")
    parser.add_argument("--alphabet", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--level", type=float, default=0.5, help="accuracy that counts as formed")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.variant, args.steps, args.every, args.alphabet = ["base:"], 20, 10, 64
    variants = (args.variant or ["base:"]) + ([] if args.no_plain else ["plain"])
    torch.set_num_threads(args.threads)
    vocab = args.alphabet + 1
    probe = induction_rows(256, args.alphabet, torch.Generator().manual_seed(10_000 + args.seed))
    results = []
    for variant in variants:
        torch.manual_seed(args.seed)
        name, model = build(variant, vocab)
        began = time.perf_counter()
        curve = train(model, args, probe)
        seconds = time.perf_counter() - began
        formed = first_step_at(curve, args.level)
        results.append((name, formed, curve))
        shown = " ".join(f"{step}:{acc:.2f}" for step, acc in curve)
        print(f"{name:>12}  formed at {formed}  ({seconds:.0f} s)  {shown}", flush=True)
    peer = next((formed for name, formed, _ in results if name == "plain"), None)
    print(f"\nsteps to {args.level:.2f} accuracy, alphabet {args.alphabet}, seed {args.seed}:")
    for name, formed, curve in results:
        ratio = (
            f"{formed / peer:.2f}x the peer's"
            if formed is not None and peer
            else "not formed"
            if formed is None
            else ""
        )
        print(
            f"{name:>12}  {formed if formed is not None else math.inf!s:>6}  {ratio}  "
            f"final {curve[-1][1]:.3f}"
        )


if __name__ == "__main__":
    main()
