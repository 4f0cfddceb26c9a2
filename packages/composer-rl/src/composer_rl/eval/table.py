"""The evaluation summary as rich tables: pass@k and every mean with its standard error
(over tasks, see `composer_rl.eval.stats`), the side evals, and two checkpoints side by side."""

from __future__ import annotations

import math
from typing import Any

from rich.console import Console
from rich.table import Table

from composer_rl.eval.stats import format_se

SE_NOTE = "± is the standard error over tasks (sample sd of per-task values / sqrt(tasks))"


def _cell(row: dict[str, Any], key: str) -> str:
    if key not in row:
        return "-"
    return format_se(float(row[key]), float(row.get(f"{key}_se", math.nan)))


def print_summary(summary: dict[str, Any], console: Console | None = None) -> None:
    console = console or Console()
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
    side = summary.get("side_evals") or {}
    if side:
        side_table = Table(title="side evaluations")
        for column in ("side eval", "what", "tasks", "score"):
            side_table.add_column(
                column, justify="right" if column in ("tasks", "score") else "left"
            )
        for name, row in side.items():
            side_table.add_row(name, row["what"], str(row["tasks"]), _cell(row, "score"))
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
    facts.add_row(
        "reward_total_mean",
        format_se(summary["reward_total_mean"], summary.get("reward_total_se", math.nan)),
    )
    ses = summary.get("reward_components_se", {})
    for name, value in summary.get("reward_components_mean", {}).items():
        facts.add_row(f"reward: {name}", format_se(value, ses.get(name, math.nan)))
    console.print(facts)
    console.print(SE_NOTE)


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
                f"reward: {name}",
                {"v": value, "v_se": a.get("reward_components_se", {}).get(name, math.nan)},
                {
                    "v": b["reward_components_mean"][name],
                    "v_se": b.get("reward_components_se", {}).get(name, math.nan),
                },
                "v",
            )
    return rows


def print_comparison(
    a: dict[str, Any], b: dict[str, Any], names: tuple[str, str], console: Console | None = None
) -> None:
    """The same metrics for two checkpoints (say SFT and RL) side by side."""
    console = console or Console()
    table = Table(title=f"{a.get('suite', 'heldout')}: A = {names[0]}, B = {names[1]}")
    for column in ("metric", "A", "B", "B - A"):
        table.add_column(column, justify="left" if column == "metric" else "right")
    for row in comparison_rows(a, b):
        table.add_row(*row)
    console.print(table)
    console.print(SE_NOTE)
