"""self-summary: the model's own summary against plain truncation, at the same context budget.

The report's claim: when an episode fills its context, letting the model summarize its work
and continue from the task plus that summary loses much less than a fixed compaction. Here
the checkpoint runs the same held-out tasks three ways, greedily (so every episode is
deterministic and the variants are paired by task):

- `none`: no compaction; the context may grow to the engine's `max_seq_len` (the reference:
  what an unlimited budget solves);
- `summarize` at budget B: when the next turn could pass B tokens, the model is asked for a
  summary and continues from the task and the summary (`composer_rl.agent.summarize`);
- `truncate` at the same B: the oldest whole turns are dropped and the task and the most
  recent turns that leave room for the next one are kept.

Both compacting variants get the same trigger and the same number of compactions
(`max_summaries`). The budgets are below what the held-out tasks of difficulty 1 and 2 need
(their oracle episodes reach about 200 to 400 tokens, and a turn is given 160: the study
keeps the turn limits it was measured under, `STUDY_TURNS`), so most
episodes compact at least once. Difficulty 3 tasks are left out: the stage-one policy
solves none of them with or without a budget, so they cannot show a difference.

Measured per variant: pass@1 (± s.e. over tasks), the share of episodes that compacted,
generated tokens per episode and per solved task, and how often a compaction carried the
needed facts. The needed facts of a task are what its solution edits need and its
instruction does not say: each edited file's path and the exact text an edit replaces. A
compaction carried them when all of them appear in what it kept (the summary, or the kept
turns). The compaction error of a variant is `none`'s pass@1 minus its own, on the tasks
where both compacting variants compacted (paired by task).

With `--work-dir`, each variant's episodes are kept there (`<variant>.json`, with the
weights' digest, the task ids and the runner settings they were played under) and a rerun
reuses those that match, so a change to how the episodes are judged does not replay them.
"""

from __future__ import annotations

import json
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from composer_rl.agent.episode import EpisodeResult, RunnerConfig
from composer_rl.agent.quick import random_checkpoint
from composer_rl.agent.summarize import CompactionMode, SummaryConfig
from composer_rl.eval.evaluate import EvalConfig, run_eval
from composer_rl.eval.stats import format_se, mean_se
from composer_rl.rl.compare import heldout_tasks
from composer_rl.rl.config import RolloutConfig
from composer_rl.studies.base import RANDOM_POLICY_NOTE, StudyOptions, StudyOutcome, Verdict
from composer_rl.studies.rl_runs import weights_digest
from composer_rl.tasks.model import Task

MODES: tuple[CompactionMode, ...] = ("summarize", "truncate")


@dataclass(frozen=True)
class Sizes:
    per_template: int
    budgets: tuple[int, ...]
    max_difficulty: int


QUICK = Sizes(per_template=1, budgets=(320,), max_difficulty=1)
FULL = Sizes(per_template=8, budgets=(320, 448), max_difficulty=2)


def needed_facts(task: Task) -> list[str]:
    """What the solution needs that the instruction does not say: each edited path and each
    replaced text (stripped), in order, without repeats."""
    facts: list[str] = []
    for edit in task.solution:
        for fact in (edit.path, (edit.old or "").strip()):
            if fact and fact not in task.instruction and fact not in facts:
                facts.append(fact)
    return facts


def carried(facts: list[str], kept: str) -> float:
    """The share of `facts` found verbatim in what a compaction kept (1.0 with no facts)."""
    return sum(fact in kept for fact in facts) / len(facts) if facts else 1.0


def episode_row(result: EpisodeResult) -> dict[str, Any]:
    """One episode's numbers for the comparison (and result.json)."""
    facts = needed_facts(result.task)
    shares = [carried(facts, kept) for kept in result.compactions]
    return {
        "task": result.task.id,
        "difficulty": int(result.task.difficulty),
        "solved": bool(result.solved),
        "generated_tokens": result.generated_tokens,
        "compactions": len(result.compactions),
        "stop_reason": result.stop_reason,
        "facts": len(facts),
        "carried": shares,
    }


STUDY_TURNS = 10
STUDY_TURN_TOKENS = 160
"""The turn limits the study was designed and measured under (RL's rollout defaults until
2026-12-07): its budgets of 320 and 448 tokens are two and three turns of 160. Under the
runners' later defaults (384 tokens a turn) a budget below one turn would condense every
episode before its first call."""


def runner_config(mode: CompactionMode | None, budget: int) -> RunnerConfig:
    """The RL loop's rollout settings at the study's turn limits, greedy, with the given
    compaction (None: none)."""
    rollout = RolloutConfig()
    summary = (
        (rollout.summary or SummaryConfig()).model_copy(
            update={"context_budget": budget, "mode": mode}
        )
        if mode is not None
        else None
    )
    return RunnerConfig(
        max_turns=STUDY_TURNS,
        max_new_tokens=STUDY_TURN_TOKENS,
        temperature=0.0,
        summary=summary,
    )


def run_variant(
    checkpoint: Path,
    tasks: list[Task],
    mode: CompactionMode | None,
    budget: int,
    keep: Path | None = None,
) -> list[dict[str, Any]]:
    """One variant's episode rows; with `keep` (a JSON file), those kept there by an earlier
    run of the same weights, tasks and runner settings, else played and kept there."""
    runner = runner_config(mode, budget)
    config = EvalConfig(runner=runner, max_batch_size=24, max_seq_len=RolloutConfig().max_seq_len)
    played_under = {
        "weights": weights_digest(checkpoint),
        "tasks": [t.id for t in tasks],
        "runner": runner.model_dump(mode="json"),
    }
    if keep is not None and keep.is_file():
        try:  # a file cut short by a kill, or edited by hand, is played again
            kept = json.loads(keep.read_text())
            if {k: kept.get(k) for k in played_under} == played_under:
                return list(kept["rows"])
        except (json.JSONDecodeError, AttributeError, KeyError, TypeError):
            pass
    _, results = run_eval(checkpoint, tasks, config)
    rows = [episode_row(r) for r in results]
    if keep is not None:
        keep.parent.mkdir(parents=True, exist_ok=True)
        keep.write_text(json.dumps({**played_under, "rows": rows}) + "\n")
    return rows


def _ratio(tokens: list[float], solved: list[float]) -> float:
    return sum(tokens) / sum(solved) if sum(solved) else math.nan


def compare_budget(
    rows: dict[str, list[dict[str, Any]]], reference: list[dict[str, Any]]
) -> dict[str, Any]:
    """The two compacting variants at one budget, against each other and the reference."""
    by_task = {v: {r["task"]: r for r in rs} for v, rs in {**rows, "none": reference}.items()}
    both = sorted(
        t for t in by_task["summarize"] if all(by_task[m][t]["compactions"] for m in MODES)
    )
    out: dict[str, Any] = {"tasks": len(by_task["none"]), "compacted_in_both": len(both)}
    variants: dict[str, Any] = {}
    for variant in (*MODES, "none"):
        rs = list(by_task[variant].values())
        solved = [float(r["solved"]) for r in rs]
        tokens = [float(r["generated_tokens"]) for r in rs]
        shares = [s for r in rs for s in r["carried"] if r["facts"]]
        variants[variant] = {
            "pass1": mean_se(solved),
            "pass1_compacted": mean_se(float(by_task[variant][t]["solved"]) for t in both),
            "compacted": mean_se(float(r["compactions"] > 0) for r in rs),
            "tokens": mean_se(tokens),
            "tokens_per_solved": _ratio(tokens, solved),
            "all_facts_carried": mean_se(float(s == 1.0) for s in shares),
            "facts_recall": mean_se(shares),
            "compactions_with_facts": len(shares),
        }
    out["variants"] = variants

    def paired(a: str, b: str) -> tuple[float, float]:
        return mean_se(
            float(by_task[a][t]["solved"]) - float(by_task[b][t]["solved"]) for t in both
        )

    out["summarize_minus_truncate"] = paired("summarize", "truncate")
    out["error"] = {m: paired("none", m) for m in MODES}
    return out


def run_budgets(checkpoint: Path, sizes: Sizes, work_dir: Path | None = None) -> dict[str, Any]:
    tasks = [t for t in heldout_tasks(sizes.per_template) if t.difficulty <= sizes.max_difficulty]

    def keep(key: str) -> Path | None:
        return work_dir / f"{key}.json" if work_dir is not None else None

    reference = run_variant(checkpoint, tasks, None, 0, keep("none"))
    budgets: dict[str, Any] = {}
    episodes: dict[str, Any] = {"none": reference}
    for budget in sizes.budgets:
        rows: dict[str, list[dict[str, Any]]] = {
            m: run_variant(checkpoint, tasks, m, budget, keep(f"{m}@{budget}")) for m in MODES
        }
        episodes.update({f"{m}@{budget}": r for m, r in rows.items()})
        budgets[str(budget)] = compare_budget(rows, reference)
    return {"tasks": len(tasks), "budgets": budgets, "episodes": episodes}


def _fmt(pair: tuple[float, float] | list[float], digits: int = 3, sign: bool = False) -> str:
    return format_se(pair[0], pair[1], digits, sign)


MIN_SOLVED_WITHOUT_BUDGET = 5
"""Compacted tasks the policy must solve without a budget for a budget to be judged. With k
of them, compaction can lose at most k tasks, a loss whose standard error is about sqrt(k)
tasks: below 5 it cannot clear 2 s.e. in either mode, so a budget with fewer says nothing
about summaries against truncation (a policy that solves almost nothing, not a tie)."""


def solved_without_budget(budget: dict[str, Any]) -> int:
    """How many of a budget's compacted-in-both tasks the policy solves without a budget."""
    return round(budget["variants"]["none"]["pass1_compacted"][0] * budget["compacted_in_both"])


def verdict(result: dict[str, Any]) -> Verdict:
    """Held when, at every budget the policy can lose tasks at, summarizing solves more of
    the compacted tasks than truncating beyond 2 s.e. (paired by task); undecided where no
    budget has `MIN_SOLVED_WITHOUT_BUDGET` compacted tasks solved without a budget."""
    budgets = result["budgets"]
    diffs = {b: r["summarize_minus_truncate"] for b, r in budgets.items()}
    if any(math.isnan(se) for _, se in diffs.values()):
        return Verdict(
            "undecided",
            "too few compacted tasks",
            "Too few tasks compacted in both modes.",
            "rests on tasks that compact under both modes",
        )
    solved = {b: solved_without_budget(r) for b, r in budgets.items()}
    if all(k < MIN_SOLVED_WITHOUT_BUDGET for k in solved.values()):
        counts = ", ".join(
            f"{b}: {k} of {budgets[b]['compacted_in_both']}" for b, k in solved.items()
        )
        return Verdict(
            "undecided",
            f"the policy solves too few compacted tasks without a budget ({counts})",
            f"Without a budget the policy solves fewer than {MIN_SOLVED_WITHOUT_BUDGET} of the "
            "tasks both modes compacted, at every budget: compaction has no solved task to "
            "lose, so neither mode can be shown to lose less.",
            "rests on a policy that solves the compacted tasks without a budget",
        )
    diffs = {b: d for b, d in diffs.items() if solved[b] >= MIN_SOLVED_WITHOUT_BUDGET}
    parts = []
    for budget, r in budgets.items():
        err = {m: r["error"][m][0] for m in MODES}
        cut = (
            f", compaction error cut by {1 - err['summarize'] / err['truncate']:.0%}"
            if err["truncate"] > 0
            else ""
        )
        parts.append(
            f"budget {budget}: summarize - truncate "
            f"{_fmt(r['summarize_minus_truncate'], sign=True)} on "
            f"{r['compacted_in_both']} tasks (errors against no budget: summarize "
            f"{_fmt(r['error']['summarize'], sign=True)}, truncate "
            f"{_fmt(r['error']['truncate'], sign=True)}{cut})"
            + ("" if budget in diffs else f"; not judged: {solved[budget]} solved without one")
        )
    summary = "Pass@1 on the tasks both modes compacted, paired by task: " + "; ".join(parts) + "."
    better = [mean - 2 * se > 0 for mean, se in diffs.values()]
    worse = [mean + 2 * se < 0 for mean, se in diffs.values()]
    strength = ", ".join(f"{b}: {_fmt(d, sign=True)}" for b, d in diffs.items())
    if all(better):
        return Verdict(
            "held", "summarize beats truncate beyond 2 s.e. at every budget: " + strength, summary
        )
    if any(better) and not any(worse):
        ahead = [b for b, ok in zip(diffs, better, strict=True) if ok]
        level = [b for b, ok in zip(diffs, better, strict=True) if not ok]
        return Verdict(
            "held in part",
            "summarize beats truncate beyond 2 s.e. at some budgets: " + strength,
            summary,
            f"summaries beat truncation at budget {', '.join(map(str, ahead))}, not at "
            f"{', '.join(map(str, level))}",
        )
    if any(worse):
        return Verdict(
            "did not hold", "truncate beats summarize beyond 2 s.e.: " + strength, summary
        )
    return Verdict("did not hold", "no difference beyond 2 s.e.: " + strength, summary)


def _figure(result: dict[str, Any]) -> Figure:
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    budgets = list(result["budgets"])
    width = 0.35
    panels = (
        ("pass1_compacted", "pass@1 on tasks both compacted"),
        ("all_facts_carried", "compactions that carried every needed fact"),
    )
    for ax, (key, title) in zip(axes[:2], panels, strict=True):
        for i, mode in enumerate(MODES):
            means = [result["budgets"][b]["variants"][mode][key][0] for b in budgets]
            errors = [result["budgets"][b]["variants"][mode][key][1] for b in budgets]
            positions = [j + (i - 0.5) * width for j in range(len(budgets))]
            ax.bar(positions, means, width, yerr=errors, capsize=3, label=mode)
        ax.set_xticks(range(len(budgets)), [f"budget {b}" for b in budgets])
        ax.set(title=title, ylim=(0, 1.05))
        ax.grid(True, axis="y", alpha=0.3)
    for j, b in enumerate(budgets):
        ref = result["budgets"][b]["variants"]["none"]["pass1_compacted"][0]
        axes[0].hlines(ref, j - 0.5, j + 0.5, colors="k", linestyles="--")
    axes[0].plot([], [], "k--", label="no budget (same tasks)")
    for ax in axes[:2]:
        ax.legend()
    for i, mode in enumerate(MODES):
        values = [result["budgets"][b]["variants"][mode]["tokens_per_solved"] for b in budgets]
        positions = [j + (i - 0.5) * width for j in range(len(budgets))]
        axes[2].bar(positions, values, width, label=mode)
    ref_tokens = result["budgets"][budgets[0]]["variants"]["none"]["tokens_per_solved"]
    axes[2].axhline(ref_tokens, color="k", linestyle="--", label="no budget")
    axes[2].set_xticks(range(len(budgets)), [f"budget {b}" for b in budgets])
    axes[2].set(title="generated tokens per solved task (all tasks)")
    axes[2].grid(True, axis="y", alpha=0.3)
    axes[2].legend()
    fig.suptitle("self-summary: the model's summary against plain truncation, same budget")
    fig.tight_layout()
    return fig


def run(options: StudyOptions) -> StudyOutcome:
    sizes = QUICK if options.quick else FULL
    with tempfile.TemporaryDirectory(prefix="study-summary-") as tmp:
        checkpoint = options.checkpoint or random_checkpoint(Path(tmp) / "random", options.seed)
        result = run_budgets(checkpoint, sizes, options.work_dir)
    rows = []
    for budget, r in result["budgets"].items():
        for variant in (*MODES, "none"):
            v = r["variants"][variant]
            rows.append(
                [
                    budget,
                    variant,
                    _fmt(v["pass1"]),
                    _fmt(v["pass1_compacted"]),
                    _fmt(v["compacted"], 2),
                    _fmt(v["tokens"], 1),
                    "n/a"
                    if math.isnan(v["tokens_per_solved"])
                    else f"{v['tokens_per_solved']:.0f}",
                    _fmt(v["all_facts_carried"], 2)
                    if variant != "none" and v["compactions_with_facts"]
                    else "n/a",
                    _fmt(r["error"][variant], sign=True) if variant in MODES else "",
                ]
            )
    notes = [
        f"{result['tasks']} held-out tasks ({sizes.per_template} a template, difficulty <= "
        f"{sizes.max_difficulty}), greedy; the RL loop's rollout settings (turns, tokens a turn, "
        "summary room, compactions an episode). Means ± standard error over tasks.",
        "'compacted in both': tasks where both modes compacted at least once; pass@1 there and "
        "the compaction error (pass@1 without a budget minus with it) are paired by task.",
        "Needed facts: each edited path and each replaced text of the task's solution that its "
        "instruction does not state; a compaction carried them if all appear in what it kept.",
        "The policy is the --checkpoint given (the stage-one SFT checkpoint in docs/studies): "
        "its summaries were taught by the SFT demonstrations only. The report also trains them "
        "with the episode's reward in RL; an RL checkpoint can be passed the same way.",
    ]
    if options.checkpoint is None:
        notes.append(RANDOM_POLICY_NOTE)
    return StudyOutcome(
        columns=[
            "budget",
            "variant",
            "pass@1 (all)",
            "pass@1 (compacted in both)",
            "compacted",
            "tokens per episode",
            "tokens per solved task",
            "compactions carrying all needed facts",
            "compaction error",
        ],
        rows=rows,
        figure=_figure(result),
        verdict=verdict(result),
        numbers={
            "sizes": sizes.__dict__,
            "checkpoint": str(options.checkpoint) if options.checkpoint else None,
            **result,
        },
        notes=notes,
    )
