"""A long run's plugins: nothing lost across restarts, nothing stalls a step (issue 16)."""

from __future__ import annotations

import shutil
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from plugins_support import write_runtime_plugins

from composer_rewards import Episode, RewardComponent, hookimpl
from composer_rl.plugins import PluginSession, read_state, submit

EPISODE = Episode(task="t")
CONFIG = {"plugins": {"block": ["style"]}, "runtime_test": {"bonus": 0.5}}


def _session(run_dir: Path, config: dict[str, object] | None = None) -> PluginSession:
    return PluginSession(config or CONFIG, run_dir, command="test")


def test_a_plugin_that_cannot_load_after_a_restart_is_kept_and_comes_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = write_runtime_plugins(tmp_path / "plugin-src")
    monkeypatch.syspath_prepend(str(source))
    run_dir = tmp_path / "run"
    first = _session(run_dir)
    submit(run_dir, "add", "runtime_plugins:Bonus", name="bonus")
    submit(run_dir, "remove", "length")
    first.step_boundary(3)
    assert first.score(EPISODE).metrics()["reward/runtime_bonus"] == 0.5

    # Restart with the plugin's package gone (uninstalled, or a different environment).
    sys.modules.pop("runtime_plugins", None)
    hidden = tmp_path / "hidden"
    shutil.move(source, hidden)
    second = _session(run_dir)
    metrics = second.step_boundary(4)
    assert metrics["plugins/add_failed/bonus"] == 1.0
    state = read_state(run_dir)
    assert state is not None
    # Nothing erased: the addition and the removal are still there, the plugin is marked.
    assert state.runtime_added == {"bonus": "runtime_plugins:Bonus"}
    assert state.runtime_removed == ["length"]
    assert "cannot import module 'runtime_plugins'" in state.unavailable["bonus"]
    (listed,) = [p for p in state.plugins if p.name == "bonus"]
    assert listed.status == "unavailable"
    assert "reward/runtime_bonus" not in second.score(EPISODE).metrics()
    assert second.step_boundary(5) == {}  # retried quietly while it still cannot load

    # The package is back: the next step boundary registers the plugin again, configured.
    shutil.move(hidden, source)
    assert second.step_boundary(6) == {"plugins/add/bonus": 1.0}
    assert second.score(EPISODE).metrics()["reward/runtime_bonus"] == 0.5
    state = read_state(run_dir)
    assert state is not None and state.unavailable == {}


def test_a_removed_entry_point_stays_removed_after_reinstalling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    info = site / "fake_plugins-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-plugins\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[composer]\nfake-good = fake_plugins:Good\n")
    (site / "fake_plugins.py").write_text(
        textwrap.dedent(
            """
            from composer_rewards import RewardComponent, hookimpl

            class Good:
                @hookimpl
                def composer_reward(self, episode):
                    return RewardComponent(name="from_entry_point", value=1.0)
            """
        )
    )
    monkeypatch.syspath_prepend(str(site))
    run_dir = tmp_path / "run"
    try:
        first = _session(run_dir)
        assert first.pm.has_plugin("fake-good")
        submit(run_dir, "remove", "fake-good")
        assert first.step_boundary(1) == {"plugins/remove/fake-good": 1.0}

        shutil.move(site, tmp_path / "uninstalled")  # restart without the package
        sys.modules.pop("fake_plugins", None)
        _session(run_dir).step_boundary(2)
        state = read_state(run_dir)
        assert state is not None and state.runtime_removed == ["fake-good"]

        shutil.move(tmp_path / "uninstalled", site)  # reinstalled, restarted again
        third = _session(run_dir)
        third.step_boundary(3)
        assert not third.pm.has_plugin("fake-good")
        assert "reward/from_entry_point" not in third.score(EPISODE).metrics()
    finally:
        sys.modules.pop("fake_plugins", None)


class Sleeper:
    """A reward that sleeps far longer than a step should take."""

    def __init__(self) -> None:
        self.release = threading.Event()

    @hookimpl
    def composer_reward(self, episode: Episode) -> RewardComponent:
        self.release.wait(30)
        return RewardComponent(name="sleepy", value=1.0)


@pytest.mark.parametrize("policy", ["skip", "disable"])
def test_a_sleeping_hook_does_not_stall_the_steps_or_a_remove(
    tmp_path: Path, policy: str, caplog: pytest.LogCaptureFixture
) -> None:
    run_dir = tmp_path / "run"
    config = {"plugins": {"block": ["style"], "hook_budget_s": 0.2, "over_budget": policy}}
    session = _session(run_dir, config)
    sleeper = Sleeper()
    session.pm.register(sleeper, name="sleeper")
    began = time.monotonic()
    for step in range(3):
        session.step_boundary(step)
        for _ in range(4):
            session.score(EPISODE)
    took = time.monotonic() - began
    sleeper.release.set()
    # A 30 s sleep per call would take 6 minutes; the budget bounds it to one 0.2 s wait a
    # step (skip) or one in all (disable).
    assert took < 10, took
    assert "ran past its budget of 0.2 s" in caplog.text
    metrics = session.step_boundary(3)
    if policy == "skip":
        assert metrics["plugin_failures/sleeper/over_budget"] == 3.0
        submit(run_dir, "remove", "sleeper")  # not stuck behind the sleeping hook
        assert session.step_boundary(4)["plugins/remove/sleeper"] == 1.0
    else:
        assert metrics["plugin_failures/sleeper/over_budget"] == 1.0
        state = read_state(run_dir)
        assert state is not None and "0.2 s" in state.disabled["sleeper"]
        (listed,) = [p for p in state.plugins if p.name == "sleeper"]
        assert listed.status == "disabled"


def test_bad_budget_settings_say_which_key(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="over_budget"):
        _session(tmp_path / "run", {"plugins": {"over_budget": "wait"}})
    with pytest.raises(ValueError, match="hook_budget_s"):
        _session(tmp_path / "run", {"plugins": {"hook_budget_s": 0}})


def test_closing_marks_the_job_finished(tmp_path: Path) -> None:
    with _session(tmp_path / "run") as session:
        session.step_boundary(0)
        state = read_state(tmp_path / "run")
        assert state is not None and not state.finished and state.command == "test"
    state = read_state(tmp_path / "run")
    assert state is not None and state.finished


def test_a_kill_between_applying_and_dequeuing_loses_and_repeats_nothing(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    first = _session(run_dir)
    request = submit(run_dir, "remove", "length")
    queued = (run_dir / "plugins" / "requests" / f"{request.id}.json").read_text()
    first.step_boundary(1)
    # As if killed after the state was written but before the request was dequeued.
    (run_dir / "plugins" / "requests" / f"{request.id}.json").write_text(queued)
    state = read_state(run_dir)
    assert state is not None and state.runtime_removed == ["length"]
    second = _session(run_dir)
    assert second.step_boundary(2) == {"plugins/remove/length": 1.0}  # the restore only
    assert not second.pm.has_plugin("length")
    assert list((run_dir / "plugins" / "requests").iterdir()) == []
