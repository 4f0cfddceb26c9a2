"""The `composer-rl` command itself: help, and the default pipeline with no subcommand."""

from __future__ import annotations

import subprocess
import sys

import pytest

from composer_rl import cli
from composer_rl.tasks import BUILTIN_TEMPLATES


def test_help_lists_every_stage_command() -> None:
    result = subprocess.run(
        [sys.executable, "-c", "from composer_rl.cli import main; main(['--help'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    for command in ("pretrain", "sft", "stage1", "eval", "tasks", "plugins"):
        assert command in result.stdout


def test_no_subcommand_runs_each_pipeline_step_in_order(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Two real, cheap subcommands stand in for stage one and eval (minutes each).
    monkeypatch.setattr(cli, "DEFAULT_PIPELINE", (("tasks", "list"), ("tasks", "list")))
    assert cli.main([]) == 0
    out, err = capsys.readouterr()
    assert "running the default pipeline: tasks list, then tasks list" in out
    assert out.count("heldout") >= 2  # `tasks list` printed its table twice
    # it builds every task first (minutes): progress lines on stderr, none in the table
    count = len(BUILTIN_TEMPLATES)
    assert err.count(f"tasks list: start, to {count} templates") == 2
    assert err.count(f"tasks list: done, {count}/{count} templates") == 2
    assert "tasks list:" not in out


def test_the_default_pipeline_is_stage_one_then_rl() -> None:
    assert cli.DEFAULT_PIPELINE == (("stage1",), ("rl",))
    parser = cli.build_parser()
    for step in cli.DEFAULT_PIPELINE:
        assert callable(parser.parse_args(list(step)).handler)
