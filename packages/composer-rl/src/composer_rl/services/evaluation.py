"""The evaluation service of the report: scores the newest published policy on held-out data.

A plain class; `composer_rl.services.start_services` runs it as a Ray actor. It follows
the trainer through its own `WeightSubscriber` (so evaluation never stalls training or
inference) and reports held-out next-token cross-entropy for the version it evaluated.
Task-level evaluation (episodes in sandboxes, pass@k) lives in `composer_rl.eval` and
plugs in here when the RL loop schedules it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from composer_infra.store import WeightSubscriber, open_store
from composer_model import compute_loss, set_threads
from composer_rl.services._common import ModelSource, build_model, pack_sequences


class EvaluationService:
    """Held-out next-token cross-entropy of the newest published policy version."""

    def __init__(
        self,
        model: ModelSource,
        store_url: str,
        *,
        readers: int = 2,
        threads: int | None = None,
    ) -> None:
        set_threads(threads)
        self.model = build_model(model).eval()
        self.policy_version: int | None = None
        self.subscriber = WeightSubscriber(
            open_store(store_url), readers=readers, on_update=self._load
        )

    def _load(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        self.model.load_state_dict(dict(state_dict), strict=True)
        self.policy_version = version

    def evaluate(self, sequences: Sequence[Sequence[int]]) -> dict[str, Any]:
        """Sync to the newest version, then score `sequences` (token ids, >= 2 each).

        Returns ``{"version", "loss", "perplexity", "tokens"}``; ``loss`` is the mean
        next-token cross-entropy in nats over every target token.
        """
        self.subscriber.sync()
        if self.policy_version is None:
            raise RuntimeError(
                "no policy version is published yet: start the training service first "
                "(it publishes version 0 when it starts)"
            )
        input_ids, cu_seqlens = pack_sequences(sequences, self.model.config.vocab_size)
        with torch.no_grad():
            loss = float(
                compute_loss(self.model, input_ids, cu_seqlens=cu_seqlens, mtp_weight=0.0).lm_loss
            )
        return {
            "version": self.policy_version,
            "loss": loss,
            "perplexity": math.exp(loss),
            "tokens": int(input_ids.numel()) - len(sequences),
        }

    def close(self) -> None:
        self.subscriber.close()
