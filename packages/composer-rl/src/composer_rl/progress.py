"""Progress of long work (a phase's steps, demonstrations, RL steps): a rich bar on a
terminal, plain lines anywhere else.

A rich bar written to a log file (`> log`, nohup, a CI job) shows nothing until it ends,
so a run looked dead for many minutes. Off a terminal, or with a bar turned off
(`--no-progress`), `StepProgress` prints one line when the work starts, one when it ends,
and one in between every `every_s` seconds of wall time or every tenth of the total,
whichever comes first, each with step/total, the rate and the time left, flushed at once.
The work itself is defined by steps; only the printing keeps time.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import Literal, TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

EVERY_S = 30.0
"""Seconds between two plain progress lines within one piece of work."""

Show = bool | Literal["lines"]
"""How a piece of work reports progress: True, a bar on a terminal and plain lines
elsewhere; "lines", plain lines always (the commands' --no-progress); False, nothing
(a rank other than 0)."""


def _duration(seconds: float) -> str:
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


class StepProgress:
    """Progress of `total` steps of one piece of work called `name`.

    `show` is a `Show`. Use as a context manager; `update` after every step.
    """

    def __init__(
        self,
        name: str,
        total: int,
        *,
        completed: int = 0,
        unit: str = "steps",
        show: Show = True,
        every_s: float = EVERY_S,
        stream: TextIO | None = None,
    ) -> None:
        self.name = name
        self.total = total
        self.completed = completed
        self.unit = unit
        self.every_s = every_s
        self.every_steps = max(1, total // 10)
        self.stream = stream
        self.info = ""
        console = Console(file=stream) if stream is not None else Console()
        self.show = show is not False
        self.live = show is True and console.is_terminal
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        if self.live:
            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TaskProgressColumn(),
                TextColumn("{task.fields[info]}"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=console,
                transient=False,
            )
        self._start_step = completed
        self._began = time.monotonic()
        self._last_line_at = self._began
        self._last_line_step = completed

    def _print(self, text: str) -> None:
        print(f"{self.name}: {text}", file=self.stream or sys.stdout, flush=True)

    def _status(self) -> str:
        done = self.completed - self._start_step
        elapsed = time.monotonic() - self._began
        rate = done / elapsed if elapsed > 0 else 0.0
        percent = 100.0 * self.completed / self.total if self.total else 100.0
        text = f"{self.completed}/{self.total} {self.unit} ({percent:.0f}%)"
        if self.info:
            text += f", {self.info}"
        text += f", {rate:.2f} {self.unit}/s, elapsed {_duration(elapsed)}"
        if rate > 0 and self.completed < self.total:
            text += f", ETA {_duration((self.total - self.completed) / rate)}"
        return text

    def __enter__(self) -> StepProgress:
        self._began = self._last_line_at = time.monotonic()
        if self._progress is not None:
            self._progress.start()
            self._task = self._progress.add_task(
                self.name, total=self.total, completed=self.completed, info=self.info
            )
        elif self.show:
            where = f"from {self.completed} " if self.completed else ""
            self._print(f"start, {where}to {self.total} {self.unit}")
        return self

    def message(self, info: str) -> None:
        """Set the text shown beside the count (a bar's field, the next plain line)."""
        self.info = info
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, info=info)

    def update(
        self, completed: int | None = None, *, advance: int = 0, info: str | None = None
    ) -> None:
        """Record progress: `completed` steps in all, or `advance` more; `info` beside."""
        self.completed = completed if completed is not None else self.completed + advance
        if info is not None:
            self.info = info
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, completed=self.completed, info=self.info)
            return
        if not self.show or self.completed >= self.total:
            return  # the last step is the end line's
        now = time.monotonic()
        if (
            now - self._last_line_at >= self.every_s
            or self.completed - self._last_line_step >= self.every_steps
        ):
            self._last_line_at, self._last_line_step = now, self.completed
            self._print(self._status())

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._progress is not None:
            self._progress.stop()
        elif self.show:
            ended = "done" if kind is None else f"stopped ({kind.__name__})"
            self._print(f"{ended}, {self._status()}")


def phase_line(name: str, text: str, show: Show = True) -> None:
    """One plain line about a piece of work (`pretrain: reused ...`), flushed at once."""
    if show is not False:
        print(f"{name}: {text}", flush=True)


__all__ = ["EVERY_S", "Show", "StepProgress", "phase_line"]
