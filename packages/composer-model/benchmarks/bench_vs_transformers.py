"""Our model and engine against transformers' DeepseekV3ForCausalLM, every ratio in one run.

Same weights (our checkpoint loaded by transformers), same machine, same process, timed
alternately; medians of --repeats. Prints, side by side:

- training fwd+bwd tokens/s at B x T = 4 x 256 and on one packed 1 x 2048 row of several
  documents (ours masks attention per document; transformers gets the same row with
  position ids restarting per document, which its sdpa path does not mask: less work for it);
- greedy decode tokens/s at batch 1, 4 and 32 (transformers' `generate` with its cache; same
  prompts, same number of output tokens, and the outputs compared token for token), with our
  engine's decode step run eagerly and captured (`compile_decode=True`: torch.compile; the
  warm-up call pays the compile, the timed ones do not).

    uv run --group bench python packages/composer-model/benchmarks/bench_vs_transformers.py

`--quick` runs every row with tiny sizes (for CI: it checks the script, not the speed).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable

import torch
from transformers import DeepseekV3ForCausalLM

from composer_model import ComposerModel, InferenceEngine, SamplingParams, preset, save_pretrained


def paired_medians(
    ours: Callable[[], object], theirs: Callable[[], object], repeats: int
) -> tuple[float, float]:
    """Median seconds of each, run alternately after one warm-up each."""
    ours()
    theirs()
    a, b = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        ours()
        a.append(time.perf_counter() - start)
        start = time.perf_counter()
        theirs()
        b.append(time.perf_counter() - start)
    return statistics.median(a), statistics.median(b)


def decode_row(
    ours: ComposerModel,
    theirs: DeepseekV3ForCausalLM,
    batch: int,
    captured: bool,
    args: argparse.Namespace,
) -> tuple[str, float, float, str]:
    """Greedy decode of the same prompts by both; the first (warm-up) call also compiles."""
    params = SamplingParams(temperature=0.0, max_new_tokens=args.new_tokens, stop_token_ids=[])
    prompts = torch.randint(0, ours.config.vocab_size, (batch, args.prompt_len))
    outputs: dict[str, list[list[int]]] = {}

    def decode_ours() -> None:
        engine = InferenceEngine(ours, max_batch_size=batch, compile_decode=captured)
        outputs["ours"] = [r.token_ids for r in engine.generate(prompts.tolist(), params)]
        if engine.captured is not None and not engine.captured.active:
            raise SystemExit(f"captured decode failed: {engine.captured.failure}")

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

    d_ours, d_theirs = paired_medians(decode_ours, decode_theirs, args.repeats)
    same = sum(a == b for a, b in zip(outputs["ours"], outputs["theirs"], strict=True))
    generated = batch * args.new_tokens
    label = "captured" if captured else "eager"
    return (
        f"greedy decode batch {batch}, {args.prompt_len}+{args.new_tokens}, ours {label}",
        generated / d_ours,
        generated / d_theirs,
        f"identical {same}/{batch}",
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--decode-batches", type=int, nargs="*", default=[1, 4, 32])
    parser.add_argument("--train-shapes", nargs="*", default=["4x256", "packed1x2048"])
    parser.add_argument(
        "--decode-modes",
        nargs="+",
        choices=["eager", "captured"],
        default=["eager", "captured"],
        help="our engine's decode step eagerly and/or captured (compile_decode=True)",
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one repeat (CI)")
    args = parser.parse_args()
    if args.quick:
        args.repeats, args.new_tokens, args.prompt_len = 1, 4, 8
        args.decode_batches = [1, 4]
        args.train_shapes = ["2x32", "packed1x64"]
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    config = preset(args.preset, num_nextn_predict_layers=0)
    ours = ComposerModel(config)
    with tempfile.TemporaryDirectory() as tmp:
        save_pretrained(ours, tmp)
        theirs = DeepseekV3ForCausalLM.from_pretrained(tmp, attn_implementation="sdpa")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"preset={args.preset} params={ours.num_parameters() / 1e6:.2f}M threads={args.threads} "
        f"cpus={os.cpu_count()} load average {load:.1f} repeats={args.repeats}"
    )
    rows: list[tuple[str, float, float, str]] = []

    for shape in args.train_shapes:
        packed = shape.startswith("packed")
        batch, length = (int(x) for x in shape.removeprefix("packed").split("x"))
        ids = torch.randint(0, config.vocab_size, (batch, length))
        cu_seqlens = None
        positions = None
        if packed:  # several documents of uneven length
            cuts = sorted(torch.randperm(length - 1)[:3].add(1).tolist())
            cu_seqlens = torch.tensor([0, *cuts, length])
            starts = cu_seqlens[:-1].repeat_interleave(cu_seqlens.diff())
            positions = (torch.arange(length) - starts)[None]

        def step(
            model: torch.nn.Module,
            is_ours: bool,
            ids: torch.Tensor = ids,
            cu_seqlens: torch.Tensor | None = cu_seqlens,
            positions: torch.Tensor | None = positions,
        ) -> Callable[[], None]:
            def run() -> None:
                if is_ours:
                    logits = model(ids, cu_seqlens=cu_seqlens).logits
                else:
                    logits = model(ids, position_ids=positions).logits
                loss = torch.nn.functional.cross_entropy(
                    logits[:, :-1].reshape(-1, config.vocab_size), ids[:, 1:].reshape(-1)
                )
                loss.backward()
                model.zero_grad(set_to_none=True)

            return run

        ours.train()
        theirs.train()
        t_ours, t_theirs = paired_medians(step(ours, True), step(theirs, False), args.repeats)
        docs = f", {len(cu_seqlens) - 1} documents" if cu_seqlens is not None else ""
        rows.append(
            (
                f"train fwd+bwd {batch}x{length}{docs}",
                ids.numel() / t_ours,
                ids.numel() / t_theirs,
                "",
            )
        )

    ours.eval()
    theirs.eval()
    for mode in args.decode_modes:
        for batch in args.decode_batches:
            rows.append(decode_row(ours, theirs, batch, mode == "captured", args))

    print(f"| what | ours tok/s | transformers tok/s | ratio | |\n|{' --- |' * 5}")
    for what, a, b, note in rows:
        print(f"| {what} | {a:.0f} | {b:.0f} | {a / b:.2f}x | {note} |")


if __name__ == "__main__":
    main()
