"""Training-state checkpoints of a phase: written atomically, the newest one resumed.

A checkpoint holds everything that changes during training (model, optimiser, scheduler,
step); batches are a function of (seed, step) and so need no state. Files are written to a
temporary name and renamed, so a kill mid-write leaves the previous checkpoint intact.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import torch

STATE_DIR = "checkpoints"
_PATTERN = re.compile(r"^step_(\d+)\.pt$")


def checkpoint_paths(run_dir: Path) -> list[tuple[int, Path]]:
    directory = run_dir / STATE_DIR
    if not directory.is_dir():
        return []
    found = []
    for path in directory.iterdir():
        match = _PATTERN.match(path.name)
        if match:
            found.append((int(match.group(1)), path))
    return sorted(found)


def save_checkpoint(run_dir: Path, step: int, state: dict[str, Any], keep: int) -> Path:
    directory = run_dir / STATE_DIR
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"step_{step:06d}.pt"
    tmp = final.with_suffix(".pt.tmp")
    torch.save({"step": step, **state}, tmp)
    with tmp.open("rb") as fh:
        os.fsync(fh.fileno())
    tmp.replace(final)
    for _, old in checkpoint_paths(run_dir)[:-keep]:
        old.unlink(missing_ok=True)
    return final


def load_latest(run_dir: Path) -> dict[str, Any] | None:
    """The newest readable checkpoint (a corrupt newest one falls back to the one before)."""
    for _, path in reversed(checkpoint_paths(run_dir)):
        try:
            return dict(torch.load(path, map_location="cpu", weights_only=False))
        except Exception:
            continue
    return None
