"""SWE-bench-format instances against a git repository the test creates: loaded through the
`composer_task_sources` hook, the oracle passes and the base commit fails (plain grader and
sandbox), and every instance that cannot be loaded is explained."""

from __future__ import annotations

import json
from pathlib import Path

import pluggy
import pytest
from _swebench_support import BASIC_TEST, make_instance
from _swebench_support import source as _source

from composer_rl.agent.oracle import play_oracle
from composer_rl.tasks import Split, grade_files, hookspecs
from composer_rl.tasks.sources import collect_tasks
from composer_rl.tasks.swebench import SWEBenchTaskSource

hookimpl = pluggy.HookimplMarker("composer")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    root = tmp_path_factory.mktemp("swe")
    return root, make_instance(root)


def test_loads_through_the_hook_and_grades_end_to_end(workspace) -> None:  # type: ignore[no-untyped-def]
    root, good = workspace
    source = _source(root, [json.dumps(good)])

    class Plugin:
        @hookimpl
        def composer_task_sources(self) -> list[SWEBenchTaskSource]:
            return [source]

    pm = pluggy.PluginManager("composer")
    pm.add_hookspecs(hookspecs)
    pm.register(Plugin())
    tasks = collect_tasks(Split.HELDOUT, sources=[], pm=pm)
    assert [t.id for t in tasks] == ["acme__calc-1"] and source.skipped == []
    assert collect_tasks(Split.TRAIN, sources=[], pm=pm) == []
    task = tasks[0]
    assert set(task.files) == {"calc.py", "tests/test_basic.py"}  # the binary file is left out
    assert set(task.tests) == {"_grading/tests/test_add.py", "_grading/tests/test_basic.py"}
    assert "_grading/tests/test_add.py::test_add" in task.test_command
    solved = grade_files(task, task.solved_files())
    assert solved.success and solved.passed == 2
    unsolved = grade_files(task, task.files)
    assert not unsolved.success and unsolved.failed == 1 and unsolved.passed == 1
    demo = play_oracle(task)  # in a composer-infra sandbox
    assert demo.solved


def test_every_unloadable_instance_is_explained(workspace) -> None:  # type: ignore[no-untyped-def]
    root, good = workspace
    bad = [
        "{not json",
        json.dumps({k: v for k, v in good.items() if k != "patch"} | {"instance_id": "no-patch"}),
        json.dumps(good | {"instance_id": "elsewhere", "repo": "acme/missing"}),
        json.dumps(good | {"instance_id": "no-commit", "base_commit": "0" * 40}),
        json.dumps(
            good
            | {
                "instance_id": "stale",
                "patch": good["patch"].replace("return a - b", "return a * b"),
            }
        ),
        json.dumps(good | {"instance_id": "django", "FAIL_TO_PASS": ["test_add (tests.Calc)"]}),
        json.dumps(
            good | {"instance_id": "no-file", "PASS_TO_PASS": ["tests/test_gone.py::test_x"]}
        ),
        json.dumps(good | {"instance_id": "empty", "FAIL_TO_PASS": []}),
        json.dumps(good),
        json.dumps(good),
    ]
    source = _source(root, bad)
    assert [t.id for t in source.load()] == ["acme__calc-1"]
    reasons = {s.instance_id: s.reason for s in source.skipped}
    assert len(source.skipped) == 9
    assert "invalid JSON" in reasons["?"]
    assert "missing field(s) ['patch']" in reasons["no-patch"]
    assert "'acme/missing' is not on disk" in reasons["elsewhere"]
    assert "is not a commit of" in reasons["no-commit"]
    assert "patch does not apply at base_commit" in reasons["stale"]
    assert "not a pytest node id" in reasons["django"]
    assert "'tests/test_gone.py' is not in the repository" in reasons["no-file"]
    assert "FAIL_TO_PASS is empty" in reasons["empty"]
    assert "appears twice" in reasons["acme__calc-1"]
    assert all(str(s).startswith(f"{root / 'instances.jsonl'}:") for s in source.skipped)


def test_a_patch_that_deletes_a_file_is_explained(workspace) -> None:  # type: ignore[no-untyped-def]
    root, good = workspace
    deletion = (
        "diff --git a/tests/test_basic.py b/tests/test_basic.py\n"
        "deleted file mode 100644\n"
        "--- a/tests/test_basic.py\n+++ /dev/null\n@@ -1,5 +0,0 @@\n"
        + "".join(f"-{line}\n" for line in BASIC_TEST.splitlines())
    )
    source = _source(root, [json.dumps(good | {"patch": deletion})])
    assert source.load() == []
    assert "deletes or renames a file" in source.skipped[0].reason


def test_a_large_test_file_loads_and_one_over_the_limit_is_named(tmp_path: Path) -> None:
    """A 256 KB test file (real repositories have such) loads with the defaults; under a
    smaller `max_file_bytes` the instance is skipped naming the file, its size, the limit
    and the setting (it used to say the listed file "is not in the repository")."""
    padding = "".join(
        f"\ndef test_pad_{i}():\n    assert sub({i}, 0) == {i}\n" for i in range(9000)
    )
    big_test = (BASIC_TEST + padding)[: 256 * 1024 - 1] + "\n"
    big_test = big_test[: big_test.rindex("\ndef ")] + "\n"
    big_test += " " * (256 * 1024 - len(big_test.encode()))  # exactly 256 KB, valid Python
    instance = make_instance(tmp_path, name="big", base_tests={"tests/test_big.py": big_test})
    repo = tmp_path / "repos" / "acme__big"
    size = (repo / "tests" / "test_big.py").stat().st_size
    assert size == 256 * 1024
    path = tmp_path / "instances.jsonl"
    path.write_text(json.dumps(instance) + "\n")

    source = SWEBenchTaskSource("swe", path, tmp_path / "repos")
    [task] = source.load()
    assert source.skipped == [] and task.tests["_grading/tests/test_big.py"] == big_test
    assert grade_files(task, task.solved_files()).success

    small = SWEBenchTaskSource("swe", path, tmp_path / "repos", max_file_bytes=200_000)
    assert small.load() == []
    [skipped] = small.skipped
    assert skipped.reason == (
        f"listed test file 'tests/test_big.py' is {size:,} bytes, over max_file_bytes=200,000, "
        "so it was left out of the workspace; raise SWEBenchTaskSource(max_file_bytes=...) to "
        "load this instance"
    )
