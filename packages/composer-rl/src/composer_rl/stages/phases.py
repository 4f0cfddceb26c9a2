"""Phase bookkeeping: where a phase's run directory is, whether it already finished, and
exporting its final model (HF DeepSeek-V3 format plus the tokenizer) for the next phase."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from composer_model import ComposerModel, ComposerTokenizer, save_pretrained

FINAL_DIR = "final"
RESULT_FILE = "result.json"


def final_dir(phase_dir: Path) -> Path:
    return phase_dir / FINAL_DIR


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
    tmp = phase_dir / (RESULT_FILE + ".tmp")
    tmp.write_text(json.dumps(summary, indent=2) + "\n")
    tmp.replace(phase_dir / RESULT_FILE)
    return out
