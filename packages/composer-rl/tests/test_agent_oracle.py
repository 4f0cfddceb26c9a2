"""Oracle demonstrations, played in real composer-infra sandboxes, solve their tasks, and
their token masks train exactly the model's own segments."""

from __future__ import annotations

import pytest

from composer_model import train_tokenizer
from composer_rl.agent.format import TOOL_CALL, TOOL_RESULT, parse_output
from composer_rl.agent.oracle import oracle_calls, play_oracle
from composer_rl.agent.sandboxes import grade_sandbox, open_sandbox
from composer_rl.tasks import BUILTIN_TEMPLATES, Split, collect_tasks, sample_tasks

FAST = ["fix_operator", "implement_stub", "read_constant", "rename_function"]


@pytest.mark.parametrize("name", FAST)
def test_oracle_demonstration_solves_in_the_sandbox(name: str) -> None:
    template = next(t for t in BUILTIN_TEMPLATES if t.name == name)
    task = next(iter(template.tasks(Split.TRAIN)))
    demo = play_oracle(task)
    assert demo.solved, demo.test_output
    with open_sandbox(task) as sandbox:
        assert not grade_sandbox(sandbox, task).all_passed  # the untouched repo fails


PASS_EVERY_TEST = (
    "import pytest\n\n\n@pytest.hookimpl(hookwrapper=True)\n"
    "def pytest_runtest_makereport(item, call):\n"
    "    outcome = yield\n"
    "    outcome.get_result().outcome = 'passed'\n"
)


@pytest.mark.parametrize("path", ["conftest.py", "_grading/conftest.py"])
def test_a_planted_conftest_is_not_paid(path: str) -> None:
    """An episode that only writes a conftest whose hook passes every report (this made
    the hidden tests of every built-in task pass before grading ignored it) is unsolved."""
    task = next(iter(BUILTIN_TEMPLATES[0].tasks(Split.TRAIN)))
    with open_sandbox(task) as sandbox:
        assert sandbox.call("write_file", {"path": path, "content": PASS_EVERY_TEST}).ok
        report = grade_sandbox(sandbox, task)
    assert not report.all_passed and report.failed + report.errors > 0, report


@pytest.mark.slow
def test_every_template_demonstration_solves() -> None:
    for task in sample_tasks(collect_tasks(Split.HELDOUT), per_group=1, seed=3):
        assert play_oracle(task).solved, task.id


def test_demonstration_text_parses_back_to_the_oracle_calls() -> None:
    task = next(iter(BUILTIN_TEMPLATES[2].tasks(Split.TRAIN)))  # two files read, one edit
    demo = play_oracle(task, grade=False)
    text = demo.transcript.text
    assert text.count(TOOL_RESULT) == len(oracle_calls(task)) - 1  # finish gets no result
    assert parse_output(text).calls == oracle_calls(task)
    assert task.files[task.metadata["context_files"][1]] in text  # the real file, as read


def test_mask_covers_exactly_the_model_segments() -> None:
    task = next(iter(BUILTIN_TEMPLATES[0].tasks(Split.TRAIN)))
    demo = play_oracle(task, grade=False)
    tokenizer = train_tokenizer([demo.transcript.text] * 3, vocab_size=400)
    ids, mask = demo.transcript.encode(tokenizer)
    assert len(ids) == len(mask)
    trained = tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if m])
    expected = "".join(s.text for s in demo.transcript.segments if s.trainable)
    assert trained == expected
    assert trained.startswith(TOOL_CALL) and task.instruction not in trained
