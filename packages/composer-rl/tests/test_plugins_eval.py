"""`composer-rl eval` scores through the one plugin manager and takes plugin requests.

Issue 11: evaluation built its own pluggy manager (no entry points, no block list, no
configure), so it scored with default settings and without installed plugins. Issue 16:
it ran to the end with `composer-rl plugins add` requests queued and never applied.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from plugins_support import tiny_checkpoint

from composer_rl.agent.episode import RunnerConfig
from composer_rl.cli import main
from composer_rl.eval import EvalConfig, run_eval
from composer_rl.plugins import PluginSettings, read_state
from composer_rl.tasks import BUILTIN_TEMPLATES, Split

PLUGINS = textwrap.dedent(
    """
    from composer_rewards import RewardComponent, hookimpl
    from composer_rl.plugins import submit


    class Configured:
        '''Reads its value from the run config: proves composer_configure reached it.'''

        value = None

        @hookimpl
        def composer_configure(self, config):
            self.value = config["eval_test"]["value"]

        @hookimpl
        def composer_reward(self, episode):
            return RewardComponent(name="configured", value=self.value)


    class Installed:
        @hookimpl
        def composer_reward(self, episode):
            return RewardComponent(name="installed", value=1.0)


    class Late:
        @hookimpl
        def composer_reward(self, episode):
            return RewardComponent(name="late", value=2.0)


    class AddsLateAtStepZero:
        '''Queues `add Late` from inside step 0, as `composer-rl plugins add` would.'''

        run_dir = None
        done = False

        @hookimpl
        def composer_configure(self, config):
            self.run_dir = config["eval_test"]["run_dir"]

        @hookimpl
        def composer_reward(self, episode):
            if not self.done:
                submit(self.run_dir, "add", "eval_plugins:Late", name="late")
                submit(self.run_dir, "remove", "length")
                self.done = True
            return None
    """
)


@pytest.fixture
def plugin_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Module `eval_plugins`, and a distribution whose `composer` entry point is Installed."""
    site = tmp_path / "site"
    info = site / "eval_plugins-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: eval-plugins\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[composer]\ninstalled = eval_plugins:Installed\n")
    (site / "eval_plugins.py").write_text(PLUGINS)
    monkeypatch.syspath_prepend(str(site))
    yield site
    sys.modules.pop("eval_plugins", None)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "final")


def _tasks(count: int) -> list[Any]:
    return [
        t for _, t in zip(range(count), BUILTIN_TEMPLATES[0].tasks(Split.HELDOUT), strict=False)
    ]


RUNNER = RunnerConfig(max_turns=1, max_new_tokens=8, grading_workers=2)


def test_eval_uses_the_one_manager_and_applies_requests_between_steps(
    checkpoint: Path, plugin_site: Path, tmp_path: Path
) -> None:
    run_dir = tmp_path / "eval-run"
    config = EvalConfig(
        runner=RUNNER,
        tasks_per_step=1,
        run_dir=run_dir,
        plugins=PluginSettings(
            plugins=["eval_plugins:Configured", "eval_plugins:AddsLateAtStepZero"],
            block=["style"],
        ),
        plugin_config={"eval_test": {"value": 0.75, "run_dir": str(run_dir)}},
    )
    summary, _ = run_eval(checkpoint, _tasks(2), config)
    means = summary["reward_components_mean"]
    assert means["configured"] == 0.75  # configured through composer_configure
    assert means["installed"] == 1.0  # the entry point was loaded
    assert "style" not in means  # the block list applies
    assert summary["reward_plugin_failures"] == 0

    # Step 0 queued `add late` and `remove length`; step 1 began by applying them.
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1]
    assert "reward/late" not in records[0] and "reward/length" in records[0]
    assert records[1]["plugins/add/late"] == 1.0 and records[1]["plugins/remove/length"] == 1.0
    assert records[1]["reward/late"] == 2.0 and "reward/length" not in records[1]
    assert records[1]["reward/configured"] == 0.75
    state = read_state(run_dir)
    assert state is not None and state.finished and state.command == "eval"
    assert state.runtime_added == {"late": "eval_plugins:Late"}


def test_eval_cli_refuses_a_bad_plugin_config(
    tmp_path: Path, checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "run.toml"
    config.write_text("[plugins]\nstirct = true\n")
    assert main(["eval", "--checkpoint", str(checkpoint), "--config", str(config)]) == 2
    assert "stirct" in capsys.readouterr().err
