"""A third-party plugin package, installed for a test: a task source, a sandbox backend and a
reward in one module, found through its entry point in group ``composer``.

`install_thirdparty(site)` writes the package into `site` as an installed distribution
(``composer_thirdparty-1.0.dist-info`` with ``entry_points.txt``, and the module beside it);
put `site` on ``sys.path`` (or PYTHONPATH) and every manager that loads entry points finds it,
as it would find one ``pip install``-ed. Its backend appends a line to the file named in the
job's configuration (``thirdparty.log``, through the historic ``composer_configure`` hook)
for every sandbox it starts, so a test can tell that a job's sandboxes came from it.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pluggy
import pytest

import composer_infra.plugins as infra_plugins
import composer_rl.plugins.job as job_module
import composer_rl.plugins.manager as manager_module

MODULE = "composer_thirdparty"
DIST = "composer-thirdparty"
ENTRY_POINT = "thirdparty"
BACKEND = "recording"
SOURCE = "thirdparty"
REWARD = "thirdparty_seen"
TRAIN_IDS = ("thirdparty-sub-0", "thirdparty-sub-1")
HELDOUT_IDS = ("thirdparty-sub-9",)

PLUGIN = textwrap.dedent(
    '''
    """composer-thirdparty: tasks, a sandbox backend and a reward, as a third party ships them."""

    from pathlib import Path

    from composer_hooks import hookimpl
    from composer_infra.sandbox import SandboxBackend
    from composer_infra.sandbox.backends.bwrap import BwrapBackend
    from composer_rewards import RewardComponent
    from composer_rl.tasks import Split, Task

    TRAIN_IDS = ("thirdparty-sub-0", "thirdparty-sub-1")
    HELDOUT_IDS = ("thirdparty-sub-9",)
    LOG = None  # where the backend records each sandbox it starts (config: thirdparty.log)


    class RecordingBackend(SandboxBackend):
        """bwrap, recording every sandbox it starts."""

        name = "recording"
        isolation = "namespaces"

        def __init__(self):
            self.inner = BwrapBackend()

        def unavailable_reason(self):
            return self.inner.unavailable_reason()

        def start(self, workspace, config, *, state_dir, memory_image=None):
            if LOG is not None:
                with open(LOG, "a") as out:
                    out.write(f"start {workspace}\\n")
            return self.inner.start(workspace, config, state_dir=state_dir)


    def _task(task_id, split):
        return Task(
            id=task_id,
            category="debugging",
            difficulty=1,
            instruction="`sub` in calc.py adds; make it subtract.",
            files={"calc.py": "def sub(a, b):\\n    return a + b\\n"},
            tests={
                "_grading/test_calc.py": (
                    "from calc import sub\\n\\n\\ndef test_sub():\\n    assert sub(5, 3) == 2\\n"
                )
            },
            metadata={"template": "thirdparty_sub", "split": split},
        )


    class ThirdPartyTasks:
        name = "thirdparty"

        def tasks(self, split):
            ids = TRAIN_IDS if Split(split) == Split.TRAIN else HELDOUT_IDS
            return [_task(task_id, Split(split).value) for task_id in ids]


    @hookimpl
    def composer_configure(config):
        global LOG
        LOG = (config.get("thirdparty") or {}).get("log")


    @hookimpl
    def composer_task_sources():
        return [ThirdPartyTasks()]


    @hookimpl
    def composer_sandbox_backends():
        return [RecordingBackend()]


    @hookimpl
    def composer_reward(episode):
        """Scores nothing (weight 0): it shows the package's reward scored the episode."""
        return RewardComponent(name="thirdparty_seen", value=1.0, weight=0.0)
    '''
)


def install_thirdparty(site: Path) -> Path:
    """Write the package into `site` as an installed distribution; returns `site`."""
    site.mkdir(parents=True, exist_ok=True)
    info = site / "composer_thirdparty-1.0.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DIST}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[composer]\n{ENTRY_POINT} = {MODULE}\n")
    (site / f"{MODULE}.py").write_text(PLUGIN)
    return site


def forget_thirdparty() -> None:
    """Drop the module from this process (a later test installs it afresh)."""
    sys.modules.pop(MODULE, None)


@pytest.fixture
def thirdparty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The package, installed for this test (on sys.path, found through its entry point)."""
    site = install_thirdparty(tmp_path / "site")
    monkeypatch.syspath_prepend(str(site))
    forget_thirdparty()
    yield site
    forget_thirdparty()


class Unusable:
    """Stands in for composer-infra's standalone manager: any use is recorded and raises."""

    def __init__(self, uses: list[str]) -> None:
        self._uses = uses

    def __getattr__(self, name: str) -> Any:
        self._uses.append(name)
        raise AssertionError(f"composer-infra's standalone manager was used ({name})")


@dataclass
class Watch:
    builds: list[dict[str, Any]]
    """The configuration of every job manager built."""
    standalone_uses: list[str]
    """Every use of a manager composer-infra made for itself (none in a job)."""


def watch_job(monkeypatch: pytest.MonkeyPatch) -> Watch:
    """From now on (until `monkeypatch` undoes it), count every job manager built, and make
    composer-infra's own managers unusable: its standalone one and any new one. A plugin
    kind looked up anywhere but in a manager a job passed down then fails and is recorded."""
    seen = Watch([], [])
    real = manager_module.build_plugin_manager

    def counted(config: Any = None) -> pluggy.PluginManager:
        seen.builds.append(dict(config or {}))
        return real(config)

    def no_own_manager(**_: Any) -> pluggy.PluginManager:
        seen.standalone_uses.append("new_infra_manager")
        raise AssertionError("composer-infra built a manager of its own inside a job")

    monkeypatch.setattr(manager_module, "build_plugin_manager", counted)
    monkeypatch.setattr(job_module, "build_plugin_manager", counted)
    monkeypatch.setattr(infra_plugins, "_standalone", Unusable(seen.standalone_uses))
    monkeypatch.setattr(infra_plugins, "new_infra_manager", no_own_manager)
    return seen


__all__ = [
    "BACKEND",
    "DIST",
    "ENTRY_POINT",
    "HELDOUT_IDS",
    "MODULE",
    "REWARD",
    "SOURCE",
    "TRAIN_IDS",
    "Unusable",
    "Watch",
    "forget_thirdparty",
    "install_thirdparty",
    "thirdparty",
    "watch_job",
]
