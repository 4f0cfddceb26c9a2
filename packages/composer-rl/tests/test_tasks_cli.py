"""`composer-rl tasks` lists, exports (both formats) and validates tasks."""

from __future__ import annotations

from pathlib import Path

import pytest

from composer_rl.cli import main
from composer_rl.tasks import BUILTIN_TEMPLATES, load_tasks, save_tasks_jsonl


def test_list_and_export(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tasks", "list"]) == 0
    assert "fix_operator" in capsys.readouterr().out
    assert main(["tasks", "export", str(tmp_path / "t.jsonl"), "--per-template", "1"]) == 0
    assert len(load_tasks(tmp_path / "t.jsonl")) == len(BUILTIN_TEMPLATES)
    out = tmp_path / "dirs"
    assert main(["tasks", "export", str(out), "--per-template", "1", "--split", "train"]) == 0
    assert len(load_tasks(out)) == len(BUILTIN_TEMPLATES)


def test_validate_flags_a_broken_task(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["tasks", "export", str(tmp_path / "t.jsonl"), "--per-template", "1"])
    task = next(
        t for t in load_tasks(tmp_path / "t.jsonl") if t.metadata["template"] == "fix_operator"
    )
    broken = task.model_copy(update={"solution": []})  # the "oracle" now changes nothing
    save_tasks_jsonl([task, broken.model_copy(update={"id": "broken"})], tmp_path / "two.jsonl")
    assert main(["tasks", "validate", str(tmp_path / "two.jsonl")]) == 1
    out = capsys.readouterr().out
    assert f"{task.id}: ok" in out and "broken: oracle fails" in out
