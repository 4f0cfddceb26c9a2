"""The asynchronous RL loop: rollout slots, groups, staleness, the batch queue, the trainer.

The orchestrator owns no model. It talks to two endpoints, each a plain service object
called through a future (`Endpoint`): in tests the services run in threads of this process,
in a run they are Ray actors. The loop never blocks on one of them while the other could
work:

- **rollout**: `submit_episodes(task, samples, group_id)` and `poll_episodes()` on the
  inference service (an `EpisodeRunner` over its engine, weights followed from the store
  between decode steps). Slots are refilled as groups are handed out, so generation goes on
  while the trainer steps.
- **trainer**: `train_rl(trajectories, state)` on the training service: one step of the
  project's training step with the RL loss, then version v+1 is published; it answers a
  typed `StepResult` (`composer_rl.rl.trainer`).

A finished group (G episodes of one task) is scored through the one plugin manager, gets
Dr. GRPO advantages, is written to the group checkpoint store (never regenerated after a
kill), and queued. Before it is trained, the staleness rule counts queue time: a group
whose oldest token is more than `max_off_policy_steps` optimizer steps from the trainer's
weights is dropped (or its task regenerated) and counted. With `sync=True` the same loop
alternates (generate a batch, then train on it) - a flag, not a second loop.

Staleness is measured on the version tree (`composer_rl.rl.lineage`), not by subtracting
version numbers: after a kill the trainer restores its last checkpoint (or the initial
weights) under a new version number, and the steps it lost are a lineage the current
weights do not descend from. On resume every finished group no checkpointed step trained
is queued again, among them those the lost steps had trained: a group sampled by an
ancestor of the restored weights is as stale as the steps since it, one sampled (in part)
by a lost version as the steps from that version back to the fork plus those since. A
resumed group that is beyond the bound is never simply dropped: the kill made it stale, so
its task is generated again whatever `stale_policy` says, and no prompt of the epoch is
lost to a kill.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from composer_infra.checkpoint import FinishedGroup, GroupStore, Trajectory
from composer_rl.rl.algorithm import GroupAdvantages, group_advantages
from composer_rl.rl.fates import Fate, fate_record
from composer_rl.rl.lineage import STEP, VersionTree
from composer_rl.rl.sampler import TaskSampler
from composer_rl.tasks.model import Task

if TYPE_CHECKING:  # the trainer's answer (its module, the model's step, is not needed here)
    from composer_rl.rl.trainer import StepResult


class Endpoint(Protocol):
    """A service method call that returns a future (a thread, or a Ray actor call)."""

    def call(self, method: str, *args: Any, **kwargs: Any) -> Future[Any]: ...


@dataclass
class ScoredEpisode:
    """What the rollout side hands back for one episode, scored by the orchestrator."""

    trajectories: list[Trajectory]
    reward: float | None  # None: the infrastructure failed (no reward, not a zero)
    components: dict[str, float] = field(default_factory=dict)
    flags: dict[str, str] = field(default_factory=dict)
    solved: bool = False
    turns: int = 0
    generated_tokens: int = 0
    sandbox_seconds: float = 0.0
    record: dict[str, Any] = field(default_factory=dict)  # the episodes/*.jsonl line


def group_is_constant(
    episodes: list[ScoredEpisode], reward_constant: bool, by: Literal["reward", "correctness"]
) -> bool:
    """Whether a finished group counts as constant (left out of batches when dropping them).

    By reward, a shaping component (the length penalty) makes almost every group differ, so
    groups whose episodes all failed fill the batch with advantages of a few thousandths;
    by correctness only groups that mix solved and unsolved episodes count (composer-rl
    README: the length-penalty runs). Episodes without a reward (infra failures) do not vote.
    """
    if by == "reward":
        return reward_constant
    return len({e.solved for e in episodes if e.reward is not None}) <= 1


class OrchestratorConfig(BaseModel):
    """The loop's knobs (the `[loop]` section of an RL run's configuration)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    steps: int = Field(default=40, ge=1, description="optimizer steps of the RL run")
    group_size: int = Field(default=8, ge=2, description="G episodes per prompt (fixed)")
    groups_per_step: int = Field(default=2, ge=1, description="groups in one trained batch")
    max_groups_in_flight: int = Field(
        default=3,
        ge=1,
        description="rollout slots, counted in groups (asynchrony headroom); finished groups "
        "waiting for the trainer beyond one batch take slots too, so a slow trainer pauses "
        "generation instead of letting groups go stale in the queue",
    )
    max_off_policy_steps: int = Field(
        default=3, ge=0, description="drop a group whose oldest token is more versions behind"
    )
    stale_policy: Literal["drop", "regenerate"] = Field(
        default="drop",
        description="a group past max_off_policy_steps: drop it, or generate its task again",
    )
    drop_constant_groups: bool = Field(
        default=True, description="leave out groups whose rewards are all equal (no signal)"
    )
    constant_by: Literal["reward", "correctness"] = Field(
        default="reward",
        description="what must be equal for a group to count as constant: the whole reward, "
        "or only whether each episode solved the task (then groups that differ only by "
        "shaping rewards such as the length penalty are left out too)",
    )
    sync: bool = Field(default=False, description="alternate generation and training")
    call_timeout_s: float = Field(
        default=900.0, gt=0, description="a service silent this long stops the run with an error"
    )
    upsample_hard_after: float | None = Field(
        default=0.5, ge=0, le=1, description="favour harder kinds after this share of steps"
    )
    learnability: bool = Field(
        default=False,
        description="weight each draw by 4 p (1 - p) of its template's solve rate so far, "
        "and each category by its tasks' mean weight (groups that all solve or all fail "
        "teach nothing); a task is still drawn once",
    )


@dataclass
class _OpenGroup:
    group_id: str
    task: Task
    episodes: list[ScoredEpisode] = field(default_factory=list)


@dataclass
class ReadyGroup:
    """A finished group waiting for a batch: its trainable trajectories, by reference (the
    versions the staleness rule reads are computed from them, never copied beside them)."""

    group_id: str
    task_id: str
    trajectories: list[Trajectory]
    resumed: bool = False  # finished before this process started, not trained since

    @cached_property
    def versions(self) -> frozenset[int]:
        """Every policy version that sampled a token of the group."""
        return frozenset(v for t in self.trajectories for v in t.sampled_versions)

    @property
    def oldest_version(self) -> int:
        return min(self.versions)

    def lag(self, version: int, lineage: VersionTree | None = None) -> int | None:
        """Optimizer steps from the furthest weights that sampled a token of the group to
        those of `version` (`VersionTree.lag`; None: a lineage the tree cannot place).
        Without a tree (or a restart), `version` minus the oldest version."""
        if lineage is None:
            return version - self.oldest_version
        lags = [lineage.lag(v, version) for v in self.versions]
        return None if None in lags else max(lag for lag in lags if lag is not None)


@dataclass
class LoopCounters:
    groups_finished: int = 0
    groups_constant: int = 0
    groups_untrainable: int = 0  # no episode with a reward and a sampled token
    groups_stale_dropped: int = 0
    groups_regenerated: int = 0
    episodes_infra_failed: int = 0
    groups_resumed: int = 0  # finished before a restart, queued again (lost steps' too)
    groups_resumed_lost_lineage: int = 0  # of them, sampled in part by a lost lineage
    groups_resumed_regenerated: int = 0  # resumed, beyond the bound: their task redone
    groups_superseded: int = 0  # an older group of a task generated again (never trained)
    tasks_reissued: int = 0
    groups_left_at_end: int = 0


ScoreFn = Callable[[Any], ScoredEpisode]


def wants_more_groups(config: OrchestratorConfig, open_: int, ready: int, training: bool) -> bool:
    """Whether the loop may hand the rollout service another group.

    Asynchronous: up to `max_groups_in_flight` groups generating, and no more than one
    batch (`groups_per_step`) of finished groups waiting beyond them. Without that second
    bound a trainer slower than generation lets the queue grow until its oldest groups pass
    `max_off_policy_steps` and are dropped: measured on a loaded 2-core box, 19 of the first
    39 groups, half the generation thrown away. Synchronous: exactly one batch, then wait.
    """
    if config.sync:
        return not training and open_ + ready < config.groups_per_step
    return (
        open_ < config.max_groups_in_flight
        and open_ + ready < config.max_groups_in_flight + config.groups_per_step
    )


def ready_from_trajectories(
    group_id: str, task_id: str, trajs: list[Trajectory]
) -> ReadyGroup | None:
    trainable = [t for t in trajs if t.advantage is not None and t.num_sampled]
    if not trainable:
        return None
    return ReadyGroup(group_id=group_id, task_id=task_id, trajectories=trainable)


def record_is_constant(trajs: list[Trajectory], by: Literal["reward", "correctness"]) -> bool:
    """`group_is_constant` of a persisted group (a resumed run judges it again, as the
    killed one did): by reward, every advantage zero; by correctness, one outcome among
    the episodes with a reward. A group written before outcomes were recorded is judged by
    reward."""
    if by == "reward" or any("solved" not in t.metadata for t in trajs if t.reward is not None):
        return all(t.advantage is None or t.advantage == 0.0 for t in trajs)
    return len({bool(t.metadata["solved"]) for t in trajs if t.reward is not None}) <= 1


def take_fresh(
    ready: deque[ReadyGroup],
    version: int,
    wanted: int,
    max_off_policy_steps: int,
    lineage: VersionTree | None = None,
) -> tuple[list[ReadyGroup], list[ReadyGroup]]:
    """Pop up to `wanted` groups from the front of `ready`; (fresh, stale) by the lag rule.

    The lag of a group is measured from the trainer's weights now to the oldest weights
    that sampled any of its tokens (`ReadyGroup.lag`; on the version tree when one is
    given), so the time a group waited in the queue counts, not only how old its weights
    were when it was generated.
    """
    fresh: list[ReadyGroup] = []
    stale: list[ReadyGroup] = []
    while ready and len(fresh) < wanted:
        group = ready.popleft()
        lag = group.lag(version, lineage)
        (stale if lag is None or lag > max_off_policy_steps else fresh).append(group)
    return fresh, stale


def deadline_order(
    groups: list[ReadyGroup], version: int, lineage: VersionTree
) -> list[ReadyGroup]:
    """Resumed groups, the stalest first (earliest deadline first).

    A restart queues more groups than the loop ever holds (those of the lost steps too),
    and each ages a step per step while the queue drains; training the ones nearest the
    staleness bound first lets the most of them through before they pass it. Ties keep
    generation order."""

    def key(group: ReadyGroup) -> int:
        lag = group.lag(version, lineage)
        return -(lag if lag is not None else 1 << 30)

    return sorted(groups, key=key)


def _group_number(group_id: str) -> int:
    """The generation counter in a group id (``g000012-<task>``, made by `_fill`)."""
    head = group_id.split("-", 1)[0]
    return int(head[1:]) if head[1:].isdigit() else 0


def group_task(group_id: str) -> str:
    """The task id in a group id (``g000012-<task>``)."""
    return group_id.split("-", 1)[1]


def _steps(n: int | None) -> str:
    return f"{n} optimizer step{'' if n == 1 else 's'}"


def assign_advantages(
    episodes: list[ScoredEpisode],
) -> tuple[list[Trajectory], GroupAdvantages]:
    """Every trajectory of every episode gets its episode's reward and advantage: the
    segments of a self-summarized episode share the episode's final reward."""
    advantages = group_advantages([e.reward for e in episodes])
    trajs: list[Trajectory] = []
    for episode, adv in zip(episodes, advantages.advantages, strict=True):
        for traj in episode.trajectories:
            traj.reward, traj.advantage = episode.reward, adv
            traj.metadata["solved"] = episode.solved  # the group checkpoint keeps it
            trajs.append(traj)
    return trajs, advantages


class Orchestrator:
    """Runs the loop until `config.steps` optimizer steps are done or the epoch runs out."""

    def __init__(
        self,
        config: OrchestratorConfig,
        sampler: TaskSampler,
        groups: GroupStore,
        rollout: Endpoint,
        trainer: Endpoint,
        score: ScoreFn,
        *,
        start_step: int = 0,
        start_version: int = 0,
        lineage: VersionTree | None = None,
        consumed: set[str] | None = None,
        dropped: set[str] | None = None,
        on_step: Callable[[dict[str, Any]], None] | None = None,
        on_episode: Callable[[ScoredEpisode, str], None] | None = None,
        step_boundary: Callable[[int], None] | None = None,
        on_fate: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.config = config
        self.sampler = sampler
        self.groups = groups
        self.rollout = rollout
        self.trainer = trainer
        self.score = score
        self.step = start_step
        self.version = start_version
        self.lineage = lineage or VersionTree()
        self.consumed = set(consumed or ())
        self.dropped = set(dropped or ())
        self.on_step = on_step
        self.on_episode = on_episode
        self.step_boundary = step_boundary
        self.on_fate = on_fate
        self.counters = LoopCounters()
        self.open: dict[str, _OpenGroup] = {}
        self.ready: deque[ReadyGroup] = deque()
        self.reissue: deque[Task] = deque()
        self._group_counter = len(sampler.drawn)
        self._trainer_idle_s = 0.0
        self._gen_tokens = 0
        self._sandbox_s = 0.0
        self._window: list[ScoredEpisode] = []
        self._submissions: list[Future[Any]] = []
        self._resume()

    # --- resume -----------------------------------------------------------------------

    def _resume(self) -> None:
        """Groups generated but not trained are queued; drawn tasks with no group are redone.

        "Not trained" is what the restored checkpoint says, so after a kill between
        checkpoints the groups the lost steps trained are queued again, and so are the
        groups the lost steps' loop dropped: each is judged again by the same rules
        (constant, then staleness on the version tree at batch time). Of several groups of
        one task (it was generated again, and the kill came before a checkpoint recorded
        the older one as dropped) only the newest counts. The resumed groups are queued
        stalest first (`deadline_order`)."""
        ids = self.groups.ids()  # zero-padded counters: generation order
        newest: dict[str, str] = {}  # task -> its newest group
        for gid in ids:
            self._group_counter = max(self._group_counter, _group_number(gid))
            newest[group_task(gid)] = gid
        resumed: list[ReadyGroup] = []
        for gid in ids:
            task_id = group_task(gid)
            if gid in self.consumed or gid in self.dropped:
                continue
            if newest[task_id] != gid:
                self.counters.groups_superseded += 1
                self.dropped.add(gid)
                self._fate(
                    gid,
                    task_id,
                    "regenerated",
                    f"superseded: its task was generated again as {newest[task_id]} before "
                    "the kill, and of a task's groups only the newest counts",
                    superseded_by=newest[task_id],
                    resumed=True,
                )
                continue
            trajs = self.groups.get(gid).episodes
            episodes: dict[str, Trajectory] = {t.episode_id: t for t in trajs}
            ready = self._admit(
                gid,
                task_id,
                trajs,
                record_is_constant(trajs, self.config.constant_by),
                [t.reward for t in episodes.values()],
                [bool(t.metadata.get("solved")) for t in episodes.values()],
                resumed=True,
            )
            if ready is None:
                continue
            ready.resumed = True
            resumed.append(ready)
        for ready in deadline_order(resumed, self.version, self.lineage):
            self.ready.append(ready)
            self.counters.groups_resumed += 1
            if not all(self.lineage.is_ancestor(v, of=self.version) for v in ready.versions):
                self.counters.groups_resumed_lost_lineage += 1
        for task_id in self.sampler.drawn:
            if task_id not in newest:
                self.reissue.append(self.sampler.tasks[task_id])
                self.counters.tasks_reissued += 1

    # --- rollout side -----------------------------------------------------------------

    def _next_task(self) -> Task | None:
        if self.reissue:
            return self.reissue.popleft()
        return self.sampler.next()

    def _want_more(self, training: bool) -> bool:
        return wants_more_groups(self.config, len(self.open), len(self.ready), training)

    def _fill(self, training: bool) -> None:
        while self._want_more(training):
            task = self._next_task()
            if task is None:
                return
            self._group_counter += 1
            gid = f"g{self._group_counter:06d}-{task.id}"
            self.open[gid] = _OpenGroup(gid, task)
            # Not waited for: the rollout service takes calls in order, so the next poll
            # sees this group; a failed submission is raised at the next check.
            self._submissions.append(
                self.rollout.call("submit_episodes", task, self.config.group_size, gid)
            )

    def _check_submissions(self) -> None:
        pending = []
        for future in self._submissions:
            if future.done():
                future.result()  # raises what the rollout service raised
            else:
                pending.append(future)
        self._submissions = pending

    def _take_episodes(self, results: list[tuple[str, Any]]) -> None:
        for gid, raw in results:
            group = self.open.get(gid)
            if group is None:
                continue
            scored = self.score(raw)
            for traj in scored.trajectories:
                traj.group_id = gid
            self._gen_tokens += scored.generated_tokens
            self._sandbox_s += scored.sandbox_seconds
            if scored.reward is None:
                self.counters.episodes_infra_failed += 1
            scored.record["scored_after_step"] = self.step
            group.episodes.append(scored)
            self._window.append(scored)
            if self.on_episode is not None:
                self.on_episode(scored, gid)
            if scored.generated_tokens:
                self.sampler.record_effort(group.task, scored.turns, scored.generated_tokens)
            if scored.reward is not None:
                self.sampler.record_outcome(group.task, scored.solved)
            if len(group.episodes) == self.config.group_size:
                self._finish_group(self.open.pop(gid))

    def _finish_group(self, group: _OpenGroup) -> None:
        self.counters.groups_finished += 1
        trajs, advantages = assign_advantages(group.episodes)
        self.groups.put(
            FinishedGroup(group_id=group.group_id, prompt_id=group.task.id, episodes=trajs)
        )
        ready = self._admit(
            group.group_id,
            group.task.id,
            trajs,
            group_is_constant(group.episodes, advantages.constant, self.config.constant_by),
            [e.reward for e in group.episodes],
            [e.solved for e in group.episodes],
        )
        if ready is not None:
            self.ready.append(ready)

    def _admit(
        self,
        gid: str,
        task_id: str,
        trajs: list[Trajectory],
        constant: bool,
        rewards: list[float | None],
        solved: list[bool],
        resumed: bool = False,
    ) -> ReadyGroup | None:
        """A finished group ready for a batch, or None when it is left out, counted and its
        fate recorded: no episode with a reward and a sampled token (infrastructure failed;
        a group whose every episode lost its reward is that, not constant), or constant."""
        ready = ready_from_trajectories(gid, task_id, trajs)
        scored = [(r, s) for r, s in zip(rewards, solved, strict=True) if r is not None]
        if ready is not None and not (self.config.drop_constant_groups and constant):
            return ready
        self.dropped.add(gid)
        if scored and self.config.drop_constant_groups and constant:
            self.counters.groups_constant += 1
            by = self.config.constant_by
            if by == "correctness":
                outcome = "solved" if scored[0][1] else "failed"
                why = (
                    f"every episode with a reward {outcome} the task "
                    "(loop.constant_by = correctness)"
                )
            else:
                values = sorted({r for r, _ in scored})
                why = f"its episodes' rewards are all equal ({values[0]:g})"
            reason = (
                f"left out as constant: {why}, so it carries no signal (loop.drop_constant_groups)"
            )
            self._fate(gid, task_id, "constant", reason, resumed=resumed)
            return None
        self.counters.groups_untrainable += 1
        failed = len(rewards) - len(scored)
        reason = (
            f"no episode has both a reward and a sampled token: {failed} of {len(rewards)} "
            "episodes got no reward (their sandbox or grader failed), and an episode without "
            "a reward is never trained on nor scored as zero"
            if failed
            else "no episode has a sampled token to train on"
        )
        self._fate(gid, task_id, "infrastructure_failed", reason, resumed=resumed)
        return None

    def _fate(
        self,
        gid: str,
        task_id: str,
        fate: Fate,
        reason: str,
        *,
        lag: int | None = None,
        staleness: bool = False,
        resumed: bool = False,
        **extra: Any,
    ) -> None:
        """Record a group's fate as decided (`composer_rl.rl.fates`): at the steps done so
        far, in the trainer's current life; with its lag and the bound where `staleness`."""
        if self.on_fate is None:
            return
        if resumed:
            extra["resumed"] = True
        self.on_fate(
            fate_record(
                gid,
                task_id,
                fate,
                step=self.step,
                life=self.lineage.life,
                reason=reason,
                staleness=(lag, self.config.max_off_policy_steps) if staleness else None,
                **extra,
            )
        )

    # --- trainer side -----------------------------------------------------------------

    def _batch(self) -> list[ReadyGroup] | None:
        """Up to `groups_per_step` fresh groups, after dropping (or redoing) stale ones."""
        fresh, stale = take_fresh(
            self.ready,
            self.version,
            self.config.groups_per_step,
            self.config.max_off_policy_steps,
            self.lineage,
        )
        bound = self.config.max_off_policy_steps
        for group in stale:
            self.counters.groups_stale_dropped += 1
            self.dropped.add(group.group_id)
            lag = group.lag(self.version, self.lineage)
            why = (
                f"its oldest token was {_steps(lag)} behind the trainer's weights when "
                f"its turn came, more than loop.max_off_policy_steps = {bound}"
                if lag is not None
                else "tokens of it were sampled by weights the version tree cannot place"
            )
            # A resumed group went stale because of the kill (lost steps, a queue longer
            # than the loop ever lets it be): its task is redone, never lost.
            if group.resumed:
                self.counters.groups_resumed_regenerated += 1
                why += "; queued again by a resume, the kill made it stale, so its task is redone"
            elif self.config.stale_policy == "regenerate":
                why += "; its task is generated again (loop.stale_policy = regenerate)"
            else:
                why += " (loop.stale_policy = drop)"
            redo = group.resumed or self.config.stale_policy == "regenerate"
            if redo:
                self.counters.groups_regenerated += 1
                self.reissue.append(self.sampler.tasks[group.task_id])
            fate: Fate = "regenerated" if redo else "dropped_stale"
            self._fate(
                group.group_id,
                group.task_id,
                fate,
                f"{'regenerated' if redo else 'dropped'} as stale: {why}",
                lag=lag,
                staleness=True,
                resumed=group.resumed,
            )
        if len(fresh) < self.config.groups_per_step or (self.config.sync and self.open):
            self.ready.extendleft(reversed(fresh))
            return None
        return fresh

    def state(self, extra_consumed: list[str]) -> dict[str, Any]:
        """What the trainer's step checkpoint records for the loop (the sampler lives apart):
        the groups trained and dropped, and this process's counts (the reasons for the drops,
        also those after the last step's metrics line, in the checkpoint the run ends with)."""
        return {
            "consumed": sorted(self.consumed | set(extra_consumed)),
            "dropped": sorted(self.dropped),
            "counters": dict(vars(self.counters)),
        }

    # --- the loop ---------------------------------------------------------------------

    def run(self) -> list[dict[str, Any]]:
        history: list[dict[str, Any]] = []
        poll: Future[Any] | None = None
        train: Future[Any] | None = None
        batch: list[ReadyGroup] = []
        epoch_over = False
        idle_since = time.monotonic()
        step_began = time.monotonic()
        while self.step < self.config.steps:
            self._fill(training=train is not None)
            if train is None:
                chosen = self._batch()
                if chosen is not None:
                    batch = chosen
                    self._trainer_idle_s += time.monotonic() - idle_since
                    trajectories = [t for g in batch for t in g.trajectories]
                    state = self.state([g.group_id for g in batch])
                    # The life pins the lineage the batch was judged against: a trainer
                    # restarted under the loop refuses it instead of training it.
                    train = self.trainer.call("train_rl", trajectories, state, self.lineage.life)
            if poll is None and self.open:
                poll = self.rollout.call("poll_episodes")
            self._check_submissions()
            waiting = [f for f in (poll, train) if f is not None]
            if not waiting:
                if self.sampler.exhausted and not self.reissue and not self.open:
                    # The epoch is over: fewer than a batch of groups is left (they stay in
                    # the group store, untrained, and are counted).
                    self.counters.groups_left_at_end = len(self.ready)
                    epoch_over = True
                    break
                continue
            finished, _ = wait(
                waiting, timeout=self.config.call_timeout_s, return_when=FIRST_COMPLETED
            )
            if not finished:
                stuck = [n for n, f in (("inference", poll), ("training", train)) if f is not None]
                raise TimeoutError(
                    f"no answer from the {' and '.join(stuck)} service in "
                    f"{self.config.call_timeout_s:.0f} s (loop.call_timeout_s); the run can be "
                    "resumed from its checkpoints with the same command"
                )
            if poll is not None and poll.done():
                self._take_episodes(poll.result())
                poll = None
            if train is not None and train.done():
                result: StepResult = train.result()
                train = None
                idle_since = time.monotonic()
                self.step, self.version = result.step, result.version
                if self.config.sync:
                    # Alternating means the next batch is sampled by exactly this version.
                    self.rollout.call(
                        "wait_for_version", self.version, self.config.call_timeout_s
                    ).result()
                self.consumed |= {g.group_id for g in batch}
                self._record_trained(batch)
                row = self._step_row(result, batch, time.monotonic() - step_began)
                step_began = time.monotonic()
                history.append(row)
                if self.on_step is not None:
                    self.on_step(row)
                if self.step_boundary is not None:
                    self.step_boundary(self.step)
        if train is not None:
            train.result()
        if poll is not None:
            poll.result()
        self._record_left_over(epoch_over)
        return history

    def _record_trained(self, batch: list[ReadyGroup]) -> None:
        trained = self.version - 1  # the weights the step was taken on
        for group in batch:
            lag = group.lag(trained, self.lineage)
            self._fate(
                group.group_id,
                group.task_id,
                "trained",
                f"trained at step {self.step}: its oldest token was {_steps(lag)} behind the "
                f"weights the step was taken on (at most "
                f"loop.max_off_policy_steps = {self.config.max_off_policy_steps})",
                lag=lag,
                staleness=True,
                resumed=group.resumed,
            )

    def ended_early(self) -> str | None:
        """Why the run stopped short of `loop.steps`, in one line; None when it did not.

        An epoch that runs out ends the run quietly otherwise, and a run whose every group
        was constant (an untrained policy that solves nothing) would report "0 steps" and
        exit 0 with no hint of what to change.
        """
        if self.step >= self.config.steps:
            return None
        c = self.counters
        return (
            f"the epoch ran out at step {self.step} of {self.config.steps}: this call "
            f"finished {c.groups_finished} group(s) and resumed {c.groups_resumed}; "
            f"{c.groups_constant} were constant "
            f"(loop.drop_constant_groups, loop.constant_by = {self.config.constant_by}), "
            f"{c.groups_untrainable} untrainable, {c.groups_stale_dropped} too stale, and "
            f"{c.groups_left_at_end} left over, fewer than a batch; more tasks "
            "(tasks.per_template) or a policy that solves some would train more"
        )

    def _record_left_over(self, epoch_over: bool) -> None:
        """The groups still queued when the run ends: untrained, in the group store; a run
        resumed with more steps judges them again."""
        n = len(self.ready)
        why = (
            f"the epoch ran out with {n} finished group(s) queued, fewer than a batch of "
            f"loop.groups_per_step = {self.config.groups_per_step}"
            if epoch_over
            else f"the run reached loop.steps = {self.config.steps} before its turn"
        )
        for group in self.ready:
            self._fate(
                group.group_id,
                group.task_id,
                "left_over",
                f"left over, not trained: {why}; a resume with more steps judges it again",
                resumed=group.resumed,
            )

    def _step_row(
        self, result: StepResult, batch: list[ReadyGroup], seconds: float
    ) -> dict[str, Any]:
        trained = self.version - 1  # the weights the step was taken on
        # (None, a lineage the tree cannot place, never passes the staleness rule.)
        lags = [lag for g in batch if (lag := g.lag(trained, self.lineage)) is not None]
        by_version = Counter(v for g in batch for t in g.trajectories for v in t.sampled_versions)
        token_lags: Counter[int] = Counter()
        for version, count in by_version.items():
            if (lag := self.lineage.lag(version, trained)) is not None:
                token_lags[lag] += count
        tokens = token_lags.total()
        window, self._window = self._window, []
        rewards = [e.reward for e in window if e.reward is not None]
        components: dict[str, list[float]] = {}
        flags: Counter[str] = Counter()
        for e in window:
            for k, v in e.components.items():
                components.setdefault(k, []).append(v)
            flags.update(e.flags.keys())
        row: dict[str, Any] = {
            **result.metrics(),
            "kind": STEP,
            "life": self.lineage.life,
            "groups": len(batch),
            "trained_groups": [g.group_id for g in batch],
            "group_lag_max": max(lags) if lags else 0,
            "token_lag_mean": sum(k * n for k, n in token_lags.items()) / tokens if tokens else 0.0,
            "token_lag_max": max(token_lags) if token_lags else 0,
            "token_lag_hist": dict(token_lags),
            "episodes": len(window),
            "reward_mean": statistics.fmean(rewards) if rewards else None,
            "solved_rate": statistics.fmean(e.solved for e in window) if window else None,
            "reward_components": {k: statistics.fmean(v) for k, v in sorted(components.items())},
            "monitor_flags": dict(flags),
            "generated_tokens": self._gen_tokens,
            "generation_tokens_per_s": self._gen_tokens / seconds if seconds > 0 else 0.0,
            "training_tokens_per_s": result.tokens_per_s,
            "trainer_idle_s": self._trainer_idle_s,
            "sandbox_s": self._sandbox_s,
            "step_seconds": seconds,
            **{f"count_{k}": v for k, v in vars(self.counters).items()},
            "tasks_drawn": len(self.sampler.drawn),
            **self.sampler.realised_mix(),
        }
        self._gen_tokens = 0
        self._trainer_idle_s = 0.0
        self._sandbox_s = 0.0
        return row


__all__ = [
    "Endpoint",
    "LoopCounters",
    "Orchestrator",
    "OrchestratorConfig",
    "ReadyGroup",
    "ScoreFn",
    "ScoredEpisode",
    "wants_more_groups",
]
