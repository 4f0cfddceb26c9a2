"""Shared pieces of the plugin tests: a module of test plugins, and a job in its own process.

Imported by the `test_plugins_*` modules (fixtures included), rather than living in a
conftest, so that the rest of composer-rl's tests are not affected.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

RUNTIME_PLUGINS = textwrap.dedent(
    """
    from composer_rewards import RewardComponent, hookimpl


    class Bonus:
        '''Reads its value from the run config, so it shows the historic configure hook.'''

        bonus = None

        @hookimpl
        def composer_configure(self, config):
            self.bonus = config["runtime_test"]["bonus"]

        @hookimpl
        def composer_reward(self, episode):
            return RewardComponent(name="runtime_bonus", value=self.bonus, weight=1.0)


    class Broken:
        @hookimpl
        def composer_reward(self, episode):
            raise RuntimeError("broken on purpose")


    class MisspelledHook:
        @hookimpl
        def composer_rewrad(self, episode):
            return None


    class ExtraArgument:
        @hookimpl
        def composer_reward(self, episode, temperature):
            return None


    class NotAPlugin:
        def composer_reward(self, episode):
            return None
    """
)


def write_runtime_plugins(directory: Path) -> Path:
    """Write module `runtime_plugins` into `directory` (created) and return it."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "runtime_plugins.py").write_text(RUNTIME_PLUGINS)
    return directory


@pytest.fixture
def importable_plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Module `runtime_plugins` importable in this process (use with usefixtures)."""
    directory = write_runtime_plugins(tmp_path / "plugin-src")
    monkeypatch.syspath_prepend(str(directory))
    yield directory
    sys.modules.pop("runtime_plugins", None)


JOB_SCRIPT = Path(__file__).with_name("plugins_job.py")
Record = dict[str, Any]


class Job:
    def __init__(
        self, run_dir: Path, python: str = sys.executable, pythonpath: list[Path] | None = None
    ) -> None:
        self.run_dir = run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)
        if pythonpath:
            env["PYTHONPATH"] = os.pathsep.join(str(p) for p in pythonpath)
        self.log = (run_dir / "job.log").open("w")
        self.process = subprocess.Popen(
            [python, str(JOB_SCRIPT), str(run_dir)],
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def records(self) -> list[Record]:
        path = self.run_dir / "metrics.jsonl"
        if not path.exists():
            return []
        lines = path.read_text().splitlines()
        return [json.loads(line) for line in lines if line.endswith("}")]

    def wait_for(
        self, predicate: Callable[[list[Record]], bool], timeout: float = 120.0
    ) -> list[Record]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(
                    f"the job exited ({self.process.returncode}):\n{self.output()}"
                )
            records = self.records()
            if predicate(records):
                return records
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for the job; its output:\n{self.output()}")

    def wait_steps(self, count: int) -> list[Record]:
        return self.wait_for(lambda records: len(records) >= count)

    def output(self) -> str:
        self.log.flush()
        return (self.run_dir / "job.log").read_text()

    def stop(self) -> int:
        (self.run_dir / "stop").touch()
        try:
            return self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise
        finally:
            self.log.close()


def step_of_event(records: list[Record], action: str, name: str) -> int | None:
    for record in records:
        for event in record["plugin_events"]:
            if event["action"] == action and event["name"] == name:
                assert event["step"] == record["step"]
                return int(record["step"])
    return None


@contextmanager
def running_job(
    run_dir: Path, python: str = sys.executable, pythonpath: list[Path] | None = None
) -> Iterator[Job]:
    """A job process that has made two steps; stopped (and checked to exit 0) afterwards."""
    job = Job(run_dir, python=python, pythonpath=pythonpath)
    try:
        job.wait_steps(2)
        yield job
    finally:
        if job.process.poll() is None:
            assert job.stop() == 0, job.output()


def tiny_checkpoint(directory: Path) -> Path:
    """An untrained two-layer tiny model with its tokenizer: a real checkpoint in seconds."""
    import torch

    from composer_model import ComposerModel, preset, save_pretrained, train_tokenizer
    from composer_rl.agent.oracle import play_oracle
    from composer_rl.tasks import BUILTIN_TEMPLATES, Split

    tasks = [t for _, t in zip(range(2), BUILTIN_TEMPLATES[0].tasks(Split.TRAIN), strict=False)]
    texts = [play_oracle(t, grade=False).transcript.text for t in tasks]
    tokenizer = train_tokenizer(texts * 4, vocab_size=400)
    torch.manual_seed(0)
    model = ComposerModel(preset("tiny", vocab_size=tokenizer.vocab_size, num_hidden_layers=2))
    save_pretrained(model, directory)
    tokenizer.save(directory / "tokenizer.json")
    return directory
