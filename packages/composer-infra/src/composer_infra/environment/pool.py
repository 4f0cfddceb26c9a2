"""Warm sandboxes, started before a task needs them.

Starting a gVisor container costs a few hundred milliseconds; an episode should not
wait for it. The pool keeps `size` empty sandboxes started and hands one out per task
(writing the task's files into it), starting a replacement in the background.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Executor
from pathlib import Path

from composer_infra.sandbox import Sandbox, SandboxBackend, SandboxConfig, Task

log = logging.getLogger(__name__)

_BLANK = Task(id="pool", instruction="(pre-started sandbox, no task yet)")


class SandboxPool:
    """Pre-started sandboxes of one backend and config."""

    def __init__(
        self,
        backend: SandboxBackend,
        config: SandboxConfig,
        *,
        size: int,
        work_dir: Path,
        executor: Executor,
    ) -> None:
        self.backend = backend
        self.config = config
        self.size = size
        self.work_dir = work_dir
        self.executor = executor
        self._idle: list[Sandbox] = []
        self._lock = threading.Lock()
        self._closed = False
        for _ in range(size):
            self._refill()

    def _start_one(self) -> None:
        try:
            sandbox = Sandbox.create(
                _BLANK, self.backend, config=self.config, work_dir=self.work_dir
            )
        except Exception:
            log.exception("could not pre-start a %s sandbox", self.backend.name)
            return
        with self._lock:
            if not self._closed:
                self._idle.append(sandbox)
                return
        sandbox.close()

    def _refill(self) -> None:
        self.executor.submit(self._start_one)

    def acquire(self, task: Task) -> Sandbox:
        """A started sandbox holding `task`'s files (a warm one when there is one)."""
        with self._lock:
            sandbox = self._idle.pop() if self._idle else None
        if sandbox is None:
            return Sandbox.create(task, self.backend, config=self.config, work_dir=self.work_dir)
        self._refill()
        sandbox.adopt(task)
        return sandbox

    @property
    def idle(self) -> int:
        with self._lock:
            return len(self._idle)

    def close(self) -> None:
        """Close every idle sandbox (all of them, even if one fails; then raise the first)."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        first: Exception | None = None
        for sandbox in idle:
            try:
                sandbox.close()
            except Exception as exc:
                log.exception("could not close pre-started sandbox %s", sandbox.id)
                first = first or exc
        if first is not None:
            raise first
