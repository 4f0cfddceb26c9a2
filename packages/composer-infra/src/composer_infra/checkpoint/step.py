"""Step-level checkpoints: everything a killed trainer needs to resume exactly.

One directory per checkpoint, built under a temp name and renamed into place, then a
``latest`` file (replaced atomically) names it. A checkpoint directory therefore either
exists complete or not at all, and ``latest`` only ever names complete ones::

    ckpt/step-00000012-3f9a1c2e/model.safetensors   model weights (shared tensors handled)
                                optimizer.pt        optimizer.state_dict()
                                rng.pt              Python / NumPy / torch (/ CUDA) RNG states
                                state.json          step, policy version, sampler state,
                                                    caller's extra state
    ckpt/latest                                     "step-00000012-3f9a1c2e"

Resuming (`load` without a path) starts from the checkpoint ``latest`` names and, if that
one cannot be read (a disk error, a file damaged after it was written), logs why and falls
back to the next newest: a damaged checkpoint costs the steps since the one before it,
never the run. Only unreadable checkpoints are skipped; any other error propagates.
"""

from __future__ import annotations

import json
import logging
import pickle
import uuid
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, Field
from safetensors import SafetensorError
from safetensors.torch import load_file, load_model, save_model

from composer_infra.checkpoint.atomic import (
    atomic_directory,
    atomic_write_bytes,
    remove_directory,
    remove_temp_entries,
)
from composer_infra.checkpoint.rng import rng_state, set_rng_state

FILES = ("model.safetensors", "optimizer.pt", "rng.pt", "state.json")

log = logging.getLogger(__name__)

# What reading a damaged or truncated checkpoint file raises (safetensors, torch.load's
# zip reader and unpickler, the file system); anything else is a bug and propagates.
_UNREADABLE = (OSError, EOFError, RuntimeError, ValueError, pickle.UnpicklingError, SafetensorError)


class CheckpointError(RuntimeError):
    """A checkpoint is missing or unreadable; the message names the path."""


class StepState(BaseModel):
    """The JSON part of a step checkpoint."""

    format: int = 1
    step: int = Field(ge=0)
    policy_version: int = Field(ge=0)
    sampler: dict[str, Any]
    extra: dict[str, Any] = Field(default_factory=dict)


class StepCheckpointer:
    """Writes and restores step checkpoints under `root` (keeps the newest `keep_last`)."""

    def __init__(self, root: str | Path, *, keep_last: int | None = 3) -> None:
        if keep_last is not None and keep_last < 1:
            raise ValueError(f"keep_last must be >= 1 or None (keep all), got {keep_last}")
        self.root = Path(root)
        self.keep_last = keep_last
        self.root.mkdir(parents=True, exist_ok=True)
        remove_temp_entries(self.root)

    # -- writing ---------------------------------------------------------------------

    def save(
        self,
        *,
        step: int,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        sampler: dict[str, Any],
        policy_version: int,
        extra: dict[str, Any] | None = None,
    ) -> Path:
        """Write a checkpoint, then point ``latest`` at it; returns its directory."""
        state = StepState(
            step=step,
            policy_version=policy_version,
            sampler=sampler,
            extra=dict(extra or {}),
        )
        final = self.root / f"step-{step:08d}-{uuid.uuid4().hex[:8]}"
        with atomic_directory(final) as tmp:
            save_model(model, str(tmp / "model.safetensors"))
            torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
            torch.save(rng_state(), tmp / "rng.pt")
            (tmp / "state.json").write_text(state.model_dump_json(indent=1))
        atomic_write_bytes(self.root / "latest", final.name.encode())
        self._prune(keep=final)
        return final

    def _prune(self, keep: Path) -> None:
        if self.keep_last is None:
            return
        for old in self._oldest_first()[: -self.keep_last]:
            if old != keep:
                remove_directory(old)

    # -- reading ---------------------------------------------------------------------

    def checkpoints(self) -> list[Path]:
        return sorted(p for p in self.root.glob("step-*") if p.is_dir())

    def _oldest_first(self) -> list[Path]:
        return sorted(
            self.checkpoints(), key=lambda p: (int(p.name.split("-")[1]), p.stat().st_mtime)
        )

    def latest(self) -> Path | None:
        pointer = self.root / "latest"
        if not pointer.exists():
            return None
        path = self.root / pointer.read_text().strip()
        if not path.is_dir():
            raise CheckpointError(f"{pointer} names {path.name}, which does not exist")
        return path

    def read_state(self, path: Path) -> StepState:
        missing = [f for f in FILES if not (path / f).is_file()]
        if missing:
            raise CheckpointError(f"checkpoint {path} is missing {missing}")
        try:
            return StepState.model_validate_json((path / "state.json").read_text())
        except ValueError as error:
            raise CheckpointError(f"{path}/state.json is unreadable: {error}") from None

    def candidates(self) -> list[Path]:
        """Checkpoints to resume from, best first: the one ``latest`` names, then the rest
        newest first (a directory written just before a crash, ahead of its pointer, is
        complete too: directories only appear whole)."""
        ordered = list(reversed(self._oldest_first()))
        pointer = self.root / "latest"
        if pointer.exists():
            named = self.root / pointer.read_text().strip()
            if named in ordered:
                ordered.remove(named)
                ordered.insert(0, named)
        return ordered

    def load(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        *,
        path: Path | None = None,
        restore_rng: bool = True,
    ) -> StepState | None:
        """Restore model, optimizer and RNGs; returns the checkpoint's state, None if none.

        With `path`, exactly that checkpoint (`CheckpointError` if it is unreadable).
        Without, the newest readable one: an unreadable checkpoint is logged (warning,
        naming the path and the error) and the one before it is used; `CheckpointError`
        if checkpoints exist but none is readable.
        """
        if path is not None:
            return self._load_from(path, model, optimizer, restore_rng)
        candidates = self.candidates()
        if not candidates:
            return None
        failures: list[str] = []
        for candidate in candidates:
            try:
                state = self._load_from(candidate, model, optimizer, restore_rng)
            except CheckpointError as error:
                log.warning("skipping unreadable checkpoint %s: %s", candidate, error)
                failures.append(str(error))
                continue
            if failures:
                log.warning("resumed from %s (step %d) instead", candidate, state.step)
            return state
        raise CheckpointError(f"no readable checkpoint under {self.root}: " + "; ".join(failures))

    def _load_from(
        self,
        path: Path,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer | None,
        restore_rng: bool,
    ) -> StepState:
        """Read every part of `path` first, then apply them: a damaged file raises
        `CheckpointError` before the model or the optimizer has been touched."""
        state = self.read_state(path)
        try:
            load_file(str(path / "model.safetensors"))  # whole-file check before loading
            optim_state = (
                torch.load(path / "optimizer.pt", weights_only=True)
                if optimizer is not None
                else None
            )
            rng = torch.load(path / "rng.pt", weights_only=True) if restore_rng else None
        except _UNREADABLE as error:
            raise CheckpointError(
                f"checkpoint {path} is unreadable: {type(error).__name__}: {error}"
            ) from error
        load_model(model, str(path / "model.safetensors"))
        if optimizer is not None and optim_state is not None:
            optimizer.load_state_dict(optim_state)
        if rng is not None:
            set_rng_state(rng)
        return state

    def verify(self, path: Path) -> StepState:
        """Read every file of a checkpoint fully (for audits and tests); raises if any is bad."""
        state = self.read_state(path)
        from safetensors.torch import load_file

        load_file(str(path / "model.safetensors"))
        torch.load(path / "optimizer.pt", weights_only=True)
        torch.load(path / "rng.pt", weights_only=True)
        json.loads((path / "state.json").read_text())
        return state
