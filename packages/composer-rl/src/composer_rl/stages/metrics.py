"""Where a phase's numbers go: JSONL (the record), TensorBoard events, and PNG plots.

The JSONL file is the source of truth; on resume it is cut back to the checkpoint's step so
that a killed-and-resumed run has the same record as an uninterrupted one, and TensorBoard
is told to purge the steps after it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from torch.utils.tensorboard import SummaryWriter

METRICS_FILE = "metrics.jsonl"


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / METRICS_FILE
    if not path.is_file():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            break  # a line cut by a kill: everything after it is dropped
    return records


class MetricsLogger:
    def __init__(self, run_dir: Path, resume_step: int = 0) -> None:
        self.run_dir = run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        kept = [r for r in read_metrics(run_dir) if int(r.get("step", 0)) <= resume_step]
        self.path = run_dir / METRICS_FILE
        self.path.write_text("".join(json.dumps(r) + "\n" for r in kept))
        self._fh = self.path.open("a")
        self.tb = SummaryWriter(
            str(run_dir / "tensorboard"), purge_step=resume_step + 1 if resume_step else None
        )

    def log(self, step: int, kind: str, values: dict[str, float]) -> None:
        record = {"step": step, "kind": kind, **values}
        self._fh.write(json.dumps(record) + "\n")
        self._fh.flush()
        for key, value in values.items():
            if isinstance(value, int | float):
                self.tb.add_scalar(f"{kind}/{key}", value, step)

    def close(self) -> None:
        self._fh.close()
        self.tb.flush()
        self.tb.close()


def plot_losses(run_dir: Path, title: str) -> Path:
    """loss.png: training loss and held-out cross-entropy against step."""
    records = read_metrics(run_dir)
    train = [(r["step"], r["lm_loss"]) for r in records if r["kind"] == "train"]
    heldout = [(r["step"], r["heldout_ce"]) for r in records if r["kind"] == "eval"]
    mtp = [(r["step"], r["mtp_loss"]) for r in records if r["kind"] == "train" and r.get("mtp_on")]
    fig, ax = plt.subplots(figsize=(7, 4))
    if train:
        ax.plot(*zip(*train, strict=True), label="train CE", alpha=0.6)
    if heldout:
        ax.plot(*zip(*heldout, strict=True), "o-", label="held-out CE")
    if mtp:
        ax.plot(*zip(*mtp, strict=True), label="MTP self-distillation KL", alpha=0.6)
    ax.set_xlabel("step")
    ax.set_ylabel("nats / token")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    path = run_dir / "loss.png"
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_position_loss(path: Path, curves: dict[str, list[tuple[int, float]]], title: str) -> Path:
    """Held-out loss per position bucket, one line per model (before/after long context)."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for label, points in curves.items():
        ax.plot(*zip(*points, strict=True), "o-", label=label)
    ax.set_xlabel("position (bucket start)")
    ax.set_ylabel("held-out CE (nats / token)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
