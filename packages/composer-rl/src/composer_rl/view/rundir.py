"""One run directory as the viewer reads it: files present, status, curves, groups.

Everything is read from the files the RL loop writes (`composer_rl.rl.run`), never from
the job itself, so the viewer works on a live run, a finished one, a killed one, a copy
from another machine, and a directory an older version wrote. Whatever is missing or
damaged becomes a note on the page ("no eval.jsonl: ..."), never an error.

Status is judged from files: `plugins/state.json` (`finished`, the job's pid and host,
`updated_at`), `final/`, the newest write to the logs, and `checkpoints/`:

- finished: the job marked itself finished, or wrote `final/`;
- running: its pid is alive on this host, or a log was written in the last `LIVE_WINDOW_S`;
- stopped: neither; resumable from the newest step checkpoint (the same command resumes).

A group's fate is read from `groups/fates.jsonl`, where the loop records each as it decides
it (`composer_rl.rl.fates`); it is inferred from metrics.jsonl, the config and the newest
checkpoint only for a run that predates recorded fates, and the page says so.
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
import threading
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from composer_rl.rl.fates import FATES_LOG, FateBook
from composer_rl.view.index import EpisodeIndex
from composer_rl.view.jsonl import JsonlTail

LIVE_WINDOW_S = 120.0
"""A run whose logs changed this recently counts as running even without a live pid."""

EPISODES = Path("episodes") / "episodes.jsonl"
STEP_DIR = re.compile(r"^step-(\d+)")
INFERRED = "inferred: this run predates recorded fates (no line for it in groups/fates.jsonl)"

# The curves the run page draws: (title, metric keys or key prefixes ending in "/").
CHARTS: list[tuple[str, list[str]]] = [
    ("reward by component", ["reward_mean", "solved_rate", "reward_components/"]),
    ("token lag (versions)", ["token_lag_mean", "token_lag_max", "group_lag_max"]),
    ("KL to the reference (k1, k3)", ["kl_k1", "kl_k3"]),
    ("trainer-inference mismatch", ["logprob_mismatch", "is_capped_share"]),
    (
        "dropped and constant groups (cumulative)",
        [
            "count_groups_stale_dropped",
            "count_groups_constant",
            "count_groups_regenerated",
            "count_episodes_infra_failed",
        ],
    ),
    ("monitor flags by step", ["monitor_flags/"]),
]


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class RunDir:
    """A run directory, its episode index and its step log, read incrementally."""

    path: Path
    name: str
    episodes: EpisodeIndex = field(init=False)
    metrics_tail: JsonlTail = field(init=False)
    eval_tail: JsonlTail = field(init=False)
    fates_tail: JsonlTail = field(init=False)
    fates: FateBook = field(default_factory=FateBook)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    evals: list[dict[str, Any]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self.episodes = EpisodeIndex(self.path / EPISODES)
        self.metrics_tail = JsonlTail(self.path / "metrics.jsonl")
        self.eval_tail = JsonlTail(self.path / "eval.jsonl")
        self.fates_tail = JsonlTail(self.path / FATES_LOG)

    # --- reading what was appended -------------------------------------------------------

    def refresh(self) -> None:
        """Read lines appended to the episode, step and evaluation logs since the last call."""
        self.episodes.refresh()
        with self._lock:
            self.metrics_tail.poll(lambda r, _o, _n: self.metrics.append(r))
            self.eval_tail.poll(lambda r, _o, _n: self.evals.append(r))
            self.fates_tail.poll(self._add_fate)

    def _add_fate(self, record: dict[str, Any], offset: int, _length: int) -> None:
        if offset == 0:  # the file's first line: read from the start (again, if replaced)
            self.fates = FateBook()
        self.fates.add(record)

    def snapshot(self) -> dict[str, Any]:
        """What the live pages watch: counts and status (sent when any of it changes)."""
        self.refresh()
        status = self.status()
        return {
            "episodes": len(self.episodes.rows),
            "steps": len(self.metrics),
            "evals": len(self.evals),
            "groups": self._count_groups(),
            "fates": self.fates.lines,
            "status": status["state"],
        }

    def _count_groups(self) -> int:
        try:
            return sum(1 for e in os.scandir(self.path / "groups") if e.name.endswith(".json"))
        except OSError:
            return 0

    # --- files, config, status -----------------------------------------------------------

    def config(self) -> tuple[dict[str, Any] | None, str, str]:
        """(parsed config.toml or None, its text, a note if it is missing or unreadable)."""
        path = self.path / "config.toml"
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None, "", "no config.toml: the run's settings are unknown"
        try:
            return tomllib.loads(text), text, ""
        except tomllib.TOMLDecodeError as error:
            return None, text, f"config.toml does not parse ({error}); shown as text"

    def plugin_state(self) -> dict[str, Any] | None:
        try:
            data = json.loads((self.path / "plugins" / "state.json").read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def checkpoints(self) -> list[int]:
        """Steps of the trainer's step checkpoints present (ascending)."""
        steps = set()
        try:
            for entry in os.scandir(self.path / "checkpoints"):
                match = STEP_DIR.match(entry.name)
                if match and entry.is_dir() and os.path.exists(Path(entry.path) / "state.json"):
                    steps.add(int(match.group(1)))
        except OSError:
            pass
        return sorted(steps)

    def newest_write(self) -> float | None:
        times = []
        for rel in ("metrics.jsonl", EPISODES, "eval.jsonl", "plugins/state.json", "groups"):
            try:
                times.append((self.path / rel).stat().st_mtime)
            except OSError:
                continue
        return max(times) if times else None

    def status(self) -> dict[str, Any]:
        state = self.plugin_state()
        newest = self.newest_write()
        age = None if newest is None else max(0.0, time.time() - newest)
        checkpoints = self.checkpoints()
        steps_done = int(self.metrics[-1].get("step", len(self.metrics))) if self.metrics else 0
        config, _, _ = self.config()
        planned = None
        if config and isinstance(config.get("loop"), dict):
            planned = config["loop"].get("steps")
        alive = bool(
            state
            and state.get("host") == socket.gethostname()
            and isinstance(state.get("pid"), int)
            and _pid_alive(state["pid"])
        )
        if (state and state.get("finished")) or (self.path / "final").is_dir():
            label, why = "finished", "the job marked itself finished" if state else "final/ exists"
        elif alive:
            label, why = "running", f"pid {state['pid'] if state else '?'} is alive on this host"
        elif age is not None and age < LIVE_WINDOW_S:
            label, why = "running", f"a log was written {age:.0f} s ago"
        elif newest is None:
            label, why = "empty", "nothing the RL loop writes is here yet"
        else:
            resume = (
                f"resumable from the step-{checkpoints[-1]} checkpoint (run the same command)"
                if checkpoints
                else "no step checkpoint: a restart begins from step 0"
            )
            label, why = "stopped", f"killed or crashed (last write {_ago(age)}); {resume}"
        return {
            "state": label,
            "why": why,
            "last_write_age_s": age,
            "steps_done": steps_done,
            "steps_planned": planned,
            "checkpoints": checkpoints,
            "episodes": len(self.episodes.rows),
        }

    def notes(self) -> list[str]:
        """Everything missing or damaged, in words."""
        out = []
        if not self.path.is_dir():
            return [f"{self.path} is not a directory"]
        _, _, config_note = self.config()
        if config_note:
            out.append(config_note)
        for tail, what in (
            (self.metrics_tail, "no metrics.jsonl: no optimizer step has finished (no curves)"),
            (self.episodes.tail, "no episodes/episodes.jsonl: no episode has finished yet"),
            (self.eval_tail, "no eval.jsonl: no held-out evaluation has finished yet"),
        ):
            if not tail.exists:
                out.append(what)
        out += self.metrics_tail.notes() + self.episodes.notes() + self.eval_tail.notes()
        out += self.fates_tail.notes()
        if not (self.path / "groups").is_dir():
            out.append("no groups/: per-token versions and advantages cannot be shown")
        elif not self.fates_tail.exists:
            out.append(
                "no groups/fates.jsonl: this run predates recorded fates, so each group's "
                "fate is inferred from metrics.jsonl, the config and the newest checkpoint"
            )
        if self.plugin_state() is None:
            out.append("no readable plugins/state.json: status is judged from file times only")
        if not self.checkpoints():
            out.append("no step checkpoint under checkpoints/")
        return out

    # --- curves --------------------------------------------------------------------------

    def series(self) -> dict[str, Any]:
        """Per-step curves, evaluation by version, and plugin changes on the step axis."""
        with self._lock:
            rows = list(self.metrics)
            evals = list(self.evals)
        steps: list[int | None] = []
        values: dict[str, list[float | None]] = {}
        events: list[dict[str, Any]] = []
        for i, row in enumerate(rows):
            step = row.get("step")
            steps.append(step if isinstance(step, int) else i + 1)
            flat: dict[str, float | None] = {}
            for key, value in row.items():
                if isinstance(value, dict) and key in ("reward_components", "monitor_flags"):
                    for sub, v in value.items():
                        flat[f"{key}/{sub}"] = _finite(v)
                elif key.startswith("plugins/") and _finite(value):
                    _, action, name = [*key.split("/", 2), "", ""][:3]
                    events.append({"step": steps[-1], "action": action, "name": name})
                elif _finite(value) is not None:
                    flat[key] = _finite(value)
            for key in values.keys() | flat.keys():
                column = values.setdefault(key, [None] * i)
                default = 0.0 if key.startswith("monitor_flags/") else None
                column.append(flat.get(key, default))
        events += self._processed_events(events)
        charts = []
        for title, wanted in CHARTS:
            keys = [
                k
                for w in wanted
                for k in sorted(values)
                if (k.startswith(w) if w.endswith("/") else k == w)
            ]
            charts.append({"title": title, "keys": keys})
        return {
            "steps": steps,
            "values": values,
            "charts": charts,
            "plugin_events": events,
            "eval": [
                {
                    "version": e.get("version"),
                    "pass@1": _finite(e.get("pass@1")),
                    "se": _finite(e.get("pass@1_se")),
                    "tasks": e.get("tasks"),
                }
                for e in evals
            ],
        }

    def _processed_events(self, seen: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Answered plugin requests (plugins/processed/) the step log does not show yet."""
        have = {(e["step"], e["action"], e["name"]) for e in seen}
        out = []
        try:
            paths = sorted((self.path / "plugins" / "processed").glob("*.json"))
        except OSError:
            return []
        for path in paths:
            try:
                event = json.loads(path.read_text()).get("event") or {}
                key = (event.get("step"), event.get("action"), event.get("name"))
            except (OSError, ValueError, AttributeError):
                continue
            ok = bool(event.get("ok"))
            action = key[1] if ok else f"{key[1]}_failed"
            if (key[0], action, key[2]) not in have and isinstance(key[0], int):
                out.append({"step": key[0], "action": action, "name": key[2]})
        return out

    # --- groups --------------------------------------------------------------------------

    def group_path(self, group_id: str) -> Path | None:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", group_id) or group_id.startswith("."):
            return None
        return self.path / "groups" / f"{group_id}.json"

    def group_fate(
        self, group_id: str, rewards: list[float | None], solved: list[bool]
    ) -> dict[str, Any]:
        """Why a group was trained on, dropped as stale, left out as constant, or waits:
        `text` (a headline), `reason`, `source` ("recorded": its line in groups/fates.jsonl;
        "undecided": no fate yet; "inferred": a run that predates recorded fates), `note`
        and the recorded line (`record`)."""
        record = self.fates.standing.get(group_id)
        if record is not None:
            return {
                "text": fate_headline(record),
                "reason": str(record.get("reason") or ""),
                "source": "recorded",
                "note": "recorded by the loop when it decided (groups/fates.jsonl)",
                "record": record,
            }
        path = self.group_path(group_id)
        if not self.fates_tail.exists or group_id in self.fates.unrecorded:
            text = self._inferred_fate(group_id, rewards, solved)
            return {
                "text": text,
                "reason": "",
                "source": "inferred",
                "note": INFERRED,
                "record": None,
            }
        if path is None or not path.exists():
            text = "still generating: its group file is written when its last episode finishes"
        elif self.status()["state"] == "running":
            text = "waiting in the queue for the trainer: not decided yet"
        else:
            text = "not decided when the run stopped: a resumed run judges it again"
        reason = ""
        voided = self.fates.voided.get(group_id)
        if voided is not None:
            reason = (
                f"the killed run had decided it ({fate_headline(voided)}) after its last "
                "checkpoint; the resume voided that, and the resumed run decides it again"
            )
        return {
            "text": text,
            "reason": reason,
            "source": "undecided",
            "note": "no fate recorded yet (groups/fates.jsonl)",
            "record": None,
        }

    def _inferred_fate(self, group_id: str, rewards: list[float | None], solved: list[bool]) -> str:
        """A fate guessed from metrics rows, the config and the newest checkpoint's dropped
        list: only for a run directory that predates recorded fates."""
        for row in self.metrics:
            if group_id in (row.get("trained_groups") or []):
                return f"trained at step {row.get('step')} (batch lag {row.get('group_lag_max')})"
        config, _, _ = self.config()
        loop = (config or {}).get("loop", {}) if isinstance(config, dict) else {}
        scored = [r for r in rewards if r is not None]
        by = loop.get("constant_by", "reward")
        constant = (len(set(scored)) <= 1) if by == "reward" else len(set(solved)) <= 1
        dropped = group_id in self._dropped()
        path = self.group_path(group_id)
        if path is None or not path.exists():
            return "still generating: its group file is written when its last episode finishes"
        if loop.get("drop_constant_groups", True) and constant:
            return (
                f"left out as constant: its episodes' {by}s are all equal, so every advantage "
                "is zero (loop.drop_constant_groups)"
            )
        if not scored:
            return "left out: no episode of it has a reward (the infrastructure failed)"
        limit = loop.get("max_off_policy_steps", "?")
        if dropped:
            return (
                f"dropped as stale: its oldest token was more than {limit} versions behind the "
                "trainer when its turn came (loop.max_off_policy_steps)"
            )
        if self.status()["state"] == "running":
            return "waiting in the queue for the trainer (or dropped since the last checkpoint)"
        return (
            f"not trained: dropped as stale (more than {limit} versions behind) after the last "
            "checkpoint, or left over when the run ended (fewer than a batch)"
        )

    def _dropped(self) -> set[str]:
        """Group ids the newest step checkpoint records as dropped (stale or constant)."""
        steps = self.checkpoints()
        if not steps:
            return set()
        for entry in sorted((self.path / "checkpoints").glob(f"step-{steps[-1]:08d}*")):
            try:
                state = json.loads((entry / "state.json").read_text())
                return set(state.get("sampler", {}).get("dropped", []))
            except (OSError, ValueError, AttributeError):
                continue
        return set()

    def tokenizer_candidates(self) -> list[Path]:
        config, _, _ = self.config()
        out = [self.path / "final" / "tokenizer.json"]
        model = (config or {}).get("model") if isinstance(config, dict) else None
        if isinstance(model, str):
            model_path = Path(model)
            if not model_path.is_absolute():
                model_path = self.path / model_path
            out.insert(0, model_path / "tokenizer.json")
        return out


def fate_headline(record: dict[str, Any]) -> str:
    """One line for a recorded fate (`composer_rl.rl.fates`): what happened, at which step."""
    step, lag, bound = record.get("step"), record.get("lag"), record.get("bound")
    staleness = f"lag {'unknown' if lag is None else lag}, bound {bound}" if "lag" in record else ""
    headline = {
        "trained": f"trained at step {step}",
        "dropped_stale": f"dropped as stale after step {step}",
        "regenerated": f"regenerated after step {step}: its task was generated again",
        "constant": "left out as constant",
        "infrastructure_failed": "left out: the infrastructure failed",
        "left_over": f"left over when the run ended after step {step}, not trained",
    }.get(str(record.get("fate")), f"{record.get('fate')} (step {step})")
    extras = [staleness] if staleness else []
    if record.get("life"):
        extras.append(f"trainer life {record['life']}")
    if record.get("resumed"):
        extras.append("queued again by a resume")
    if record.get("recovered"):
        extras.append("recorded at the resume")
    return headline + (f" ({'; '.join(extras)})" if extras else "")


def _ago(age: float | None) -> str:
    if age is None:
        return "never"
    if age < 120:
        return f"{age:.0f} s ago"
    if age < 7200:
        return f"{age / 60:.0f} min ago"
    if age < 172800:
        return f"{age / 3600:.1f} h ago"
    return f"{age / 86400:.1f} days ago"


def looks_like_run(path: Path) -> bool:
    return any(
        (path / rel).exists() for rel in ("metrics.jsonl", EPISODES, "config.toml", "groups")
    )


def find_runs(root: Path, depth: int = 3) -> list[Path]:
    """Run directories at or below `root` (a directory the RL loop wrote into)."""
    found: list[Path] = []
    if not root.is_dir():
        return found
    if looks_like_run(root):
        return [root]
    if depth == 0:
        return found
    try:
        children = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError:
        return found
    for child in children:
        found += find_runs(child, depth - 1)
    return found


__all__ = ["CHARTS", "LIVE_WINDOW_S", "RunDir", "fate_headline", "find_runs", "looks_like_run"]
