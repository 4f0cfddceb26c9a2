"""The evaluation service of the report: scores the newest published policy on held-out data.

A plain class; `composer_rl.rl.services.start_services` runs it as a Ray actor. It follows
the trainer through its own `WeightSubscriber` (so evaluation never stalls training or
inference) and reports held-out next-token cross-entropy for the version it evaluated.
`evaluate_tasks` runs greedy agent episodes on held-out tasks with the newest version
(pass@1 with its standard error): the RL loop schedules it every Nth version without
waiting for it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from composer_infra.store import WeightSubscriber
from composer_model import ComposerTokenizer, InferenceEngine, lm_forward_loss, set_threads
from composer_rl.agent.episode import EpisodeRunner, RunnerConfig
from composer_rl.agent.sandboxes import Sandboxes
from composer_rl.eval.stats import mean_se
from composer_rl.plugins import JobPlugins
from composer_rl.rl.services._common import (
    ModelSource,
    build_model,
    pack_sequences,
    wait_for_version,
)
from composer_rl.tasks.model import Task


class EvaluationService:
    """Held-out next-token cross-entropy of the newest published policy version."""

    def __init__(
        self,
        model: ModelSource,
        store_url: str,
        *,
        readers: int = 2,
        threads: int | None = None,
        plugins: JobPlugins | None = None,
        sandboxes: Sandboxes | None = None,
    ) -> None:
        set_threads(threads)
        # The job's plugins: the weight store and the episodes' sandbox backends are looked
        # up in them (a service made alone is a job of its own, default configuration).
        self.plugins = plugins if plugins is not None else JobPlugins()
        # Where episodes' sandboxes live: the environment service in a Ray run, else here.
        self.sandboxes = sandboxes
        self.model = build_model(model).eval()
        self.policy_version: int | None = None
        self.subscriber = WeightSubscriber(
            self.plugins.open_store(store_url), readers=readers, on_update=self._load
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
                lm_forward_loss(
                    self.model, input_ids, cu_seqlens=cu_seqlens, mtp_weight=0.0
                ).lm_loss
            )
        return {
            "version": self.policy_version,
            "loss": loss,
            "perplexity": math.exp(loss),
            "tokens": int(input_ids.numel()) - len(sequences),
        }

    def evaluate_tasks(
        self,
        tokenizer_path: str,
        tasks: Sequence[Task],
        runner: RunnerConfig,
        version: int | None = None,
        timeout_s: float = 300.0,
    ) -> dict[str, Any]:
        """Run one greedy episode per task with `version` (or newer; default: the newest
        published), return pass@1 ± s.e.

        Runs on this service's own engine and weight subscription, so the RL loop keeps
        generating and training while a version is evaluated.
        """
        if version is None:
            self.subscriber.sync()
        else:
            wait_for_version(self.subscriber, version, timeout_s)
        if self.policy_version is None:
            raise RuntimeError("no policy version is published yet: start the training service")
        version = self.policy_version
        tokenizer = ComposerTokenizer.from_file(tokenizer_path)
        engine = InferenceEngine(self.model, tokenizer, max_batch_size=16)
        greedy = runner.model_copy(update={"temperature": 0.0, "record_routing": False})
        episodes = EpisodeRunner(engine, tokenizer, greedy, self.plugins.backends, self.sandboxes)
        try:
            results = episodes.run(list(tasks))
        finally:
            episodes.close()
        mean, se = mean_se([float(r.solved) for r in results])
        return {"version": version, "pass@1": mean, "pass@1_se": se, "tasks": len(results)}

    def close(self) -> None:
        self.subscriber.close()
