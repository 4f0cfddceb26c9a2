"""Plugin requests at step boundaries: the piece every long-running job calls.

A job that scores or monitors episodes (``composer-rl eval``, the RL run) owns one
:class:`PluginSession` over its run directory::

    with PluginSession(config, run_dir, command="rl") as plugins:   # builds pm, restores
        for step in range(start, steps):
            metrics = plugins.step_boundary(step)   # apply add/remove; events + failures
            ...
            score = plugins.score(episode)          # budgeted, errors captured per plugin
            ...
    # leaving the block marks the job finished in plugins/state.json

A command that scores nothing (``pretrain``) calls :func:`refuse_plugin_requests` on its
run directory instead, so ``composer-rl plugins add --run`` there fails at once with a
message that says why, instead of queueing requests no one will apply.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import pluggy

from composer_rewards import Episode, EpisodeScore, PluginScorer
from composer_rl.plugins.job import JobPlugins
from composer_rl.plugins.registry import PluginRegistry, event_metrics
from composer_rl.plugins.requests import JobState, PluginDirs, PluginEvent, write_json_atomic
from composer_rl.plugins.settings import PluginSettings


class PluginSession:
    """The plugin manager of one job, its run-time registry and its scorer, together.

    :param config: the run configuration given to plugins (``plugins``, ``rewards``,
        ``monitors`` sections and anything a third-party plugin reads).
    :param run_dir: where ``plugins/`` lives; ``composer-rl plugins --run RUN_DIR``.
    :param command: the job's command name, shown by ``composer-rl plugins list``.
    :param pm: a manager made by :func:`build_plugin_manager` already (default: build one).
    :param plugins: the job's :class:`JobPlugins`, whose manager this session applies requests
        to and scores with (default: ``JobPlugins(config, pm=pm)``). A job passes the one it
        also looks backends, stores and task sources up in.
    :param resume_after_finish: replay the run-time changes of a predecessor that finished
        normally too (an RL run continued past its old end); ``False`` for a command whose
        rerun starts afresh (evaluation). A killed predecessor's are always replayed.

    Construction restores the run-time changes a killed predecessor made in the same run
    directory; their events are returned by the first :meth:`step_boundary`.
    """

    def __init__(
        self,
        config: Mapping[str, Any] | None,
        run_dir: str | os.PathLike[str],
        *,
        command: str,
        pm: pluggy.PluginManager | None = None,
        plugins: JobPlugins | None = None,
        resume_after_finish: bool = True,
    ) -> None:
        self.config = dict(config or {})
        self.settings = self.settings_of(self.config)
        if plugins is not None and pm is not None and plugins.pm is not pm:
            raise ValueError("pass the job's plugins or a manager, not two different ones")
        self.plugins = plugins if plugins is not None else JobPlugins(self.config, pm=pm)
        self.pm = self.plugins.pm
        self.registry = PluginRegistry(self.pm, run_dir, command=command)
        self.scorer = PluginScorer(
            self.pm,
            strict=self.settings.strict,
            budget_s=self.settings.hook_budget_s,
            over_budget=self.settings.over_budget,
        )
        self._restored = self.registry.restore(after_finish=resume_after_finish)
        self.events: list[PluginEvent] = []
        """The plugin events of the last step boundary (restores included on the first)."""

    @staticmethod
    def settings_of(config: Mapping[str, Any] | None) -> PluginSettings:
        """The validated ``plugins`` section of `config`."""
        return PluginSettings.model_validate((config or {}).get("plugins") or {})

    @property
    def run_dir(self) -> Path:
        return self.registry.dirs.root.parent

    def step_boundary(self, step: int) -> dict[str, float]:
        """Apply queued requests and start step `step`; call between steps, never inside one.

        :return: metrics for the step: ``plugins/<action>[_failed]/<name>`` for each event
            (see :attr:`events`) and the cumulative ``plugin_failures/<plugin>/<kind>``.
        """
        self.registry.record_disabled(self.scorer.disabled)
        events = self._restored + self.registry.step_boundary(step)
        self._restored = []
        self.events = events
        return {**event_metrics(events), **self.scorer.new_step()}

    def score(self, episode: Episode) -> EpisodeScore:
        """Every registered reward and monitor on `episode` (see :class:`PluginScorer`)."""
        return self.scorer.score(episode)

    def close(self) -> None:
        """Mark the job finished in ``state.json`` (requests queued after are refused)."""
        self.registry.record_disabled(self.scorer.disabled)
        self.registry.finish()

    def __enter__(self) -> PluginSession:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if kind is None:
            self.close()
        # On an exception the job did not finish: it may resume and apply what is queued.


def refuse_plugin_requests(run_dir: str | os.PathLike[str], command: str, why: str) -> None:
    """Mark `run_dir` as the run directory of a job that takes no plugin requests.

    :param why: what the user should know, e.g. "pretrain scores no episodes".
    """
    dirs = PluginDirs(run_dir)
    state = JobState(
        command=command,
        refusal=why,
        pid=os.getpid(),
        host=socket.gethostname(),
        python=sys.executable,
        sys_path=[],
        step=-1,
        updated_at=time.time(),
        plugins=[],
    )
    write_json_atomic(dirs.state, state.model_dump())
