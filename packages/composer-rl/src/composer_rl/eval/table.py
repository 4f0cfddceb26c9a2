"""The evaluation summary as a rich table."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def print_summary(summary: dict[str, Any], console: Console | None = None) -> None:
    console = console or Console()
    keys = [k for k in summary["overall"] if k.startswith("pass@")]
    table = Table(title=f"held-out evaluation of {summary.get('checkpoint', '')}")
    table.add_column("group")
    table.add_column("tasks", justify="right")
    for k in keys:
        table.add_column(k, justify="right")
    for section in ("by_category", "by_difficulty"):
        for label, row in summary[section].items():
            table.add_row(label, str(row["tasks"]), *(f"{row.get(k, 0):.3f}" for k in keys))
        table.add_section()
    overall = summary["overall"]
    table.add_row("[bold]all", str(overall["tasks"]), *(f"[bold]{overall[k]:.3f}" for k in keys))
    console.print(table)
    facts = Table(show_header=False, title="episodes")
    for name in (
        "episodes",
        "tokens_per_episode",
        "tool_calls_per_episode",
        "well_formed_call_rate",
        "valid_python_rate",
        "finished_rate",
        "reward_total_mean",
    ):
        value = summary.get(name)
        facts.add_row(name, f"{value:.3f}" if isinstance(value, float) else str(value))
    for name, value in summary.get("reward_components_mean", {}).items():
        facts.add_row(f"reward: {name}", f"{value:.3f}")
    console.print(facts)
