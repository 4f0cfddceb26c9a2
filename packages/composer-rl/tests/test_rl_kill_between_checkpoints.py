"""A kill between checkpoints loses nothing it could keep (issue 31).

The trainer restores its last checkpoint (or the initial weights) under a new version
number; the groups the lost steps trained are queued again and judged for staleness on the
version tree (`composer_rl.rl.lineage`), not by version numbers that jumped; a resumed group
beyond the bound has its task generated again; metrics.jsonl marks the restart.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

import pytest
from _rl_helpers import Unused, tiny_checkpoint, trajectory
from _services_support import micro_config, token_batch

from composer_infra.checkpoint import FinishedGroup, GroupStore, StepCheckpointer
from composer_rl.rl.config import load_config
from composer_rl.rl.fates import FATES_LOG, FateBook
from composer_rl.rl.lineage import (
    LINEAGE_FILE,
    Life,
    VersionTree,
    final_lineage,
    restarts,
)
from composer_rl.rl.orchestrator import (
    Orchestrator,
    OrchestratorConfig,
    ReadyGroup,
    record_is_constant,
    take_fresh,
)
from composer_rl.rl.plots import plot_training
from composer_rl.rl.run import run_rl
from composer_rl.rl.sampler import TaskSampler
from composer_rl.rl.services.training import TrainerRestarted, TrainingConfig, TrainingService
from composer_rl.tasks import BUILTIN_TEMPLATES, Split

# The tester's run: killed after step 4, before the first checkpoint (step 5); the trainer
# came back with the initial weights as version 5.
REPORTED = VersionTree([Life(0, 0, None), Life(5, 0, 0)])


def test_the_version_tree_measures_steps_between_weights_not_version_numbers() -> None:
    tree = REPORTED
    assert tree.life == 1 and tree.step_of(5) == 0 and tree.step_of(7) == 2
    # Version 0 is the weights version 5 republished: a fresh policy is not stale.
    assert tree.lag(0, 5) == 0 and tree.lag(0, 7) == 2
    # Versions 1-4 are a lost lineage that forked at version 0: back to the fork and on.
    assert not tree.is_ancestor(3, of=7) and tree.is_ancestor(0, of=7)
    assert tree.lag(3, 5) == 3 and tree.lag(3, 7) == 5
    # A version one step ahead of the trainer (published before the loop heard) is ahead.
    assert tree.lag(8, 7) == -1
    # One life: the old rule, trainer version minus token version.
    single = VersionTree()
    assert [single.lag(v, 6) for v in (6, 5, 1)] == [0, 1, 5]
    # A second restart, from a checkpoint at step 2 written in the second life (version 7).
    twice = tree.restart(first_version=10, restored_step=2, restored_version=7)
    assert twice.lag(7, 10) == 0 and twice.lag(9, 11) == 2 + 1  # 9: step 4 of life 1
    assert twice.lag(3, 10) == 3 + 2 and twice.lag(0, 11) == 3
    assert VersionTree.from_dict(twice.to_dict()) == twice
    # Lives that published nothing (the store never showed their first version) are dropped.
    assert tree.restart(5, 0, 0) == tree
    # A restore the tree cannot place (no file of an older run) is of unknown distance.
    unknown = VersionTree().restart(first_version=9, restored_step=2, restored_version=6)
    assert unknown.lag(3, 10) is None and unknown.lag(9, 10) == 1


def test_a_resume_requeues_lost_steps_groups_and_redoes_the_prompts_of_stale_ones(
    tmp_path: Path,
) -> None:
    tasks = [t for _, t in zip(range(6), BUILTIN_TEMPLATES[0].tasks(Split.TRAIN), strict=False)]
    sampler = TaskSampler(tasks, seed=0)
    drawn = [task for _ in range(6) if (task := sampler.next()) is not None]
    store = GroupStore(tmp_path / "groups")
    made = {
        "g000001": (drawn[0], [[0, 0]]),  # sampled by the restored weights: lag 0
        "g000002": (drawn[1], [[0, 1]]),  # one token of lost version 1: 1 step from the fork
        "g000003": (drawn[2], [[3, 4]]),  # lost versions 3-4: 4 steps, beyond the bound
        "g000004": (drawn[3], [[1, 2]]),  # generated again below: superseded
        "g000007": (drawn[3], [[2, 3]]),
        "g000005": (drawn[4], [[0, 0]]),  # every advantage zero: constant, not trained
    }
    for gid, (task, versions) in made.items():
        advantage = 0.0 if gid == "g000005" else 0.5
        trajs = [trajectory(v, advantage) for v in versions]
        store.put(FinishedGroup(group_id=f"{gid}-{task.id}", prompt_id=task.id, episodes=trajs))
    # drawn[5] was being generated at the kill: its task is redone.
    config = OrchestratorConfig(groups_per_step=2, max_off_policy_steps=3, stale_policy="drop")
    loop = Orchestrator(
        config, sampler, store, Unused(), Unused(), lambda raw: raw, start_version=5,
        lineage=REPORTED,
    )  # fmt: skip
    c = loop.counters
    assert (c.groups_resumed, c.groups_resumed_lost_lineage) == (4, 3)
    assert (c.groups_constant, c.groups_superseded, c.tasks_reissued) == (1, 1, 1)
    # Stalest first; the superseded and the constant group are dropped, with their reasons.
    assert [g.group_id.split("-")[0] for g in loop.ready] == [
        "g000003",
        "g000007",
        "g000002",
        "g000001",
    ]
    assert {g.split("-")[0] for g in loop.dropped} == {"g000004", "g000005"}
    # Under "drop", a resumed group beyond the bound has its task redone all the same.
    batch = loop._batch()
    assert batch is not None and [g.group_id.split("-")[0] for g in batch] == [
        "g000007",
        "g000002",
    ]
    assert c.groups_stale_dropped == c.groups_resumed_regenerated == c.groups_regenerated == 1
    assert [t.id for t in loop.reissue] == [drawn[5].id, drawn[2].id]
    # New group ids never collide with the resumed ones.
    assert loop._group_counter == 7
    # The outcome each episode had is kept, so constant-by-correctness is judged again too.
    solved = trajectory([0, 0])
    solved.metadata["solved"] = True
    group = FinishedGroup(group_id="g000009-x", prompt_id="x", episodes=[solved])
    (back,) = FinishedGroup.model_validate_json(group.model_dump_json()).episodes
    assert back.metadata == {"solved": True}


def test_queue_rule_on_the_tree_keeps_fresh_groups_after_a_version_jump() -> None:
    def group(name: str, versions: set[int]) -> ReadyGroup:
        return ReadyGroup(name, name, [trajectory(sorted(versions))])

    ready = deque([group("sft", {0}), group("lost", {2, 4}), group("new", {5, 6})])
    fresh, stale = take_fresh(ready, 6, 3, max_off_policy_steps=3, lineage=REPORTED)
    # Versions said 6 - 0 = 6 for "sft"; the tree says 1 step.
    assert [g.group_id for g in fresh] == ["sft", "new"]
    assert [g.group_id for g in stale] == ["lost"]  # 4 back to the fork + 1 since


def test_a_restarted_trainer_starts_a_life_and_refuses_batches_of_the_old_one(
    tmp_path: Path,
) -> None:
    url = (tmp_path / "weights").as_uri()
    first = TrainingService(
        micro_config(), url, tmp_path / "ckpt", TrainingConfig(checkpoint_every=2)
    )
    for seed in range(3):  # checkpoint at step 2; step 3 published, then "killed"
        first.train_step(token_batch(seed=seed), wait=True)
    assert first.resume_state().restored is False
    first.close()
    second = TrainingService(
        micro_config(), url, tmp_path / "ckpt", TrainingConfig(checkpoint_every=2)
    )
    try:
        state = second.resume_state()
        assert (state.step, state.version, state.restored) == (2, 4, True)
        tree = state.lineage
        assert tree == VersionTree([Life(0, 0, None), Life(4, 2, 2)])
        assert VersionTree.load(tmp_path / "ckpt" / LINEAGE_FILE) == tree
        assert tree.lag(2, 4) == 0 and tree.lag(3, 4) == 1
        with pytest.raises(TrainerRestarted, match="run the same command again"):
            second.train_rl([trajectory([2, 2])], {}, life=0)
        assert second.train_rl([trajectory([4, 4])], {}, life=1).version == 5
    finally:
        second.close()


def test_the_plot_reads_only_the_final_lineage(tmp_path: Path) -> None:
    rows: list[dict[str, Any]] = [
        {"step": s, "kind": "step", "life": 0, "version": s, "reward_mean": 0.1 * s}
        for s in (1, 2, 3, 4)
    ]
    rows.append({"kind": "restart", "from_step": 2, "life": 1})
    rows += [
        {"step": s, "kind": "step", "life": 1, "version": s + 3, "reward_mean": 0.0}
        for s in (3, 4, 5)
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    evals = [{"version": v, "pass@1": 0.5, "pass@1_se": 0.1} for v in (4, 6)]  # 4: lost
    (tmp_path / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in evals))
    VersionTree([Life(0, 0, None), Life(5, 2, 2)]).save(tmp_path / "checkpoints" / LINEAGE_FILE)
    assert plot_training(tmp_path).is_file()
    assert [(r["step"], r["life"]) for r in final_lineage(rows)] == [
        (1, 0),
        (2, 0),
        (3, 1),
        (4, 1),
        (5, 1),
    ]
    assert restarts(rows) == [rows[4]]
    assert [r["step"] for r in final_lineage([{"step": 1}, {"step": 2}])] == [1, 2]


FLAGS = {
    "local": "true",
    "tasks.per-template": "1",
    "rollout.max-turns": "2",
    "rollout.max-new-tokens": "24",
    "rollout.max-seq-len": "512",
    "loop.group-size": "2",
    "loop.groups-per-step": "1",
    "loop.max-groups-in-flight": "3",
    "loop.max-off-policy-steps": "2",
    # An untrained policy solves nothing, and failures are not charged for length: every
    # group is constant, and the test is about the kill, not the signal.
    "loop.drop-constant-groups": "false",
    "train.checkpoint-every": "2",
    "eval.per-template": "0",
}


def _task(group_id: str) -> str:
    return group_id.split("-", 1)[1]


def _rows(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _checkpoint_state(run: Path) -> dict[str, Any]:
    """state.json of the run's latest step checkpoint."""
    latest = StepCheckpointer(run / "checkpoints").latest()
    assert latest is not None, "no step checkpoint"
    state: dict[str, Any] = json.loads((latest / "state.json").read_text())
    return state


@pytest.mark.slow
def test_a_kill_between_checkpoints_trains_every_group_once_and_loses_no_prompt(
    tmp_path: Path,
) -> None:
    model = tiny_checkpoint(tmp_path / "sft")
    run = tmp_path / "run"
    argv = [sys.executable, "-c", "import sys; from composer_rl.cli import main; sys.exit(main())"]
    argv += ["rl", "--model", str(model), "--run-dir", str(run), "--loop.steps", "1000"]
    argv += ["--no-progress", *[x for k, v in FLAGS.items() for x in (f"--{k}", v)]]
    job = subprocess.Popen(
        argv, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    metrics = run / "metrics.jsonl"
    deadline = time.monotonic() + 600
    while len(_rows(metrics)) < 3:  # step 3 trained, after the checkpoint of step 2
        if job.poll() is not None or time.monotonic() > deadline:
            err = job.stderr.read().decode()[-2000:] if job.stderr else ""
            pytest.fail(f"the job ended early or hung: {err}")
        time.sleep(0.05)
    os.killpg(job.pid, signal.SIGKILL)
    job.wait()
    logged = _rows(metrics)
    state = _checkpoint_state(run)
    restored, consumed_then = state["step"], set(state["sampler"]["consumed"])
    assert restored < logged[-1]["step"], "the kill should fall between checkpoints"
    groups_then = set(GroupStore(run / "groups").ids())
    drawn_then = json.loads((run / "sampler.json").read_text())["drawn"]

    # The same command again (in this process), run until the epoch is over.
    overrides = {k.replace("-", "_"): v for k, v in FLAGS.items()}
    config = load_config(
        None, {**overrides, "model": str(model), "run_dir": str(run), "loop.steps": 1000}
    )
    history = run_rl(config)
    rows = _rows(metrics)
    (restart,) = restarts(rows)
    assert restart["from_step"] == restored and restart["life"] == 1
    lost = [r for r in logged if r["step"] > restored]
    assert restart["steps_lost"] == [r["step"] for r in lost]
    assert restart["groups_retrained"] == sorted(g for r in lost for g in r["trained_groups"])
    # The final lineage: steps 1.. once each; after the restart every row says life 1.
    lineage = final_lineage(rows)
    assert [r["step"] for r in lineage] == list(range(1, len(lineage) + 1))
    assert all(r["life"] == (0 if r["step"] <= restored else 1) for r in lineage)
    assert history[0]["step"] == restored + 1 and history[0]["count_groups_resumed"] >= 1
    # A fresh policy does not look stale: what the first resumed step trained is in bound.
    assert history[0]["group_lag_max"] <= 2

    trained = [g for r in lineage for g in r["trained_groups"]]
    assert len(trained) == len(set(trained)), "a group trained twice in the final lineage"
    assert len({_task(g) for g in trained}) == len(trained), "a prompt trained twice"
    final = _checkpoint_state(run)
    consumed, dropped = set(final["sampler"]["consumed"]), set(final["sampler"]["dropped"])
    assert consumed == set(trained)  # the checkpoint agrees with the final lineage
    every = set(GroupStore(run / "groups").ids())
    # Every finished group is trained once or dropped, and each drop is counted.
    assert every == consumed | dropped and not consumed & dropped
    # (The counts of the resumed process, saved with the checkpoint the run ends with.)
    counts = final["sampler"]["counters"]
    dropped_now = dropped - set(state["sampler"]["dropped"])
    assert len(dropped_now) == sum(
        counts[f"groups_{k}"] for k in ("constant", "stale_dropped", "superseded", "untrainable")
    )
    # Nothing the kill exposed is lost: each group finished but not checkpointed as trained
    # is trained in the final lineage, counted constant, or its prompt generated again.
    by_task: dict[str, list[str]] = {}
    for gid in sorted(every):
        by_task.setdefault(_task(gid), []).append(gid)
    store = GroupStore(run / "groups")
    for gid in groups_then - consumed_then - set(state["sampler"]["dropped"]):
        if gid in consumed:
            continue
        newer = [g for g in by_task[_task(gid)] if g > gid]
        constant = record_is_constant(store.get(gid).episodes, "reward")
        assert newer or constant, f"{gid}: dropped and its prompt lost"
    # Every finished group has exactly one fate standing in the fate log, the one the final
    # lineage and the final checkpoint say: trained at its step and life, or dropped.
    fates = FateBook.read(run / FATES_LOG)
    assert set(fates.standing) == every and not fates.repeated
    assert not fates.voided and not fates.unrecorded
    fate_of = {gid: record["fate"] for gid, record in fates.standing.items()}
    assert {g for g, f in fate_of.items() if f == "trained"} == consumed
    assert {g for g, f in fate_of.items() if f != "trained"} == dropped
    assert {g: (fates.standing[g]["step"], fates.standing[g]["life"]) for g in consumed} == {
        g: (r["step"], r["life"]) for r in lineage for g in r["trained_groups"]
    }
    # The fate log marks the restart as metrics.jsonl does, and voids what the lost steps
    # trained (decided again by the resumed run).
    (fate_restart,) = fates.restarts
    assert (fate_restart["from_step"], fate_restart["life"]) == (restored, 1)
    assert set(restart["groups_retrained"]) <= set(fate_restart["voided"])
    assert set(fate_restart["voided"]).isdisjoint(consumed_then | set(state["sampler"]["dropped"]))
    # No prompt of the epoch is lost: every drawn task has a group; the single epoch holds.
    drawn = json.loads((run / "sampler.json").read_text())["drawn"]
    assert drawn[: len(drawn_then)] == drawn_then and len(drawn) == len(set(drawn))
    assert set(drawn) == set(by_task)
