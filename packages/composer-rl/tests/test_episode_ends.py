"""`benchmarks/episode_ends.py`: where a policy's greedy episodes end, counted from the
episodes themselves."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "episode_ends.py"


@pytest.mark.slow  # about a minute: 31 episodes of a random tiny model
def test_quick_run_counts_the_episodes_it_kept(tmp_path: Path) -> None:
    out = tmp_path / "episodes.jsonl"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    header = done.stdout.splitlines()[0]
    assert header == f"{len(rows)} validation_words tasks, turn limit 10"
    assert len({r["task"] for r in rows}) == len(rows) > 20  # one greedy episode a task
    stops = Counter(r["stop"] for r in rows)
    printed = next(line for line in done.stdout.splitlines() if "stopped by:" in line)
    for stop, count in stops.items():
        assert f"{stop} {count} (" in printed
    calls = sum(len(r["calls"]) for r in rows)
    assert f"calls a episode {calls / len(rows):.2f}" in done.stdout
    assert "failed_read_again:" in done.stdout


def test_a_checkpoint_without_a_tokenizer_is_refused(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--models", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        == f"error: {tmp_path} has no tokenizer.json: give a stage-one checkpoint"
    )
