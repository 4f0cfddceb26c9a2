"""PNG plots of an RL run, drawn from its metrics.jsonl (and the final comparison)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from composer_rl.rl.jsonl import read_jsonl
from composer_rl.rl.lineage import LINEAGE_FILE, VersionTree, final_lineage, restarts


def read_rows(run_dir: Path, name: str = "metrics.jsonl") -> list[dict[str, Any]]:
    """The whole lines of a run's log (a torn last line of a killed run left out)."""
    return read_jsonl(run_dir / name)


def _series(rows: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for row in rows:
        value = row.get(key)
        if isinstance(value, int | float) and math.isfinite(value):
            xs.append(int(row["step"]))
            ys.append(float(value))
    return xs, ys


def plot_training(run_dir: Path) -> Path:
    """Reward, solve rate, lag, KL and mismatch per step: one PNG with five panels.

    Only the steps the final policy descends from are drawn (a killed run logs the steps
    after its last checkpoint again once resumed); each restart is a dotted line at the
    step it resumed from. Evaluations are drawn at the step of the version they scored
    (version numbers jump at a restart), those of lost versions left out."""
    logged = read_rows(run_dir)
    rows = final_lineage(logged)
    marks = [int(r["from_step"]) for r in restarts(logged)]
    tree = VersionTree.load(run_dir / "checkpoints" / LINEAGE_FILE)
    last = max((int(r["version"]) for r in rows if "version" in r), default=None)
    panels = [
        ("reward_mean", "mean episode reward"),
        ("solved_rate", "share of episodes solved"),
        ("token_lag_mean", "token lag (optimizer steps behind)"),
        ("kl_k1", "KL to reference: k1 (k3 dashed)"),
        ("logprob_mismatch", "|log pi_train - log pi_behaviour|"),
    ]
    evals = [
        r
        for r in read_rows(run_dir, "eval.jsonl")
        if last is None or tree.is_ancestor(int(r["version"]), of=last)
    ]
    if evals:
        panels.insert(1, ("pass@1", "held-out pass@1 during training (± s.e.)"))
    fig, axes = plt.subplots(len(panels), 1, figsize=(7, 2.2 * len(panels)), sharex=True)
    for ax, (key, title) in zip(axes, panels, strict=True):
        if key == "pass@1":
            ax.errorbar(
                [tree.step_of(int(r["version"])) for r in evals],
                [r["pass@1"] for r in evals],
                yerr=[0 if math.isnan(r["pass@1_se"]) else r["pass@1_se"] for r in evals],
                marker="o",
                capsize=3,
            )
            ax.set_title(title, fontsize=9)
            ax.grid(alpha=0.3)
            continue
        for i, step in enumerate(marks):
            ax.axvline(step, color="grey", linestyle=":", linewidth=1)
            if i == 0 and ax is axes[0]:
                ax.text(
                    step,
                    1,
                    " restart",
                    transform=ax.get_xaxis_transform(),
                    fontsize=7,
                    va="top",
                    color="grey",
                )
        xs, ys = _series(rows, key)
        ax.plot(xs, ys, marker=".", linewidth=1)
        if key == "kl_k1":
            xs3, ys3 = _series(rows, "kl_k3")
            ax.plot(xs3, ys3, linestyle="--", linewidth=1)
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("optimizer step")
    fig.tight_layout()
    out = run_dir / "training.png"
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_comparison(run_dir: Path, rows: list[dict[str, Any]]) -> Path:
    """SFT against RL for each metric of the comparison table, with standard-error bars."""
    labels = [r["metric"] for r in rows]
    fig, ax = plt.subplots(figsize=(max(5, 1.4 * len(labels)), 3.2))
    width = 0.38
    for offset, key, name in ((-width / 2, "sft", "SFT"), (width / 2, "rl", "RL")):
        means = [r[key][0] for r in rows]
        errors = [0 if math.isnan(r[key][1]) else r[key][1] for r in rows]
        ax.bar(
            [i + offset for i in range(len(rows))], means, width, yerr=errors, label=name, capsize=3
        )
    ax.set_xticks(range(len(rows)), labels, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("rate (± s.e. over tasks)")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    out = run_dir / "comparison.png"
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


__all__ = ["plot_comparison", "plot_training", "read_rows"]
