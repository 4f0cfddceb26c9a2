"""Training and decode throughput of ComposerModel against transformers' DeepseekV3, same weights.

Both models are built from one random checkpoint (ours, saved in the DeepSeek-V3 layout and
read by `transformers`), run on the same machine in the same process, and timed alternately.
Prints medians and the ratio ours / transformers (higher is better for us).

    uv run python packages/composer-model/benchmarks/bench_vs_transformers.py --preset tiny
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable

import torch
from transformers import DeepseekV3ForCausalLM

from composer_model import ComposerModel, InferenceEngine, SamplingParams, preset, save_pretrained


def median_seconds(fn: Callable[[], object], repeats: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    config = preset(args.preset, num_nextn_predict_layers=0)
    ours = ComposerModel(config)
    with tempfile.TemporaryDirectory() as tmp:
        save_pretrained(ours, tmp)
        theirs = DeepseekV3ForCausalLM.from_pretrained(tmp, attn_implementation="sdpa")
    print(f"preset={args.preset} params={ours.num_parameters() / 1e6:.2f}M threads={args.threads}")
    print(
        f"transformers experts implementation: {getattr(theirs.config, '_experts_implementation', 'default')}"
    )

    ids = torch.randint(0, config.vocab_size, (args.batch, args.seq_len))
    with torch.no_grad():
        diff = (ours(ids).logits - theirs(ids).logits).abs().max().item()
    print(f"max |logit difference| on the benchmark batch: {diff:.2e}")

    def train_step(model: torch.nn.Module, is_ours: bool) -> Callable[[], None]:
        def run() -> None:
            logits = model(ids).logits
            loss = torch.nn.functional.cross_entropy(
                logits[:, :-1].reshape(-1, config.vocab_size), ids[:, 1:].reshape(-1)
            )
            loss.backward()
            model.zero_grad(set_to_none=True)

        del is_ours
        return run

    ours.train()
    theirs.train()
    t_ours = median_seconds(train_step(ours, True), args.repeats)
    t_theirs = median_seconds(train_step(theirs, False), args.repeats)
    tokens = ids.numel()
    print(
        f"train fwd+bwd  ours {tokens / t_ours:9.0f} tok/s   transformers {tokens / t_theirs:9.0f} tok/s   "
        f"ratio {t_theirs / t_ours:.2f}x"
    )

    ours.eval()
    theirs.eval()
    prompts = torch.randint(0, config.vocab_size, (args.batch, args.prompt_len))
    params = SamplingParams(temperature=0.0, max_new_tokens=args.new_tokens, stop_token_ids=[])
    outputs: dict[str, list[list[int]]] = {}

    def decode_ours() -> None:
        engine = InferenceEngine(ours, max_batch_size=args.batch)
        outputs["ours"] = [r.token_ids for r in engine.generate(prompts.tolist(), params)]

    @torch.no_grad()
    def decode_theirs() -> None:
        out = theirs.generate(
            prompts,
            max_new_tokens=args.new_tokens,
            min_new_tokens=args.new_tokens,
            do_sample=False,
            attention_mask=torch.ones_like(prompts),
            pad_token_id=0,
        )
        outputs["theirs"] = out[:, args.prompt_len :].tolist()

    d_ours = median_seconds(decode_ours, max(1, args.repeats // 2))
    d_theirs = median_seconds(decode_theirs, max(1, args.repeats // 2))
    generated = args.batch * args.new_tokens
    same = sum(a == b for a, b in zip(outputs["ours"], outputs["theirs"], strict=True))
    print(
        f"decode (greedy, batch {args.batch}, {args.prompt_len}+{args.new_tokens})  ours {generated / d_ours:7.0f} tok/s   "
        f"transformers {generated / d_theirs:7.0f} tok/s   ratio {d_theirs / d_ours:.2f}x   "
        f"identical sequences {same}/{args.batch}"
    )


if __name__ == "__main__":
    main()
