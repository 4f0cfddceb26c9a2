"""Where training and decode time goes: per-module forward shares and the top ops (fwd+bwd).

Module shares come from forward hooks (wall time inside each module kind, summed over
layers); the op table is torch.profiler's self CPU time over one training step and over a
batch of decode steps. What is left of the step after the listed modules is Python and
framework overhead around them.

    uv run python packages/composer-model/benchmarks/profile_model.py
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from collections.abc import Callable

import torch
from torch import nn

from composer_model import ComposerModel, InferenceEngine, SamplingParams, preset
from composer_model.layers.attention import MultiHeadLatentAttention
from composer_model.layers.mlp import SwiGLU
from composer_model.layers.moe import RoutedExperts, Router
from composer_model.layers.norm import RMSNorm

KINDS: dict[type[nn.Module], str] = {
    MultiHeadLatentAttention: "attention (MLA, incl. projections)",
    Router: "MoE router",
    RoutedExperts: "MoE dispatch + expert GEMMs",
    SwiGLU: "dense / shared-expert MLP",
    RMSNorm: "RMSNorm",
}


def module_shares(model: ComposerModel, run: Callable[[], object], repeats: int) -> None:
    spent: dict[str, float] = defaultdict(float)
    starts: dict[int, float] = {}
    handles = []
    patched: list[nn.Module] = []
    for module in model.modules():
        kind = next((k for t, k in KINDS.items() if isinstance(module, t)), None)
        if kind is None:
            continue

        def pre(mod: nn.Module, _args: object) -> None:
            starts[id(mod)] = time.perf_counter()

        def post(mod: nn.Module, _args: object, _out: object, kind: str = kind) -> None:
            spent[kind] += time.perf_counter() - starts.pop(id(mod))

        handles += [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]
        if isinstance(module, MultiHeadLatentAttention):  # the engine calls forward_cached
            cached = module.forward_cached

            def timed(*a: object, _f: Callable[..., torch.Tensor] = cached, **k: object) -> object:
                began = time.perf_counter()
                out = _f(*a, **k)
                spent["attention (MLA, incl. projections)"] += time.perf_counter() - began
                return out

            module.forward_cached = timed  # type: ignore[method-assign]
            patched.append(module)
    total = 0.0
    run()  # warm-up
    spent.clear()
    for _ in range(repeats):
        began = time.perf_counter()
        run()
        total += time.perf_counter() - began
    for handle in handles:
        handle.remove()
    for module in patched:
        del module.forward_cached  # back to the class's method
    # The shared-expert SwiGLU runs inside MoE; norms inside attention (q/kv norms) too.
    for kind, seconds in sorted(spent.items(), key=lambda kv: -kv[1]):
        print(f"  {kind:38s} {seconds / repeats * 1e3:8.1f} ms  {seconds / total:6.1%}")
    print(f"  {'whole step':38s} {total / repeats * 1e3:8.1f} ms")


def top_ops(run: Callable[[], object], rows: int) -> None:
    run()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        run()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rows", type=int, default=12)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--skip-train", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = preset(args.preset, num_nextn_predict_layers=0)
    model = ComposerModel(config)
    shapes = [(4, 256, None), (1, 2048, torch.tensor([0, 300, 900, 1500, 2048]))]
    if args.quick:
        shapes = [(2, 32, None), (1, 64, torch.tensor([0, 20, 64]))]
    for batch, length, cu in [] if args.skip_train else shapes:
        ids = torch.randint(0, config.vocab_size, (batch, length))

        def train_step(ids: torch.Tensor = ids, cu: torch.Tensor | None = cu) -> None:
            logits = model(ids, cu_seqlens=cu).logits
            torch.nn.functional.cross_entropy(
                logits[:, :-1].reshape(-1, config.vocab_size), ids[:, 1:].reshape(-1)
            ).backward()
            model.zero_grad(set_to_none=True)

        model.train()
        print(
            f"train fwd+bwd {batch}x{length}{' packed' if cu is not None else ''}: forward shares"
        )
        module_shares(model, train_step, args.repeats)
        top_ops(train_step, args.rows)
    model.eval()
    for batch in (1, 4) if args.quick else (1, 32):
        prompts = torch.randint(0, config.vocab_size, (batch, 32)).tolist()
        params = SamplingParams(
            temperature=0.0, max_new_tokens=4 if args.quick else 32, stop_token_ids=[]
        )

        def decode(
            prompts: list[list[int]] = prompts, batch: int = batch, params: SamplingParams = params
        ) -> None:
            InferenceEngine(model, max_batch_size=batch).generate(prompts, params)

        print(f"greedy decode batch {batch}, 32 + {params.max_new_tokens} tokens: forward shares")
        module_shares(model, decode, args.repeats)
        top_ops(decode, args.rows)


if __name__ == "__main__":
    main()
