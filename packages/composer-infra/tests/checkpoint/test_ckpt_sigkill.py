"""Kill a real short run with SIGKILL at random points, restart it, check the invariants.

Each run is a forked child process (forked so that it does not pay torch's import and
first-use costs again) running `_ckpt_driver.run`; the parent kills it at a random point,
audits the run directory while nothing is running, and restarts it, until the run finishes.

The kill is aimed by progress, not by a clock alone: the child reports each checkpointed
step, the parent lets a random number of steps pass and then a random part of one more
step's time before SIGKILL. A busy machine (CI runs two test workers) makes steps slower, not
the kills later, so they still land mid-run and anywhere inside a step, saves included.
"""

from __future__ import annotations

import multiprocessing as mp
import random
import signal
import time
from pathlib import Path

import pytest
from _ckpt_driver import group_id, run

from composer_infra.checkpoint import FinishedGroup, StepCheckpointer

PROMPTS = 64
GROUPS_PER_STEP = 2
MAX_KILLS = 12


def audit(run_dir: Path, previous_trained: list[int], group_bytes: dict[str, bytes]) -> list[int]:
    """Check the on-disk invariants after a kill; returns the trained list of `latest`."""
    ckpt_root = run_dir / "ckpt"
    trained: list[int] = []
    if (ckpt_root / "latest").exists():
        reader = StepCheckpointer.__new__(StepCheckpointer)  # read-only: no temp cleanup
        reader.root, reader.keep_last = ckpt_root, None
        latest = reader.latest()
        assert latest is not None
        for path in reader.checkpoints():  # every visible checkpoint is whole
            reader.verify(path)
        state = reader.verify(latest)
        trained = state.extra["trained"]
        assert state.extra["consumed"] == [group_id(p) for p in trained]
        assert state.sampler["position"] == len(trained)
    # The trained prefix only grows: a kill never loses a checkpointed step.
    assert trained[: len(previous_trained)] == previous_trained
    for path in (run_dir / "groups").glob("*.json"):
        data = path.read_bytes()
        FinishedGroup.model_validate_json(data)  # never half-written
        # Never regenerated or rewritten once persisted.
        assert group_bytes.setdefault(path.stem, data) == data, path
    return trained


@pytest.mark.slow
def test_sigkill_at_random_points_loses_nothing_and_repeats_nothing(tmp_path: Path) -> None:
    # Pay torch's lazy first-use costs once here, so every forked run starts at once; then
    # time a short run for a first guess at one step's time (later steps refine it).
    run(tmp_path / "warmup", prompts=4)
    start = time.perf_counter()
    run(tmp_path / "timing", prompts=8, groups_per_step=GROUPS_PER_STEP)
    step_time = (time.perf_counter() - start) / (8 // GROUPS_PER_STEP)
    total_steps = PROMPTS // GROUPS_PER_STEP
    ctx = mp.get_context("fork")
    rng = random.Random(20260329)
    run_dir = tmp_path / "run"
    trained: list[int] = []
    group_bytes: dict[str, bytes] = {}
    kills = 0
    for _attempt in range(3 * MAX_KILLS + 5):
        parent_end, child_end = ctx.Pipe()
        proc = ctx.Process(
            target=run,
            args=(run_dir,),
            kwargs={"prompts": PROMPTS, "groups_per_step": GROUPS_PER_STEP, "ready": child_end},
        )
        proc.start()
        assert parent_end.poll(120) and parent_end.recv() == "ready"
        remaining = total_steps - len(trained) // GROUPS_PER_STEP
        if kills < MAX_KILLS and remaining >= 3:
            # Let 0-3 steps finish (never the last two), then kill within the next one: at
            # most about 5 steps an attempt, so at least 6 of the 32 steps' kills land.
            for _ in range(rng.randint(0, min(3, remaining - 3))):
                began = time.perf_counter()
                assert parent_end.poll(300), "driver stopped reporting steps"
                parent_end.recv()
                step_time = time.perf_counter() - began
            proc.join(timeout=rng.uniform(0.0, step_time))
            if proc.exitcode is None:
                proc.kill()  # SIGKILL
                kills += 1
        proc.join(timeout=300)
        assert proc.exitcode in (0, -signal.SIGKILL), f"driver crashed with {proc.exitcode}"
        trained = audit(run_dir, trained, group_bytes)
        if proc.exitcode == 0:
            break
    else:
        pytest.fail("run did not finish")
    assert kills >= MAX_KILLS // 2, f"only {kills} kills landed mid-run; widen the window"
    # Every prompt trained on exactly once across all restarts, and no group lost.
    assert sorted(trained) == list(range(PROMPTS))
    assert sorted(group_bytes) == sorted(group_id(p) for p in range(PROMPTS))
