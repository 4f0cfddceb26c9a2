"""`benchmarks/copy_distance.py`: how well a checkpoint copies a stretch written again after
a gap, the second copy ending at the same position whatever the gap."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "copy_distance.py"


def test_a_row_repeats_one_stretch_at_the_gap_and_ends_where_asked(
    benchmark_script: Callable[[str], ModuleType],
) -> None:
    copy_row = benchmark_script("copy_distance").copy_row
    documents = [list(range(start, start + 300)) for start in range(0, 3000, 300)]
    for gap in (0, 50, 200):
        row, second = copy_row(documents, 12, gap, 400, random.Random(gap))
        assert len(row) == 400 and second == 388
        first = second - gap - 12
        assert row[first : first + 12] == row[second:]
        between = row[first + 12 : second]
        assert len(between) == gap and not set(between) & set(row[second:])
    once, second = copy_row(documents, 12, None, 400, random.Random(0))
    assert len(once) == 400 and second == 388
    assert not set(once[:second]) & set(once[second:])  # nothing earlier to copy


def test_quick_run_scores_each_gap_and_refuses_a_gap_that_does_not_fit(tmp_path: Path) -> None:
    out = tmp_path / "copy.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    (figures,) = json.loads(out.read_text()).values()
    assert sorted(figures) == ["0", "64", "none"]
    for by_gap in figures.values():
        assert by_gap["ce"][0] > 0 and 0 <= by_gap["accuracy"][0] <= 1
    refused = subprocess.run(
        [sys.executable, str(SCRIPT), "--models", "m", "--tokens", str(out), "--end", "100"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert refused.returncode == 2 and "raise --end or lower --gaps" in refused.stderr
