"""Every finished group's fate is recorded when the loop decides it (groups/fates.jsonl).

The real Orchestrator on a real group store, task sampler and fate log: its resume (a
superseded, a constant and an infrastructure-failed group), its batch rule (a resumed
group regenerated as stale, a fresh one dropped as stale), finished groups left out, and a
real micro trainer for the trained and left-over fates. The fate log's restart line, its
torn tail and the groups a kill left trained but unrecorded are checked on the file itself.
The kill -9 and resume of a whole run is in test_rl_kill_between_checkpoints.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from _rl_helpers import Unused, trajectory
from _services_support import micro_config

from composer_infra.checkpoint import FinishedGroup, GroupStore, Trajectory
from composer_rl.rl.fates import FATES_LOG, Fate, FateBook, FateLog, fate_record
from composer_rl.rl.jsonl import read_jsonl
from composer_rl.rl.lineage import RESTART, Life, VersionTree
from composer_rl.rl.orchestrator import (
    Orchestrator,
    OrchestratorConfig,
    ScoredEpisode,
    _OpenGroup,
    group_task,
)
from composer_rl.rl.run import LocalEndpoint, RunLog
from composer_rl.rl.sampler import TaskSampler
from composer_rl.rl.services.training import TrainingConfig, TrainingService
from composer_rl.tasks import BUILTIN_TEMPLATES, Split
from composer_rl.tasks.model import Task

# Killed after step 4 before the first checkpoint: the initial weights came back as version 5.
RESTARTED = VersionTree([Life(0, 0, None), Life(5, 0, 0)])


def _sampler(n: int) -> tuple[TaskSampler, list[Task]]:
    tasks = [t for _, t in zip(range(n), BUILTIN_TEMPLATES[0].tasks(Split.TRAIN), strict=False)]
    sampler = TaskSampler(tasks, seed=0)
    return sampler, [task for _ in range(n) if (task := sampler.next()) is not None]


def _episodes(versions: list[list[int]], advantage: float | None) -> list[Trajectory]:
    out = []
    for sample, v in enumerate(versions):
        traj = trajectory(v, 0.0 if advantage is None else advantage * (-1) ** sample)
        if advantage is None:  # the sandbox or grader failed: no reward, not a zero
            traj.reward = traj.advantage = None
        traj.episode_id = f"e{sample}"
        out.append(traj)
    return out


def _scored(reward: float | None, solved: bool, version: int) -> ScoredEpisode:
    traj = trajectory([version, version])
    return ScoredEpisode(
        trajectories=[traj], reward=reward, solved=solved, turns=1, generated_tokens=2
    )


def test_the_resume_and_the_batch_rule_record_each_fate_with_its_reason(tmp_path: Path) -> None:
    sampler, drawn = _sampler(7)
    store = GroupStore(tmp_path / "groups")
    made = {
        "g000001": (drawn[0], [[0, 0], [0, 0]], 0.5),  # sampled by the restored weights
        "g000003": (drawn[2], [[3, 4], [4, 4]], 0.5),  # lost versions 3-4: 4 steps, stale
        "g000004": (drawn[3], [[1, 2], [2, 2]], 0.5),  # its task generated again below
        "g000007": (drawn[3], [[2, 3], [3, 3]], 0.5),
        "g000005": (drawn[4], [[0, 0], [0, 0]], 0.0),  # every advantage zero: constant
        "g000006": (drawn[5], [[0, 0], [0, 0]], None),  # every episode lost its reward
    }
    for gid, (task, versions, advantage) in made.items():
        store.put(
            FinishedGroup(
                group_id=f"{gid}-{task.id}",
                prompt_id=task.id,
                episodes=_episodes(versions, advantage),
            )
        )
    log = FateLog(tmp_path / FATES_LOG)
    config = OrchestratorConfig(
        group_size=2, groups_per_step=2, max_off_policy_steps=3, stale_policy="drop"
    )
    loop = Orchestrator(
        config, sampler, store, Unused(), Unused(), lambda raw: raw, start_step=4,
        start_version=5, lineage=RESTARTED, on_fate=log.record,
    )  # fmt: skip

    def standing() -> dict[str, dict[str, Any]]:
        book = FateBook.read(tmp_path / FATES_LOG)
        assert not book.repeated
        return {gid.split("-")[0]: record for gid, record in book.standing.items()}

    fates = standing()
    assert {gid: r["fate"] for gid, r in fates.items()} == {
        "g000004": "regenerated",
        "g000005": "constant",
        "g000006": "infrastructure_failed",
    }
    superseded = fates["g000004"]
    assert superseded["superseded_by"] == f"g000007-{drawn[3].id}" and superseded["resumed"]
    assert superseded["task"] == drawn[3].id and superseded["step"] == 4
    assert superseded["life"] == 1 and "lag" not in superseded
    assert "rewards are all equal (0)" in fates["g000005"]["reason"]
    assert "2 of 2 episodes got no reward" in fates["g000006"]["reason"]
    # A group whose every episode lost its reward is counted as the infrastructure's failure.
    c = loop.counters
    assert (c.groups_superseded, c.groups_constant, c.groups_untrainable) == (1, 1, 1)

    # Resumed and beyond the bound: its task is redone (whatever stale_policy says).
    batch = loop._batch()
    assert batch is not None and len(batch) == 2
    stale = standing()["g000003"]
    assert (stale["fate"], stale["lag"], stale["bound"], stale["resumed"]) == (
        "regenerated",
        4,
        3,
        True,
    )
    assert "4 optimizer steps behind" in stale["reason"] and "kill" in stale["reason"]

    # Groups finished by this process: constant, infrastructure failed, and one that goes
    # stale in the queue while the trainer takes four steps (dropped: stale_policy = drop).
    fresh = {"constant": (1.0, 1.0), "infra": (None, None), "stale": (1.0, 0.0)}
    ids: dict[str, str] = {}
    # The tasks drawn with no group (drawn[1], drawn[6]) and the stale group's are redone.
    assert list(loop.reissue) == [drawn[1], drawn[6], drawn[2]]
    for (name, rewards), task in zip(fresh.items(), loop.reissue, strict=True):
        gid = f"g00001{len(ids)}-{task.id}"
        ids[name] = gid.split("-")[0]
        loop.open[gid] = _OpenGroup(gid, task)
        loop._take_episodes([(gid, _scored(r, r == 1.0, 5)) for r in rewards])
    assert not loop.open and [g.group_id.split("-")[0] for g in loop.ready] == [ids["stale"]]
    loop.step, loop.version = 8, 9  # four steps later (version 9 is step 4 of life 1)
    assert loop._batch() is None
    fates = standing()
    assert fates[ids["constant"]]["fate"] == "constant"
    assert fates[ids["infra"]]["fate"] == "infrastructure_failed"
    dropped = fates[ids["stale"]]
    assert (dropped["fate"], dropped["step"], dropped["lag"], dropped["bound"]) == (
        "dropped_stale",
        8,
        4,
        3,
    )
    assert "resumed" not in dropped and "stale_policy = drop" in dropped["reason"]
    # Every fate line is a decision the loop counted, and none is written twice.
    lines = read_jsonl(tmp_path / FATES_LOG)
    assert len(lines) == len({r["group"] for r in lines}) == 7
    log.close()


def test_trained_and_left_over_fates_come_from_the_running_loop(tmp_path: Path) -> None:
    sampler, drawn = _sampler(3)
    assert sampler.exhausted
    store = GroupStore(tmp_path / "groups")
    for n, task in enumerate(drawn, start=1):
        trajs = _episodes([[0, 0], [0, 0]], 0.5)
        store.put(FinishedGroup(group_id=f"g{n:06d}-{task.id}", prompt_id=task.id, episodes=trajs))
    trainer = TrainingService(
        micro_config(), (tmp_path / "weights").as_uri(), None, TrainingConfig()
    )
    endpoint = LocalEndpoint(trainer)
    log = FateLog(tmp_path / FATES_LOG)
    config = OrchestratorConfig(group_size=2, groups_per_step=2, steps=5)
    try:
        loop = Orchestrator(
            config, sampler, store, Unused(), endpoint, lambda raw: raw, on_fate=log.record
        )
        history = loop.run()
    finally:
        endpoint.close()
        trainer.close()
        log.close()
    # Three groups, two a step: one step, then the epoch is over with one group left.
    assert [row["step"] for row in history] == [1]
    book = FateBook.read(tmp_path / FATES_LOG)
    trained = {g for g, r in book.standing.items() if r["fate"] == "trained"}
    assert trained == set(history[0]["trained_groups"]) == loop.consumed
    for gid in trained:
        record = book.standing[gid]
        assert (record["step"], record["life"], record["lag"], record["bound"]) == (1, 0, 0, 3)
        assert record["task"] == group_task(gid) and record["reason"].startswith(
            "trained at step 1"
        )
    (left,) = set(store.ids()) - trained
    assert book.standing[left]["fate"] == "left_over"
    assert "epoch ran out" in book.standing[left]["reason"]
    assert loop.counters.groups_left_at_end == 1 and left not in loop.dropped
    assert loop.ended_early() == (
        "the epoch ran out at step 1 of 5: this call finished 0 group(s) and resumed 3; "
        "0 were constant "
        "(loop.drop_constant_groups, loop.constant_by = reward), 0 untrainable, 0 too stale, "
        "and 1 left over, fewer than a batch; more tasks (tasks.per_template) or a policy "
        "that solves some would train more"
    )


def test_a_resume_voids_later_fates_and_records_what_the_kill_left_unrecorded(
    tmp_path: Path,
) -> None:
    path = tmp_path / FATES_LOG
    log = FateLog(path)
    decided: list[tuple[str, Fate, int]] = [
        ("g000001-a", "trained", 1),
        ("g000002-b", "constant", 1),
        ("g000003-c", "trained", 2),
        ("g000004-d", "dropped_stale", 2),
    ]
    for gid, fate, step in decided:
        log.record(fate_record(gid, group_task(gid), fate, step=step, life=0, reason="r"))
    log.close()
    with path.open("a") as out:  # kill -9 in the middle of a line
        out.write('{"kind": "fate", "group": "g000005-e", "fa')
    assert [r["group"] for r in read_jsonl(path)][-1] == "g000004-d"  # readers skip it
    log = FateLog(path)  # the next writer cuts it off before appending
    assert path.read_bytes().endswith(b'"reason": "r"}\n')
    # The checkpoint restored at step 1 trained g1 and g6 (g6's line was never written: the
    # kill came after the checkpoint, before the loop heard of the step) and dropped g2 and
    # g0 (decided by a version that recorded no fates).
    restart = log.restart(
        from_step=1,
        life=1,
        version=3,
        restored_version=1,
        consumed={"g000001-a", "g000006-f"},
        dropped={"g000002-b", "g000000-z"},
        trained_at={},
        task_of=group_task,
    )
    assert restart["kind"] == RESTART and (restart["from_step"], restart["life"]) == (1, 1)
    assert restart["voided"] == ["g000003-c", "g000004-d"]
    assert restart["unrecorded"] == ["g000000-z"]
    log.record(fate_record("g000003-c", "c", "trained", step=2, life=1, reason="again"))
    log.close()
    book = FateBook.read(path)
    assert not book.repeated and book.restarts == [restart]
    assert {g: (r["fate"], r["step"], r["life"]) for g, r in book.standing.items()} == {
        "g000001-a": ("trained", 1, 0),
        "g000002-b": ("constant", 1, 0),
        "g000003-c": ("trained", 2, 1),
        "g000006-f": ("trained", 1, 1),
    }
    assert book.standing["g000006-f"]["recovered"] is True
    assert book.standing["g000006-f"]["task"] == "f"
    assert list(book.voided) == ["g000004-d"]  # not decided again yet
    assert book.unrecorded == {"g000000-z"}


def test_the_run_log_cuts_a_line_a_kill_tore_before_appending(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2, "kl_')
    log = RunLog(tmp_path)
    log.step({"step": 2})
    log.close()
    assert (tmp_path / "metrics.jsonl").read_text() == '{"step": 1}\n{"step": 2}\n'
