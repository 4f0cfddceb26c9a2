"""The agent's tools: what they do, and that a bad call is an error result, never a raise."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from composer_infra.sandbox import TOOL_NAMES, Sandbox

MakeSandbox = Callable[..., Sandbox]


def test_tool_names_match_the_contract() -> None:
    assert set(TOOL_NAMES) == {
        "read_file",
        "write_file",
        "edit_file",
        "list_files",
        "run",
        "todo",
        "finish",
    }


def test_file_tools_round_trip(backend: str, make_sandbox: MakeSandbox) -> None:
    sandbox = make_sandbox(backend)
    assert sandbox.list_files().output.splitlines() == ["calc.py", "tests/", "tests/test_calc.py"]
    assert sandbox.read_file("calc.py").output == "def add(a, b):\n    return a - b\n"
    assert sandbox.write_file("pkg/deep/new.py", "x = 1\n").ok
    assert sandbox.read_file("/workspace/pkg/deep/new.py").output == "x = 1\n"
    # The sandbox's own commands see (and may change) what the tools wrote, and vice versa.
    ran = sandbox.run("cat pkg/deep/new.py && echo 'y = 2' >> pkg/deep/new.py")
    assert ran.ok and "x = 1" in ran.output
    assert sandbox.read_file("pkg/deep/new.py").output == "x = 1\ny = 2\n"
    edited = sandbox.edit_file("calc.py", "a - b", "a + b")
    assert edited.ok
    assert "a + b" in sandbox.read_file("calc.py").output


def test_edit_file_needs_exactly_one_match(make_sandbox: MakeSandbox) -> None:
    sandbox = make_sandbox("bwrap")
    sandbox.write_file("twice.py", "x = 1\nx = 1\n")
    missing = sandbox.edit_file("twice.py", "y = 2", "y = 3")
    assert not missing.ok and "not found" in (missing.error or "")
    ambiguous = sandbox.edit_file("twice.py", "x = 1", "x = 2")
    assert not ambiguous.ok and "2 times" in (ambiguous.error or "")
    assert sandbox.read_file("twice.py").output == "x = 1\nx = 1\n"


@pytest.mark.parametrize(
    ("tool", "arguments", "expected"),
    [
        ("rm_rf", {}, "unknown tool"),
        ("read_file", {}, "path"),
        ("read_file", {"path": 3}, "path"),
        ("read_file", "calc.py", "must be an object"),
        ("write_file", {"path": "a.py"}, "content"),
        ("write_file", {"path": "a.py", "content": "x", "mode": "w"}, "mode"),
        ("edit_file", {"path": "calc.py", "old": "", "new": "x"}, "old"),
        ("run", {"command": ""}, "command"),
        ("run", {"command": "true", "timeout": -1}, "timeout"),
        ("todo", {"action": "explode"}, "action"),
        ("read_file", {"path": "/etc/passwd"}, "outside the workspace"),
        ("read_file", {"path": "../../etc/passwd"}, "outside the workspace"),
        ("read_file", {"path": "missing.py"}, "does not exist"),
        ("read_file", {"path": "tests"}, "directory"),
        ("write_file", {"path": "/tmp/x", "content": "x"}, "outside the workspace"),
        ("list_files", {"path": "nope"}, "does not exist"),
    ],
)
def test_bad_calls_are_error_results(
    make_sandbox: MakeSandbox, tool: str, arguments: object, expected: str
) -> None:
    sandbox = make_sandbox("bwrap")
    result = sandbox.call(tool, arguments)
    assert not result.ok
    assert expected in (result.error or ""), result.error


def test_binary_and_oversized_files_are_refused(make_sandbox: MakeSandbox) -> None:
    sandbox = make_sandbox("bwrap")
    (sandbox.workspace / "blob.bin").write_bytes(b"\xff\xfe\x00")
    assert "UTF-8" in (sandbox.read_file("blob.bin").error or "")
    (sandbox.workspace / "big.txt").write_text("x" * (sandbox.config.read_limit + 1))
    assert "read limit" in (sandbox.read_file("big.txt").error or "")


def test_run_reports_exit_code_and_timeout(backend: str, make_sandbox: MakeSandbox) -> None:
    sandbox = make_sandbox(backend)
    failed = sandbox.run("echo out; echo err >&2; exit 3")
    assert not failed.ok and failed.error == "exit code 3"
    assert "out" in failed.output and "err" in failed.output
    assert failed.data["exit_code"] == 3
    slow = sandbox.run("sleep 30", timeout=1)
    assert not slow.ok and slow.data["timed_out"]


def test_todo_list(make_sandbox: MakeSandbox) -> None:
    sandbox = make_sandbox("bwrap")
    assert sandbox.todo("add", item="read the failing test").ok
    assert sandbox.todo("add", item="fix add()").ok
    assert sandbox.todo("start", id=2).ok
    listed = sandbox.todo("complete", id=1)
    assert listed.output.splitlines() == ["1. [x] read the failing test", "2. [~] fix add()"]
    assert not sandbox.todo("complete", id=7).ok
    assert not sandbox.todo("add").ok
    assert [(i.text, i.status) for i in sandbox.todos.items] == [
        ("read the failing test", "done"),
        ("fix add()", "in_progress"),
    ]


def test_finish_ends_the_episode(make_sandbox: MakeSandbox) -> None:
    sandbox = make_sandbox("bwrap")
    assert sandbox.finish("fixed add").ok
    assert sandbox.finished and sandbox.final_message == "fixed add"
    after = sandbox.read_file("calc.py")
    assert not after.ok and "finished" in (after.error or "")
