"""The evaluation summary as rich tables: pass@k and every mean with its standard error
(over tasks, see `composer_rl.eval.stats`), the side evals, and two checkpoints side by side.

A reader must be able to rerun and trust a table from the table alone, so the summary prints
the suite (and side-eval) version and the command that made it; beside every score, what the
do-nothing and random baselines earned on the same tasks and the lift over the better one
(`composer_rl.eval.lift`); and, beside a reward component that some episodes lack (a plugin
added mid-run), on how many of the episodes its mean rests.
"""

from __future__ import annotations

import math
from typing import Any

from rich.console import Console
from rich.table import Table

from composer_rl.eval.baseline_checkpoints import BASELINE_LABELS
from composer_rl.eval.lift import Lift, lift_over_baselines
from composer_rl.eval.stats import format_se, mean_se

SE_NOTE = "± is the standard error over tasks (sample sd of per-task values / sqrt(tasks))"
LIFT_NOTE = (
    "lift = score − the better baseline's, paired by task (side evals: by unit), with the "
    "standard error of the paired difference"
)
NO_BASELINES = "baselines: not scored (run_eval with EvalConfig.baselines)"


def _cell(row: dict[str, Any], key: str) -> str:
    if key not in row:
        return "-"
    return format_se(float(row[key]), float(row.get(f"{key}_se", math.nan)))


def coverage(summary: dict[str, Any], name: str) -> tuple[int, int] | None:
    """(episodes with the component, scored episodes) when the component is missing from
    some of them (a plugin added mid-run, or one that abstains), else None."""
    counts = summary.get("reward_components_episodes") or {}
    total = summary.get("episodes")
    if name not in counts or not isinstance(total, int) or counts[name] >= total:
        return None
    return int(counts[name]), total


def component_coverage(summary: dict[str, Any], name: str) -> str:
    """' (13 of 21 episodes)' beside a component some episodes lack, else ''."""
    counts = coverage(summary, name)
    return f" ({counts[0]} of {counts[1]} episodes)" if counts else ""


def baseline_values(summary: dict[str, Any], metric: str) -> dict[str, dict[str, float]]:
    """{baseline: per-task values of `metric`} for the baselines the summary holds."""
    return {
        name: dict(row.get("per_task", {}).get(metric, {}))
        for name, row in (summary.get("baselines") or {}).items()
    }


def metric_lift(summary: dict[str, Any], metric: str) -> Lift | None:
    """The lift of `metric` (a key of the summary's ``per_task``) over its baselines."""
    policy = (summary.get("per_task") or {}).get(metric)
    if not policy:
        return None
    return lift_over_baselines(policy, baseline_values(summary, metric))


def _baseline_cells(summary: dict[str, Any], metric: str) -> list[str]:
    """One cell per baseline (mean ± SE of its per-task values), then the lift's."""
    cells = []
    for values in baseline_values(summary, metric).values():
        cells.append(format_se(*mean_se(values.values())) if values else "-")
    lift = metric_lift(summary, metric)
    cells.append(
        f"{lift.text()} (over {BASELINE_LABELS.get(lift.baseline, lift.baseline)})" if lift else "-"
    )
    return cells


def _baseline_columns(summary: dict[str, Any]) -> list[str]:
    names = list(summary.get("baselines") or {})
    return [BASELINE_LABELS.get(n, n) for n in names] + (["lift"] if names else [])


def print_header(summary: dict[str, Any], console: Console) -> None:
    """What was run and how to run it again: suite and side-eval versions, the command."""
    suite = summary.get("suite", "heldout")
    side = summary.get("side_version")
    console.print(f"suite: {suite}" + (f" + side evals {side}" if side else ""))
    if summary.get("command"):
        console.print(f"command: {summary['command']}")
    baselines = summary.get("baselines") or {}
    if baselines:
        console.print("baselines: " + ", ".join(BASELINE_LABELS.get(n, n) for n in baselines))
    else:
        console.print(NO_BASELINES)


def print_summary(summary: dict[str, Any], console: Console | None = None) -> None:
    console = console or Console()
    print_header(summary, console)
    keys = [k for k in summary["overall"] if k.startswith("pass@") and not k.endswith("_se")]
    suite = summary.get("suite", "heldout")
    table = Table(title=f"{suite} evaluation of {summary.get('checkpoint', '')}")
    table.add_column("group")
    table.add_column("tasks", justify="right")
    for k in keys:
        table.add_column(k, justify="right")
    for section in ("by_category", "by_difficulty"):
        for label, row in summary[section].items():
            table.add_row(label, str(row["tasks"]), *(_cell(row, k) for k in keys))
        table.add_section()
    overall = summary["overall"]
    table.add_row("[bold]all", str(overall["tasks"]), *(f"[bold]{_cell(overall, k)}" for k in keys))
    if overall["tasks"]:
        console.print(table)
        extra = _baseline_columns(summary)
        if extra:
            against = Table(title="against the baselines (same tasks)")
            for column in ("metric", "policy", *extra):
                against.add_column(column, justify="left" if column == "metric" else "right")
            for k in keys:
                against.add_row(f"{k} all", _cell(overall, k), *_baseline_cells(summary, k))
            console.print(against)
    side = summary.get("side_evals") or {}
    if side:
        extra = _baseline_columns(summary)
        side_table = Table(title=f"side evaluations ({summary.get('side_version') or 'side'})")
        for column in ("side eval", "what", "tasks", "units", "score", *extra):
            side_table.add_column(
                column, justify="left" if column in ("side eval", "what") else "right"
            )
        for name, row in side.items():
            side_table.add_row(
                name,
                row["what"],
                str(row["tasks"]),
                str(row.get("units", row["tasks"])),
                _cell(row, "score"),
                *(_baseline_cells(summary, f"side: {name}") if extra else []),
            )
        console.print(side_table)
    facts = Table(show_header=False, title="episodes")
    for name in (
        "episodes",
        "tokens_per_episode",
        "tool_calls_per_episode",
        "well_formed_call_rate",
        "valid_python_rate",
        "finished_rate",
    ):
        value = summary.get(name)
        facts.add_row(name, f"{value:.3f}" if isinstance(value, float) else str(value))
    total = format_se(summary["reward_total_mean"], summary.get("reward_total_se", math.nan))
    for name, row in (summary.get("baselines") or {}).items():
        if "reward_total_mean" in row:
            value = format_se(row["reward_total_mean"], row.get("reward_total_se", math.nan))
            total += f"; {BASELINE_LABELS.get(name, name)} {value}"
    facts.add_row("reward_total_mean", total)
    ses = summary.get("reward_components_se", {})
    for name, value in summary.get("reward_components_mean", {}).items():
        cell = format_se(value, ses.get(name, math.nan)) + component_coverage(summary, name)
        facts.add_row(f"reward: {name}", cell)
    console.print(facts)
    console.print(SE_NOTE)
    if summary.get("baselines"):
        console.print(LIFT_NOTE)


def comparison_rows(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(metric, A, B, B - A) for every pass@k, category, side eval and reward both share."""
    rows: list[tuple[str, str, str, str]] = []

    def add(label: str, ra: dict[str, Any] | None, rb: dict[str, Any] | None, key: str) -> None:
        if not ra or not rb or key not in ra or key not in rb:
            return
        diff = float(rb[key]) - float(ra[key])
        rows.append((label, _cell(ra, key), _cell(rb, key), f"{diff:+.3f}"))

    keys = [k for k in a["overall"] if k.startswith("pass@") and not k.endswith("_se")]
    for k in keys:
        add(f"{k} all", a["overall"], b["overall"], k)
        for section in ("by_category", "by_difficulty"):
            for label in a[section]:
                add(f"{k} {label}", a[section][label], b[section].get(label), k)
    for name in a.get("side_evals") or {}:
        add(f"side: {name}", a["side_evals"][name], (b.get("side_evals") or {}).get(name), "score")
    add(
        "reward total",
        {"v": a["reward_total_mean"], "v_se": a.get("reward_total_se", math.nan)},
        {"v": b["reward_total_mean"], "v_se": b.get("reward_total_se", math.nan)},
        "v",
    )
    for name, value in a.get("reward_components_mean", {}).items():
        if name in b.get("reward_components_mean", {}):
            add(
                f"reward: {name}{_coverage_pair(a, b, name)}",
                {"v": value, "v_se": a.get("reward_components_se", {}).get(name, math.nan)},
                {
                    "v": b["reward_components_mean"][name],
                    "v_se": b.get("reward_components_se", {}).get(name, math.nan),
                },
                "v",
            )
    return rows


def _coverage_pair(a: dict[str, Any], b: dict[str, Any], name: str) -> str:
    """' (A: 13 of 21 episodes)' and the like, for a component either report lacks in some
    episodes; '' when both have it in every episode."""
    parts = [
        f"{label}: {counts[0]} of {counts[1]} episodes"
        for label, summary in (("A", a), ("B", b))
        if (counts := coverage(summary, name))
    ]
    return f" ({'; '.join(parts)})" if parts else ""


def print_comparison(
    a: dict[str, Any], b: dict[str, Any], names: tuple[str, str], console: Console | None = None
) -> None:
    """The same metrics for two checkpoints (say SFT and RL) side by side."""
    console = console or Console()
    print_header(a, console)
    table = Table(title=f"{a.get('suite', 'heldout')}: A = {names[0]}, B = {names[1]}")
    for column in ("metric", "A", "B", "B - A"):
        table.add_column(column, justify="left" if column == "metric" else "right")
    for row in comparison_rows(a, b):
        table.add_row(*row)
    console.print(table)
    console.print(SE_NOTE)
