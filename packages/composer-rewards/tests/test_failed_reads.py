"""The optional `failed_reads_again` reward and the built-in `failed_read_again` monitor on
hand-built episodes: which reads of a missing file are charged (spellings of one path,
edits, writing commands, compactions, a read that finds the file), the component, the
monitor flagging exactly the charged reads, and the ways around it that must not pay."""

from __future__ import annotations

from typing import Any

import pluggy
import pytest

from composer_rewards import (
    BUILTIN_PLUGINS,
    OPTIONAL_PLUGINS,
    Episode,
    ToolCall,
    load_spec,
    score_episode,
)
from composer_rewards.episode import COMPACTIONS_KEY
from composer_rewards.monitors.failed_read_again import FailedReadAgainMonitor
from composer_rewards.rewards.failed_reads import (
    FailedReadsAgainPenalty,
    FailedReadsAgainSettings,
    failed_reads_again,
)

MISSING = "'mathop.py' does not exist"


def missing(path: str = "mathop.py", **fields: Any) -> ToolCall:
    return ToolCall(name="read_file", arguments={"path": path}, ok=False, error=MISSING, **fields)


def found(path: str = "mathops.py", **fields: Any) -> ToolCall:
    return ToolCall(name="read_file", arguments={"path": path}, output="x = 1\n", **fields)


def run(command: str, ok: bool = True, **fields: Any) -> ToolCall:
    return ToolCall(name="run", arguments={"command": command}, ok=ok, **fields)


def charged(*calls: ToolCall, **fields: Any) -> list[tuple[int, str, int]]:
    episode = Episode(task="fix f", tool_calls=calls, **fields)
    return [(r.index, r.path, r.first) for r in failed_reads_again(episode)]


def test_a_missing_file_read_again_is_charged_each_time() -> None:
    assert charged(missing(), missing()) == [(1, "mathop.py", 0)]
    assert charged(missing(), missing(), missing()) == [(1, "mathop.py", 0), (2, "mathop.py", 1)]
    # Looking around, searching or reading other files between cannot make the file.
    listing = ToolCall(name="list_files", arguments={}, output="mathops.py")
    between = [listing, run("grep -rn total ."), run("ls"), found(), missing("other.py")]
    assert charged(missing(), *between, missing()) == [(6, "mathop.py", 0)]
    # One path, several spellings: still the same missing file.
    assert charged(missing(), missing("./mathop.py")) == [(1, "mathop.py", 0)]
    assert charged(missing(), missing("/workspace/mathop.py")) == [(1, "mathop.py", 0)]
    # A cat of the missing file is the same read (and fails the same way).
    cat = run("cat mathop.py", ok=False)
    assert charged(missing(), cat) == [(1, "mathop.py", 0)]


def test_once_or_a_new_file_is_not_charged() -> None:
    assert charged(missing()) == []
    assert charged(missing(), missing("other.py"), found()) == []
    write = ToolCall(name="write_file", arguments={"path": "mathop.py", "content": "x = 1\n"})
    assert charged(missing(), write, missing()) == []
    # A command that could write files makes every missing file worth another look.
    assert charged(missing(), run("python make.py"), missing()) == []
    # A read that finds the file learned something (a process left running made it).
    assert charged(missing(), found("mathop.py")) == []
    assert charged(missing(), found("mathop.py"), missing()) == []
    # Malformed calls were never executed.
    broken = missing(malformed=True)
    assert charged(broken, broken) == [] and charged(missing(), broken) == []


def test_a_compaction_between_makes_the_read_new() -> None:
    first, second = missing(turn=0), missing(turn=3)
    assert charged(first, second) == [(1, "mathop.py", 0)]
    assert charged(first, second, metadata={COMPACTIONS_KEY: [1]}) == []


def test_the_component_and_its_settings(pm: pluggy.PluginManager) -> None:
    penalty = FailedReadsAgainPenalty()
    loop = Episode(task="t", tool_calls=(missing(),) * 4)
    component = penalty.composer_reward(loop)
    assert component.name == "failed_reads_again" and component.value == -0.75
    assert component.weight == 0.2 and component.details.count("missing at") == 3
    assert penalty.composer_reward(Episode(task="t", tool_calls=(missing(),) * 9)).value == -1
    assert penalty.composer_reward(Episode(task="t", tool_calls=(missing(),))).value == 0.0
    # Added to a running job, it reads the run's config like a plugin there from the start.
    config = {"rewards": {"failed_reads_again": {"per_read": 0.5, "weight": 1.0}}}
    pm.hook.composer_configure.call_historic(kwargs={"config": config})
    late = FailedReadsAgainPenalty()
    pm.register(late, name="failed_reads_again")
    assert late.settings == FailedReadsAgainSettings(per_read=0.5, weight=1.0)
    assert late.composer_reward(loop).weighted == pytest.approx(-1.0)
    with pytest.raises(ValueError, match=r"rewards\.failed_reads_again\.per_read: Input should be"):
        FailedReadsAgainPenalty().composer_configure(
            {"rewards": {"failed_reads_again": {"per_read": 2}}}
        )


def test_the_monitor_flags_exactly_the_charged_reads(pm: pluggy.PluginManager) -> None:
    assert BUILTIN_PLUGINS["failed_read_again"] is FailedReadAgainMonitor
    assert "failed_reads_again" not in BUILTIN_PLUGINS  # the reward is off unless added
    plugin = load_spec(OPTIONAL_PLUGINS["failed_reads_again"])
    assert isinstance(plugin, FailedReadsAgainPenalty)
    pm.register(FailedReadAgainMonitor(), name="failed_read_again")
    pm.register(plugin, name="failed_reads_again")
    pm.hook.composer_configure.call_historic(kwargs={"config": {}})
    cases = [
        Episode(task="t", tool_calls=(missing(), found(), missing())),
        Episode(task="t", tool_calls=(missing(), found())),
        Episode(task="t", tool_calls=(missing(), missing("./mathop.py"), missing())),
    ]
    for case in cases:
        score = score_episode(pm, case, strict=True)
        (component,) = [s.component for s in score.components]
        reads = failed_reads_again(case)
        assert score.monitors["failed_read_again"].metrics["failed_reads_again"] == len(reads)
        assert component.value == -min(1.0, 0.25 * len(reads))
        if reads:
            assert score.flags == {"failed_read_again/failed_read_again": component.details}
        else:
            assert score.flags == {} and component.details == ""
    assert [len(failed_reads_again(c)) for c in cases] == [1, 0, 2]
