"""The third-party example plugin, installed into a fresh environment.

A virtual environment gets composer-rewards, and composer-infra's and composer-rl's code
without their heavy dependencies (the plugin machinery needs neither torch nor ray; a task
is a composer-infra sandbox task, which needs pydantic and zstandard), but not the example. A
job starts there; the example is then installed into the same environment, found
through its entry point, and added to the running job with `composer-rl plugins add`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from importlib.metadata import version
from pathlib import Path

import pytest
from plugins_support import running_job, step_of_event

from composer_rl.cli import main

ROOT = Path(__file__).resolve().parents[3]
REWARDS = ROOT / "packages" / "composer-rewards"
INFRA = ROOT / "packages" / "composer-infra"
RL = ROOT / "packages" / "composer-rl"
EXAMPLE = ROOT / "examples" / "reward-plugin"
SPEC = "composer_example_reward:TestsTouchedReward"

pytestmark = pytest.mark.slow


def uv(*args: str, cwd: Path) -> None:
    """Run uv outside any project (cwd is a temporary directory), online then offline."""
    uv_bin = shutil.which("uv")
    if uv_bin is None:
        pytest.skip("uv is not on PATH; .ci/run installs it")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "UV_PROJECT"))}
    attempts = [[uv_bin, *args], [uv_bin, *args, "--offline"]]
    for attempt in attempts:
        completed = subprocess.run(attempt, cwd=cwd, env=env, capture_output=True, text=True)
        if completed.returncode == 0:
            return
    raise AssertionError(f"{' '.join(args)} failed:\n{completed.stderr}")


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    """A fresh venv with composer-rewards, composer-infra and composer-rl (these two without
    their dependencies but zstandard), at this env's versions."""
    location = tmp_path / "venv"
    uv("venv", "--python", sys.executable, str(location), cwd=tmp_path)
    python = location / "bin" / "python"
    pins = tmp_path / "pins.txt"
    light = ("pluggy", "pydantic", "ruff", "zstandard")
    pins.write_text("".join(f"{p}=={version(p)}\n" for p in light))
    uv(
        "pip",
        "install",
        "--python",
        str(python),
        "-c",
        str(pins),
        str(REWARDS),
        "zstandard",
        cwd=tmp_path,
    )
    uv("pip", "install", "--python", str(python), "--no-deps", str(INFRA), str(RL), cwd=tmp_path)
    return python


def in_venv(python: Path, code: str) -> str:
    completed = subprocess.run(
        [str(python), "-c", textwrap.dedent(code)], capture_output=True, text=True, check=False
    )
    assert completed.returncode == 0, completed.stderr
    return completed.stdout


DISCOVER = """
    import importlib.util, json
    from composer_rewards import Episode, iter_entry_points, score_episode
    from composer_rl.plugins import build_plugin_manager

    assert importlib.util.find_spec("torch") is None  # the plugin stack is light
    (ep,) = [ep for ep in iter_entry_points() if ep.dist.name == "composer-example-reward"]
    pm = build_plugin_manager({"plugins": {"block": ["style"]}, "example_reward": {"bonus": 0.3}})
    episode = Episode(task="t", changed_files={"tests/test_x.py": "x = 1\\n"})
    metrics = score_episode(pm, episode, strict=True).metrics()
    print(json.dumps({"entry_point": [ep.name, ep.value], "registered": pm.has_plugin(ep.name),
                      "metrics": metrics}))
"""


def test_example_is_discovered_called_and_added_to_a_running_job(
    venv: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with running_job(tmp_path / "run", python=str(venv)) as job:
        run = str(job.run_dir)
        # Not installed yet: the check, made in the job's environment, refuses it.
        assert main(["plugins", "add", "--run", run, SPEC]) == 2
        assert "cannot import module 'composer_example_reward'" in capsys.readouterr().err

        uv("pip", "install", "--python", str(venv), "--no-deps", str(EXAMPLE), cwd=tmp_path)

        # Installed: a fresh process finds the entry point, registers and calls the plugin.
        found = json.loads(in_venv(venv, DISCOVER))
        assert found["entry_point"] == ["tests-touched", SPEC]
        assert found["registered"] is True
        assert found["metrics"]["reward/tests_touched"] == 1.0
        assert found["metrics"]["monitor/tests-touched/test_files_touched"] == 1.0

        # And the job that was already running picks it up at its next step boundary.
        assert main(["plugins", "add", "--run", run, SPEC, "--wait", "120"]) == 0
        assert "applied" in capsys.readouterr().out
        records = job.wait_for(lambda r: step_of_event(r, "add", SPEC) is not None)
        added_at = step_of_event(records, "add", SPEC)
        assert added_at is not None and added_at >= 2
        (at_step,) = [r for r in records if r["step"] == added_at]
        assert at_step["reward/tests_touched"] == 1.0
        assert at_step["plugins/add/" + SPEC] == 1.0
        # The job's configuration reached the late plugin: its weight is example_reward.bonus.
        # The same episode is scored every step, so the total rises by exactly the new
        # component: weight example_reward.bonus = 0.25 (the job's configuration) * 1.0.
        (before,) = [r for r in records if r["step"] == added_at - 1]
        assert at_step["reward/total"] - before["reward/total"] == pytest.approx(0.25)
        assert all("reward/tests_touched" not in r for r in records if r["step"] < added_at)
