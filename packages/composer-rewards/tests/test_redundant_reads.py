"""The `redundant_reads` reward and the `reread` monitor on hand-built episodes: which reads
are charged (spellings of one path, edits, commands that could write, compactions between),
the component's value and settings, and the monitor flagging exactly the charged reads."""

from __future__ import annotations

from typing import Any

import pluggy
import pytest

from composer_rewards import BUILTIN_PLUGINS, Episode, ToolCall, score_episode
from composer_rewards.episode import COMPACTIONS_KEY
from composer_rewards.monitors.reread import RereadMonitor
from composer_rewards.rewards.redundant_reads import (
    RedundantReadsPenalty,
    RedundantReadsSettings,
    cat_path,
    redundant_reads,
    workspace_path,
)
from composer_rewards.transcript import may_write

SOURCE = "def f(a, b):\n    return a - b\n"


def read(path: str, output: str = SOURCE, **fields: Any) -> ToolCall:
    return ToolCall(name="read_file", arguments={"path": path}, output=output, **fields)


def run(command: str, output: str = "", **fields: Any) -> ToolCall:
    return ToolCall(name="run", arguments={"command": command}, output=output, **fields)


def edit(path: str, **fields: Any) -> ToolCall:
    arguments = {"path": path, "old": "a - b", "new": "a + b"}
    return ToolCall(name="edit_file", arguments=arguments, output=f"edited {path}", **fields)


def episode(*calls: ToolCall, **fields: Any) -> Episode:
    return Episode(task="fix f in m.py", tool_calls=calls, **fields)


def charged(*calls: ToolCall, **fields: Any) -> list[tuple[int, str, int]]:
    """(index, path, index of the read it repeats) of each charged read."""
    return [(r.index, r.path, r.first) for r in redundant_reads(episode(*calls, **fields))]


def test_a_second_read_with_nothing_between_is_charged() -> None:
    assert charged(read("m.py"), read("m.py")) == [(1, "m.py", 0)]
    assert charged(read("m.py"), read("other.py")) == []
    # Three reads: the second and the third each repeat the one before.
    assert charged(read("m.py"), read("m.py"), read("m.py")) == [(1, "m.py", 0), (2, "m.py", 1)]
    # Calls that change nothing do not make a read new: listing, the todo list, looking around.
    between = [
        ToolCall(name="list_files", arguments={}, output="m.py"),
        ToolCall(name="todo", arguments={"action": "list"}),
        run("ls -la && grep -n 'return' m.py", output="2:    return a - b"),
        run("git diff; git status"),
    ]
    assert charged(read("m.py"), *between, read("m.py")) == [(5, "m.py", 0)]


@pytest.mark.parametrize(
    "spelling", ["./m.py", ".//m.py", "/workspace/m.py", "src/../m.py", "./src/.././m.py"]
)
def test_spellings_of_one_path_are_one_file(spelling: str) -> None:
    assert charged(read("m.py"), read(spelling)) == [(1, "m.py", 0)]
    assert charged(read(spelling), read("m.py")) == [(1, "m.py", 0)]


def test_workspace_paths_resolve_as_the_sandbox_resolves_them() -> None:
    assert workspace_path("./pkg//mod.py") == "pkg/mod.py"
    assert workspace_path("/workspace") is None  # the workspace itself is no file
    assert workspace_path("/workspace/pkg/../mod.py") == "mod.py"
    assert workspace_path("../m.py") is None  # above the workspace: the sandbox refuses it
    assert workspace_path("/etc/passwd") is None
    assert workspace_path("/workspaces/m.py") is None
    assert workspace_path("") is None
    assert workspace_path("M.py") != workspace_path("m.py")  # a case-sensitive file system


def test_an_edit_of_the_file_between_makes_the_read_new() -> None:
    after_edit = "def f(a, b):\n    return a + b\n"
    assert charged(read("m.py"), edit("m.py"), read("m.py", after_edit)) == []
    # An edit spelled another way is the same file.
    assert charged(read("m.py"), edit("./m.py"), read("m.py", after_edit)) == []
    write = ToolCall(name="write_file", arguments={"path": "/workspace/m.py", "content": "x"})
    assert charged(read("m.py"), write, read("m.py", "x")) == []
    # Even where the edit left the same text (the read still had to look).
    assert charged(read("m.py"), edit("m.py"), read("m.py")) == []
    # An edit of another file does not.
    assert charged(read("m.py"), edit("other.py"), read("m.py")) == [(2, "m.py", 0)]
    # A failed edit (old text not found) sends the agent back to the file: not charged.
    failed = edit("m.py", ok=False, error="`old` text was not found in m.py; read the file")
    assert charged(read("m.py"), failed, read("m.py")) == []
    # A malformed edit was never executed: it changes nothing.
    malformed = edit("m.py", ok=False, malformed=True, error="malformed tool call")
    assert charged(read("m.py"), malformed, read("m.py")) == [(2, "m.py", 0)]


@pytest.mark.parametrize(
    "command",
    [
        "sed -i 's/a - b/a + b/' m.py",
        "python fix.py",
        "cat > m.py <<'EOF'\nx\nEOF",
        "git checkout m.py",
        "make",
        "bash -c 'true'",
        'echo $(python -c \'open("m.py", "w")\')',
        "find . -name '*.py' -exec touch {} +",
        "ls && python -m black .",
    ],
)
def test_a_command_that_could_have_written_files_makes_every_read_new(command: str) -> None:
    assert may_write(command)
    assert charged(read("m.py"), read("util.py"), run(command), read("m.py"), read("util.py")) == []
    # Failed or not: a command that exited non-zero may have written before it failed.
    failing = run(command, ok=False, error="exit code 1")
    assert charged(read("m.py"), failing, read("m.py")) == []


@pytest.mark.parametrize(
    "command",
    [
        "pytest -q",
        "python -m pytest tests/test_m.py",
        "cd tests && python -m unittest",
        "ls; cat m.py | grep return",
        "git diff && git log --oneline",
        "find . -name '*.py'",
    ],
)
def test_looking_around_and_test_runs_change_nothing(command: str) -> None:
    assert not may_write(command)
    assert charged(read("m.py"), run(command, output="1 passed in 0.01s"), read("m.py")) == [
        (2, "m.py", 0)
    ]


def test_cat_of_one_file_is_a_read_too() -> None:
    assert cat_path("cat m.py") == "m.py"
    assert cat_path("cat -n './src/m.py'") == "./src/m.py"
    for other in ("cat a.py b.py", "cat m.py | head", "cat *.py", "cat $F", "cat", "head m.py"):
        assert cat_path(other) is None, other
    # Reading in the terminal what read_file showed, or the other way round, is charged.
    assert charged(read("m.py"), run("cat ./m.py", output=SOURCE)) == [(1, "m.py", 0)]
    assert charged(run("cat m.py", output=SOURCE), read("m.py")) == [(1, "m.py", 0)]
    # `cat -n` shows other text (line numbers): it is not the same read as read_file's...
    numbered = "     1\tdef f(a, b):\n     2\t    return a - b\n"
    assert charged(read("m.py"), run("cat -n m.py", output=numbered)) == []
    # ...but twice is.
    assert charged(run("cat -n m.py", output=numbered), run("cat -n m.py", output=numbered)) == [
        (1, "m.py", 0)
    ]
    # A cat that failed (no such file) read nothing.
    missing = run("cat m.py", ok=False, error="exit code 1", output="cat: m.py: No such file")
    assert charged(missing, read("m.py")) == []


def test_reads_that_read_nothing_count_for_nothing() -> None:
    missing = read("m.py", ok=False, output="", error="'m.py' does not exist")
    assert charged(missing, read("m.py")) == []
    malformed = read("m.py", ok=False, malformed=True, output="", error="malformed tool call")
    assert charged(malformed, read("m.py")) == []


def test_a_file_that_changed_unseen_is_read_anew() -> None:
    # Something this reading cannot see (a process left running) changed the file: the
    # second read showed new text, so it learned something.
    assert charged(read("m.py"), read("m.py", "def f(a, b):\n    return 0\n")) == []


def test_a_compaction_between_makes_every_read_new() -> None:
    calls = [read("m.py", turn=1), read("m.py", turn=2), read("m.py", turn=3)]
    assert charged(*calls) == [(1, "m.py", 0), (2, "m.py", 1)]
    # The context was condensed after turn 2: turn 3's read is not in it any more.
    assert charged(*calls, metadata={COMPACTIONS_KEY: [2]}) == [(1, "m.py", 0)]
    assert charged(*calls, metadata={COMPACTIONS_KEY: [1, 2]}) == []
    assert charged(*calls, metadata={COMPACTIONS_KEY: [3]}) == [(1, "m.py", 0), (2, "m.py", 1)]


def test_the_reward_charges_each_redundant_read_up_to_minus_one() -> None:
    reward = RedundantReadsPenalty()
    clean = reward.composer_reward(episode(read("m.py"), edit("m.py"), read("m.py")))
    assert (clean.name, clean.value, clean.weight, clean.details) == ("redundant_reads", 0, 0.2, "")
    twice = reward.composer_reward(episode(read("m.py"), read("./m.py"), read("m.py")))
    assert twice.value == pytest.approx(-0.5)  # 2 reads * 0.25
    assert twice.details == (
        "read_file #1: m.py (already read at #0); read_file #2: m.py (already read at #1)"
    )
    many = reward.composer_reward(episode(*[read("m.py")] * 7))  # 6 redundant reads
    assert many.value == -1.0
    custom = RedundantReadsPenalty(RedundantReadsSettings(per_read=0.1, weight=0.5))
    assert custom.composer_reward(episode(read("m.py"), read("m.py"))).weighted == pytest.approx(
        -0.05
    )


def test_settings_come_through_the_historic_configure_hook(pm: pluggy.PluginManager) -> None:
    config = {"rewards": {"redundant_reads": {"per_read": 0.5, "weight": 1.0}}}
    pm.hook.composer_configure.call_historic(kwargs={"config": config})
    late = RedundantReadsPenalty()
    pm.register(late, name="redundant_reads")  # added to a running job: sees the same config
    assert late.settings == RedundantReadsSettings(per_read=0.5, weight=1.0)
    for bad, message in (
        ({"per_read": -0.1}, "rewards.redundant_reads.per_read: Input should be greater"),
        ({"per_read": 2}, "rewards.redundant_reads.per_read: Input should be less"),
        ({"weight": -1}, "rewards.redundant_reads.weight: Input should be greater"),
        ({"per_reed": 0.1}, "rewards.redundant_reads.per_reed: Extra inputs"),
    ):
        with pytest.raises(ValueError, match=message):
            RedundantReadsPenalty().composer_configure({"rewards": {"redundant_reads": bad}})


def test_the_monitor_flags_exactly_the_reads_the_reward_charges(pm: pluggy.PluginManager) -> None:
    assert BUILTIN_PLUGINS["redundant_reads"] is RedundantReadsPenalty
    assert BUILTIN_PLUGINS["reread"] is RereadMonitor
    pm.register(RedundantReadsPenalty(), name="redundant_reads")
    pm.register(RereadMonitor(), name="reread")
    pm.hook.composer_configure.call_historic(kwargs={"config": {}})
    cases = [
        episode(read("m.py"), read("./m.py")),
        episode(read("m.py"), edit("m.py"), read("m.py")),
        episode(read("m.py"), run("pytest -q"), read("m.py"), run("sed -i s/a/b/ m.py")),
        episode(read("m.py"), run("python fix.py"), read("m.py")),
        episode(
            read("a.py"), read("b.py"), run("cat a.py", output=SOURCE), read("/workspace/b.py")
        ),
    ]
    for case in cases:
        score = score_episode(pm, case, strict=True)
        (component,) = [s.component for s in score.components]
        found = redundant_reads(case)
        report = score.monitors["reread"]
        assert report.metrics["redundant_reads"] == len(found)
        assert component.value == -min(1.0, 0.25 * len(found))
        if found:
            assert score.flags == {"reread/reread": component.details}
        else:
            assert score.flags == {} and component.details == ""
    assert [len(redundant_reads(c)) for c in cases] == [1, 0, 1, 0, 2]
