"""The example third-party reward plugin added to a running RL job: it takes effect at the
next step boundary, and the run records when."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _rl_helpers import tiny_checkpoint

from composer_rl.cli import main

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE_SRC = ROOT / "examples" / "reward-plugin" / "src"
SPEC = "composer_example_reward:TestsTouchedReward"


def _rows(path: Path) -> list[dict]:  # type: ignore[type-arg]
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


@pytest.mark.slow
def test_example_plugin_added_mid_run_scores_from_the_next_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = tiny_checkpoint(tmp_path / "sft")
    run = tmp_path / "run"
    flags = {
        "model": str(model), "run-dir": str(run), "local": "true", "loop.steps": "12",
        "tasks.per-template": "2", "rollout.max-turns": "2", "rollout.max-new-tokens": "24",
        "rollout.max-seq-len": "512", "loop.group-size": "2", "loop.groups-per-step": "1",
        "loop.drop-constant-groups": "false", "eval.per-template": "0",
    }  # fmt: skip
    argv = [sys.executable, "-c", "import sys; from composer_rl.cli import main; sys.exit(main())"]
    argv += ["rl", "--no-progress", *[x for k, v in flags.items() for x in (f"--{k}", v)]]
    env = {**os.environ, "PYTHONPATH": str(EXAMPLE_SRC)}
    log = (tmp_path / "job.log").open("w")
    job = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 900
        while not _rows(run / "metrics.jsonl"):
            assert job.poll() is None, (tmp_path / "job.log").read_text()[-3000:]
            assert time.monotonic() < deadline
            time.sleep(0.2)
        monkeypatch.syspath_prepend(str(EXAMPLE_SRC))  # the CLI checks the spec here too
        assert main(["plugins", "add", "--run", str(run), "--name", "late", SPEC]) == 0
        assert job.wait(timeout=900) == 0, (tmp_path / "job.log").read_text()[-3000:]
    finally:
        if job.poll() is None:
            job.kill()
    rows = _rows(run / "metrics.jsonl")
    added = [r["step"] for r in rows if r.get("plugins/add/late") == 1.0]
    assert len(added) == 1, [sorted(r) for r in rows]
    (step,) = added
    for row in rows:
        assert ("late" in row["plugins_registered"]) == (row["step"] >= step)
    assert step < rows[-1]["step"], "the plugin came too late to score anything"
    episodes = [e for e in _rows(run / "episodes" / "episodes.jsonl") if e["reward"] is not None]
    after = [e for e in episodes if e["scored_after_step"] >= step]
    before = [e for e in episodes if e["scored_after_step"] < step]
    assert after and before
    assert all("tests_touched" in e["components"] for e in after)
    assert not any("tests_touched" in e["components"] for e in before)
