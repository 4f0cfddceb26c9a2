"""The `composer-rl` command itself: help, and the default pipeline with no subcommand."""

from __future__ import annotations

import subprocess
import sys

import pytest

from composer_rl import cli


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
    out = capsys.readouterr().out
    assert "running the default pipeline: tasks list, then tasks list" in out
    assert out.count("heldout") >= 2  # `tasks list` printed its table twice


def test_the_default_pipeline_is_stage_one_then_rl() -> None:
    assert cli.DEFAULT_PIPELINE == (("stage1",), ("rl",))
    parser = cli.build_parser()
    for step in cli.DEFAULT_PIPELINE:
        assert callable(parser.parse_args(list(step)).handler)
