"""The run directory's JSON-lines logs as a kill -9 leaves them: at most a torn last line.

The RL loop appends a line at a time and flushes it (metrics.jsonl, episodes/episodes.jsonl,
groups/fates.jsonl), so a killed writer can leave only its last line half-written. Readers
take whole lines (`read_jsonl`; the viewer's `composer_rl.view.jsonl.JsonlTail` too), and a
writer that opens the file again first cuts the torn tail off (`cut_torn_tail`), so it never
runs into the next whole line.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The whole JSON-object lines of `path` ([] if there is none): a torn last line (no
    newline yet, or a writer killed mid-line) and lines that do not parse are skipped."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    out = []
    for raw in data.split(b"\n")[:-1]:  # the part after the last newline is not whole
        try:
            record = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            continue
        if isinstance(record, dict):
            out.append(record)
    return out


def cut_torn_tail(path: Path) -> None:
    """Cut what follows the last newline (a line a killed writer left half-written)."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return
    if size == 0:
        return
    with path.open("rb+") as f:
        back = min(size, 1 << 20)
        while True:
            f.seek(size - back)
            tail = f.read(back)
            cut = tail.rfind(b"\n")
            if cut >= 0 or back == size:
                break
            back = min(size, back * 2)
        keep = size - back + cut + 1  # 0 when no newline at all
        if keep < size:
            f.truncate(keep)
            f.flush()
            os.fsync(f.fileno())


__all__ = ["cut_torn_tail", "read_jsonl"]
