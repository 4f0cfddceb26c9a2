"""A tiny corpus and configuration that make every stage run in seconds."""

from __future__ import annotations

import json
from pathlib import Path


def write_corpus(path: Path, documents: int = 80) -> Path:
    lines = []
    for i in range(documents):
        body = "".join(
            f"def function_{i}_{j}(value):\n    return value * {j} + {i}\n\n\n" for j in range(6)
        )
        lines.append(json.dumps({"id": f"doc{i}", "text": body}))
    path.write_text("\n".join(lines) + "\n")
    return path


def tiny_config(run_dir: Path, corpus: Path) -> dict[str, object]:
    phase = {
        "seq_len": 32,
        "rows_per_step": 2,
        "eval_every": 4,
        "eval_rows": 2,
        "checkpoint_every": 2,
        "optim": {"warmup_steps": 1},
    }
    return {
        "run_dir": str(run_dir),
        "threads": 1,
        "corpus": {
            "path": str(corpus),
            "vocab_size": 320,
            "heldout_fraction": 0.2,
            "tokenizer_chars": 50_000,
        },
        "pretrain": {**phase, "name": "pretrain", "steps": 8, "mtp_join_step": 4},
        "long_context": {**phase, "name": "long_context", "steps": 2, "seq_len": 64},
        "sft": {**phase, "name": "sft", "steps": 2, "seq_len": 384, "max_tasks": 13},
    }
