"""cpt-vs-rl: does the cross-entropy after continued pretraining predict the reward after RL?

The report finds a log-linear relation: the lower the held-out cross-entropy a model reaches
in continued pretraining, the higher the reward RL then gets from it. Here stage one runs
with several pretraining budgets (steps), everything after it fixed:

- pretraining of N steps (the only thing that differs; the learning-rate schedule is the
  phase's own, so every budget ends its schedule), then the same long-context phase and
  the same SFT phase (fewer steps than the default stage one, the same for every budget);
- the same RL run from each SFT checkpoint (same steps, groups, learning rate, task stream),
  once per RL seed.

The x of each budget is the held-out cross-entropy at the end of continued pretraining (the
long-context phase's, on held-out standard-library code). The y is the RL run's reward and
solve rate on its second-half episodes: in a single-epoch run they are the trained policy's
first attempts at tasks it has not seen (mean ± s.e. over episodes). The study fits
y = a + b ln(CE) over every (budget, seed) point and reports the slope with its standard
error, R², the slope of each seed alone (their spread), and the first-step reward (the SFT
policy before RL), so a reader can see whether the relation is made by RL or was already
there after SFT.

All variants share one tokenizer and one set of SFT demonstrations: they are made by the
first budget's stage one and copied into the others' run directories.
"""

from __future__ import annotations

import math
import shutil
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from composer_rl.eval.stats import format_se, mean_se
from composer_rl.rl.episodes import read_episodes
from composer_rl.rl.quick import QUICK_RL_SETTINGS
from composer_rl.stages.config import load_stage1_config
from composer_rl.stages.pretrain import run_long_context, run_pretrain
from composer_rl.stages.sft import run_sft
from composer_rl.studies.base import StudyOptions, StudyOutcome, Verdict
from composer_rl.studies.rl_runs import RLSizes, late_episodes, run_or_reuse

SHARED_FILES = ("tokenizer.json", "tokens.pt", "sft_tokens.pt")
"""Made once by the first budget's stage one, identical for every budget."""


@dataclass(frozen=True)
class Sizes:
    pretrain_steps: tuple[int, ...]
    stage1: dict[str, object]  # stage-one overrides shared by every budget
    rl: RLSizes
    rl_seeds: tuple[int, ...]
    rl_overrides: dict[str, object] = field(default_factory=dict)


_TINY_PHASE = {"rows_per_step": 2, "eval_rows": 2}
QUICK = Sizes(
    pretrain_steps=(2, 4, 8, 16),
    stage1={
        "corpus.max_train_chars": 60_000,
        "corpus.max_heldout_chars": 20_000,
        "corpus.tokenizer_chars": 30_000,
        "corpus.vocab_size": 512,
        "sft.max_tasks": 13,
        "pretrain.seq_len": 64,
        **{f"pretrain.{k}": v for k, v in _TINY_PHASE.items()},
        "pretrain.optim.warmup_steps": 1,
        "long_context.steps": 2,
        "long_context.seq_len": 128,
        "long_context.optim.warmup_steps": 1,
        **{f"long_context.{k}": v for k, v in _TINY_PHASE.items()},
        "sft.steps": 2,
        "sft.seq_len": 384,
        "sft.optim.warmup_steps": 1,
        **{f"sft.{k}": v for k, v in _TINY_PHASE.items()},
    },
    rl=RLSizes(steps=4, group_size=2, groups_per_step=1, lr=None),
    rl_seeds=(0,),
    # Alternating, so the second half has episodes however busy the machine is (asynchronous,
    # four short steps may train only groups sampled by the first two versions).
    rl_overrides={**QUICK_RL_SETTINGS, "loop.sync": True},
)
# The default stage one's 1400 SFT steps (after 300, no policy solved a task, so RL reward
# was shaping only and the study could not decide) and RL 8 steps of 4 groups of 8, twice
# per budget: about 2.5 hours on two cores, most of it the four SFT phases.
FULL = Sizes(
    pretrain_steps=(50, 100, 200, 400),
    stage1={},  # the default stage one after each pretraining budget
    rl=RLSizes(steps=8, group_size=8, groups_per_step=4, lr=3e-4),
    rl_seeds=(0, 1),
)


def stage_one(
    work: Path, steps: int, sizes: Sizes, first: Path | None
) -> tuple[Path, dict[str, Any]]:
    """Stage one with `steps` of pretraining (reused when finished); its SFT checkpoint and
    the held-out CE after the pretraining, long-context and SFT phases."""
    run_dir = work / f"stage1-pretrain{steps}"
    every = min(100, steps)
    config = load_stage1_config(
        None,
        **{
            **sizes.stage1,
            "run_dir": str(run_dir),
            "pretrain.steps": steps,
            "pretrain.mtp_join_step": steps // 2,
            "pretrain.eval_every": every,
            "pretrain.checkpoint_every": every,
        },
    )
    if first is not None:
        run_dir.mkdir(parents=True, exist_ok=True)
        for name in SHARED_FILES:
            if (first / name).is_file() and not (run_dir / name).is_file():
                shutil.copy2(first / name, run_dir / name)
    # Each phase reports as `composer-rl stage1` does (lines off a terminal): four stage
    # ones run before the first RL run, and a log of the study showed nothing for them.
    pretrain = run_pretrain(config)
    long_context = run_long_context(config)
    sft = run_sft(config)
    return run_dir / "sft" / "final", {
        "run_dir": str(run_dir),
        "ce_pretrain": float(pretrain["heldout_ce"]),
        "ce_cpt": float(long_context["heldout_ce"]),
        "ce_sft": float(sft["heldout_ce"]),
    }


def _mean_se(values: list[float]) -> tuple[float, float]:
    """`mean_se`, but NaN (not 0) for no values: a run with no such episode has no reward."""
    return mean_se(values) if values else (math.nan, math.nan)


def rl_point(run_dir: Path, steps: int) -> dict[str, Any]:
    """One RL run's reward and solve rate, first step and second half."""
    episodes = read_episodes(run_dir)
    late = late_episodes(episodes, steps)
    first = [e for e in episodes if max(e["versions"]) == 0]
    return {
        "late_episodes": len(late),
        "reward": _mean_se([float(e["reward"]) for e in late]),
        "solved": _mean_se([float(e["solved"]) for e in late]),
        "first_reward": _mean_se([float(e["reward"]) for e in first]),
        "first_solved": _mean_se([float(e["solved"]) for e in first]),
    }


def fit_log_linear(xs: list[float], ys: list[float]) -> dict[str, float]:
    """Least squares y = a + b ln(x): slope b, its standard error, intercept a and R²."""
    points = [(x, y) for x, y in zip(xs, ys, strict=True) if not math.isnan(y)]
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    n = len(xs)
    if n < 3 or len(set(xs)) < 2:
        return {"slope": math.nan, "slope_se": math.nan, "intercept": math.nan, "r2": math.nan}
    lx = [math.log(x) for x in xs]
    mx, my = statistics.fmean(lx), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in lx)
    slope = sum((x - mx) * (y - my) for x, y in zip(lx, ys, strict=True)) / sxx
    intercept = my - slope * mx
    residual = sum((y - intercept - slope * x) ** 2 for x, y in zip(lx, ys, strict=True))
    total = sum((y - my) ** 2 for y in ys)
    return {
        "slope": slope,
        "slope_se": math.sqrt(residual / (n - 2) / sxx),
        "intercept": intercept,
        "r2": 1 - residual / total if total > 0 else math.nan,
    }


def run_budgets(work: Path, sizes: Sizes) -> dict[str, Any]:
    budgets: dict[str, Any] = {}
    first: Path | None = None
    reused: list[str] = []
    for steps in sizes.pretrain_steps:
        model, ce = stage_one(work, steps, sizes, first)
        first = first or Path(ce["run_dir"])
        runs = {}
        for seed in sizes.rl_seeds:
            run_dir = work / f"rl-pretrain{steps}-seed{seed}"
            _, was_reused = run_or_reuse(model, run_dir, sizes.rl, sizes.rl_overrides, seed)
            if was_reused:
                reused.append(run_dir.name)
            runs[str(seed)] = rl_point(run_dir, sizes.rl.steps)
        budgets[str(steps)] = {**ce, "rl": runs}
    return {"budgets": budgets, "fits": fits(budgets), "reused_runs": reused}


def fits(budgets: dict[str, Any]) -> dict[str, Any]:
    """The log-linear fits of reward and solve rate on CE: pooled, and per RL seed."""
    out: dict[str, Any] = {}
    seeds = sorted({s for b in budgets.values() for s in b["rl"]})
    for metric in ("reward", "solved", "first_reward"):
        points = [
            (b["ce_cpt"], b["rl"][s][metric][0], s) for b in budgets.values() for s in b["rl"]
        ]
        pooled = fit_log_linear([p[0] for p in points], [p[1] for p in points])
        per_seed = {
            s: fit_log_linear(
                [p[0] for p in points if p[2] == s], [p[1] for p in points if p[2] == s]
            )
            for s in seeds
        }
        slopes = [f["slope"] for f in per_seed.values()]
        out[metric] = {
            **pooled,
            "per_seed_slopes": slopes,
            "seed_spread": statistics.stdev(slopes) if len(slopes) > 1 else math.nan,
        }
    # The run-to-run spread of the reward at one budget: the s.d. over RL seeds, averaged.
    spreads = [
        statistics.stdev(r["reward"][0] for r in b["rl"].values())
        for b in budgets.values()
        if len(b["rl"]) > 1
    ]
    out["reward_seed_sd"] = statistics.fmean(spreads) if spreads else math.nan
    return out


def verdict(result: dict[str, Any]) -> Verdict:
    """Held when the reward falls as ln(CE) rises, beyond 2 s.e. of the slope, the fit
    explains at least half of the variance over (budget, seed) points, and RL raised the
    reward beyond 2 s.e. (`rl_gain`); undecided when the relation is there but RL's gain is
    not (the relation could be the SFT policies' own)."""
    fit = result["fits"]["reward"]
    if math.isnan(fit["slope_se"]):
        return Verdict(
            "undecided",
            "too few points to fit",
            "Too few budgets or RL runs for a fit.",
            "rests on a fit over more budgets or RL runs",
        )
    if math.isnan(fit["r2"]):
        return Verdict(
            "undecided",
            "no variation",
            "The reward was the same after every budget.",
            "rests on budgets whose rewards differ",
        )
    solved_any = any(
        r["solved"][0] > 0 for b in result["budgets"].values() for r in b["rl"].values()
    )
    if not solved_any:
        return Verdict(
            "undecided",
            "no RL run solved a task in its second half",
            "No policy solved a held-out task after RL, so the reward differences are the "
            f"shaping components alone (reward slope {fit['slope']:+.3f} ± "
            f"{fit['slope_se']:.3f}, R² {fit['r2']:.2f}); the claim is about the reward of "
            "solving tasks.",
            "rests on RL runs that solve tasks",
        )
    first = result["fits"]["first_reward"]
    solved = result["fits"]["solved"]
    summary = (
        f"Reward after RL against ln(CE after continued pretraining): slope "
        f"{fit['slope']:+.3f} ± {fit['slope_se']:.3f}, R² {fit['r2']:.2f} over "
        f"{sum(len(b['rl']) for b in result['budgets'].values())} runs "
        f"(per-seed slopes {', '.join(f'{s:+.3f}' for s in fit['per_seed_slopes'])}); solve "
        f"rate slope {solved['slope']:+.3f} ± {solved['slope_se']:.3f} (R² {solved['r2']:.2f}). "
        f"The SFT policy's own first-step reward gives slope {first['slope']:+.3f} ± "
        f"{first['slope_se']:.3f}: the part of the relation that was there before RL."
    )
    gain = rl_gain(result)
    summary += (
        f" RL's own gain (second-half reward minus first-step reward, mean over runs) is "
        f"{format_se(*gain, sign=True)}."
    )
    strength = f"slope {fit['slope']:+.3f} ± {fit['slope_se']:.3f}, R² {fit['r2']:.2f}"
    related = fit["slope"] + 2 * fit["slope_se"] < 0 and fit["r2"] >= 0.5
    if related and not gain[0] - 2 * gain[1] > 0:
        # The claim is about the reward RL reaches; if RL did not raise the reward beyond
        # noise, the relation may be the SFT policies' own, and this study cannot tell.
        return Verdict(
            "undecided",
            strength + f"; RL gain {format_se(*gain, sign=True)}",
            summary,
            f"rests on RL learning, not yet shown: RL raised the reward by "
            f"{format_se(*gain, sign=True)} (within 2 s.e.), and the SFT policies' first-step "
            f"reward already gives slope {first['slope']:+.2f} ± {first['slope_se']:.2f}",
        )
    if related:
        return Verdict("held", strength, summary)
    if fit["slope"] + 2 * fit["slope_se"] < 0:
        return Verdict("did not hold", strength + " (the right sign, but R² below 0.5)", summary)
    return Verdict("did not hold", strength + " (no fall of reward with CE beyond 2 s.e.)", summary)


def rl_gain(result: dict[str, Any]) -> tuple[float, float]:
    """(mean over RL runs of second-half reward minus first-step reward, its standard error
    over runs): whether RL learned at all, the premise of a claim about RL's reward."""
    gains = [
        r["reward"][0] - r["first_reward"][0]
        for b in result["budgets"].values()
        for r in b["rl"].values()
    ]
    return mean_se(gains)


def _figure(result: dict[str, Any]) -> Figure:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    budgets = result["budgets"]
    for ax, metric, label in zip(
        axes,
        ("reward", "solved"),
        ("reward, second half of RL", "solve rate, second half of RL"),
        strict=True,
    ):
        seeds = sorted({s for b in budgets.values() for s in b["rl"]})
        for seed in seeds:
            xs = [b["ce_cpt"] for b in budgets.values()]
            ys = [b["rl"][seed][metric][0] for b in budgets.values()]
            es = [b["rl"][seed][metric][1] for b in budgets.values()]
            ax.errorbar(xs, ys, yerr=es, fmt="o", capsize=3, label=f"RL seed {seed}")
        first = [b["rl"][seeds[0]][f"first_{metric}"][0] for b in budgets.values()]
        ax.plot(
            [b["ce_cpt"] for b in budgets.values()],
            first,
            "x",
            color="gray",
            label="SFT policy (first step)",
        )
        fit = result["fits"][metric]
        if not math.isnan(fit["slope"]):
            lo = min(b["ce_cpt"] for b in budgets.values())
            hi = max(b["ce_cpt"] for b in budgets.values())
            grid = [lo * (hi / lo) ** (i / 20) for i in range(21)]
            ax.plot(
                grid,
                [fit["intercept"] + fit["slope"] * math.log(x) for x in grid],
                "k--",
                label=f"fit: slope {fit['slope']:+.3f}, R² {fit['r2']:.2f}",
            )
        for steps, b in budgets.items():
            ax.annotate(f"{steps} steps", (b["ce_cpt"], b["rl"][seeds[0]][metric][0]), fontsize=7)
        ax.set_xscale("log")
        ax.set(xlabel="held-out CE after continued pretraining (log scale)", ylabel=label)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("cpt-vs-rl: RL outcome against the cross-entropy continued pretraining reached")
    fig.tight_layout()
    return fig


def run(options: StudyOptions) -> StudyOutcome:
    sizes = QUICK if options.quick else FULL
    with tempfile.TemporaryDirectory(prefix="study-cpt-") as tmp:
        result = run_budgets(options.work_dir or Path(tmp), sizes)
    rows = []
    for steps, b in result["budgets"].items():
        for seed, r in b["rl"].items():
            rows.append(
                [
                    steps,
                    f"{b['ce_pretrain']:.3f}",
                    f"{b['ce_cpt']:.3f}",
                    f"{b['ce_sft']:.3f}",
                    seed,
                    _fmt(r["first_reward"]),
                    _fmt(r["reward"]),
                    _fmt(r["first_solved"]),
                    _fmt(r["solved"]),
                ]
            )
    fit = result["fits"]
    notes = [
        "Fits y = a + b ln(CE after continued pretraining) over every (budget, RL seed) point: "
        + "; ".join(
            f"{m}: slope {fit[m]['slope']:+.3f} ± {fit[m]['slope_se']:.3f}, R² {fit[m]['r2']:.2f}"
            for m in ("reward", "solved", "first_reward")
        )
        + f". Spread of the reward over RL seeds at one budget (s.d., mean over budgets): "
        f"{fit['reward_seed_sd']:.3f}.",
        f"Stage one per budget: pretraining of the given steps, then the same long-context and "
        f"SFT phases ({load_stage1_config(None, **sizes.stage1).sft.steps} SFT steps). RL per "
        f"budget and seed: {sizes.rl.steps} steps x {sizes.rl.groups_per_step} groups x "
        f"{sizes.rl.group_size} episodes, single epoch, hard-task upsampling off. Rewards and "
        "solve rates: mean ± s.e. over the run's second-half episodes (first step: version-0 "
        "episodes, the SFT policy).",
    ]
    if result["reused_runs"]:
        notes.append(
            f"Reused finished RL runs from --work-dir: {', '.join(result['reused_runs'])}; "
            "finished stage-one phases are reused too; the wall-clock is this command's."
        )
    if options.quick:
        notes.append(
            "Quick sizes: a tiny corpus and a few steps per phase; the pipeline is real, the "
            "numbers are not meaningful."
        )
    return StudyOutcome(
        columns=[
            "pretrain steps",
            "CE after pretraining",
            "CE after CPT",
            "CE after SFT",
            "RL seed",
            "reward, first step",
            "reward, second half",
            "solve rate, first step",
            "solve rate, second half",
        ],
        rows=rows,
        figure=_figure(result),
        verdict=verdict(result),
        numbers={
            "sizes": {"pretrain_steps": sizes.pretrain_steps, "rl": sizes.rl.__dict__},
            **result,
        },
        notes=notes,
    )


def _fmt(pair: tuple[float, float] | list[float]) -> str:
    return format_se(pair[0], pair[1])
