"""The third-party example plugin added to a running `composer-rl eval`, removed, and
surviving kill -9 (issue 16: "added to each shipped long-running job mid-run").

The job runs in a fresh virtual environment beside the project: it sees the project's
packages (torch, composer-*) through a site directory, and the example is installed into
that fresh environment only while the evaluation is running, as a user would.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from plugins_support import tiny_checkpoint
from test_plugins_example import EXAMPLE, SPEC, uv

from composer_rl.cli import main

pytestmark = pytest.mark.slow
NAME = "tests-touched-late"
MINE = f"monitor/{NAME}/test_files_touched"  # keyed by plugin name: this instance only
ENTRY_POINT = "monitor/tests-touched/test_files_touched"  # the installed entry point's
Record = dict[str, Any]


@pytest.fixture
def job_venv(tmp_path: Path) -> Path:
    """A fresh venv that sees this environment's packages but has none of its own."""
    location = tmp_path / "venv"
    uv("venv", "--python", sys.executable, str(location), cwd=tmp_path)
    site = next(location.glob("lib/python*/site-packages"))
    project_site = sysconfig.get_paths()["purelib"]
    # An `import` line in a .pth runs at start-up: addsitedir also reads the project's own
    # .pth files (the workspace's editable installs).
    (site / "project.pth").write_text(f"import site; site.addsitedir({project_site!r})\n")
    # A plugin that paces the evaluation (the tiny model's steps can take well under the
    # time the CLI needs to check a spec), loaded from the job's config.
    (site / "pacer.py").write_text(PACER)
    return location / "bin" / "python"


PACER = """
import time
from composer_rewards import hookimpl

class Pacer:
    @hookimpl
    def composer_reward(self, episode):
        time.sleep(1.5)
"""


class EvalJob:
    """`composer-rl eval` in its own process, one task a step."""

    def __init__(self, python: Path, checkpoint: Path, run_dir: Path, log: Path) -> None:
        self.run_dir = run_dir
        self.log_path = log
        code = "import sys; from composer_rl.cli import main; sys.exit(main(sys.argv[1:]))"
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        config = run_dir.parent / "config.toml"
        config.write_text('[plugins]\nplugins = ["pacer:Pacer"]\nblock = ["style"]\n')
        args = [
            "eval", "--config", str(config), "--checkpoint", str(checkpoint),
            "--run-dir", str(run_dir),
            "--out", str(run_dir.parent / "report.json"), "--per-template", "1",
            "--tasks-per-step", "1", "--max-turns", "1", "--max-new-tokens", "8",
            "--batch", "2", "--workers", "1", "--threads", "1",
        ]  # fmt: skip
        # 21 tasks, so up to 21 paced steps a job; in a run with 3 a template the add landed
        # at step 5 of the first job and the remove at step 2 of the second.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        with log.open("a") as out:
            self.process = subprocess.Popen(
                [str(python), "-c", code, *args], stdout=out, stderr=subprocess.STDOUT, env=env
            )

    def records(self) -> list[Record]:
        path = self.run_dir / "metrics.jsonl"
        if not path.exists():
            return []
        return [json.loads(x) for x in path.read_text().splitlines() if x.endswith("}")]

    def wait_for(
        self, predicate: Callable[[list[Record]], bool], timeout: float = 600
    ) -> list[Record]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            records = self.records()
            if predicate(records):
                return records
            if self.process.poll() is not None:
                raise AssertionError(f"eval exited ({self.process.returncode}):\n{self.output()}")
            time.sleep(0.2)
        raise AssertionError(f"timed out; eval output:\n{self.output()}")

    def output(self) -> str:
        return self.log_path.read_text()[-5000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def _event_step(records: list[Record], action: str, name: str) -> int | None:
    for record in records:
        if any(
            e["action"] == action and e["name"] == name and e["ok"] for e in record["plugin_events"]
        ):
            return int(record["step"])
    return None


def test_example_added_to_a_running_eval_removed_and_surviving_kill_9(
    job_venv: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = tiny_checkpoint(tmp_path / "ckpt" / "final")
    run_dir = tmp_path / "eval" / "run"
    log = tmp_path / "eval.log"
    job = EvalJob(job_venv, checkpoint, run_dir, log)
    try:
        job.wait_for(lambda r: len(r) >= 1)
        run = str(run_dir)
        # Not installed yet: the check, made in the job's environment, refuses it.
        assert main(["plugins", "add", "--run", run, SPEC, "--name", NAME]) == 2
        assert "cannot import module 'composer_example_reward'" in capsys.readouterr().err

        uv("pip", "install", "--python", str(job_venv), "--no-deps", str(EXAMPLE), cwd=tmp_path)
        assert main(["plugins", "add", "--run", run, SPEC, "--name", NAME, "--wait", "600"]) == 0
        records = job.wait_for(lambda r: _event_step(r, "add", NAME) is not None)
        added_at = _event_step(records, "add", NAME)
        assert added_at is not None and added_at >= 1
        assert all(MINE not in r for r in records if r["step"] < added_at)
        (at_step,) = [r for r in records if r["step"] == added_at]
        assert MINE in at_step and "reward/tests_touched" in at_step  # from the step it came
        assert ENTRY_POINT not in at_step  # entry points are read when a job starts

        # kill -9, then the same command again: the run-time plugin is restored.
        os.kill(job.process.pid, signal.SIGKILL)
        job.process.wait()
        (run_dir / "metrics.jsonl").rename(run_dir / "metrics-before-kill.jsonl")
        job = EvalJob(job_venv, checkpoint, run_dir, log)
        records = job.wait_for(lambda r: len(r) >= 1)
        first = records[0]
        assert [(e["action"], e["name"], e["ok"]) for e in first["plugin_events"]] == [
            ("add", NAME, True)
        ]
        assert MINE in first
        assert ENTRY_POINT in first  # the restarted job also found the installed entry point

        assert main(["plugins", "remove", "--run", run, NAME, "--wait", "600"]) == 0
        records = job.wait_for(lambda r: _event_step(r, "remove", NAME) is not None)
        removed_at = _event_step(records, "remove", NAME)
        assert removed_at is not None
        assert all(MINE not in r for r in records if r["step"] >= removed_at)
        assert all(ENTRY_POINT in r for r in records)  # removing one instance left the other
        job.process.wait(timeout=600)
        assert job.process.returncode == 0, job.output()
        state = json.loads((run_dir / "plugins" / "state.json").read_text())
        assert state["finished"] and state["runtime_added"] == {}
    finally:
        job.stop()
