"""Every finished group's fate, recorded when the loop decides it: ``groups/fates.jsonl``.

The orchestrator writes one line a decision (`composer_rl.rl.orchestrator.Orchestrator`,
its ``on_fate``), so why a group was or was not trained is read, never inferred::

    {"kind": "fate", "group": "g000007-fix_operator-3f2a", "task": "fix_operator-3f2a",
     "fate": "dropped_stale", "step": 5, "life": 0, "lag": 4, "bound": 3,
     "reason": "its oldest token was 4 optimizer steps behind ..."}

- ``fate``: one of `FATES`: ``trained`` (at ``step``), ``dropped_stale`` (beyond the
  staleness bound, its task not redone), ``constant`` (no learning signal),
  ``regenerated`` (stale or superseded, its task generated again), ``infrastructure_failed``
  (no episode with both a reward and a sampled token), ``left_over`` (still queued when the
  run ended: fewer than a batch when the epoch ran out, or ``loop.steps`` reached).
- ``step``: the optimizer step that trained it, or the steps done when it was decided;
  ``life``: the trainer's life (`composer_rl.rl.lineage.VersionTree.life`).
- ``lag`` and ``bound``: where staleness applies (trained, dropped as stale, regenerated as
  stale), the optimizer steps from the oldest weights that sampled a token of the group to
  the trainer's (None: a lineage the version tree cannot place) and ``loop.max_off_policy_steps``.
- ``resumed``: the group was queued again by a resume; ``recovered``: the line was written at
  a resume for a group the restored checkpoint had trained but the killed run had not
  recorded (it died between the checkpoint and the line); ``superseded_by``: the newer group
  of its task.

A resume appends a restart line first, as metrics.jsonl marks a restart (the same ``kind``,
``from_step`` and ``life``; `composer_rl.rl.lineage.RESTART`), at every resume::

    {"kind": "restart", "from_step": 4, "life": 1, "version": 7, "voided": [...], "unrecorded": []}

``voided``: the groups whose recorded fate the restored checkpoint does not hold (decided
after it, by the killed run): the resumed run judges them again and records their fate
anew. ``unrecorded``: groups the checkpoint records as dropped with no fate line (a run
begun by a version that did not record fates): only for them does the viewer still infer.
`FateBook` reads the lines in order and keeps the fate that stands for each group.

Lines are appended and flushed one at a time, so a kill -9 leaves at most a torn last line:
readers skip it (`read_jsonl`, the viewer's `JsonlTail`), and the next writer cuts it off
before appending (`FateLog`), so it never runs into a whole line.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from composer_rl.rl.jsonl import cut_torn_tail, read_jsonl
from composer_rl.rl.lineage import RESTART

FATES_LOG = Path("groups") / "fates.jsonl"
"""The fate log, relative to the run directory (beside the group files)."""

FATE = "fate"
"""The `kind` of a fate line (a restart line has `composer_rl.rl.lineage.RESTART`)."""

Fate = Literal[
    "trained", "dropped_stale", "constant", "regenerated", "infrastructure_failed", "left_over"
]
FATES: tuple[Fate, ...] = get_args(Fate)


def fate_record(
    group_id: str,
    task_id: str,
    fate: Fate,
    *,
    step: int,
    life: int,
    reason: str,
    staleness: tuple[int | None, int] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """One fate line; `staleness` is (lag, bound) where the staleness rule applies."""
    record: dict[str, Any] = {
        "kind": FATE,
        "group": group_id,
        "task": task_id,
        "fate": fate,
        "step": step,
        "life": life,
    }
    if staleness is not None:
        record["lag"], record["bound"] = staleness
    return {**record, "reason": reason, **extra}


@dataclass
class FateBook:
    """The fates a fate log records, read line by line (`add`), as they stand now."""

    standing: dict[str, dict[str, Any]] = field(default_factory=dict)
    voided: dict[str, dict[str, Any]] = field(default_factory=dict)  # not decided again yet
    unrecorded: set[str] = field(default_factory=set)  # decided before fates were recorded
    restarts: list[dict[str, Any]] = field(default_factory=list)
    repeated: list[str] = field(default_factory=list)  # a second fate no restart voided
    lines: int = 0

    def add(self, record: dict[str, Any]) -> None:
        self.lines += 1
        if record.get("kind") == RESTART:
            self.restarts.append(record)
            for gid in record.get("voided") or []:
                if gid in self.standing:
                    self.voided[gid] = self.standing.pop(gid)
            self.unrecorded |= set(record.get("unrecorded") or [])
        elif record.get("kind") == FATE and isinstance(record.get("group"), str):
            gid = record["group"]
            if gid in self.standing:
                self.repeated.append(gid)
            self.standing[gid] = record
            self.voided.pop(gid, None)
            self.unrecorded.discard(gid)

    @classmethod
    def read(cls, path: Path) -> FateBook:
        book = cls()
        for record in read_jsonl(path):
            book.add(record)
        return book


class FateLog:
    """Appends fate and restart lines to a run's fate log, one flushed line at a time."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        cut_torn_tail(path)
        self._out = path.open("a", encoding="utf-8")

    def record(self, record: dict[str, Any]) -> None:
        self._out.write(json.dumps(record, default=str) + "\n")
        self._out.flush()

    def restart(
        self,
        *,
        from_step: int,
        life: int,
        version: int,
        restored_version: int | None,
        consumed: Iterable[str],
        dropped: Iterable[str],
        trained_at: dict[str, int],
        task_of: Callable[[str], str],
    ) -> dict[str, Any]:
        """Mark a resume: the restart line, then a recovered ``trained`` line for each group
        the restored checkpoint trained that no standing line records (at its step in
        metrics.jsonl's final lineage, `trained_at`, else at `from_step`: the one step whose
        line a kill can lose is the checkpointed step whose result it never logged)."""
        book = FateBook.read(self.path)
        consumed, dropped = set(consumed), set(dropped)
        record: dict[str, Any] = {
            "kind": RESTART,
            "from_step": from_step,
            "life": life,
            "version": version,
            "restored_version": restored_version,
            "voided": sorted(g for g in book.standing if g not in consumed | dropped),
            "unrecorded": sorted(g for g in dropped if g not in book.standing),
        }
        self.record(record)
        for gid in sorted(consumed - book.standing.keys()):
            step = trained_at.get(gid, from_step)
            self.record(
                fate_record(
                    gid,
                    task_of(gid),
                    "trained",
                    step=step,
                    life=life,
                    reason=f"trained at step {step}; recorded at the resume from the "
                    f"step-{from_step} checkpoint (the killed run had not written the line)",
                    recovered=True,
                )
            )
        return record

    def close(self) -> None:
        self._out.close()


__all__ = [
    "FATE",
    "FATES",
    "FATES_LOG",
    "Fate",
    "FateBook",
    "FateLog",
    "fate_record",
]
