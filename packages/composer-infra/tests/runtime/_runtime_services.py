"""Service classes the Ray runtime tests run as actors (plain classes, no Ray in them)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import ray


def expected_token(prompt: int, position: int) -> int:
    """The token a deterministic policy emits at `position` of `prompt`'s rollout."""
    return int(hashlib.sha256(f"{prompt}:{position}".encode()).hexdigest()[:4], 16)


def node_id() -> str | None:
    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None


class TokenRolloutService:
    """A rollout worker: a deterministic policy's tokens for a prompt, and where it ran.

    ``payload``: ``prompt``, ``length`` and optional ``crash_at`` (the process exits hard
    at that position, once; a marker file remembers it happened). ``calls`` lives in the
    actor's memory only, so a restarted actor counts from zero again.
    """

    def __init__(self, name: str, marker_dir: str) -> None:
        self.name = name
        self.marker_dir = Path(marker_dir)
        self.marker_dir.mkdir(parents=True, exist_ok=True)
        self.calls = 0

    def rollout(self, item_id: str, payload: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        tokens: list[int] = []
        for position in range(payload["length"]):
            if payload.get("crash_at") == position:
                marker = self.marker_dir / f"{item_id}.crashed"
                if not marker.exists():
                    marker.write_text(str(os.getpid()))
                    os._exit(1)  # a hard crash: no cleanup, no exception
            tokens.append(expected_token(payload["prompt"], position))
        return {
            "tokens": tokens,
            "calls": self.calls,
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
