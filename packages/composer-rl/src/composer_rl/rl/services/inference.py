"""The inference service of the report: an `InferenceEngine` that follows the trainer's versions.

A plain class; `composer_rl.rl.services.start_services` runs it as a Ray actor. Weights
arrive through a `WeightSubscriber` whose `on_update` is the engine's `update_weights`,
so every generated token carries the policy version that sampled it (what off-policy
corrections in the RL loss need), with its behaviour log-probability and, on request,
the experts it was routed to (for router replay in the trainer).
"""

from __future__ import annotations

from collections.abc import Sequence

from composer_infra.store import WeightSubscriber
from composer_model import (
    ComposerTokenizer,
    GenerationResult,
    InferenceEngine,
    SamplingParams,
    set_threads,
)
from composer_rl.agent.episode import EpisodeResult, EpisodeRunner, RunnerConfig
from composer_rl.agent.sandboxes import Sandboxes
from composer_rl.plugins import JobPlugins
from composer_rl.rl.services._common import ModelSource, build_model, wait_for_version
from composer_rl.tasks.model import Task


class InferenceService:
    """Generation from token prompts with the newest published policy (after `sync`)."""

    def __init__(
        self,
        model: ModelSource,
        store_url: str,
        *,
        max_batch_size: int = 8,
        readers: int = 2,
        follow_interval_s: float | None = None,
        threads: int | None = None,
        max_seq_len: int | None = None,
        compile_decode: bool = False,
        plugins: JobPlugins | None = None,
        sandboxes: Sandboxes | None = None,
    ) -> None:
        set_threads(threads)
        # The job's plugins: the weight store and the episodes' sandbox backends are looked
        # up in them (a service made alone is a job of its own, default configuration).
        self.plugins = plugins if plugins is not None else JobPlugins()
        # Where episodes' sandboxes live: the environment service in a Ray run, else here.
        self.sandboxes = sandboxes
        self.engine = InferenceEngine(
            build_model(model),
            max_batch_size=max_batch_size,
            max_seq_len=max_seq_len,
            compile_decode=compile_decode,
        )
        self.runner: EpisodeRunner | None = None
        self.subscriber = WeightSubscriber(
            self.plugins.open_store(store_url),
            readers=readers,
            on_update=self.engine.update_weights,
        )
        if follow_interval_s is not None:  # pick up versions in the background as they land
            self.subscriber.start_following(interval_s=follow_interval_s)

    def sync(self) -> int | None:
        """Load the newest complete version from the store; returns the version now held.

        None means nothing was published yet (the engine keeps its initial weights).
        """
        return self.subscriber.sync()

    def version(self) -> int:
        """The policy version new tokens are stamped with."""
        return self.engine.version

    def wait_for_version(self, version: int, timeout_s: float = 300.0) -> int:
        """Block until `version` (or newer) is applied; TimeoutError after `timeout_s`."""
        return wait_for_version(self.subscriber, version, timeout_s)

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        max_new_tokens: int = 16,
        temperature: float = 1.0,
        seed: int | None = None,
        stop_token_ids: list[int] | None = None,
        return_routing: bool = False,
    ) -> list[GenerationResult]:
        """Sample continuations of token-id prompts.

        Each result has `token_ids`, `logprobs` (under the sampling distribution),
        `versions` (per token) and, with `return_routing`, `routing`
        ([prompt + generated tokens, MoE layers, top_k] expert indices).
        With `seed`, prompt i uses seed + i (reproducible regardless of batching).
        """
        params = [
            SamplingParams(
                temperature=temperature,
                max_new_tokens=max_new_tokens,
                seed=None if seed is None else seed + i,
                stop_token_ids=stop_token_ids,
                return_routing=return_routing,
            )
            for i in range(len(prompts))
        ]
        return self.engine.generate([list(p) for p in prompts], params)

    # --- rollouts for the RL loop -------------------------------------------------------

    def start_rollouts(self, tokenizer_path: str, config: RunnerConfig) -> None:
        """Drive agent episodes on this engine (the RL loop's rollout side)."""
        tokenizer = ComposerTokenizer.from_file(tokenizer_path)
        self.engine.tokenizer = tokenizer
        self.runner = EpisodeRunner(
            self.engine, tokenizer, config, self.plugins.backends, self.sandboxes
        )

    def _runner(self) -> EpisodeRunner:
        if self.runner is None:
            raise RuntimeError("call start_rollouts(tokenizer_path, config) before episodes")
        return self.runner

    def submit_episodes(self, task: Task, samples: int, key: str) -> None:
        """Queue `samples` episodes of `task`, labelled `key` (the group id)."""
        runner = self._runner()
        for sample in range(samples):
            runner.submit(task, sample, key)

    def poll_episodes(self, max_steps: int = 64) -> list[tuple[str, EpisodeResult]]:
        """Decode until some episodes are graded (or `max_steps` engine steps); return them.

        Weights followed from the store are applied between these steps (in flight), so an
        episode's tokens may carry several versions.
        """
        runner = self._runner()
        done: list[EpisodeResult] = []
        for _ in range(max_steps):
            if not runner.in_flight:
                break
            done += runner.poll()
            if done:
                break
        return [(r.key, r) for r in done]

    def close(self) -> None:
        if self.runner is not None:
            self.runner.close()
        self.subscriber.close()
