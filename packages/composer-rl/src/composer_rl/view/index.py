"""The episode table: a compact in-memory index of `episodes/episodes.jsonl`, queried per page.

A run writes tens of thousands of episode lines, each with its whole transcript. Parsing
them on every request would cost seconds (`benchmarks/view_bench.py` measures it), so
the index keeps one small row per episode (the columns the table filters and sorts on,
plus the line's byte offset) and grows by reading only what was appended since the last
request (`JsonlTail`). Filtering, sorting and paging happen here, on the server; the page
gets one page of rows. The full record is read back by offset when one episode is opened.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from composer_rl.view.jsonl import JsonlTail

EXPECTED_FIELDS = (
    "episode",
    "group",
    "task",
    "category",
    "reward",
    "components",
    "flags",
    "solved",
    "versions",
    "scored_after_step",
    "grading_failure",
    "transcript",
)
"""Fields today's RL loop writes on every episode line (older runs may lack some)."""

SORT_KEYS = (
    "index",
    "episode",
    "task",
    "category",
    "difficulty",
    "reward",
    "solved",
    "turns",
    "tokens",
    "step",
    "lag",
    "span",
)
MAX_PAGE_SIZE = 500


def template_of(task_id: str) -> str:
    """A built-in task id is `<template>-<hash>`; anything else is its own template."""
    head, sep, tail = task_id.rpartition("-")
    return head if sep and head and tail.isalnum() else task_id


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(slots=True)
class EpisodeRow:
    """One table row: what the table shows, filters and sorts on, and where the line is."""

    index: int
    episode: str
    group: str
    task: str
    template: str
    category: str
    difficulty: int | None
    reward: float | None
    solved: bool
    flags: tuple[str, ...]
    stop_reason: str
    turns: int | None
    tokens: int | None
    vmin: int | None
    vmax: int | None
    step: int | None
    grading: str | None
    offset: int
    length: int

    @property
    def lag(self) -> int | None:
        """Versions between the oldest token's policy and the trainer when it was scored."""
        return None if self.step is None or self.vmin is None else self.step - self.vmin

    @property
    def span(self) -> int | None:
        """Policy versions one episode's tokens span (more than 0: an in-flight update)."""
        return None if self.vmin is None or self.vmax is None else self.vmax - self.vmin

    def as_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "episode": self.episode,
            "group": self.group,
            "task": self.task,
            "template": self.template,
            "category": self.category,
            "difficulty": self.difficulty,
            "reward": self.reward,
            "solved": self.solved,
            "flags": list(self.flags),
            "stop_reason": self.stop_reason,
            "turns": self.turns,
            "tokens": self.tokens,
            "versions": [self.vmin, self.vmax] if self.vmin is not None else [],
            "step": self.step,
            "lag": self.lag,
            "span": self.span,
            "grading": self.grading,
        }


def row_of(record: dict[str, Any], index: int, offset: int, length: int) -> EpisodeRow:
    """The table row of one episode line; never raises on odd or missing fields."""
    versions = [v for v in record.get("versions") or [] if _int(v) is not None]
    flags = record.get("flags")
    task = str(record.get("task", ""))
    episode = str(record.get("episode") or f"line-{index + 1}")
    group = record.get("group")
    if not isinstance(group, str):
        # Older lines have no group field; the episode id is `<group>.s<sample>`.
        group = episode.rpartition(".s")[0] if ".s" in episode else ""
    grading = record.get("grading_error") or record.get("grading_failure")
    return EpisodeRow(
        index=index,
        episode=episode,
        group=group,
        task=task,
        template=template_of(task),
        category=str(record.get("category", "")),
        difficulty=_int(record.get("difficulty")),
        reward=_number(record.get("reward")),
        solved=record.get("solved") is True,
        flags=tuple(sorted(str(k) for k in flags)) if isinstance(flags, dict) else (),
        stop_reason=str(record.get("stop_reason") or ""),
        turns=_int(record.get("turns")),
        tokens=_int(record.get("generated_tokens")),
        vmin=min(versions) if versions else None,
        vmax=max(versions) if versions else None,
        step=_int(record.get("scored_after_step")),
        grading=str(grading)[:300] if grading else None,
        offset=offset,
        length=length,
    )


@dataclass
class Query:
    """The table's filters, sort and page, as given in the request's query string."""

    template: str = ""
    category: str = ""
    solved: str = ""  # "yes", "no", "unscored" (no reward: the infrastructure failed)
    flag: str = ""  # a flag name, "any" or "none"
    reward_min: float | None = None
    reward_max: float | None = None
    lag_min: int | None = None
    lag_max: int | None = None
    step_min: int | None = None
    step_max: int | None = None
    group: str = ""
    text: str = ""  # a substring of the episode id or task id
    sort: str = "index"
    order: str = "asc"
    page: int = 0
    page_size: int = 50

    @classmethod
    def parse(cls, params: dict[str, str]) -> Query:
        """From query-string values; a bad number is an error that names the parameter."""

        def number(name: str, kind: type[int] | type[float]) -> Any:
            raw = params.get(name, "").strip()
            if not raw:
                return None
            try:
                value = kind(raw)
            except ValueError:
                raise ValueError(f"{name} must be a {kind.__name__}, got {raw!r}") from None
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{name} must be finite")
            return value

        sort = params.get("sort", "index") or "index"
        if sort not in SORT_KEYS:
            raise ValueError(f"sort must be one of {', '.join(SORT_KEYS)}; got {sort!r}")
        order = params.get("order", "asc") or "asc"
        if order not in ("asc", "desc"):
            raise ValueError(f"order must be asc or desc; got {order!r}")
        page = number("page", int) or 0
        size = number("page_size", int) or 50
        return cls(
            template=params.get("template", ""),
            category=params.get("category", ""),
            solved=params.get("solved", ""),
            flag=params.get("flag", ""),
            reward_min=number("reward_min", float),
            reward_max=number("reward_max", float),
            lag_min=number("lag_min", int),
            lag_max=number("lag_max", int),
            step_min=number("step_min", int),
            step_max=number("step_max", int),
            group=params.get("group", ""),
            text=params.get("q", ""),
            sort=sort,
            order=order,
            page=max(0, page),
            page_size=min(MAX_PAGE_SIZE, max(1, size)),
        )

    def keep(self, row: EpisodeRow) -> bool:
        if self.template and row.template != self.template:
            return False
        if self.category and row.category != self.category:
            return False
        if self.group and row.group != self.group:
            return False
        if self.solved == "yes" and not row.solved:
            return False
        if self.solved == "no" and (row.solved or row.reward is None):
            return False
        if self.solved == "unscored" and row.reward is not None:
            return False
        if self.flag == "any" and not row.flags:
            return False
        if self.flag == "none" and row.flags:
            return False
        if self.flag not in ("", "any", "none") and self.flag not in row.flags:
            return False
        if self.reward_min is not None and (row.reward is None or row.reward < self.reward_min):
            return False
        if self.reward_max is not None and (row.reward is None or row.reward > self.reward_max):
            return False
        lag = row.lag
        if self.lag_min is not None and (lag is None or lag < self.lag_min):
            return False
        if self.lag_max is not None and (lag is None or lag > self.lag_max):
            return False
        if self.step_min is not None and (row.step is None or row.step < self.step_min):
            return False
        if self.step_max is not None and (row.step is None or row.step > self.step_max):
            return False
        return not (self.text and self.text not in row.episode and self.text not in row.task)


def _sort_value(row: EpisodeRow, key: str) -> Any:
    value = row.tokens if key == "tokens" else getattr(row, key)
    return value


@dataclass
class EpisodeIndex:
    """Every episode line of one run as a row, kept current by reading appended lines."""

    path: Path
    rows: list[EpisodeRow] = field(default_factory=list)
    by_id: dict[str, int] = field(default_factory=dict)
    missing_fields: dict[str, int] = field(default_factory=dict)
    tail: JsonlTail = field(init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self.tail = JsonlTail(self.path)

    def refresh(self) -> int:
        """Index what was appended since the last call; returns how many rows are new."""
        with self._lock:
            return self.tail.poll(self._add)

    def _add(self, record: dict[str, Any], offset: int, length: int) -> None:
        for name in EXPECTED_FIELDS:
            if name not in record:
                self.missing_fields[name] = self.missing_fields.get(name, 0) + 1
        row = row_of(record, len(self.rows), offset, length)
        self.by_id.setdefault(row.episode, row.index)
        self.rows.append(row)

    def record(self, episode: str) -> dict[str, Any] | None:
        """The whole episode line (transcript and all), read back from the file by offset."""
        index = self.by_id.get(episode)
        if index is None:
            return None
        row = self.rows[index]
        return self.tail.read_at(row.offset, row.length)

    def query(self, q: Query) -> dict[str, Any]:
        """One page of rows matching `q`, the match count and the values the filters offer."""
        rows = self.rows  # appended to only: a snapshot of the length is consistent
        n = len(rows)
        matched = [r for r in rows[:n] if q.keep(r)]
        if q.sort != "index":
            present = [r for r in matched if _sort_value(r, q.sort) is not None]
            absent = [r for r in matched if _sort_value(r, q.sort) is None]
            present.sort(key=lambda r: _sort_value(r, q.sort), reverse=q.order == "desc")
            matched = present + absent  # rows without the value go last either way
        elif q.order == "desc":
            matched.reverse()
        start = q.page * q.page_size
        return {
            "total": n,
            "matched": len(matched),
            "page": q.page,
            "page_size": q.page_size,
            "rows": [r.as_json() for r in matched[start : start + q.page_size]],
        }

    def facets(self) -> dict[str, Any]:
        """The values the table's filters offer (templates, categories, flags, ranges)."""
        templates: dict[str, int] = {}
        categories: dict[str, int] = {}
        flags: dict[str, int] = {}
        steps = [r.step for r in self.rows if r.step is not None]
        for r in self.rows:
            templates[r.template] = templates.get(r.template, 0) + 1
            categories[r.category] = categories.get(r.category, 0) + 1
            for f in r.flags:
                flags[f] = flags.get(f, 0) + 1
        return {
            "templates": dict(sorted(templates.items())),
            "categories": dict(sorted(categories.items())),
            "flags": dict(sorted(flags.items())),
            "steps": [min(steps), max(steps)] if steps else [],
        }

    def notes(self) -> list[str]:
        out = self.tail.notes()
        if self.missing_fields:
            names = ", ".join(f"{k} ({v} lines)" for k, v in sorted(self.missing_fields.items()))
            out.append(
                f"episode lines without fields today's RL loop writes: {names} (written by an "
                "older version?); those columns and views are left empty"
            )
        return out


__all__ = ["EpisodeIndex", "EpisodeRow", "Query", "row_of", "template_of"]
