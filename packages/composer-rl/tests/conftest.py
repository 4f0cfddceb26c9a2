from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

RUNTIME_PLUGINS = textwrap.dedent(
    """
    from composer_rewards import RewardComponent, hookimpl


    class Bonus:
        '''Reads its value from the run config, so it shows the historic configure hook.'''

        bonus = None

        @hookimpl
        def composer_configure(self, config):
            self.bonus = config["runtime_test"]["bonus"]

        @hookimpl
        def composer_reward(self, episode):
            return RewardComponent(name="runtime_bonus", value=self.bonus, weight=1.0)


    class Broken:
        @hookimpl
        def composer_reward(self, episode):
            raise RuntimeError("broken on purpose")


    class MisspelledHook:
        @hookimpl
        def composer_rewrad(self, episode):
            return None


    class ExtraArgument:
        @hookimpl
        def composer_reward(self, episode, temperature):
            return None


    class NotAPlugin:
        def composer_reward(self, episode):
            return None
    """
)


@pytest.fixture
def plugin_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory holding module `runtime_plugins`, not on this process's import path."""
    directory = tmp_path / "plugin-src"
    directory.mkdir()
    (directory / "runtime_plugins.py").write_text(RUNTIME_PLUGINS)
    yield directory
    sys.modules.pop("runtime_plugins", None)


@pytest.fixture
def importable_plugins(plugin_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(plugin_dir))
    return plugin_dir
