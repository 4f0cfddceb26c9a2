"""Adding and removing plugins while a job runs.

The job calls :meth:`PluginRegistry.step_boundary` between steps. It applies every request
that ``composer-rl plugins add|remove`` queued since the last call, in order, and returns
what happened as :class:`PluginEvent` s for the job's metrics. A request that cannot be
applied (the module does not import, the object is not a plugin, a hook does not fit its
spec, the name is taken) is answered with the error and changes nothing: the job goes on,
even in a strict run (strictness is about plugins failing while they score episodes).

Run-time changes are kept in ``state.json`` and replayed by :meth:`PluginRegistry.restore`
when the job restarts from the same run directory, so a plugin added at step 500 is still
there after a resume at step 800.
"""

from __future__ import annotations

import importlib
import logging
import os
import socket
import sys
import time

import pluggy

from composer_rewards import BUILTIN_PLUGINS, load_spec
from composer_rl.plugins.manager import register_checked
from composer_rl.plugins.requests import (
    JobState,
    PluginDirs,
    PluginEvent,
    PluginRequest,
    ProcessedRequest,
    RegisteredPlugin,
    pending,
    read_state,
    write_json_atomic,
)

logger = logging.getLogger(__name__)


def event_metrics(events: list[PluginEvent]) -> dict[str, float]:
    """Metrics for a step's plugin events: ``plugins/<action>[_failed]/<name>`` = 1."""
    return {f"plugins/{e.action}{'' if e.ok else '_failed'}/{e.name}": 1.0 for e in events}


class PluginRegistry:
    """The run-time view of a job's plugin manager, driven by files in ``RUN_DIR/plugins``."""

    def __init__(self, pm: pluggy.PluginManager, run_dir: str | os.PathLike[str]) -> None:
        self.pm = pm
        self.dirs = PluginDirs(run_dir)
        self.dirs.make()
        self.runtime_added: dict[str, str] = {}
        self.runtime_removed: list[str] = []
        self.step = -1

    # --- what the job calls --------------------------------------------------------------

    def restore(self) -> list[PluginEvent]:
        """Replay the run-time changes a previous process of this job made (on resume)."""
        previous = read_state(self.dirs.root.parent)
        events: list[PluginEvent] = []
        if previous is not None:
            step = previous.step
            for name in previous.runtime_removed:
                events.append(self._remove(name, step))
            for name, spec in previous.runtime_added.items():
                events.append(self._add(spec, name, step))
        self.write_state()
        return events

    def step_boundary(self, step: int) -> list[PluginEvent]:
        """Apply the queued requests; call between two steps, never inside one."""
        self.step = step
        events = []
        for request in pending(self.dirs.root.parent):
            event = self._apply(request, step)
            events.append(event)
            answer = ProcessedRequest(request=request, event=event)
            write_json_atomic(self.dirs.processed / f"{request.id}.json", answer.model_dump())
            (self.dirs.requests / f"{request.id}.json").unlink(missing_ok=True)
        self.write_state()
        return events

    # --- applying one request ------------------------------------------------------------

    def _apply(self, request: PluginRequest, step: int) -> PluginEvent:
        if request.action == "add":
            return self._add(request.target, request.name or request.target, step, request.id)
        return self._remove(request.target, step, request.id)

    def _add(self, spec: str, name: str, step: int, request_id: str = "") -> PluginEvent:
        try:
            importlib.invalidate_caches()  # find packages installed after the job started
            register_checked(self.pm, load_spec(spec), name)
        except Exception as error:
            logger.error("step %d: cannot add plugin %r (%s): %s", step, name, spec, error)
            return PluginEvent(
                step=step,
                action="add",
                name=name,
                target=spec,
                ok=False,
                error=f"{type(error).__name__}: {error}",
                request_id=request_id,
            )
        self.runtime_added[name] = spec
        if name in self.runtime_removed:
            self.runtime_removed.remove(name)
        logger.info("step %d: added plugin %r (%s)", step, name, spec)
        return PluginEvent(
            step=step, action="add", name=name, target=spec, ok=True, request_id=request_id
        )

    def _resolve_name(self, target: str) -> str | None:
        if self.pm.has_plugin(target):
            return target
        for plugin in self.registered():
            if plugin.spec == target:
                return plugin.name
        return None

    def _remove(self, target: str, step: int, request_id: str = "") -> PluginEvent:
        name = self._resolve_name(target)
        if name is None:
            error = (
                f"no plugin named {target!r} is registered; `composer-rl plugins list` shows them"
            )
            logger.error("step %d: cannot remove plugin: %s", step, error)
            return PluginEvent(
                step=step,
                action="remove",
                name=target,
                target=target,
                ok=False,
                error=error,
                request_id=request_id,
            )
        self.pm.unregister(name=name)
        if self.runtime_added.pop(name, None) is None:
            self.runtime_removed.append(name)
        logger.info("step %d: removed plugin %r", step, name)
        return PluginEvent(
            step=step, action="remove", name=name, target=target, ok=True, request_id=request_id
        )

    # --- state ---------------------------------------------------------------------------

    def registered(self) -> list[RegisteredPlugin]:
        plugins = []
        for name, plugin in sorted(self.pm.list_name_plugin(), key=lambda item: item[0]):
            if name in self.runtime_added:
                source, spec = "runtime", self.runtime_added[name]
            elif name in BUILTIN_PLUGINS:
                source, spec = "builtin", f"{type(plugin).__module__}:{type(plugin).__qualname__}"
            else:
                source, spec = "entry point or config", ""
            hooks = sorted(caller.name for caller in self.pm.get_hookcallers(plugin) or [])
            plugins.append(RegisteredPlugin(name=name, source=source, spec=spec, hooks=hooks))
        return plugins

    def write_state(self) -> None:
        state = JobState(
            pid=os.getpid(),
            host=socket.gethostname(),
            python=sys.executable,
            sys_path=[p for p in sys.path if p],
            step=self.step,
            updated_at=time.time(),
            plugins=self.registered(),
            runtime_added=self.runtime_added,
            runtime_removed=self.runtime_removed,
        )
        write_json_atomic(self.dirs.state, state.model_dump())
