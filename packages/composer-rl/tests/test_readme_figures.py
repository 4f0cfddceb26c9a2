"""Figures the composer-rl README states that code computes are checked against the code:
the split sizes `composer-rl tasks list` prints, the number of templates, and the number
of tasks `composer-rl eval` runs on its defaults. A change to the task suite that moves
them fails here until the README says the new figure."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from composer_rl.cli import main
from composer_rl.tasks import BUILTIN_TEMPLATES, Split, collect_tasks, sample_tasks

README = Path(__file__).resolve().parents[1] / "README.md"


def _number(text: str) -> int:
    return int(text.replace(",", ""))


def _readme(pattern: str) -> re.Match[str]:
    """The README's sentence matching `pattern` (whitespace may be a line break)."""
    text = " ".join(README.read_text().split())
    found = re.search(pattern, text)
    assert found is not None, f"the README no longer says {pattern!r}: update this test"
    return found


def test_split_sizes_are_what_tasks_list_prints(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    said = _readme(
        r"\*\*([\d,]+) train and ([\d,]+) held-out tasks\*\* \(`composer-rl tasks list`\)"
    )
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["tasks", "list"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if re.match(r"^│ all\s", line))
    cells = [c.strip() for c in row.strip("│").split("│")]
    train, heldout = int(cells[3]), int(cells[4])
    assert (_number(said.group(1)), _number(said.group(2))) == (train, heldout)


def test_template_counts_and_the_default_eval_size() -> None:
    templates = len(BUILTIN_TEMPLATES)
    assert _number(_readme(r"(\d+) templates with parameters generate").group(1)) == templates
    grew = _readme(
        r"the suite grew from 13 to (\d+) templates, `composer-rl eval` on its defaults "
        r"\((\d+) held-out tasks per template\) runs (\d+) tasks"
    )
    per_template = _number(grew.group(2))
    # What `composer-rl eval` does on its defaults (--per-template 4, --seed 0).
    default_eval = sample_tasks(collect_tasks(Split.HELDOUT), per_template, seed=0)
    assert (_number(grew.group(1)), _number(grew.group(3))) == (templates, len(default_eval))
