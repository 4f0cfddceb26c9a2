"""Figures the composer-rl README and its task-suite page state that code computes are
checked against the code: the split sizes and per-category medians `composer-rl tasks list`
prints, the number of templates, and the number of tasks `composer-rl eval` runs on its
defaults. A change to the task suite that moves them fails here until the page says the new
figure."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from composer_rl.cli import main
from composer_rl.tasks import BUILTIN_TEMPLATES, Split, collect_tasks, sample_tasks

README = Path(__file__).resolve().parents[1] / "README.md"
TASK_SUITE = Path(__file__).resolve().parents[3] / "docs" / "rl" / "task-suite.md"
SPLIT_SIZES = r"\*\*([\d,]+) train and ([\d,]+) held-out tasks\*\* \(`composer-rl tasks list`\)"


def _number(text: str) -> int:
    return int(text.replace(",", ""))


def _readme(pattern: str, page: Path = README) -> re.Match[str]:
    """The page's sentence matching `pattern` (whitespace may be a line break)."""
    text = " ".join(page.read_text().split())
    found = re.search(pattern, text)
    assert found is not None, f"{page.name} no longer says {pattern!r}: update this test"
    return found


def _cells(row: str) -> list[str]:
    return [c.strip() for c in row.strip().strip("│|").split("│" if "│" in row else "|")]


@pytest.fixture(scope="module")
def tasks_list() -> str:
    """What `composer-rl tasks list` prints, run once (it builds every task of both splits)."""
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out):
        patch.setenv("COLUMNS", "200")
        assert main(["tasks", "list"]) == 0
    return out.getvalue()


def _split_sizes(printed: str) -> tuple[int, int]:
    row = next(line for line in printed.splitlines() if re.match(r"^│ all\s", line))
    cells = _cells(row)
    return int(cells[3]), int(cells[4])


@pytest.mark.parametrize("page", [README, TASK_SUITE], ids=lambda p: p.name)
def test_split_sizes_are_what_tasks_list_prints(tasks_list: str, page: Path) -> None:
    said = _readme(SPLIT_SIZES, page)
    assert (_number(said.group(1)), _number(said.group(2))) == _split_sizes(tasks_list)


def test_the_medians_per_category_are_what_tasks_list_prints(tasks_list: str) -> None:
    """The task-suite page's table of medians per category, row for row, is the one
    `tasks list` prints: the figures the issue's point about domain match rests on."""
    lines = tasks_list.splitlines()
    title = next(i for i, line in enumerate(lines) if "medians per category" in line)
    printed = {
        cells[0]: cells[1:]
        for cells in (_cells(line) for line in lines[title + 1 :] if line.startswith("│"))
        if cells[0] and cells[0] != "category"
    }
    page = TASK_SUITE.read_text().splitlines()
    header = page.index("| category | tasks | changed lines | files changed | description chars |")
    said = {}
    for line in page[header + 2 :]:
        if not line.startswith("|"):
            break
        cells = _cells(line)
        said[cells[0]] = cells[1:]
    # Every category on both sides: two empty tables would also be equal.
    assert len(printed) == len({t.category for t in BUILTIN_TEMPLATES})
    assert said == printed
    assert _number(
        _readme(r"(\d+) templates with parameters generate", TASK_SUITE).group(1)
    ) == len(BUILTIN_TEMPLATES)


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


def test_the_bench_figures_of_the_evaluation_page() -> None:
    """docs/rl/evaluation.md describes the bench by its size and medians beside today's
    training split's: a bench or template change that moves them fails here."""
    from composer_rl.eval.bench import BENCH_PER_TEMPLATE, BENCH_TEMPLATES, bench_tasks
    from composer_rl.tasks.stats import medians

    page = Path(__file__).resolve().parents[3] / "docs" / "rl" / "evaluation.md"
    said = _readme(
        r"(\d+) tasks, (\d+) held-out tasks from each of the (\w+) templates .* median "
        r"([\d.]+) changed lines over (\d+) files \(training when it was frozen: \d+ lines, "
        r"\d+ file; (\d+) since .*\) and ([\d.]+)-character descriptions \(training: \d+; "
        r"(\d+) since\)",
        page,
    )
    bench, train = medians(bench_tasks()), medians(collect_tasks(Split.TRAIN))
    words = {"six": 6, "seven": 7, "eight": 8}
    assert (int(said.group(1)), int(said.group(2)), words[said.group(3)]) == (
        bench.tasks,
        BENCH_PER_TEMPLATE,
        len(BENCH_TEMPLATES),
    )
    assert (float(said.group(4)), float(said.group(5)), float(said.group(7))) == (
        bench.changed_lines,
        bench.files_changed,
        bench.description_chars,
    )
    assert (float(said.group(6)), float(said.group(8))) == (
        train.changed_lines,
        train.description_chars,
    )


def test_the_multi_file_templates_table_is_what_the_templates_give(tasks_list: str) -> None:
    """The task-suite page's table of issue 31's multi-file templates gives each one's
    files and changed lines (the medians of its tasks) and says each has difficulty 3, 100
    training and 25 held-out tasks; `tasks validate --per-template 1` checks one task of
    every template."""
    from composer_rl.tasks.stats import medians

    page = TASK_SUITE.read_text().splitlines()
    header = page.index("| template | category | files, lines | what is graded |")
    said: dict[str, tuple[float, float]] = {}
    for line in page[header + 2 :]:
        if not line.startswith("|"):
            break
        name, _, size, _ = _cells(line)
        files, lines = (float(n) for n in size.split(","))
        said[name.strip("`")] = (files, lines)
    _readme(r"difficulty 3, 100 training and 25 held-out tasks each", TASK_SUITE)
    rows = {cells[0]: cells for cells in map(_cells, tasks_list.splitlines()) if cells[0]}
    by_name = {t.name: t for t in BUILTIN_TEMPLATES}
    assert len(said) == 10
    for name, (files, lines) in said.items():
        template = by_name[name]
        size = medians([*template.tasks(Split.TRAIN), *template.tasks(Split.HELDOUT)])
        assert (size.files_changed, size.changed_lines) == (files, lines), name
        assert rows[name][2:5] == ["3", "100", "25"], rows[name]
    said_valid = _readme(r"prints `(\d+)/(\d+) tasks valid`", TASK_SUITE)
    assert {int(said_valid.group(1)), int(said_valid.group(2))} == {len(BUILTIN_TEMPLATES)}
