"""router-replay: does replaying the engine's expert choices close the train/inference gap?

In RL the trainer recomputes the log-probability of every sampled token and weighs it
against the one the inference engine recorded. The two networks hold the same weights but
do not compute the same numbers: the engine decodes a token at a time against a cache, in
whatever precision serving uses; the trainer runs whole sequences in its own. Where a
router's top-k has a near tie, that round-off picks a different expert, and the token's
log-probability moves by far more than round-off. The report replays the engine's expert
indices in the trainer's forward, and guards the replay: an expert the trainer's router
scores far below its own k-th choice is replaced (`replay_guard`).

Here the engine (`composer_model.InferenceEngine`, batched decode with its cache) samples
continuations at temperature 1 with `return_routing`, in two numerics:

- **fp32 engine**: the same weights and dtype as the trainer; only the decode path differs
  (cached one-token steps, other batch shapes);
- **bf16 engine**: the same weights cast to bfloat16, as serving runs them.

The trainer's fp32 forward then scores the same tokens three ways: its own routing (replay
off), the engine's experts verbatim (replay, no guard) and with the guard (the RL default,
0.1). For each, over the sampled tokens: mean, 99th percentile and max of |log pi_train -
log pi_engine|, and the share of tokens whose truncated importance weight pi_train /
pi_engine is above the RL loss's cap (2), i.e. the tokens whose gradient the mismatch
bends. The replay-off rows also count the tokens where some layer's trainer routing differs
from the engine's.

Then its effect on learning (`studies.router_replay_learning`): with a checkpoint (or
`--quick`), two RL runs on a few training tasks seen again and again, where this policy
does learn, replay on against off, the engines serving bf16-rounded weights.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import copy

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from composer_model import (
    ComposerModel,
    ComposerTokenizer,
    InferenceEngine,
    SamplingParams,
    load_pretrained,
    preset,
)
from composer_rl.agent.quick import random_checkpoint
from composer_rl.studies.base import RANDOM_POLICY_NOTE, StudyOptions, StudyOutcome, Verdict
from composer_rl.studies.router_replay_learning import (
    LEARN_FULL,
    LEARN_QUICK,
    LEARNING_COLUMNS,
    VARIANTS,
    learning_rows,
    learning_summary,
    run_learning,
)

ENGINES: tuple[tuple[str, torch.dtype], ...] = (("fp32", torch.float32), ("bf16", torch.bfloat16))
MODES: tuple[tuple[str, bool, float | None], ...] = (
    ("replay off", False, None),
    ("replay, no guard", True, None),
    ("replay + guard 0.1", True, 0.1),
)
IS_CAP = 2.0  # the RL loss's default truncated importance-weight cap


@dataclass(frozen=True)
class Sizes:
    prompts: int
    prompt_len: int  # random-token prompts (random model); task prompts are their own length
    new_tokens: int


QUICK = Sizes(prompts=8, prompt_len=24, new_tokens=32)
FULL = Sizes(prompts=64, prompt_len=48, new_tokens=96)


def build_policy(options: StudyOptions, sizes: Sizes) -> tuple[ComposerModel, list[list[int]]]:
    """The policy and its prompts: a checkpoint with held-out task prompts in the agent
    format, or a random tiny model with random-token prompts."""
    gen = torch.Generator().manual_seed(options.seed)
    if options.checkpoint is not None:
        from composer_rl.agent.format import render_prompt
        from composer_rl.rl.compare import heldout_tasks
        from composer_rl.tasks.model import Task

        model = load_pretrained(options.checkpoint, dtype=torch.float32).eval()
        tokenizer = ComposerTokenizer.from_file(options.checkpoint / "tokenizer.json")
        by_template: dict[str, list[Task]] = {}
        for task in heldout_tasks(per_template=sizes.prompts, seed=options.seed):
            by_template.setdefault(str(task.metadata.get("template")), []).append(task)
        # Round robin over the templates, so every template is in the prompts.
        tasks = [t for row in zip_longest(*by_template.values()) for t in row if t is not None]
        prompts = [tokenizer.encode(render_prompt(t.instruction)) for t in tasks]
        return model, prompts[: sizes.prompts]
    torch.manual_seed(options.seed)
    model = ComposerModel(preset("tiny")).eval()
    vocab = model.config.vocab_size
    prompts = [
        torch.randint(1, vocab, (sizes.prompt_len,), generator=gen).tolist()
        for _ in range(sizes.prompts)
    ]
    return model, prompts


@torch.no_grad()
def sample(
    model: ComposerModel, dtype: torch.dtype, prompts: list[list[int]], sizes: Sizes, seed: int
) -> list[Any]:
    """Temperature-1 continuations from an engine over `model` cast to `dtype`, with the
    engine's per-token logprobs and expert indices."""
    served = copy.deepcopy(model).to(dtype).eval()
    engine = InferenceEngine(served, max_batch_size=len(prompts))
    params = [
        SamplingParams(
            temperature=1.0,
            max_new_tokens=sizes.new_tokens,
            seed=seed * 100_003 + i,
            stop_token_ids=[],
            return_routing=True,
        )
        for i in range(len(prompts))
    ]
    return engine.generate(prompts, params)


@torch.no_grad()
def score(
    model: ComposerModel, results: list[Any], replay: bool, guard: float | None
) -> dict[str, Any]:
    """The trainer's fp32 log-probabilities of the sampled tokens, packed into one row."""
    docs = [torch.tensor(r.prompt_ids + r.token_ids) for r in results]
    lens = torch.tensor([0] + [len(d) for d in docs])
    cu = lens.cumsum(0)
    ids = torch.cat(docs)[None]
    routing = torch.cat([r.routing for r in results]) if replay else None
    out = model(
        ids,
        cu_seqlens=cu,
        replay_indices=routing,
        replay_guard=guard if replay else None,
        return_routing=not replay,
    )
    logp = torch.log_softmax(out.logits[0].double(), -1)
    deltas, differs = [], 0
    for i, r in enumerate(results):
        start = int(cu[i]) + len(r.prompt_ids)
        n = len(r.token_ids)
        positions = torch.arange(start - 1, start - 1 + n)  # logits at t-1 score token t
        train = logp[positions, torch.tensor(r.token_ids)]
        deltas.append(train - torch.tensor(r.logprobs, dtype=torch.float64))
        if not replay and out.routing:
            mine = torch.stack([x[start : start + n] for x in out.routing], 1).sort(-1).values
            theirs = r.routing[len(r.prompt_ids) : len(r.prompt_ids) + n].long().sort(-1).values
            differs += int((mine != theirs).any(-1).any(-1).sum())
    delta = torch.cat(deltas)
    gap = delta.abs()
    choices = sum(int(r.routing.shape[1] * r.routing.shape[2]) * len(r.token_ids) for r in results)
    return {
        "tokens": int(delta.numel()),
        "mean_abs": float(gap.mean()),
        "p99_abs": float(torch.quantile(gap, 0.99)),
        "max_abs": float(gap.max()),
        "capped_share": float((delta.exp() > IS_CAP).double().mean()),
        "routing_differs_share": differs / max(1, int(delta.numel())) if not replay else None,
        "guard_replacement_rate": float(out.replacements) / max(1, choices)
        if replay and guard is not None
        else None,
        "abs_gaps": gap.tolist(),
    }


def measure(options: StudyOptions, sizes: Sizes) -> list[dict[str, Any]]:
    model, prompts = build_policy(options, sizes)
    rows = []
    for engine_name, dtype in ENGINES:
        results = sample(model, dtype, prompts, sizes, options.seed)
        for mode, replay, guard in MODES:
            rows.append(
                {"engine": engine_name, "mode": mode, **score(model, results, replay, guard)}
            )
    return rows


def _figure(rows: list[dict[str, Any]], learning: dict[str, Any] | None) -> Figure:
    panels = len(ENGINES) + (learning is not None)
    fig, axes = plt.subplots(1, panels, figsize=(5.5 * panels, 4))
    for ax, (engine_name, _) in zip(axes, ENGINES, strict=False):
        for row in (r for r in rows if r["engine"] == engine_name):
            gaps = torch.tensor(row["abs_gaps"]).clamp_min(1e-12).sort().values
            share_above = 1.0 - torch.arange(len(gaps), dtype=torch.float64) / len(gaps)
            ax.loglog(gaps.numpy(), share_above.numpy(), label=row["mode"])
        ax.set_title(f"{engine_name} engine vs fp32 trainer")
        ax.set_xlabel("|log pi_train - log pi_engine| of a sampled token")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("share of tokens with a larger gap")
    axes[0].legend()
    if learning is not None:
        ax = axes[-1]
        for name, _ in VARIANTS:
            curve = learning["variants"][name]["curve"]
            x = [i + 1 for i in range(len(curve))]
            ax.errorbar(
                x,
                [m for m, _, _ in curve],
                yerr=[se for _, se, _ in curve],
                marker="o",
                capsize=3,
                label=f"{name} (training episodes)",
            )
        ax.set_xlabel("quarter of the run")
        ax.set_ylabel("solve rate")
        ax.set_title(f"learning, engines on {learning['publish_dtype']} weights")
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.suptitle("router-replay: train/inference log-probability mismatch and learning")
    fig.tight_layout()
    return fig


def _verdict(rows: list[dict[str, Any]]) -> Verdict:
    def get(engine: str, mode: str) -> dict[str, Any]:
        return next(r for r in rows if r["engine"] == engine and r["mode"] == mode)

    off, verbatim, guarded = (get("bf16", m) for m, _, _ in MODES)
    if off["routing_differs_share"] == 0:
        return Verdict(
            "undecided",
            "no routing flips",
            "The bf16 engine chose the trainer's experts for every token, so replay had "
            "nothing to correct here; more tokens or a trained checkpoint would show flips.",
            "rests on tokens the engine and the trainer route differently",
        )
    cut_mean = off["mean_abs"] / max(verbatim["mean_abs"], 1e-300)
    cut_p99 = off["p99_abs"] / max(verbatim["p99_abs"], 1e-300)
    replay_held = verbatim["mean_abs"] < off["mean_abs"] and verbatim["p99_abs"] <= off["p99_abs"]
    guard_held = guarded["p99_abs"] < verbatim["p99_abs"]
    summary = (
        f"With the bf16 engine {off['routing_differs_share']:.1%} of sampled tokens had some "
        f"layer route differently in the trainer. Replay cut the mean mismatch "
        f"{cut_mean:.1f}x ({off['mean_abs']:.2e} -> {verbatim['mean_abs']:.2e}) and the p99 "
        f"{cut_p99:.1f}x; capped importance weights {off['capped_share']:.2%} -> "
        f"{verbatim['capped_share']:.2%}. The guard replaced "
        f"{guarded['guard_replacement_rate']:.3%} of replayed choices and moved the p99 "
        f"{verbatim['p99_abs']:.2e} -> {guarded['p99_abs']:.2e}"
        + (" (no further cut)." if not guarded["p99_abs"] < verbatim["p99_abs"] else ".")
    )
    strength = f"mean cut {cut_mean:.1f}x, p99 cut {cut_p99:.1f}x"
    if replay_held and guard_held:
        return Verdict("held", strength, summary)
    if replay_held:
        return Verdict(
            "held in part",
            strength + "; the guard's further cut did not show",
            summary + " At one policy version a replayed expert is the trainer's own choice or "
            "a near tie, so the guard has nothing to replace; it exists for choices that are "
            "implausible, not merely rounded differently.",
            f"replay cut the mismatch (mean {cut_mean:.1f}x, p99 {cut_p99:.1f}x); the guard's "
            f"further p99 cut did not show ({verbatim['p99_abs']:.3g} -> "
            f"{guarded['p99_abs']:.3g})",
        )
    return Verdict("did not hold", strength, summary)


def learning(options: StudyOptions) -> dict[str, Any] | None:
    """The two learning runs, or None in a full study without a checkpoint (runs on a
    random policy at full size would cost half an hour and show nothing)."""
    if options.checkpoint is None and not options.quick:
        return None
    sizes = LEARN_QUICK if options.quick else LEARN_FULL
    with tempfile.TemporaryDirectory(prefix="study-replay-") as tmp:
        work = (options.work_dir or Path(tmp)) / "learning"
        work.mkdir(parents=True, exist_ok=True)
        model = options.checkpoint or random_checkpoint(work / "random-policy", options.seed)
        return run_learning(model, work, sizes, options.seed, quick=options.quick)


def run(options: StudyOptions) -> StudyOutcome:
    sizes = QUICK if options.quick else FULL
    rows = measure(options, sizes)
    learned = learning(options)
    table = [
        [
            r["engine"],
            r["mode"],
            str(r["tokens"]),
            f"{r['mean_abs']:.2e}",
            f"{r['p99_abs']:.2e}",
            f"{r['max_abs']:.2e}",
            f"{r['capped_share']:.2%}",
            "-" if r["routing_differs_share"] is None else f"{r['routing_differs_share']:.1%}",
            "-" if r["guard_replacement_rate"] is None else f"{r['guard_replacement_rate']:.3%}",
        ]
        for r in rows
    ]
    numbers = {
        "sizes": sizes.__dict__,
        "checkpoint": str(options.checkpoint) if options.checkpoint else None,
        "rows": [{k: v for k, v in r.items() if k != "abs_gaps"} for r in rows],
        "learning": learned,
    }
    verdict = _verdict(rows)
    notes = [
        "The engine samples at temperature 1 with its batched, cached decode; the "
        "trainer scores the same tokens in one packed fp32 forward.",
    ]
    more_tables = []
    if learned is None:
        notes.append(
            "Effect on learning not measured: it trains from a stage-one checkpoint "
            "(--checkpoint runs/stage1/sft/final), or --quick on a random policy."
        )
    else:
        verdict = Verdict(
            verdict.label,
            verdict.strength
            + f"; learning, replay on - off {learned['on_minus_off']['sampled']['mean']:+.3f} "
            f"± {learned['on_minus_off']['sampled']['se']:.3f}",
            verdict.summary + " " + learning_summary(learned),
            verdict.detail,
        )
        more_tables.append(
            (
                "Effect on learning (the same seed, tasks and checkpoint; replay on and off)",
                LEARNING_COLUMNS,
                learning_rows(learned),
            )
        )
        notes.append(
            f"Learning runs: up to {learned['sizes']['steps']} steps x "
            f"{learned['sizes']['groups_per_step']} groups x {learned['sizes']['group_size']} "
            f"episodes on {learned['sizes']['tasks']} training tasks (each handed out "
            f"{learned['repeats']} times; trained steps: "
            + ", ".join(f"{n} {v['steps']}" for n, v in learned["variants"].items())
            + ", as a run ends when its task copies are used up and constant groups are "
            "left out), the engines receiving the trainer's weights as "
            f"{learned['publish_dtype']} (`train.publish_dtype`; bf16 matmuls are emulated on "
            "this CPU, so the engines decode in float32 on bf16-rounded weights). Scored on "
            f"those tasks: greedy, and {learned['k']} samples at T=1 a task; gains paired "
            "over tasks against the starting policy."
        )
        if options.checkpoint is None:
            notes.append(RANDOM_POLICY_NOTE)
    return StudyOutcome(
        columns=[
            "engine",
            "trainer forward",
            "tokens",
            "mean |dlogp|",
            "p99",
            "max",
            f"IS weight > {IS_CAP:g}",
            "tokens routed differently",
            "guard replacements",
        ],
        rows=table,
        figure=_figure(rows, learned),
        verdict=verdict,
        numbers=numbers,
        notes=notes,
        more_tables=more_tables,
    )
