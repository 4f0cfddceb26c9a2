"""Phase bookkeeping: where a phase's run directory is, whether it already finished, and
exporting its final model (HF DeepSeek-V3 format plus the tokenizer) for the next phase.

Files written here go through composer-infra's `atomic_write_bytes` (temp file, fsync,
rename), so a kill mid-write leaves the previous file or none, never half of one."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import torch

from composer_infra.checkpoint import atomic_write_bytes
from composer_model import ComposerModel, ComposerTokenizer, save_pretrained, set_threads

FINAL_DIR = "final"
RESULT_FILE = "result.json"


def final_dir(phase_dir: Path) -> Path:
    return phase_dir / FINAL_DIR


def open_phase(run_dir: Path, name: str, threads: int | None) -> tuple[Path, dict[str, Any] | None]:
    """Start a phase: pin the torch thread count, and return its directory and, when the
    phase already finished, its summary (the caller returns it instead of training)."""
    set_threads(threads)
    phase_dir = run_dir / name
    return phase_dir, read_result(phase_dir)


def previous_final(phase_dir: Path, hint: str) -> Path:
    """The `final/` model directory of a finished earlier phase; a clear error naming
    what to run (`hint`) when that phase has not finished."""
    source = final_dir(phase_dir)
    if not (source / "config.json").is_file():
        raise FileNotFoundError(f"{source}: {hint}")
    return source


def read_result(phase_dir: Path) -> dict[str, Any] | None:
    """The finished phase's summary, or None when it has not finished."""
    path = phase_dir / RESULT_FILE
    if not path.is_file() or not (final_dir(phase_dir) / "config.json").is_file():
        return None
    return dict(json.loads(path.read_text()))


def export_final(
    model: ComposerModel, tokenizer: ComposerTokenizer, phase_dir: Path, summary: dict[str, Any]
) -> Path:
    out = final_dir(phase_dir)
    save_pretrained(model, out)
    tokenizer.save(out / "tokenizer.json")
    atomic_write_bytes(phase_dir / RESULT_FILE, (json.dumps(summary, indent=2) + "\n").encode())
    return out


def save_torch(obj: object, path: Path) -> None:
    """`torch.save` made crash-safe: serialised in memory, then written atomically."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    atomic_write_bytes(path, buffer.getvalue())
