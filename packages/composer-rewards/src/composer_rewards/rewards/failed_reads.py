"""Reading a missing file again: a read of a path whose last read failed, with nothing in
between that could have made the file.

The SFT policies of 2026-12-05 spent most of their turns this way: they misnamed a file,
the sandbox answered that it does not exist, and the next call was the same read, until
the turn limit (composer-rl's docs/rl/2026-12-05-failed-read-loops.md). The
``redundant_reads`` reward counts successful reads only ("a read that failed read
nothing"), so it never charged this. :func:`failed_reads_again` is the one reading; the
``failed_read_again`` monitor (:mod:`composer_rewards.monitors.failed_read_again`) flags
exactly the reads it returns, and composer-rl's evaluation reports the rate with it.

- **Reads** are what ``redundant_reads`` calls reads (``read_file``, and a ``run`` that is
  only a ``cat`` of one file), and paths are compared in its one spelling
  (:func:`composer_rewards.rewards.redundant_reads.workspace_path`): ``./a.py`` after a
  failed ``a.py`` is the same read. A read *failed* when the call was executed and did not
  succeed. Malformed calls were never executed and count for nothing.
- **What makes a missing file worth reading again**, so that the read is not charged: a
  ``write_file`` or ``edit_file`` of that path that was executed, or a ``run`` command that
  could have written files (``transcript.may_write``), between the failed read and this
  one. Listing the files, searching or reading another path does not: they cannot make the
  file exist. A compaction of the context between the two makes the read new, since the
  failure is no longer in the context. And the read must fail again: one that finds the
  file (made by something this reading cannot see, a process left running) learned
  something.

Counted in the ``failed_reads_again`` component as ``-min(1, per_read * count)``. The
reward is optional (composer-rl adds it by spec, e.g. with ``composer-rl plugins add``);
the monitor is a built-in, so the rate is watched in every run.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from composer_hooks import hookimpl
from composer_rewards.episode import COMPACTIONS_KEY, EDIT_TOOLS, TERMINAL_TOOL, Episode
from composer_rewards.plugin import ConfiguredPlugin
from composer_rewards.results import RewardComponent
from composer_rewards.rewards.redundant_reads import read_path, workspace_path
from composer_rewards.transcript import may_write


class FailedReadsAgainSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    per_read: float = Field(default=0.25, ge=0, le=1)
    weight: float = Field(default=0.2, ge=0)


@dataclass(frozen=True)
class FailedReadAgain:
    """A read of `path` at tool call `index` after the read at tool call `first` failed."""

    index: int
    tool: str
    path: str
    first: int

    def describe(self) -> str:
        return f"{self.tool} #{self.index}: {self.path} (missing at #{self.first})"


def failed_reads_again(episode: Episode) -> list[FailedReadAgain]:
    """Every read of `episode` of a path whose last read failed, with nothing between that
    could have made the file (the module docstring says what counts)."""
    compactions = sorted(int(turn) for turn in episode.metadata.get(COMPACTIONS_KEY, ()) or ())
    failed: dict[str, int] = {}  # path -> index of its last failed read
    found: list[FailedReadAgain] = []
    turn_seen = None
    for index, call in enumerate(episode.tool_calls):
        if call.malformed:
            continue
        if turn_seen is not None and any(turn_seen <= t < call.turn for t in compactions):
            failed.clear()
        turn_seen = call.turn
        if call.name in EDIT_TOOLS:
            path = workspace_path(str(call.arguments.get("path", "")))
            if path is not None:
                failed.pop(path, None)
            continue
        if call.name == TERMINAL_TOOL and may_write(str(call.arguments.get("command", ""))):
            failed.clear()
            continue
        path = read_path(call.name, call.arguments)
        if path is None:
            continue
        if call.ok:  # the file is there after all: this read learned something
            failed.pop(path, None)
            continue
        if path in failed:
            found.append(FailedReadAgain(index, call.name, path, failed[path]))
        failed[path] = index
    return found


class FailedReadsAgainPenalty(ConfiguredPlugin[FailedReadsAgainSettings]):
    """``failed_reads_again`` = -min(1, per_read * the episode's reads of missing files
    already read)."""

    name = "failed_reads_again"
    settings_type = FailedReadsAgainSettings

    @hookimpl
    def composer_reward(self, episode: Episode) -> RewardComponent:
        found = failed_reads_again(episode)
        return RewardComponent(
            name="failed_reads_again",
            value=-min(1.0, self.settings.per_read * len(found)),
            weight=self.settings.weight,
            details="; ".join(read.describe() for read in found),
        )
