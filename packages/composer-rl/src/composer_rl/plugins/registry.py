"""Adding and removing plugins while a job runs.

The job calls :meth:`PluginRegistry.step_boundary` between steps. It applies every request
that ``composer-rl plugins add|remove`` queued since the last call, in order, and returns
what happened as :class:`PluginEvent` s for the job's metrics. A request that cannot be
applied (the module does not import, the object is not a plugin, a hook does not fit its
spec, the name is taken) is answered with the error and changes nothing: the job goes on,
even in a strict run (strictness is about plugins failing while they score episodes).

Run-time changes are kept in ``state.json`` and replayed by :meth:`PluginRegistry.restore`
when the job restarts from the same run directory, so a plugin added at step 500 is still
there after a resume at step 800. Nothing is dropped on the way:

- a run-time plugin that cannot load after a restart (its package is missing) stays in
  ``runtime_added``, is listed as unavailable with the error, is retried at every step
  boundary, and comes back as soon as it loads;
- a removal stays in ``runtime_removed`` even while the plugin is absent, so a removed
  entry-point plugin does not come back when its package is reinstalled;
- a plugin disabled by the hook time budget stays disabled across restarts until it is
  added again.
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

STATE_HEARTBEAT_S = 1.0
"""With nothing changed, ``state.json`` (its step) is rewritten at most this often."""


def event_metrics(events: list[PluginEvent]) -> dict[str, float]:
    """Metrics for a step's plugin events: ``plugins/<action>[_failed]/<name>`` = 1."""
    return {f"plugins/{e.action}{'' if e.ok else '_failed'}/{e.name}": 1.0 for e in events}


def _forget_import_misses() -> None:
    """Let imports see files and directories that appeared since the last attempt.

    ``invalidate_caches`` refreshes the finders' directory listings; a path entry that did
    not exist when last looked at is cached as ``None`` and (before Python 3.12) kept.
    """
    for path, finder in list(sys.path_importer_cache.items()):
        if finder is None:
            del sys.path_importer_cache[path]
    importlib.invalidate_caches()


class PluginRegistry:
    """The run-time view of a job's plugin manager, driven by files in ``RUN_DIR/plugins``.

    :param command: the job's command (``eval``, ``rl``...), shown by ``plugins list``.
    """

    def __init__(
        self, pm: pluggy.PluginManager, run_dir: str | os.PathLike[str], command: str = ""
    ) -> None:
        self.pm = pm
        self.command = command
        self.dirs = PluginDirs(run_dir)
        self.dirs.make()
        self.runtime_added: dict[str, str] = {}
        self.runtime_removed: list[str] = []
        self.unavailable: dict[str, str] = {}
        self.disabled: dict[str, str] = {}
        self.step = -1
        self.last_request = ""
        self._written_at = 0.0

    # --- what the job calls --------------------------------------------------------------

    def restore(self, *, after_finish: bool = True) -> list[PluginEvent]:
        """Replay the run-time changes a previous process of this job made (on resume).

        :param after_finish: also when the previous process finished normally (a run
            continued past its old end); ``False`` starts such a directory afresh, as a
            rerun of an evaluation should. A killed process is always resumed from.
        """
        previous = read_state(self.dirs.root.parent)
        if previous is not None and (previous.refusal or (previous.finished and not after_finish)):
            previous = None
        events: list[PluginEvent] = []
        if previous is not None:
            step = previous.step
            self.step = step
            self.runtime_removed = list(previous.runtime_removed)
            self.last_request = previous.last_request
            self.disabled = dict(previous.disabled)
            for name in [*previous.runtime_removed, *previous.disabled]:
                if self.pm.has_plugin(name):
                    self.pm.unregister(name=name)
                    events.append(
                        PluginEvent(step=step, action="remove", name=name, target=name, ok=True)
                    )
                else:
                    logger.info("plugin %r stays removed (it is not present now)", name)
            for name, spec in previous.runtime_added.items():
                if name not in self.disabled:
                    events.append(self._add(spec, name, step, keep_if_unavailable=True))
        self.write_state()
        return events

    def step_boundary(self, step: int) -> list[PluginEvent]:
        """Apply the queued requests; call between two steps, never inside one.

        The state (with the requests' effects) is written before the requests are answered
        and dequeued, so a job killed in between loses nothing: on restart the state has
        the change, and a request at or before ``last_request`` is dequeued, not re-applied.
        """
        self.step = step
        events = self._retry_unavailable(step)
        answered: list[ProcessedRequest] = []
        for request in pending(self.dirs.root.parent):
            if request.id <= self.last_request:  # applied by a process killed before dequeuing
                (self.dirs.requests / f"{request.id}.json").unlink(missing_ok=True)
                continue
            event = self._apply(request, step)
            events.append(event)
            answered.append(ProcessedRequest(request=request, event=event))
            self.last_request = request.id
        if events or time.monotonic() - self._written_at >= STATE_HEARTBEAT_S:
            self.write_state()
        for answer in answered:
            path = self.dirs.processed / f"{answer.request.id}.json"
            write_json_atomic(path, answer.model_dump())
            (self.dirs.requests / f"{answer.request.id}.json").unlink(missing_ok=True)
        return events

    def record_disabled(self, disabled: dict[str, str]) -> None:
        """Note plugins the scorer unregistered (hook budget), so a restart keeps them off."""
        new = {k: v for k, v in disabled.items() if self.disabled.get(k) != v}
        if new:
            self.disabled.update(new)
            self.write_state()

    def finish(self) -> None:
        """Mark the job finished: the CLI stops queueing requests for it."""
        self.write_state(finished=True)

    # --- applying one request ------------------------------------------------------------

    def _apply(self, request: PluginRequest, step: int) -> PluginEvent:
        if request.action == "add":
            return self._add(request.target, request.name or request.target, step, request.id)
        return self._remove(request.target, step, request.id)

    def _retry_unavailable(self, step: int) -> list[PluginEvent]:
        events = []
        for name in list(self.unavailable):
            event = self._add(
                self.runtime_added[name], name, step, keep_if_unavailable=True, quiet=True
            )
            if event.ok:
                events.append(event)
        return events

    def _add(
        self,
        spec: str,
        name: str,
        step: int,
        request_id: str = "",
        *,
        keep_if_unavailable: bool = False,
        quiet: bool = False,
    ) -> PluginEvent:
        try:
            _forget_import_misses()  # find packages installed after the job started
            register_checked(self.pm, load_spec(spec), name)
        except Exception as error:
            message = f"{type(error).__name__}: {error}"
            if keep_if_unavailable:
                # A plugin the run had: keep it, say why it is missing, retry each step.
                self.runtime_added[name] = spec
                if self.unavailable.get(name) != message and not quiet:
                    logger.error(
                        "step %d: run-time plugin %r (%s) is unavailable; kept and retried "
                        "at each step: %s",
                        step,
                        name,
                        spec,
                        error,
                    )
                self.unavailable[name] = message
            else:
                logger.error("step %d: cannot add plugin %r (%s): %s", step, name, spec, error)
            return PluginEvent(
                step=step,
                action="add",
                name=name,
                target=spec,
                ok=False,
                error=message,
                request_id=request_id,
            )
        self.runtime_added[name] = spec
        self.unavailable.pop(name, None)
        self.disabled.pop(name, None)
        if name in self.runtime_removed:
            self.runtime_removed.remove(name)
        logger.info("step %d: added plugin %r (%s)", step, name, spec)
        return PluginEvent(
            step=step, action="add", name=name, target=spec, ok=True, request_id=request_id
        )

    def _resolve_name(self, target: str) -> str | None:
        if self.pm.has_plugin(target) or target in self.unavailable:
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
        if self.pm.has_plugin(name):
            self.pm.unregister(name=name)
        self.unavailable.pop(name, None)
        if self.runtime_added.pop(name, None) is None and name not in self.runtime_removed:
            self.runtime_removed.append(name)
        logger.info("step %d: removed plugin %r", step, name)
        return PluginEvent(
            step=step, action="remove", name=name, target=target, ok=True, request_id=request_id
        )

    # --- state ---------------------------------------------------------------------------

    def registered(self) -> list[RegisteredPlugin]:
        """The registered plugins, then the unavailable and disabled ones, by name."""
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
        for name, error in sorted(self.unavailable.items()):
            plugins.append(
                RegisteredPlugin(
                    name=name,
                    source="runtime",
                    spec=self.runtime_added.get(name, ""),
                    status="unavailable",
                    error=error,
                )
            )
        for name, why in sorted(self.disabled.items()):
            if not self.pm.has_plugin(name):
                plugins.append(
                    RegisteredPlugin(
                        name=name,
                        source="runtime" if name in self.runtime_added else "",
                        spec=self.runtime_added.get(name, ""),
                        status="disabled",
                        error=why,
                    )
                )
        return plugins

    def write_state(self, *, finished: bool = False) -> None:
        state = JobState(
            command=self.command,
            finished=finished,
            pid=os.getpid(),
            host=socket.gethostname(),
            python=sys.executable,
            sys_path=[p for p in sys.path if p],
            step=self.step,
            updated_at=time.time(),
            plugins=self.registered(),
            runtime_added=self.runtime_added,
            runtime_removed=self.runtime_removed,
            last_request=self.last_request,
            unavailable=self.unavailable,
            disabled=self.disabled,
        )
        write_json_atomic(self.dirs.state, state.model_dump())
        self._written_at = time.monotonic()
