"""Rollout throughput of the EpisodeRunner on the built-in tasks: full re-send vs cache reuse.

Random weights rarely write a tool call, so this first fits the `tiny` preset (with its MTP
module, self-distillation target) to the oracle demonstrations of the built-in task
templates, then runs the same episodes (greedy, real sandboxes) three ways, alternately:

- `resend`: every turn re-sends the whole context and re-fills the cache (the old runner);
- `reuse`: each episode keeps its engine cache between turns (an engine session);
- `reuse+mtp`: the same with MTP speculative decoding;
- `reuse+captured`: cache reuse with the decode step captured by torch.compile
  (`compile_decode=True`; a warm-up run before the timed ones pays the compile).

It checks that the three produce the same transcripts and prints rollout tokens/s (generated
tokens over the wall time of `EpisodeRunner.run`, sandboxes and grading included), the same
over the time spent inside `engine.step` (the engine's share), the prompt tokens computed,
the MTP acceptance and the ratios (medians of --repeats runs). The x ratios are against
`resend` in the same run.

    uv run python packages/composer-rl/benchmarks/bench_rollout.py
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from composer_model import ComposerModel, InferenceEngine, lm_forward_loss, preset, train_tokenizer
from composer_rl.agent.episode import EpisodeRunner, RunnerConfig
from composer_rl.agent.oracle import play_oracle
from composer_rl.tasks import BUILTIN_TEMPLATES, Split

MODES = ("resend", "reuse", "reuse+mtp", "reuse+captured")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--templates", type=int, default=len(BUILTIN_TEMPLATES))
    parser.add_argument("--tasks-per-template", type=int, default=1)
    parser.add_argument("--steps", type=int, default=200, help="SFT steps on the demonstrations")
    parser.add_argument("--batch", type=int, default=8, help="engine max_batch_size")
    parser.add_argument("--max-turns", type=int, default=6)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--backend", default=None, help="sandbox backend (default: the registry's)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    tasks = []
    for template in BUILTIN_TEMPLATES[: args.templates]:
        for _, task in zip(
            range(args.tasks_per_template), template.tasks(Split.TRAIN), strict=False
        ):
            tasks.append(task)
    demos = [play_oracle(t, grade=False).transcript.text for t in tasks]
    tokenizer = train_tokenizer(demos * 4, vocab_size=1024)
    config = preset(
        "tiny", vocab_size=tokenizer.vocab_size, mtp_target="self_distill", mtp_loss_weight=0.5
    )
    model = ComposerModel(config).train()
    docs = [[*tokenizer.encode(text), tokenizer.eos_id] for text in demos]
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        picked = [docs[int(i)] for i in torch.randint(0, len(docs), (4,))]
        ids = torch.tensor([t for d in picked for t in d])[None]
        cu = torch.tensor([0, *torch.tensor([len(d) for d in picked]).cumsum(0).tolist()])
        result = lm_forward_loss(model, ids, cu_seqlens=cu)
        result.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        model.update_balancing_bias()
        if step % 50 == 0 or step == args.steps:
            print(
                f"sft step {step:4d}  lm {result.lm_loss.item():.3f}  mtp {result.mtp_loss.item():.3f}  "
                f"{time.perf_counter() - start:.0f}s"
            )
    model.eval()
    print(
        f"{len(tasks)} tasks from {args.templates} templates, batch {args.batch}, greedy, "
        f"max_turns {args.max_turns}, threads {args.threads}"
    )

    timings: dict[str, list[float]] = {m: [] for m in MODES}
    engine_timings: dict[str, list[float]] = {m: [] for m in MODES}
    stats: dict[str, tuple[int, int, int, float]] = {}
    transcripts: dict[str, list[str]] = {}

    def make_engine(mode: str) -> InferenceEngine:
        return InferenceEngine(
            model,
            tokenizer,
            max_batch_size=args.batch,
            speculative=mode == "reuse+mtp",
            compile_decode=mode == "reuse+captured",
        )

    warm = make_engine("reuse+captured")  # compile once, outside the timings
    EpisodeRunner(
        warm,
        tokenizer,
        RunnerConfig(
            max_turns=args.max_turns, max_new_tokens=args.max_new_tokens, backend=args.backend
        ),
    ).run(tasks[:2])
    for _ in range(args.repeats):
        for mode in MODES:
            engine = make_engine(mode)
            runner_config = RunnerConfig(
                max_turns=args.max_turns,
                max_new_tokens=args.max_new_tokens,
                backend=args.backend,
                reuse_cache=mode != "resend",
            )
            engine_seconds = [0.0]
            step = engine.step

            def timed_step(step=step, spent=engine_seconds):  # type: ignore[no-untyped-def]
                began = time.perf_counter()
                try:
                    return step()
                finally:
                    spent[0] += time.perf_counter() - began

            engine.step = timed_step  # type: ignore[method-assign]
            began = time.perf_counter()
            results = EpisodeRunner(engine, tokenizer, runner_config).run(tasks)
            timings[mode].append(time.perf_counter() - began)
            engine_timings[mode].append(engine_seconds[0])
            generated = sum(r.generated_tokens for r in results)
            turns = sum(len(r.calls) for r in results)
            computed = engine.stats.prompt_tokens - engine.stats.reused_tokens
            stats[mode] = (generated, turns, computed, engine.stats.acceptance_rate)
            transcripts[mode] = [r.transcript.text for r in results]
    solved = sum(r.solved for r in results)
    same = all(transcripts[m] == transcripts["resend"] for m in MODES)
    print(f"solved {solved}/{len(tasks)}; identical transcripts in all modes: {same}")
    base = statistics.median(timings["resend"])
    engine_base = statistics.median(engine_timings["resend"])
    for mode in MODES:
        generated, turns, computed, acceptance = stats[mode]
        seconds = statistics.median(timings[mode])
        in_engine = statistics.median(engine_timings[mode])
        extra = f"  MTP acceptance {acceptance:.1%}" if mode == "reuse+mtp" else ""
        print(
            f"{mode:14s} rollout {generated / seconds:7.1f} tok/s (x{base / seconds:.2f})   "
            f"engine {generated / in_engine:7.1f} tok/s (x{engine_base / in_engine:.2f})   "
            f"{generated} tokens, {turns} turns, {computed} prompt tokens computed, "
            f"{seconds:.2f}s wall, {in_engine:.2f}s in engine.step{extra}"
        )
    reuse = statistics.median(engine_timings["reuse"])
    for mode in ("reuse+mtp", "reuse+captured"):
        print(
            f"engine time, {mode} vs reuse: x{reuse / statistics.median(engine_timings[mode]):.2f}"
        )


if __name__ == "__main__":
    main()
