"""Wiring of an RL run on the services: what `composer-rl rl` and the bare command call.

The run directory is the single source of truth::

    config.toml            the configuration as resolved
    metrics.jsonl          one line per optimizer step (rewards, lag, KL, mismatch, counts),
                           and a {"kind": "restart"} line where a resumed run
                           supersedes steps its killed predecessor logged
    checkpoints/           the trainer's step checkpoints (model, Adam, RNG, loop state)
    groups/                every finished group, written once (group-level checkpoint)
    groups/fates.jsonl     every finished group's fate as the loop decided it (trained,
                           dropped as stale, constant, ...), and a restart line at each resume
    sampler.json           the tasks already handed out (single epoch across resumes)
    weights/               the file:// weight store (unless --store names another)
    episodes/episodes.jsonl  one line per episode (reward components, flags, versions, text)
    final/                 the last policy, loadable by `composer-rl eval`

A killed run started again with the same command resumes from all of it: the trainer from
its latest step checkpoint, the orchestrator with the groups no checkpointed step trained
(those the lost steps trained too, judged for staleness on the version tree,
`composer_rl.rl.lineage`). The steps logged after the restored one are superseded: the
restart line says so, and `lineage.final_lineage` reads the steps the final policy
descends from. The fate log's restart line voids the fates the killed run decided after its
checkpoint; the resumed run decides them again (`composer_rl.rl.fates`).
"""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from composer_infra.checkpoint import GroupStore
from composer_model import ComposerTokenizer
from composer_parallel import ParallelDims
from composer_rl.errors import require_model_dir
from composer_rl.plugins import JobPlugins, PluginSession
from composer_rl.progress import phase_line
from composer_rl.rl.config import ConfigError, RLConfig, to_toml
from composer_rl.rl.episodes import EPISODES_LOG, score_result
from composer_rl.rl.fates import FATES_LOG, FateLog
from composer_rl.rl.jsonl import cut_torn_tail, read_jsonl
from composer_rl.rl.lineage import RESTART, final_lineage
from composer_rl.rl.orchestrator import Orchestrator, ScoredEpisode, group_task
from composer_rl.rl.sampler import LearnabilityConfig, TaskSampler, UpsamplingConfig
from composer_rl.rl.services.evaluation import EvaluationService
from composer_rl.rl.services.inference import InferenceService
from composer_rl.rl.services.training import TrainingConfig, TrainingService
from composer_rl.rl.trainer import ResumeState
from composer_rl.tasks import (
    BuiltinTaskSource,
    DirectoryTaskSource,
    Split,
    TaskMix,
    TaskSource,
    collect_tasks,
    sample_tasks,
)
from composer_rl.tasks.invented import renamed_share
from composer_rl.tasks.model import Task
from composer_rl.tasks.templates.base import is_validation


class LocalEndpoint:
    """A service object driven from one worker thread (calls run one at a time, like an actor)."""

    def __init__(self, service: Any) -> None:
        self.service = service
        self._pool = ThreadPoolExecutor(1)

    def call(self, method: str, *args: Any, **kwargs: Any) -> Future[Any]:
        return self._pool.submit(getattr(self.service, method), *args, **kwargs)

    def close(self) -> None:
        self._pool.shutdown(wait=True)


class RayEndpoint:
    """A Ray actor; each call is `actor.method.remote(...)` seen as a concurrent future."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor

    def call(self, method: str, *args: Any, **kwargs: Any) -> Future[Any]:
        return getattr(self.actor, method).remote(*args, **kwargs).future()

    def close(self) -> None:
        pass


class RankGroupEndpoint:
    """The rank actors of a parallel trainer as one endpoint.

    Every call goes to every rank (each keeps its share of a batch; the step's collectives
    need all of them), submitted under a lock so all ranks see the calls in one order, with
    the arguments stored once in Ray's object store. The future resolves when every rank
    has answered, to rank 0's result, or fails as soon as any rank fails."""

    def __init__(self, actors: Sequence[Any]) -> None:
        if not actors:
            raise ValueError("a rank group needs at least one actor")
        self.ranks = [RayEndpoint(actor) for actor in actors]
        self._lock = threading.Lock()

    def call(self, method: str, *args: Any, **kwargs: Any) -> Future[Any]:
        import ray

        refs = [ray.put(a) for a in args]
        named = {k: ray.put(v) for k, v in kwargs.items()}
        with self._lock:
            futures = [rank.call(method, *refs, **named) for rank in self.ranks]
        return _rank_zero(futures)

    def close(self) -> None:
        pass


def _rank_zero(futures: list[Future[Any]]) -> Future[Any]:
    """A future of futures[0]'s result once all are done; the first failure fails it."""
    out: Future[Any] = Future()
    pending = [len(futures)]
    lock = threading.Lock()

    def done(future: Future[Any]) -> None:
        with lock:
            if out.done():
                return
            error = future.exception()
            if error is not None:
                out.set_exception(error)
                return
            pending[0] -= 1
            if pending[0] == 0:
                out.set_result(futures[0].result())

    for future in futures:
        future.add_done_callback(done)
    return out


class BuiltinTrainingSource(BuiltinTaskSource):
    """The built-in templates' tasks without the validation split carved from their training
    split (settings are chosen on those, so RL never trains on them)."""

    def tasks(self, split: Split) -> Iterator[Task]:
        return (t for t in super().tasks(split) if not is_validation(t))


def training_sources(config: RLConfig) -> list[TaskSource]:
    """The run's own task sources: `tasks.source`, or else the built-in templates unless
    `tasks.builtin` is false. The job's plugin task sources are added to these."""
    if config.tasks.source:
        return [DirectoryTaskSource("user", config.tasks.source)]
    return [BuiltinTrainingSource()] if config.tasks.builtin else []


def training_tasks(config: RLConfig, plugins: JobPlugins) -> list[Task]:
    """The training split of `training_sources` and of the job's plugin task sources, renamed
    with invented names where `tasks.invented_names` asks (`invented.renamed_share`)."""
    tasks = collect_tasks(Split.TRAIN, training_sources(config), pm=plugins.pm)
    if config.tasks.per_template:
        tasks = sample_tasks(tasks, config.tasks.per_template, seed=config.seed)
    if config.tasks.invented_names != "off":
        tasks = renamed_share(
            tasks, config.tasks.invented_share, config.seed, config.tasks.invented_names
        )
    if not tasks:
        raise ValueError(
            "no training tasks found; check tasks.source, tasks.builtin and the plugins' "
            "task sources (`composer_task_sources`)"
        )
    return tasks


def anchor_source(config: RLConfig) -> tuple[Path | None, int]:
    """The SFT anchor's demonstrations file and end-of-text id (None: the anchor is off).

    By default the demonstrations the policy's stage-one run made (MODEL/../../), whose
    tokens are the policy's tokenizer's; the end-of-text id is the policy's tokenizer's.
    Refused before any service starts under --dp/--cp (the anchor runs in one process)."""
    if config.loss.anchor_weight == 0:
        return None, 0
    if config.train.ranks > 1:
        raise ValueError(
            f"loss.anchor_weight = {config.loss.anchor_weight} runs in one training process "
            f"only, and train.parallel.dp x cp is {config.train.ranks}: set "
            "loss.anchor_weight = 0 or train.parallel.dp = train.parallel.cp = 1"
        )
    path = config.train.anchor_data or config.model.parent.parent / "sft_tokens.pt"
    if not path.is_file():
        raise FileNotFoundError(
            f"loss.anchor_weight = {config.loss.anchor_weight} needs stage-one demonstrations: "
            f"no {path}; set train.anchor_data to a stage-one run's sft_tokens.pt, or "
            "loss.anchor_weight = 0"
        )
    tokenizer = ComposerTokenizer.from_file(config.model / "tokenizer.json")
    return path, tokenizer.eos_id


def trainer_config(config: RLConfig) -> TrainingConfig:
    """The run's ``[train]`` section with the SFT anchor's demonstrations found
    (`anchor_source`): what the training service is built with."""
    anchor_data, anchor_eos_id = anchor_source(config)
    return config.train.model_copy(
        update={"anchor_data": anchor_data, "anchor_eos_id": anchor_eos_id}
    )


@dataclass
class RunHandles:
    trainer: LocalEndpoint | RayEndpoint | RankGroupEndpoint
    rollout: LocalEndpoint | RayEndpoint
    evaluation: LocalEndpoint | RayEndpoint
    stop: Callable[[], None]


def start_local(config: RLConfig, store_url: str, plugins: JobPlugins) -> RunHandles:
    """Both services in this process (tests, debugging): one thread each, all looking
    plugins up in the job's one manager."""
    trainer = TrainingService(
        config.model,
        store_url,
        config.run_dir / "checkpoints",
        trainer_config(config),
        plugins=plugins,
    )
    inference = InferenceService(
        config.model,
        store_url,
        max_batch_size=config.rollout.max_batch_size,
        follow_interval_s=0.05,
        threads=config.threads,
        max_seq_len=config.rollout.max_seq_len,
        compile_decode=config.rollout.compile_decode,
        plugins=plugins,
    )
    evaluation = EvaluationService(config.model, store_url, threads=config.threads, plugins=plugins)
    t, r, e = LocalEndpoint(trainer), LocalEndpoint(inference), LocalEndpoint(evaluation)

    def stop() -> None:
        for endpoint in (t, r, e):
            endpoint.close()
        trainer.flush()
        trainer.close()
        inference.close()
        evaluation.close()

    return RunHandles(t, r, e, stop)


def start_ray(config: RLConfig, store_url: str, plugins: JobPlugins) -> RunHandles:
    """Training and inference as Ray actors (local instance, or `ray_address`); each builds
    the job's manager from its plugin configuration (`JobPlugins` pickles as that). Episodes'
    sandboxes are the environment actor's, of the rollouts' backend, under the run directory."""
    import ray

    from composer_infra.environment import EnvironmentConfig
    from composer_rl.rl.services.launch import start_services

    services = start_services(
        config.model,
        config.run_dir,
        address=config.ray_address,
        store_url=store_url,
        training=trainer_config(config),
        environment=EnvironmentConfig(
            backend=config.rollout.backend,
            warm_sandboxes=0,
            work_dir=config.run_dir.resolve() / "sandboxes",
        ),
        max_batch_size=config.rollout.max_batch_size,
        threads=config.threads,
        inference_options={
            "follow_interval_s": 0.05,
            "max_seq_len": config.rollout.max_seq_len,
            "compile_decode": config.rollout.compile_decode,
        },
        plugins=plugins,
    )

    def stop() -> None:
        ray.get(services.training.flush.remote())
        services.stop()

    return RunHandles(
        RankGroupEndpoint(services.training_ranks)
        if services.training_ranks
        else RayEndpoint(services.training),
        RayEndpoint(services.inference[0]),
        RayEndpoint(services.evaluation),
        stop,
    )


class RunLog:
    """metrics.jsonl, episodes/episodes.jsonl and groups/fates.jsonl, appended line by line
    (a line a killed predecessor left half-written is cut off first)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        (run_dir / EPISODES_LOG).parent.mkdir(parents=True, exist_ok=True)
        for name in ("metrics.jsonl", EPISODES_LOG):
            cut_torn_tail(run_dir / name)
        self.metrics = (run_dir / "metrics.jsonl").open("a")
        self.episodes = (run_dir / EPISODES_LOG).open("a")
        self.fates = FateLog(run_dir / FATES_LOG)

    def step(self, row: dict[str, Any]) -> None:
        self.metrics.write(json.dumps(row, default=str) + "\n")
        self.metrics.flush()

    def restart(
        self, orchestrator: Orchestrator, restored_version: int | None
    ) -> dict[str, Any] | None:
        """Mark a resumed run in metrics.jsonl where its steps stop being one lineage: the
        step it restarted from and what the kill cost (the steps logged after it, which the
        final policy does not descend from, and the groups those steps trained, queued
        again). A run resumed with nothing logged after its checkpoint (extended after it
        finished, or checkpointed every step) continues one lineage: no line, only the
        `life` of its steps says it restarted."""
        self.metrics.flush()
        before = read_jsonl(self.run_dir / "metrics.jsonl")
        lost = [r for r in final_lineage(before) if int(r["step"]) > orchestrator.step]
        if not lost:
            return None
        counters = vars(orchestrator.counters)
        record: dict[str, Any] = {
            "kind": RESTART,
            "from_step": orchestrator.step,
            "life": orchestrator.lineage.life,
            "version": orchestrator.version,
            "restored_version": restored_version,
            "steps_lost": [int(r["step"]) for r in lost],
            "groups_retrained": sorted(g for r in lost for g in r.get("trained_groups", [])),
            **{
                f"count_{k}": counters[k]
                for k in (
                    "groups_resumed",
                    "groups_resumed_lost_lineage",
                    "groups_superseded",
                    "groups_constant",
                    "tasks_reissued",
                )
            },
        }
        self.step(record)
        return record

    def resume_fates(self, resumed: ResumeState) -> dict[str, Any] | None:
        """Mark a resume in the fate log (`FateLog.restart`): the fates the killed run
        decided after the restored checkpoint are voided, to be decided again. Written at
        every resume of a trainer restored from a checkpoint (or a store) and whenever the
        log holds lines; a run's first start writes nothing."""
        if not resumed.restored and not (self.run_dir / FATES_LOG).stat().st_size:
            return None
        from_step, lineage = resumed.step, resumed.lineage
        rows = final_lineage(read_jsonl(self.run_dir / "metrics.jsonl"))
        loop = resumed.loop
        return self.fates.restart(
            from_step=from_step,
            life=lineage.life,
            version=resumed.version,
            restored_version=lineage.lives[-1].restored_version if resumed.restored else None,
            consumed=loop.get("consumed", []),
            dropped=loop.get("dropped", []),
            trained_at={
                gid: int(row["step"])
                for row in rows
                if int(row["step"]) <= from_step
                for gid in row.get("trained_groups", [])
            },
            task_of=group_task,
        )

    def evaluation(self, row: dict[str, Any]) -> None:
        with (self.run_dir / "eval.jsonl").open("a") as out:
            out.write(json.dumps(row) + "\n")

    def episode(self, episode: ScoredEpisode, group_id: str) -> None:
        self.episodes.write(json.dumps({"group": group_id, **episode.record}) + "\n")
        self.episodes.flush()

    def close(self) -> None:
        self.metrics.close()
        self.episodes.close()
        self.fates.close()


class PeriodicEvaluation:
    """Every `eval.every` versions, the evaluation service scores the newest policy on
    held-out tasks; the loop does not wait for it (one evaluation in flight at a time)."""

    def __init__(
        self,
        config: RLConfig,
        endpoint: LocalEndpoint | RayEndpoint,
        tokenizer: str,
        log: RunLog,
        plugins: JobPlugins,
    ) -> None:
        self.every = config.eval.every
        self.endpoint = endpoint
        self.tokenizer = tokenizer
        self.log = log
        self.runner = config.rollout
        self.tasks = (
            sample_tasks(
                collect_tasks(Split.HELDOUT, pm=plugins.pm),
                config.eval.during_per_template,
                seed=0,
            )
            if self.every
            else []
        )
        self.pending: Future[Any] | None = None

    def _collect(self, block: bool) -> None:
        if self.pending is not None and (block or self.pending.done()):
            self.log.evaluation(self.pending.result())
            self.pending = None

    def after_step(self, version: int) -> None:
        self._collect(block=False)
        if self.every and version % self.every == 0 and self.pending is None:
            self.pending = self.endpoint.call(
                "evaluate_tasks", self.tokenizer, self.tasks, self.runner, version
            )

    def finish(self) -> None:
        self._collect(block=True)


def preflight(config: RLConfig) -> None:
    """Every check of `config` that needs no service, run before any starts: a ConfigError
    that names the setting to change (the CLI prints it as one line and exits with 2)."""
    parallel = config.train.parallel
    if config.local and parallel.world_size > 1:
        raise ConfigError(
            f"--train.parallel.dp {parallel.dp} x --train.parallel.cp {parallel.cp} needs one "
            "training process a rank, joined in a process group: run on Ray (drop --local true)"
        )
    try:
        ParallelDims(dp=parallel.dp, cp=parallel.cp, ep=parallel.ep)
    except ValueError as error:
        raise ConfigError(f"train.parallel.ep: {error}") from None
    if config.loop.groups_per_step * config.loop.group_size < parallel.dp:
        raise ConfigError(
            f"a step of {config.loop.groups_per_step} groups of {config.loop.group_size} "
            f"episodes cannot feed --train.parallel.dp {parallel.dp} ranks (each needs a "
            "sequence); raise loop.groups_per_step or loop.group_size"
        )
    require_model_dir(
        config.model,
        "--model",
        "a stage-one checkpoint (e.g. runs/stage1/sft/final, written by `composer-rl stage1`)",
    )
    source = config.tasks.source
    if source is not None and not source.exists():
        raise ConfigError(
            f"--tasks.source {source} does not exist: give a task directory or JSONL "
            "(`composer-rl tasks export` writes both), or leave it out for the built-in tasks"
        )
    try:
        anchor_source(config)
    except (ValueError, FileNotFoundError) as error:
        raise ConfigError(str(error)) from None


def run_rl(
    config: RLConfig,
    *,
    on_step: Callable[[dict[str, Any]], None] | None = None,
    step_boundary: Callable[[int], None] | None = None,
    plugins: JobPlugins | None = None,
) -> list[dict[str, Any]]:
    """Run (or resume) the asynchronous RL loop; returns the per-step metrics of this call.

    `plugins` are the job's (default: ``JobPlugins(config.plugin_run_config())``): one manager,
    built once, that scores episodes and in which the task sources, the weight store and
    the sandbox backends are looked up.
    """
    preflight(config)
    model_dir = config.model
    tokenizer_path = model_dir / "tokenizer.json"
    run_dir = config.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.toml").write_text(to_toml(config))
    store_url = config.store or (run_dir / "weights").resolve().as_uri()
    tokenizer = ComposerTokenizer.from_file(tokenizer_path)
    job = plugins if plugins is not None else JobPlugins(config.plugin_run_config())
    session = PluginSession(job.config, run_dir, command="rl", plugins=job)
    upsampling = (
        UpsamplingConfig(
            after_fraction=config.loop.upsample_hard_after,
            planned_draws=config.loop.steps * config.loop.groups_per_step,
        )
        if config.loop.upsample_hard_after is not None
        else None
    )
    mix = TaskMix(weights=config.tasks.mix) if config.tasks.mix is not None else TaskMix()
    sampler = TaskSampler(
        training_tasks(config, job),
        config.seed,
        upsampling,
        state_path=run_dir / "sampler.json",
        mix=mix,
        learnability=LearnabilityConfig() if config.loop.learnability else None,
    )
    handles = (
        start_local(config, store_url, job) if config.local else start_ray(config, store_url, job)
    )
    log = RunLog(run_dir)
    try:
        resumed: ResumeState = handles.trainer.call("resume_state").result()
        handles.rollout.call("sync").result()
        handles.rollout.call("start_rollouts", str(tokenizer_path), config.rollout).result()
        loop_state, lineage = resumed.loop, resumed.lineage
        periodic = PeriodicEvaluation(config, handles.evaluation, str(tokenizer_path), log, job)
        # Before the orchestrator's own resume records what it decides again.
        log.resume_fates(resumed)

        first_boundary: dict[str, float] = {}

        def step_done(row: dict[str, Any]) -> None:
            # Plugin requests (`composer-rl plugins add/remove --run`) take effect here,
            # between steps; the events go into this step's metrics line.
            row.update(first_boundary)
            first_boundary.clear()
            row.update(session.step_boundary(int(row["step"])))
            row["plugins_registered"] = sorted(
                name for name, _ in session.pm.list_name_plugin() if name
            )
            log.step(row)
            periodic.after_step(int(row["version"]))
            if on_step is not None:
                on_step(row)

        orchestrator = Orchestrator(
            config.loop,
            sampler,
            GroupStore(run_dir / "groups"),
            handles.rollout,
            handles.trainer,
            lambda raw: score_result(raw, session.score, tokenizer),
            start_step=resumed.step,
            start_version=resumed.version,
            lineage=lineage,
            consumed=set(loop_state.get("consumed", [])),
            dropped=set(loop_state.get("dropped", [])),
            on_step=step_done,
            on_episode=log.episode,
            step_boundary=step_boundary,
            on_fate=log.fates.record,
        )
        if resumed.restored:
            log.restart(orchestrator, lineage.lives[-1].restored_version)
        # Requests queued before the first step, and a killed predecessor's run-time
        # plugins restored: recorded in the first step's metrics line.
        first_boundary.update(session.step_boundary(orchestrator.step))
        history = orchestrator.run()
        if (short := orchestrator.ended_early()) is not None:
            phase_line("rl", short)
        periodic.finish()
        # With what the loop decided after its last step (groups dropped since, the counts).
        handles.trainer.call("save_checkpoint", orchestrator.state([])).result()
        final = run_dir / "final"
        handles.trainer.call("export", str(final)).result()
        shutil.copy(tokenizer_path, final / "tokenizer.json")
        session.close()  # finished: later plugin requests on this run are refused
        return history
    finally:
        log.close()
        handles.stop()


__all__ = [
    "BuiltinTrainingSource",
    "LocalEndpoint",
    "RankGroupEndpoint",
    "RayEndpoint",
    "RunLog",
    "run_rl",
    "training_sources",
    "training_tasks",
]
