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
from composer_rewards.episode import Episode
from composer_rewards.plugin import ConfiguredPlugin
from composer_rewards.results import RewardComponent
from composer_rewards.rewards.redundant_reads import read_events


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
    failed: dict[str, int] = {}  # path -> index of its last failed read
    found: list[FailedReadAgain] = []
    for event in read_events(episode):
        if event.forget == "all":
            failed.clear()
        elif event.forget == "path":
            failed.pop(event.path or "", None)
        elif event.path is None:
            continue
        elif event.call.ok:  # the file is there after all: this read learned something
            failed.pop(event.path, None)
        else:
            if event.path in failed:
                found.append(
                    FailedReadAgain(event.index, event.call.name, event.path, failed[event.path])
                )
            failed[event.path] = event.index
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
