"""The files through which ``composer-rl plugins`` talks to a running job.

Everything lives under ``RUN_DIR/plugins/`` and every file is written whole to a
temporary name and renamed into place, so a reader never sees half a file and a crash
never leaves one::

    requests/<ns>-<id>.json    queued by the CLI, in submission order
    processed/<ns>-<id>.json   the same request with the job's answer (step, ok, error)
    state.json                 the job's view: its process, step, registered plugins,
                               and the run-time changes to replay if it restarts
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Action = Literal["add", "remove"]


class PluginRequest(BaseModel):
    """One ``add`` or ``remove`` asked for by the CLI."""

    model_config = ConfigDict(extra="forbid")

    id: str
    action: Action
    target: str = Field(description="a spec for add; a plugin name or spec for remove")
    name: str | None = None
    submitted_at: float


class PluginEvent(BaseModel):
    """What the job did with a request (or a restore), at which step."""

    model_config = ConfigDict(extra="forbid")

    step: int
    action: Action
    name: str
    target: str
    ok: bool
    error: str = ""
    request_id: str = ""


class ProcessedRequest(BaseModel):
    request: PluginRequest
    event: PluginEvent


class RegisteredPlugin(BaseModel):
    name: str
    source: str = Field(description="builtin, entry point, config, or runtime")
    spec: str = ""
    hooks: list[str] = Field(default_factory=list)
    status: Literal["registered", "unavailable", "disabled"] = "registered"
    error: str = Field(default="", description="why it is unavailable or disabled")


class JobState(BaseModel):
    """Written by the job at start and after every change; read by ``plugins list``.

    ``refusal`` is set in the run directory of a command that scores nothing (``pretrain``)
    and says why: the CLI refuses ``--run`` there instead of queueing requests that no one
    will apply. ``finished`` is set when the job ends normally; a job killed without
    that keeps ``finished`` false and applies queued requests when it resumes.
    """

    command: str = ""
    refusal: str = ""
    finished: bool = False
    pid: int
    host: str
    python: str
    sys_path: list[str]
    step: int
    updated_at: float
    plugins: list[RegisteredPlugin]
    runtime_added: dict[str, str] = Field(default_factory=dict, description="name -> spec")
    runtime_removed: list[str] = Field(default_factory=list)
    last_request: str = Field(
        default="", description="id of the last request applied (ids sort by submission)"
    )
    unavailable: dict[str, str] = Field(
        default_factory=dict,
        description="run-time plugins that could not load (name -> error); kept, retried",
    )
    disabled: dict[str, str] = Field(
        default_factory=dict, description="plugins disabled by the hook budget (name -> why)"
    )


class PluginDirs:
    """The paths of one run's plugin control files."""

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.root = Path(run_dir) / "plugins"
        self.requests = self.root / "requests"
        self.processed = self.root / "processed"
        self.state = self.root / "state.json"

    def make(self) -> None:
        self.requests.mkdir(parents=True, exist_ok=True)
        self.processed.mkdir(parents=True, exist_ok=True)


def write_json_atomic(path: Path, data: Any) -> None:
    """Write `data` as JSON to `path` so that readers see the old or the new file, whole.

    Not composer-infra's `atomic_write_bytes`: `composer_rl.plugins` must import in a plugin
    author's environment that holds composer-rewards alone (no Ray, no boto3), which
    `tests/test_plugins_example.py` installs and runs the plugin job in.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def submit(
    run_dir: str | os.PathLike[str], action: Action, target: str, name: str | None = None
) -> PluginRequest:
    """Queue a request for the job of `run_dir`; it is applied at the job's next step boundary."""
    dirs = PluginDirs(run_dir)
    dirs.make()
    request = PluginRequest(
        id=f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}",
        action=action,
        target=target,
        name=name,
        submitted_at=time.time(),
    )
    write_json_atomic(dirs.requests / f"{request.id}.json", request.model_dump())
    return request


def pending(run_dir: str | os.PathLike[str]) -> list[PluginRequest]:
    """Queued requests in submission order (ids sort by submission time)."""
    dirs = PluginDirs(run_dir)
    if not dirs.requests.is_dir():
        return []
    return [
        PluginRequest.model_validate_json(path.read_text())
        for path in sorted(dirs.requests.glob("*.json"))
    ]


def processed(run_dir: str | os.PathLike[str], request_id: str) -> ProcessedRequest | None:
    path = PluginDirs(run_dir).processed / f"{request_id}.json"
    if not path.exists():
        return None
    return ProcessedRequest.model_validate_json(path.read_text())


def recent(run_dir: str | os.PathLike[str], count: int = 10) -> list[ProcessedRequest]:
    dirs = PluginDirs(run_dir)
    if not dirs.processed.is_dir():
        return []
    paths = sorted(dirs.processed.glob("*.json"))[-count:]
    return [ProcessedRequest.model_validate_json(p.read_text()) for p in paths]


def read_state(run_dir: str | os.PathLike[str]) -> JobState | None:
    path = PluginDirs(run_dir).state
    if not path.exists():
        return None
    return JobState.model_validate_json(path.read_text())
