"""What the services share: building the policy from a config or a checkpoint, packing token batches."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import torch

from composer_infra.store import WeightSubscriber
from composer_model import ComposerModel, ModelConfig, load_pretrained

ModelSource = ModelConfig | str | Path
"""A `ModelConfig` (fresh weights) or a `save_pretrained` directory (its weights)."""


def build_model(source: ModelSource, *, seed: int = 0) -> ComposerModel:
    """The policy every service holds; the same source gives the same architecture everywhere.

    A config builds seeded random weights (trainers publish their own before anyone
    reads them); a directory loads the checkpoint written by `save_pretrained`.
    """
    if isinstance(source, ModelConfig):
        torch.manual_seed(seed)
        return ComposerModel(source)
    path = Path(source)
    if not path.is_dir():
        raise FileNotFoundError(
            f"model source {str(path)!r} is not a directory written by save_pretrained; "
            "pass a ModelConfig (e.g. composer_model.preset('tiny')) or a checkpoint directory"
        )
    return load_pretrained(path)


def pack_sequences(
    sequences: Sequence[Sequence[int]], vocab_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token sequences -> one packed row [1, T] and `cu_seqlens` (documents never attend across).

    Each sequence needs two tokens (one next-token target); ids must be in the vocabulary.
    """
    if not sequences:
        raise ValueError("the batch is empty: give at least one token sequence")
    bounds = [0]
    flat: list[int] = []
    for i, seq in enumerate(sequences):
        ids = [int(t) for t in seq]
        if len(ids) < 2:
            raise ValueError(
                f"sequence {i} has {len(ids)} token(s); a training or evaluation sequence "
                "needs at least 2 (one next-token target)"
            )
        if min(ids) < 0 or max(ids) >= vocab_size:
            raise ValueError(f"sequence {i} has token ids outside [0, {vocab_size})")
        flat.extend(ids)
        bounds.append(len(flat))
    return torch.tensor([flat], dtype=torch.long), torch.tensor(bounds, dtype=torch.int32)


def wait_for_version(subscriber: WeightSubscriber, version: int, timeout_s: float) -> int:
    """Sync until the subscriber holds `version` or newer; returns the version held.

    Never waits forever: after `timeout_s` a `TimeoutError` says which version did not
    arrive from which store (a trainer that died, or a store the services do not share).
    A version that fails its checksum is skipped by the subscriber and never applied.
    """
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
    deadline = time.monotonic() + timeout_s
    while True:
        held = subscriber.sync()
        if held is not None and held >= version:
            return held
        if time.monotonic() >= deadline:
            raise TimeoutError(
                f"weight version {version} did not arrive from {subscriber.store.url} within "
                f"{timeout_s:.0f} s (holding {held}); is the training service publishing to "
                "the same store?"
            )
        time.sleep(0.05)
