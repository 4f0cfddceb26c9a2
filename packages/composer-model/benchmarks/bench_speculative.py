"""MTP speculative decoding: acceptance rate and decode speed-up over plain greedy decoding.

A random model's drafts are never right, so this first trains the `tiny` preset (with its
MTP module, self-distillation target) for a few minutes on the Python standard library's
source, then decodes held-out files' openings both ways, checks that the outputs are
identical, and prints acceptance and the tokens/s ratio (medians of --repeats runs).

    uv run python packages/composer-model/benchmarks/bench_speculative.py --steps 300
"""

from __future__ import annotations

import argparse
import statistics
import sysconfig
import time
from pathlib import Path

import torch

from composer_model import (
    ComposerModel,
    InferenceEngine,
    SamplingParams,
    lm_forward_loss,
    preset,
    train_tokenizer,
)


def stdlib_texts() -> list[str]:
    root = Path(sysconfig.get_paths()["stdlib"])
    return [p.read_text(encoding="utf-8", errors="replace") for p in sorted(root.glob("*.py"))]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--tokens-per-step", type=int, default=1024)
    parser.add_argument("--doc-len", type=int, default=256)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    texts = stdlib_texts()
    held_out, train_texts = texts[: args.prompts], texts[args.prompts :]
    config = preset("tiny", mtp_target="self_distill", mtp_loss_weight=0.3)
    start = time.perf_counter()
    tokenizer = train_tokenizer(train_texts, vocab_size=config.vocab_size)
    stream = torch.tensor(
        [t for text in train_texts for t in [*tokenizer.encode(text), tokenizer.eos_id]]
    )
    print(
        f"tokenizer + corpus: {stream.numel() / 1e6:.2f}M tokens in {time.perf_counter() - start:.1f}s"
    )

    model = ComposerModel(config).train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=3e-3, total_steps=args.steps, pct_start=0.05
    )
    docs = args.tokens_per_step // args.doc_len
    cu = torch.arange(docs + 1) * args.doc_len
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        offsets = torch.randint(0, stream.numel() - args.doc_len, (docs,))
        ids = torch.cat([stream[o : o + args.doc_len] for o in offsets])[None]
        result = lm_forward_loss(model, ids, cu_seqlens=cu)
        result.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        schedule.step()
        opt.zero_grad(set_to_none=True)
        model.update_balancing_bias()
        if step % 50 == 0 or step == args.steps:
            elapsed = time.perf_counter() - start
            print(
                f"step {step:4d}  lm {result.lm_loss.item():.3f}  mtp(kl) {result.mtp_loss.item():.3f}  "
                f"{step * args.tokens_per_step / elapsed:.0f} train tok/s"
            )

    model.eval()
    prompts = [tokenizer.encode(text)[:64] for text in held_out]
    params = SamplingParams(temperature=0.0, max_new_tokens=args.new_tokens, stop_token_ids=[])
    timings: dict[str, list[float]] = {"plain": [], "speculative": []}
    outputs: dict[str, list[list[int]]] = {}
    acceptance = 0.0
    for _ in range(args.repeats):
        for mode in ("plain", "speculative"):
            engine = InferenceEngine(
                model, tokenizer, max_batch_size=len(prompts), speculative=mode == "speculative"
            )
            begin = time.perf_counter()
            outputs[mode] = [r.token_ids for r in engine.generate(prompts, params)]
            timings[mode].append(time.perf_counter() - begin)
            if mode == "speculative":
                acceptance = engine.stats.acceptance_rate
    generated = sum(len(o) for o in outputs["plain"])
    plain = generated / statistics.median(timings["plain"])
    fast = generated / statistics.median(timings["speculative"])
    identical = outputs["plain"] == outputs["speculative"]
    print(
        f"greedy decode, batch {len(prompts)}, {args.new_tokens} new tokens: plain {plain:.0f} tok/s, "
        f"MTP speculative {fast:.0f} tok/s, speed-up {fast / plain:.2f}x, acceptance {acceptance:.1%}, "
        f"identical output: {identical}"
    )


if __name__ == "__main__":
    main()
