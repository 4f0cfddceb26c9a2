"""Service classes the Ray runtime tests run as actors (plain classes, no Ray in them)."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Any

import ray

from composer_infra.checkpoint.rollout import RolloutCheckpoint, RolloutStore
from composer_infra.store.objects import FileStore


def expected_token(prompt: int, position: int) -> int:
    """The token a deterministic policy emits at `position` of `prompt`'s rollout."""
    return int(hashlib.sha256(f"{prompt}:{position}".encode()).hexdigest()[:4], 16)


def node_id() -> str | None:
    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None


class TokenRolloutService:
    """A rollout worker: writes a rollout checkpoint after every token; resumes from one.

    ``payload``: ``prompt``, ``length``, optional ``delay`` per token, ``crash_at`` (the
    process exits hard at that position, once; a marker file remembers it happened) and
    ``wait_for`` (a file to wait for before starting).
    """

    def __init__(self, name: str, store_dir: str, marker_dir: str) -> None:
        self.name = name
        self.store = RolloutStore(FileStore(store_dir))
        self.marker_dir = Path(marker_dir)
        self.marker_dir.mkdir(parents=True, exist_ok=True)

    def rollout(self, item_id: str, payload: dict[str, Any]) -> dict[str, Any]:
        if "wait_for" in payload:
            deadline = time.monotonic() + 120
            while not Path(payload["wait_for"]).exists() and time.monotonic() < deadline:
                time.sleep(0.02)
        ck = self.store.load(item_id) or RolloutCheckpoint(
            rollout_id=item_id, prompt_id=payload["prompt"]
        )
        resumed_from = len(ck.tokens)
        while len(ck.tokens) < payload["length"]:
            position = len(ck.tokens)
            if payload.get("crash_at") == position:
                marker = self.marker_dir / f"{item_id}.crashed"
                if not marker.exists():
                    marker.write_text(str(os.getpid()))
                    os._exit(1)  # a hard crash: no cleanup, no exception
            time.sleep(payload.get("delay", 0.0))
            ck = ck.model_copy(
                update={
                    "tokens": [*ck.tokens, expected_token(payload["prompt"], position)],
                    "policy_versions": [*ck.policy_versions, 0],
                    "sandbox_snapshot": f"snapshot/{item_id}/{position}",
                    "worker": self.name,
                }
            )
            self.store.save(ck)
        return {
            "tokens": ck.tokens,
            "resumed_from": resumed_from,
            "worker": self.name,
            "pid": os.getpid(),
            "node": node_id(),
        }

    def where(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "node": node_id(), "name": self.name}


class EvaluationService:
    """A stand-in for a stateful plain service: scores answers, keeps a running mean."""

    def __init__(self) -> None:
        self.scores: list[float] = []

    def score(self, answer: str, reference: str) -> float:
        value = float(answer.strip() == reference.strip())
        self.scores.append(value)
        return value

    def mean(self) -> float:
        return sum(self.scores) / len(self.scores) if self.scores else 0.0
