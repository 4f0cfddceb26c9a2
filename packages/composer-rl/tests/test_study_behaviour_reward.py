"""`composer-rl study behaviour-reward`: each watched behaviour's monitor against its reward,
the rates, the verdict rule, and the quick study through the real command for each
behaviour: the reward added to the running job at the configured step by `composer-rl
plugins add`, present only on episodes scored after it, and the rates in result.json
recomputed here from the runs' episode logs."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, get_args

import pytest

from composer_rewards import (
    BUILTIN_PLUGINS,
    OPTIONAL_PLUGINS,
    Episode,
    PluginScorer,
    ToolCall,
    load_spec,
)
from composer_rewards.rewards.unfinished import UnfinishedWorkPenalty
from composer_rl import cli
from composer_rl.plugins.manager import build_plugin_manager, register_checked
from composer_rl.rl.config import load_config
from composer_rl.rl.episodes import read_episodes
from composer_rl.studies import STUDIES, StudyOptions
from composer_rl.studies.base import WatchedBehaviour
from composer_rl.studies.behaviour_reward import (
    FULL,
    QUICK,
    REWARD_WEIGHT,
    WATCHES,
    judge,
    measure,
    rate,
    run_dirs,
    run_settings,
    window_of,
)

TODO = WATCHES["todo_left"]
REREAD = WATCHES["reread"]
FAILED = WATCHES["failed_read_again"]
FLAG = TODO.flag_key

# --- the monitor ---------------------------------------------------------------------------


def _episode(path: str, added: list[str], context: str = "def f(xs):\n") -> Episode:
    """An episode whose diff adds `added` below `context` in `path`."""
    body = "".join(f"+{line}\n" for line in added)
    count = len(added) + 1
    diff = f"--- a/{path}\n+++ b/{path}\n@@ -1,1 +1,{count} @@\n {context}{body}"
    content = context + "".join(line + "\n" for line in added)
    return Episode(task="fix f", diff=diff, changed_files={path: content}, final_message="Fixed f.")


def _score(episode: Episode, listed: list[str]) -> tuple[dict[str, str], dict[str, float]]:
    """The flags and components of `episode` under a run's real plugin manager, the monitor
    listed as the study lists it and the matching reward present (as after the add)."""
    pm = build_plugin_manager({"plugins": {"plugins": listed, "block": ["style"]}})
    score = PluginScorer(pm).score(episode)
    return score.flags, {s.component.name: s.component.value for s in score.components}


def test_each_watched_behaviour_has_its_monitor_and_matching_reward(tmp_path: Path) -> None:
    assert set(WATCHES) == set(get_args(WatchedBehaviour))
    assert StudyOptions().behaviour == "reread"  # what the current SFT policy shows
    with pytest.raises(
        ValueError, match="'rereads' is not one of 'reread', 'todo_left', 'failed_read_again'"
    ):
        StudyOptions(behaviour="rereads")  # type: ignore[arg-type]
    for name, watch in WATCHES.items():
        assert watch.behaviour == name
        reward = load_spec(watch.reward_spec)  # what `plugins add` will load
        # A built-in reward, or an optional one (off until the add registers it).
        expected = BUILTIN_PLUGINS.get(watch.reward_name)
        if expected is None:
            expected = type(load_spec(OPTIONAL_PLUGINS[watch.reward_name]))
        assert type(reward) is expected
        settings = run_settings(Path("m"), tmp_path, QUICK, {}, 0, watch)
        assert settings["plugins.block"] == [watch.reward_name]  # blocked until the add
        # A built-in monitor is registered by name in every run; the study's own is listed.
        assert settings["plugins.plugins"] == ([watch.monitor] if watch.listed else [])
        assert watch.listed or watch.monitor in BUILTIN_PLUGINS
    assert REREAD.flag_key == "reread/reread" and REREAD.component == "redundant_reads"
    # The two behaviours' runs go to their own folders under --work-dir.
    assert run_dirs(tmp_path, REREAD)["control"] != run_dirs(tmp_path, TODO)["control"]


@pytest.mark.parametrize("behaviour", sorted(WATCHES))
def test_the_reward_added_mid_run_gets_the_weight_from_the_run_config(
    tmp_path: Path, behaviour: WatchedBehaviour
) -> None:
    # The weight is in the run's config from the start, while the reward is blocked; the
    # reward that `plugins add` registers later must be configured with it, not its default.
    watch = WATCHES[behaviour]
    config = load_config(None, run_settings(Path("m"), tmp_path, QUICK, {}, 0, watch))
    pm = build_plugin_manager(config.plugin_run_config())
    assert not pm.has_plugin(watch.reward_name)  # blocked until the add
    reward: Any = load_spec(watch.reward_spec)
    default = reward.settings.weight
    register_checked(pm, reward, watch.reward_name)  # what the job does at the add
    assert reward.settings.weight == REWARD_WEIGHT != default


def _reads(*paths: str) -> Episode:
    calls = [ToolCall(name="read_file", arguments={"path": p}, output="x = 1\n") for p in paths]
    return Episode(task="fix f", tool_calls=calls, final_message="Fixed f.")


def test_the_reread_monitor_flags_the_reads_the_redundant_reads_reward_charges() -> None:
    flags, components = _score(_reads("calc.py", "./calc.py"), [])
    assert flags[REREAD.flag_key] == "read_file #1: calc.py (already read at #0)"
    assert components[REREAD.component] < 0  # the reward charges the same read
    flags, components = _score(_reads("calc.py", "util.py"), [])
    assert REREAD.flag_key not in flags and components[REREAD.component] == 0.0


def test_the_failed_read_monitor_flags_the_reads_the_optional_reward_charges() -> None:
    missing = ToolCall(
        name="read_file", arguments={"path": "calc.py"}, ok=False, error="does not exist"
    )
    listing = ToolCall(name="list_files", arguments={}, output="calcs.py")
    looped = Episode(task="fix f", tool_calls=(missing, listing, missing), final_message="x")
    # Before the add: the monitor flags, and no component charges (the reward is optional).
    flags, components = _score(looped, [])
    assert flags[FAILED.flag_key] == "read_file #2: calc.py (missing at #0)"
    assert FAILED.component not in components
    # After it: the reward charges the same read.
    flags, components = _score(looped, [FAILED.reward_spec])
    assert FAILED.flag_key in flags and components[FAILED.component] < 0
    once = Episode(task="fix f", tool_calls=(missing, listing), final_message="x")
    flags, components = _score(once, [FAILED.reward_spec])
    assert FAILED.flag_key not in flags and components[FAILED.component] == 0.0


def test_the_monitor_flags_the_markers_the_unfinished_reward_charges() -> None:
    listed, component = [TODO.monitor], TODO.component
    todo = _episode("calc.py", ["    # TODO: handle an empty list", "    return xs[0]"])
    flags, components = _score(todo, listed)
    assert FLAG in flags and "calc.py:2: TODO" in flags[FLAG]
    assert components[component] < 0  # the reward charges the same line
    fixme = _episode("notes.md", ["FIXME later"], context="# notes\n")
    assert FLAG in _score(fixme, listed)[0]  # markers count in any file, as the reward does

    clean = _episode("calc.py", ["    return min(xs)"])
    flags, components = _score(clean, listed)
    assert FLAG not in flags and components[component] == 0.0
    # A marker only in the diff's context (already in the file) is not one the policy left.
    old = _episode("calc.py", ["    return min(xs)"], context="# TODO: old note\n")
    assert FLAG not in _score(old, listed)[0]
    # A `pass` body is charged by the reward but is not the TODO-left behaviour.
    stub = _episode("calc.py", ["    pass"])
    flags, components = _score(stub, listed)
    assert FLAG not in flags and components[component] < 0
    assert UnfinishedWorkPenalty.name == TODO.reward_name


# --- rates and windows ---------------------------------------------------------------------


def _line(group: str, flag: bool, versions: list[int], solved: bool = False) -> dict[str, Any]:
    return {
        "group": group,
        "flags": {FLAG: "x.py:1: TODO"} if flag else {},
        "versions": versions,
        "solved": solved,
    }


def test_rates_carry_standard_errors_over_groups() -> None:
    episodes = [
        _line("g1", True, [0], solved=True),
        _line("g1", True, [0]),
        _line("g2", False, [0]),
        _line("g2", False, [0]),
        _line("g3", True, [0]),
        _line("g3", False, [0]),
    ]
    r = rate(episodes, FLAG)
    assert (r["groups"], r["episodes"], r["flagged"]) == (3, 6, 3)
    # Equal groups: the standard deviation of the group shares (1, 0, 1/2) over sqrt(3).
    assert r["rate"] == pytest.approx((0.5, 0.5 / math.sqrt(3)))
    assert r["solved"][0] == pytest.approx(1 / 6)
    # Unequal groups: the ratio's cluster-robust form, by hand.
    uneven = rate([*episodes, _line("g2", False, [0])], FLAG)
    mean = 3 / 7
    spread = (2 - 2 * mean) ** 2 + (0 - 3 * mean) ** 2 + (1 - 2 * mean) ** 2
    assert uneven["rate"] == pytest.approx((mean, math.sqrt(3 / 2 * spread) / 7))
    one = rate(episodes[:2], FLAG)
    assert rate(episodes, REREAD.flag_key)["flagged"] == 0  # another behaviour's flag
    assert one["rate"][0] == 1.0 and math.isnan(one["rate"][1])  # one group: no spread


def test_windows_go_by_the_versions_that_sampled_the_episode() -> None:
    assert window_of(_line("g", False, [2, 3]), add_at=3) == "before"
    assert window_of(_line("g", False, [4, 5]), add_at=3) == "after"
    assert window_of(_line("g", False, [3, 4]), add_at=3) == "straddling"
    assert window_of(_line("g", False, []), add_at=3) is None
    # With settle, the first versions after the add are in neither window.
    assert window_of(_line("g", False, [4, 5]), add_at=3, settle=2) == "settling"
    assert window_of(_line("g", False, [5, 6]), add_at=3, settle=2) == "settling"
    assert window_of(_line("g", False, [6, 7]), add_at=3, settle=2) == "after"
    assert window_of(_line("g", False, [3, 6]), add_at=3, settle=2) == "straddling"
    assert window_of(_line("g", False, [1, 3]), add_at=3, settle=2) == "before"


def test_the_full_study_judges_the_window_fixed_before_seed_one() -> None:
    """The after window of the full study starts at version 21 and runs to the end: the one
    written down before the seed-1 runs (docs/rl/2026-12-05-behaviour-reward.md)."""
    assert FULL.add_at == 10 and FULL.add_at + FULL.settle + 1 == 21
    assert FULL.steps == 30  # the last version sampled from is 29


# --- the verdict rule ----------------------------------------------------------------------


def _window(mean: float, se: float, groups: int = 40, flagged: int = 30) -> dict[str, Any]:
    return {
        "groups": groups,
        "episodes": 8 * groups,
        "flagged": flagged,
        "rate": (mean, se),
        "solved": (0.3, 0.02),
    }


def _run(
    before: dict[str, Any], after: dict[str, Any], add_step: int | None = 10
) -> dict[str, Any]:
    return {"before": before, "after": after, "add_step": add_step}


def test_the_verdict_needs_a_fall_beyond_three_standard_errors_and_the_control() -> None:
    before, after = _window(0.10, 0.01), _window(0.04, 0.01)  # fall 0.06, s.e. 0.014: 4.2
    assert judge(_run(before, after), None, 10).label == "held"
    verdict = judge(_run(before, after), None, 10)
    assert verdict.held is True and "4.2 standard errors" in verdict.summary
    # A control that ended where the reward run did: the fall is not the reward's.
    level = {"after": _window(0.045, 0.01)}
    assert judge(_run(before, after), level, 10).label == "did not hold"
    below = {"after": _window(0.10, 0.01)}
    assert judge(_run(before, after), below, 10).label == "held"
    # Between 2 and 3 standard errors: held in part (and `held` stays False).
    partial = judge(_run(before, _window(0.065, 0.01)), None, 10)
    assert partial.label == "held in part" and partial.held is False
    assert judge(_run(before, _window(0.09, 0.01)), None, 10).label == "did not hold"
    assert judge(_run(before, _window(0.12, 0.01)), None, 10).label == "did not hold"  # a rise
    # Undecided: no add at the step, too few groups, too rare a behaviour, no spread.
    assert judge(_run(before, after, add_step=None), None, 10).held is None
    assert judge(_run(before, after, add_step=11), None, 10).label == "undecided"
    few = judge(_run(before, _window(0.0, 0.0, groups=3, flagged=0)), None, 10)
    assert few.label == "undecided" and few.strength == "too few groups"
    rare = judge(_run(_window(0.01, 0.005, flagged=4), after), None, 10)
    assert rare.label == "undecided" and rare.strength == "behaviour too rare"
    flat = judge(_run(_window(0.1, 0.0), _window(0.1, 0.0)), None, 10)
    assert flat.label == "undecided"


def test_the_study_is_listed_and_takes_a_model_and_a_behaviour(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert STUDIES["behaviour-reward"].implemented
    args = cli.build_parser().parse_args(["study", "behaviour-reward", "--model", "ckpt"])
    assert args.checkpoint == Path("ckpt") and args.behaviour is None  # the default: reread
    argv = ["study", "behaviour-reward", "--behaviour", "todo_left", "--model", "ckpt"]
    assert cli.build_parser().parse_args(argv).behaviour == "todo_left"
    # An unknown behaviour, or --behaviour for another study, fails before anything runs.
    out = ["--out", str(tmp_path / "out")]
    assert cli.main(["study", "behaviour-reward", "--quick", "--behaviour", "todo", *out]) == 2
    assert "'todo' is not one of 'reread', 'todo_left', 'failed_read_again'" in (
        capsys.readouterr().err
    )
    assert cli.main(["study", "async", "--quick", "--behaviour", "reread", *out]) == 2
    assert "--behaviour is an option of behaviour-reward only" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


# --- the quick study, end to end -----------------------------------------------------------


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _recomputed(
    run_dir: Path, add_at: int, flag: str, settle: int = 0
) -> dict[str, tuple[int, int, int, float]]:
    """(groups, episodes, flagged, rate) of each window, straight from episodes.jsonl."""
    out: dict[str, tuple[int, int, int, float]] = {}
    episodes = [
        e for e in _lines(run_dir / "episodes" / "episodes.jsonl") if e["reward"] is not None
    ]
    for name, keep in (
        ("before", lambda v: max(v) <= add_at),
        ("after", lambda v: min(v) > add_at + settle),
        ("settling", lambda v: add_at < min(v) <= add_at + settle),
    ):
        chosen = [e for e in episodes if e["versions"] and keep(e["versions"])]
        flagged = sum(flag in e["flags"] for e in chosen)
        share = flagged / len(chosen) if chosen else math.nan
        out[name] = (len({e["group"] for e in chosen}), len(chosen), flagged, share)
    return out


# Two RL runs and a rerun each (about 2.5 min on 2 cores, mostly collecting tasks).
@pytest.mark.slow
@pytest.mark.parametrize("behaviour", ["reread", "todo_left", "failed_read_again"])
def test_quick_study_adds_the_reward_to_the_running_job_at_its_step(
    behaviour: WatchedBehaviour, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    watch = WATCHES[behaviour]
    name, spec, component = watch.reward_name, watch.reward_spec, watch.component
    out, work = tmp_path / "study", tmp_path / "runs"
    # reread is the default: its run is the command without --behaviour.
    chosen = [] if behaviour == "reread" else ["--behaviour", behaviour]
    argv = ["study", "behaviour-reward", "--quick", *chosen, "--work-dir", str(work)]
    assert cli.main([*argv, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    for file in ("table.md", "plot.png", "result.json"):
        assert (out / file).is_file(), file
    assert (out / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "table.md").read_text().strip() in printed
    result = json.loads((out / "result.json").read_text())
    assert result["study"] == "behaviour-reward" and result["quick"] is True
    # A random policy neither leaves a TODO nor reads a file twice: no fall to measure.
    assert result["verdict"] == "undecided" and result["held"] is None
    numbers = result["numbers"]
    assert numbers["behaviour"] == behaviour and numbers["flag"] == watch.flag_key
    assert numbers["reward"] == {"name": name, "spec": spec, "component": component}
    add_at = QUICK.add_at
    assert numbers["sizes"]["add_at"] == add_at and 1 < add_at < QUICK.steps

    # The add, by `composer-rl plugins add`, recorded by the job at the configured step.
    dirs = run_dirs(work, watch)
    with_reward = dirs["with-reward"]
    rows = _lines(with_reward / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, QUICK.steps + 1))
    assert [r["step"] for r in rows if r.get(f"plugins/add/{name}") == 1.0] == [add_at]
    for row in rows:
        assert watch.monitor in row["plugins_registered"]  # the monitor watched every step
        assert (name in row["plugins_registered"]) == (row["step"] >= add_at)
    (processed,) = (with_reward / "plugins" / "processed").glob("*.json")
    answer = json.loads(processed.read_text())
    assert answer["request"]["target"] == spec and answer["request"]["name"] == name
    assert answer["event"]["ok"] and answer["event"]["step"] == add_at
    assert numbers["runs"]["with-reward"]["add_step"] == add_at
    state = json.loads((with_reward / "plugins" / "state.json").read_text())
    assert state["finished"] and state["runtime_added"] == {name: spec}

    # The reward's component on exactly the episodes scored after the add; some on each side.
    episodes = read_episodes(with_reward)
    carrying = [component in e["components"] for e in episodes]
    assert carrying == [e["scored_after_step"] >= add_at for e in episodes]
    assert any(carrying) and not all(carrying)
    # The control run: the same run, never added.
    control = dirs["control"]
    assert all(name not in r["plugins_registered"] for r in _lines(control / "metrics.jsonl"))
    assert not any(component in e["components"] for e in read_episodes(control))
    assert numbers["runs"]["control"]["add_step"] is None

    # The rates in result.json are the episodes' own.
    for run, run_dir in (("with-reward", with_reward), ("control", control)):
        measured = numbers["runs"][run]
        for window, counts in _recomputed(run_dir, add_at, watch.flag_key).items():
            if window == "settling":  # none at the quick study's settle of 0
                assert counts[1] == measured["settling_episodes"] == 0
                continue
            groups, count, flagged, share = counts
            got = measured[window]
            assert (got["groups"], got["episodes"], got["flagged"]) == (groups, count, flagged)
            assert got["rate"][0] == pytest.approx(share)
        assert measured["episodes"] == len(read_episodes(run_dir))
    assert numbers["runs"]["with-reward"]["before"]["episodes"] > 0
    assert numbers["runs"]["with-reward"]["after"]["episodes"] > 0
    # A settle window moves the after window's start and counts what it leaves out.
    settled = measure(with_reward, add_at, watch, settle=2)
    expected = _recomputed(with_reward, add_at, watch.flag_key, settle=2)
    assert settled["settling_episodes"] == expected["settling"][1] > 0
    groups, count, flagged, share = expected["after"]
    got = settled["after"]
    assert (got["groups"], got["episodes"], got["flagged"]) == (groups, count, flagged)
    assert settled["before"] == measure(with_reward, add_at, watch)["before"]

    # Run again on the same --work-dir: the finished runs are analysed, not rerun.
    again = tmp_path / "again"
    assert cli.main([*argv, "--out", str(again)]) == 0
    capsys.readouterr()
    second = json.loads((again / "result.json").read_text())["numbers"]
    assert second["reused_runs"] == ["with-reward", "control"]
    assert second["runs"] == numbers["runs"]
