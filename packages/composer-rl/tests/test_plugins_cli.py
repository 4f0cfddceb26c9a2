"""`composer-rl plugins` against a job running in its own process."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from plugins_support import Job, running_job, step_of_event, write_runtime_plugins

from composer_rl.cli import main


@pytest.fixture
def job(tmp_path: Path) -> Iterator[Job]:
    """A running job that can import `runtime_plugins`; this test process cannot."""
    plugin_dir = write_runtime_plugins(tmp_path / "plugin-src")
    with running_job(tmp_path / "run", pythonpath=[plugin_dir]) as running:
        yield running


def cli(*args: str) -> int:
    return main(["plugins", *args])


def test_add_then_remove_is_recorded_with_the_step(
    job: Job, capsys: pytest.CaptureFixture[str]
) -> None:
    run = str(job.run_dir)
    assert cli("add", "--run", run, "runtime_plugins:Bonus", "--name", "bonus", "--wait", "60") == 0
    out = capsys.readouterr().out
    assert "runtime_plugins:Bonus implements composer_configure, composer_reward" in out
    assert "'bonus' applied" in out

    records = job.wait_for(lambda r: step_of_event(r, "add", "bonus") is not None)
    added_at = step_of_event(records, "add", "bonus")
    assert added_at is not None
    (at_step,) = [r for r in records if r["step"] == added_at]
    assert at_step["plugins/add/bonus"] == 1.0
    # Scored from that step on, with the configuration the job started with.
    assert all("reward/runtime_bonus" not in r for r in records if r["step"] < added_at)
    assert at_step["reward/runtime_bonus"] == 0.5

    assert cli("remove", "--run", run, "bonus", "--wait", "60") == 0
    records = job.wait_for(lambda r: step_of_event(r, "remove", "bonus") is not None)
    removed_at = step_of_event(records, "remove", "bonus")
    assert removed_at is not None and removed_at > added_at
    assert all("reward/runtime_bonus" not in r for r in records if r["step"] >= removed_at)

    capsys.readouterr()
    assert cli("list", "--run", run, "--json") == 0
    listing = json.loads(capsys.readouterr().out)
    assert listing["state"]["pid"] == job.process.pid
    names = {p["name"] for p in listing["state"]["plugins"]}
    assert "bonus" not in names and "correctness" in names
    assert [(e["action"], e["name"], e["ok"]) for e in listing["recent"]] == [
        ("add", "bonus", True),
        ("remove", "bonus", True),
    ]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_such_package.mod:Plugin", "cannot import module 'no_such_package.mod'"),
        ("runtime_plugins:NotAPlugin", "is not a plugin"),
        ("runtime_plugins:MisspelledHook", "unknown hook 'composer_rewrad'"),
        ("runtime_plugins", "is not a plugin"),
    ],
)
def test_a_bad_spec_is_refused_by_the_cli_and_the_job_goes_on(
    job: Job, capsys: pytest.CaptureFixture[str], spec: str, message: str
) -> None:
    assert cli("add", "--run", str(job.run_dir), spec) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err
    assert "the job's environment (" in err and f"pid {job.process.pid})" in err
    assert not list((job.run_dir / "plugins" / "requests").iterdir())  # nothing queued
    steps = len(job.records())
    job.wait_steps(steps + 2)  # still running


def test_the_check_uses_the_jobs_import_path(job: Job, capsys: pytest.CaptureFixture[str]) -> None:
    # `runtime_plugins` is importable only in the job, and the check says it is fine.
    with pytest.raises(ModuleNotFoundError):
        __import__("runtime_plugins")
    assert cli("add", "--run", str(job.run_dir), "runtime_plugins:Bonus") == 0
    out = capsys.readouterr().out
    assert "queued add 'runtime_plugins:Bonus'" in out
    assert "running" in out


def test_the_queued_line_names_the_plugin_and_a_duplicate_name_is_refused(
    job: Job, capsys: pytest.CaptureFixture[str]
) -> None:
    run = str(job.run_dir)
    assert cli("add", "--run", run, "runtime_plugins:Bonus", "--name", "bonus") == 0
    assert "queued add 'bonus' (runtime_plugins:Bonus)" in capsys.readouterr().out
    # The same name again: refused up front (exit 2), whether queued or registered.
    assert cli("add", "--run", run, "runtime_plugins:Broken", "--name", "bonus") == 2
    assert "pick another --name" in capsys.readouterr().err
    job.wait_for(lambda r: step_of_event(r, "add", "bonus") is not None)
    assert cli("add", "--run", run, "runtime_plugins:Broken", "--name", "bonus") == 2
    assert "already has a plugin named 'bonus'" in capsys.readouterr().err
    assert (
        cli(
            "add", "--run", run, "composer_rewards.rewards.length:LengthPenalty", "--name", "length"
        )
        == 2
    )


def test_the_check_says_whose_environment_it_used(
    job: Job, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli("add", "--run", str(job.run_dir), "no_such_module_xyz:P") == 2
    err = capsys.readouterr().err
    assert f"checked in the job's environment ({sys.executable}, pid {job.process.pid})" in err
    assert "not on this machine" not in err


def test_a_long_name_is_not_cut_in_the_table(job: Job, capsys: pytest.CaptureFixture[str]) -> None:
    name = "a_plugin_with_a_name_much_longer_than_eighty_columns_" + "x" * 40
    run = str(job.run_dir)
    assert cli("add", "--run", run, "runtime_plugins:Bonus", "--name", name, "--wait", "60") == 0
    capsys.readouterr()
    assert cli("list", "--run", run) == 0
    assert name in capsys.readouterr().out


def test_unchecked_bad_specs_are_rejected_by_the_job_which_goes_on(
    job: Job, capsys: pytest.CaptureFixture[str]
) -> None:
    run = str(job.run_dir)
    code = cli("add", "--run", run, "--no-check", "runtime_plugins:ExtraArgument", "--wait", "60")
    assert code == 1
    assert "rejected" in capsys.readouterr().err
    records = job.wait_for(
        lambda r: any("plugins/add_failed/runtime_plugins:ExtraArgument" in x for x in r)
    )
    (event,) = [e for r in records for e in r["plugin_events"]]
    assert not event["ok"] and "temperature" in event["error"]
    job.wait_steps(len(records) + 2)
    assert "cannot add plugin" in job.output()


def test_a_plugin_that_raises_is_named_in_the_metrics_and_the_job_goes_on(
    job: Job, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        cli(
            "add",
            "--run",
            str(job.run_dir),
            "runtime_plugins:Broken",
            "--name",
            "broken",
            "--wait",
            "60",
        )
        == 0
    )
    records = job.wait_for(lambda r: sum("plugin_failure/broken" in x for x in r) >= 3)
    failing = [r for r in records if "plugin_failure/broken" in r]
    assert failing[0]["failures"][0]["kind"] == "raised"
    assert "broken on purpose" in failing[0]["failures"][0]["message"]
    assert failing[-1]["reward/correctness"] == 1.0  # the other rewards are intact
    output = job.output()
    assert "plugin 'broken' failed in composer_reward (raised)" in output
    # The first failure with its traceback, then counts: not a traceback per step.
    assert output.count("Traceback") == 1, output
    assert "RuntimeError: broken on purpose" in output
    assert records[-1]["plugin_failures/broken/raised"] >= 2


def test_remove_of_an_unknown_plugin_and_a_missing_run_dir(
    job: Job, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli("remove", "--run", str(job.run_dir), "ghost") == 2
    assert "the job has no plugin 'ghost'" in capsys.readouterr().err
    assert cli("list", "--run", str(tmp_path / "nowhere")) == 2
    assert "no run directory" in capsys.readouterr().err


@pytest.mark.parametrize("action", [["add", "runtime_plugins:Bonus"], ["remove", "ghost"]])
def test_a_directory_without_a_job_is_refused_and_left_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], action: list[str]
) -> None:
    # Before: `remove ghost` queued silently, and any directory got a plugins/ folder.
    somewhere = tmp_path / "not-a-run"
    somewhere.mkdir()
    assert cli(action[0], "--run", str(somewhere), action[1]) == 2
    err = capsys.readouterr().err
    assert "no job that takes plugin requests has started" in err
    assert "plugins.plugins" in err
    assert list(somewhere.iterdir()) == []


def test_a_finished_or_dead_job(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plugin_dir = write_runtime_plugins(tmp_path / "plugin-src")
    with running_job(tmp_path / "run", pythonpath=[plugin_dir]) as job:
        pass  # stopped cleanly on leaving: finished
    run = str(job.run_dir)
    assert cli("add", "--run", run, "runtime_plugins:Bonus") == 2
    assert f"(pid {job.process.pid}) finished at step" in capsys.readouterr().err
    assert cli("list", "--run", run) == 0
    assert f"job pid {job.process.pid} on" in capsys.readouterr().out

    killed = Job(tmp_path / "run2", pythonpath=[plugin_dir])
    killed.wait_steps(2)
    killed.process.kill()
    killed.process.wait()
    killed.log.close()
    assert cli("list", "--run", str(killed.run_dir)) == 0
    assert "not running (killed or crashed" in capsys.readouterr().out
    # A killed job may resume, so a request still queues, saying the job is not running.
    assert cli("add", "--run", str(killed.run_dir), "--no-check", "runtime_plugins:Bonus") == 0
    assert "not running" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["pretrain", "sft", "stage1"])
def test_commands_that_score_nothing_refuse_plugin_requests(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """The real command on a run directory whose phases have all finished: it marks the
    directory and returns at once. (A command stopped by a bad setting writes nothing:
    tests/test_cli_preflight.py.)"""
    run_dir = tmp_path / "stage1"
    for phase in ("pretrain", "long_context", "sft"):
        (run_dir / phase / "final").mkdir(parents=True)
        (run_dir / phase / "final" / "config.json").write_text("{}")
        result = {"phase": phase, "steps": 1, "seconds": 0.0, "heldout_ce": 1.0}
        (run_dir / phase / "result.json").write_text(json.dumps(result))
    assert main([command, "--run-dir", str(run_dir), "--no-progress"]) == 0
    capsys.readouterr()
    assert cli("add", "--run", str(run_dir), "runtime_plugins:Bonus") == 2
    err = capsys.readouterr().err
    assert f"is a `{command}` run" in err and "scores no episodes" in err
    assert cli("list", "--run", str(run_dir)) == 0
    assert "takes no plugin requests" in capsys.readouterr().out


@pytest.mark.slow  # a fresh interpreter through the entry point (about 10 s)
def test_the_console_script(job: Job) -> None:
    completed = subprocess.run(
        [
            Path(sys.executable).with_name("composer-rl"),
            "plugins",
            "list",
            "--run",
            str(job.run_dir),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert f"job pid {job.process.pid}" in completed.stdout
    assert "correctness" in completed.stdout


def test_a_killed_job_comes_back_with_its_run_time_plugins(
    job: Job, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = str(job.run_dir)
    assert cli("add", "--run", run, "runtime_plugins:Bonus", "--name", "bonus", "--wait", "60") == 0
    assert cli("remove", "--run", run, "length", "--wait", "60") == 0
    job.process.kill()  # no clean shutdown
    job.process.wait()
    job.log.close()
    (job.run_dir / "metrics.jsonl").rename(job.run_dir / "metrics-before-kill.jsonl")

    plugin_dir = tmp_path / "plugin-src"
    with running_job(job.run_dir, pythonpath=[plugin_dir]) as resumed:
        first = resumed.records()[0]
        restored = [(e["action"], e["name"], e["ok"]) for e in first["plugin_events"]]
        assert restored == [("remove", "length", True), ("add", "bonus", True)]
        assert first["reward/runtime_bonus"] == 0.5
        assert "reward/length" not in first


def test_every_spec_is_shown_whole_on_a_narrow_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`plugins list` on a 60-column terminal: each spec on one line, uncut (rich shrank the
    table to the terminal and ended long specs with an ellipsis)."""
    import os
    import socket
    import time

    from composer_rl.plugins.requests import (
        JobState,
        PluginDirs,
        RegisteredPlugin,
        write_json_atomic,
    )

    specs = [
        "composer_rewards.builtin.correctness:CorrectnessReward",
        "some_third_party_package.deeply.nested.module:AVeryLongPluginClassName",
        "pkg.with_brackets:Plugin[beta]",
    ]
    plugins = [
        RegisteredPlugin(name=f"plugin_{i}", source="runtime", spec=spec, hooks=["composer_reward"])
        for i, spec in enumerate(specs)
    ]
    plugins.append(
        RegisteredPlugin(
            name="broken",
            source="config",
            spec="missing.module:Plugin",
            status="unavailable",
            error="ModuleNotFoundError: No module named 'missing' " * 3,
        )
    )
    run_dir = tmp_path / "run"
    dirs = PluginDirs(run_dir)
    dirs.make()
    state = JobState(
        command="rl",
        pid=os.getpid(),
        host=socket.gethostname(),
        python=sys.executable,
        sys_path=[],
        step=3,
        updated_at=time.time(),
        plugins=plugins,
    )
    write_json_atomic(dirs.state, state.model_dump())
    monkeypatch.setenv("COLUMNS", "60")
    assert cli("list", "--run", str(run_dir)) == 0
    out = capsys.readouterr().out
    for spec in [*specs, "missing.module:Plugin"]:
        assert any(spec in line for line in out.splitlines()), (spec, out)
    assert "…" not in out
