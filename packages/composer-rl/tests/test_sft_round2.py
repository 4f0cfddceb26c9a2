"""The second SFT round from the policy's own mistakes (issue 29), with real components only:
a real checkpoint (random, or quickly trained to make one mistake) runs episodes on training
tasks through the evaluation code, never on validation or held-out ones; its failed
attempts fail the visible tests; the recovering demonstrations that open with them replay in
a fresh sandbox, fail their first run and end solved (graded by the hidden tests); the phase
trains, survives a SIGKILL and ends where an uninterrupted run ends; bad input to the command
is one line and exit status 2 before anything is written."""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from _stage_helpers import assert_same_phase, kill_at_first_checkpoint
from test_agent_demonstrations import replay

from composer_model import ComposerModel, preset, save_pretrained, train_tokenizer
from composer_rl.agent.behaviours import Behaviour, DemonstrationMix
from composer_rl.agent.demonstrations import (
    play_demonstration,
    play_recovering_from,
    visible_tests_fail,
)
from composer_rl.agent.mistakes import apply_edits
from composer_rl.agent.own_mistakes import DROP_REASONS, attempt_from_files
from composer_rl.agent.quick import random_checkpoint
from composer_rl.cli import main
from composer_rl.stages.config import OptimConfig, PhaseConfig, SftRound2Config
from composer_rl.stages.loop import train_phase
from composer_rl.stages.packing import pack_documents, rows_at_share
from composer_rl.stages.phases import save_torch
from composer_rl.stages.sft import demonstrations
from composer_rl.stages.sft_round2 import (
    ATTEMPTS_FILE,
    CHUNKS_DIR,
    COLLECTION_FILE,
    DEMONSTRATIONS_FILE,
    check_training_tasks,
    collect_policy_attempts,
    is_training_task,
    round2_tasks,
)
from composer_rl.tasks import BUILTIN_TEMPLATES, Split, Task
from composer_rl.tasks.templates.base import is_validation

TEMPLATE = "fix_operator"
QUICK = {"max_turns": 4, "max_new_tokens": 160, "max_seq_len": 1024, "max_batch_size": 8}
"""Episode settings for the tiny checkpoints (a mistake takes read, edit, finish)."""


def _template_tasks(name: str, split: Split, count: int) -> list[Task]:
    template = next(t for t in BUILTIN_TEMPLATES if t.name == name)
    return list(itertools.islice(template.tasks(split), count))


def _validation_task() -> Task:
    template = next(t for t in BUILTIN_TEMPLATES if t.name == TEMPLATE)
    return next(t for t in template.tasks(Split.TRAIN) if is_validation(t))


# --- which tasks ---------------------------------------------------------------------------


def test_the_round_draws_training_tasks_only() -> None:
    pool = [
        *_template_tasks(TEMPLATE, Split.TRAIN, 60),
        *_template_tasks("off_by_one", Split.TRAIN, 60),
        *_template_tasks(TEMPLATE, Split.HELDOUT, 20),
    ]
    assert any(is_validation(t) for t in pool) and any(t.split == "heldout" for t in pool)
    chosen = round2_tasks(SftRound2Config(tasks=30), pool)
    assert len(chosen) == 30 and len({t.id for t in chosen}) == 30
    assert all(t.split == "train" and not is_validation(t) for t in chosen)
    assert {t.metadata["template"] for t in chosen} == {TEMPLATE, "off_by_one"}
    only = round2_tasks(SftRound2Config(tasks=5, templates=["off_by_one"]), pool)
    assert {t.metadata["template"] for t in only} == {"off_by_one"} and len(only) == 5


@pytest.mark.parametrize("kind", ["validation", "held-out"])
def test_collecting_refuses_a_validation_or_held_out_task(tmp_path: Path, kind: str) -> None:
    bad = (
        _validation_task()
        if kind == "validation"
        else _template_tasks(TEMPLATE, Split.HELDOUT, 1)[0]
    )
    good = next(t for t in _template_tasks(TEMPLATE, Split.TRAIN, 10) if is_training_task(t))
    with pytest.raises(ValueError, match=f"is a {kind} task: .* training tasks only"):
        check_training_tasks([good, bad])
    with pytest.raises(ValueError, match=f"is a {kind} task"):  # before any episode runs
        collect_policy_attempts(tmp_path / "no-checkpoint", [good, bad], SftRound2Config())


def test_a_random_checkpoints_episodes_on_training_tasks_are_collected_and_saved(
    tmp_path: Path,
) -> None:
    checkpoint = random_checkpoint(tmp_path / "policy")
    tasks = [t for t in _template_tasks(TEMPLATE, Split.TRAIN, 12) if is_training_task(t)][:2]
    settings = SftRound2Config(tasks=2, samples=2, tasks_per_chunk=1, **{**QUICK, "max_turns": 2})
    save = tmp_path / CHUNKS_DIR
    collection = collect_policy_attempts(checkpoint, tasks, settings, save_dir=save, show=False)
    assert (collection.tasks, collection.episodes) == (2, 4)
    assert sum(collection.dropped.values()) + len(collection.attempts) == 4  # each counted once
    assert set(collection.dropped) <= {*DROP_REASONS, "a repeated attempt"}
    assert all(a.attempt.source == "policy" for a in collection.attempts)
    chunks = sorted(save.iterdir())
    assert [p.name for p in chunks] == ["chunk-0000.json", "chunk-0001.json"]
    # A killed collection resumes: a saved chunk is reused, a missing one is run again.
    kept = chunks[0].stat().st_mtime_ns
    chunks[1].unlink()
    again = collect_policy_attempts(checkpoint, tasks, settings, save_dir=save, show=False)
    assert chunks[0].stat().st_mtime_ns == kept and chunks[1].is_file()
    assert (again.tasks, again.episodes) == (2, 4)


# --- an attempt and its demonstration -----------------------------------------------------


def test_an_attempt_from_final_files_is_the_smallest_edits_and_says_what_it_did() -> None:
    task = _template_tasks(TEMPLATE, Split.TRAIN, 1)[0]
    (path,) = {e.path for e in task.solution}
    assert attempt_from_files(task, dict(task.files)) == (None, "unchanged")
    assert attempt_from_files(task, task.solved_files())[1] == "the oracle's state"
    extra = {**task.files, "scratch.py": "x = 1\n"}
    assert attempt_from_files(task, extra)[1] == "a file the solution lacks"
    gone = {p: t for p, t in task.files.items() if p != path}
    assert attempt_from_files(task, gone)[1] == "a file removed or unreadable"
    # What a policy might leave: the right line found, the wrong fix, a stray comment.
    wrong = task.files[path].replace("return", "# fixed\n    return -1 *", 1)
    attempt, reason = attempt_from_files(task, {**task.files, path: wrong})
    assert attempt is not None and reason == "" and attempt.source == "policy"
    assert len(attempt.edits) == 1 and attempt.edits[0].old is not None
    assert len(attempt.edits[0].old) < len(task.files[path])  # a line edit, not the file
    assert apply_edits(dict(task.files), attempt.edits) == {**task.files, path: wrong}
    assert path in attempt.what


def test_a_recovering_demonstration_from_an_own_attempt_fails_first_and_ends_solved() -> None:
    task = _template_tasks(TEMPLATE, Split.TRAIN, 1)[0]
    (path,) = {e.path for e in task.solution}
    wrong = task.files[path].replace("return", "# fixed\n    return -1 *", 1)
    attempt, _ = attempt_from_files(task, {**task.files, path: wrong})
    assert attempt is not None
    assert visible_tests_fail(task, apply_edits(dict(task.files), attempt.edits) or {})
    demo = play_recovering_from(task, attempt, grade=True)
    assert demo.kind == "recovering" and demo.solved
    assert demo.details["wrong"]["source"] == "policy" and demo.details["tests_failed_first"]
    run = replay(task, demo)  # parsed back from the text, played in a fresh sandbox
    assert run.report.all_passed and run.files == task.solved_files()
    first, second = run.test_runs()
    assert not run.results[first].ok and run.results[second].ok
    edits = [c for c in run.calls[:first] if c.name in ("edit_file", "write_file")]
    assert [(c.arguments["old"], c.arguments["new"]) for c in edits] == [
        (e.old, e.new) for e in attempt.edits
    ]  # it opens with the policy's own edit


def test_rows_at_share_mixes_the_new_rows_in_at_their_share() -> None:
    base = pack_documents([[1, 2, 3]] * 9, 4, 0, split_documents=False)
    extra = pack_documents([[7, 7, 7]] * 2, 4, 0, split_documents=False)
    mixed = rows_at_share(base, extra, 0.25)
    assert len(mixed) == 12 and int((mixed.tokens[:, 0] == 7).sum()) == 3
    assert len(rows_at_share(base, extra, 1.0)) == 2
    with pytest.raises(ValueError, match="share"):
        rows_at_share(base, extra, 0.0)


# --- the command's input checks -----------------------------------------------------------


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    return err


@pytest.fixture
def sft_run(tmp_path: Path) -> Path:
    """A run directory with an SFT checkpoint's files and round one's demonstrations."""
    run = tmp_path / "run"
    final = run / "sft" / "final"
    final.mkdir(parents=True)
    tokenizer = train_tokenizer(["def f(x):\n    return x\n"] * 4, vocab_size=300)
    tokenizer.save(final / "tokenizer.json")
    tokenizer.save(run / "tokenizer.json")
    (final / "config.json").write_text("{}")
    save_torch(
        {"train": ([[1, 2]], [[True, True]]), "heldout": ([[1]], [[True]])}, run / "sft_tokens.pt"
    )
    return run


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--sft-round2.tasks", "0"], "sft_round2.tasks 0: give how many training tasks"),
        ([], "sft_round2.tasks 0"),
        (["--sft-round2.tasks", "3", "--sft-round2.share", "1.5"], "sft_round2.share"),
        (["--sft-round2.tasks", "3", "--sft-round2.samples", "0"], "sft_round2.samples"),
        (
            ["--sft-round2.tasks", "3", "--sft-round2.phase.steps", "3"],
            "warmup_steps (5) must be below steps (3)",
        ),
        (["--sft-round2.tasks", "3", "--sft-round2.templates", "no_such"], "no template no_such"),
        (
            ["--sft-round2.tasks", "3", "--sft-round2.source", "{missing}"],
            "is not an SFT checkpoint",
        ),
    ],
    ids=["no-tasks", "tasks-missing", "share", "samples", "steps", "template", "source"],
)
def test_bad_input_is_one_line_and_exit_2_before_anything_is_written(
    sft_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    before = sorted(p.relative_to(sft_run) for p in sft_run.rglob("*"))
    args = [a.format(missing=tmp_path / "nowhere") for a in argv]
    assert main(["sft-round2", "--run-dir", str(sft_run), *args]) == 2
    assert says in _one_line_error(capsys)
    assert sorted(p.relative_to(sft_run) for p in sft_run.rglob("*")) == before


def test_a_run_without_sft_or_its_demonstrations_names_what_to_run(
    sft_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    assert main(["sft-round2", "--run-dir", str(empty), "--sft-round2.tasks", "3"]) == 2
    assert "composer-rl sft --run-dir" in _one_line_error(capsys) and not empty.exists()
    (sft_run / "sft_tokens.pt").unlink()
    assert main(["sft-round2", "--run-dir", str(sft_run), "--sft-round2.tasks", "3"]) == 2
    assert "sft_tokens.pt does not exist" in _one_line_error(capsys)


def test_a_checkpoint_of_another_tokenizer_is_refused(
    sft_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = train_tokenizer(["class A:\n    pass\n"] * 4, vocab_size=300)
    other.save(sft_run / "sft" / "final" / "tokenizer.json")
    assert main(["sft-round2", "--run-dir", str(sft_run), "--sft-round2.tasks", "3"]) == 2
    assert "differs from" in _one_line_error(capsys)


def test_stage1_checks_the_rounds_templates_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    argv = ["stage1", "--run-dir", str(run), "--round2-tasks", "4", "--round2-templates", "nope"]
    assert main(argv) == 2
    assert "no template nope" in _one_line_error(capsys) and not run.exists()


def test_a_policy_that_leaves_no_attempt_stops_with_one_line_after_saying_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    final = random_checkpoint(run / "sft" / "final")
    shutil.copy(final / "tokenizer.json", run / "tokenizer.json")
    save_torch(
        {"train": ([[1, 2]], [[True, True]]), "heldout": ([[1]], [[True]])}, run / "sft_tokens.pt"
    )
    argv = [
        "--sft-round2.tasks",
        "1",
        "--sft-round2.samples",
        "1",
        "--sft-round2.max-turns",
        "1",
        "--sft-round2.templates",
        TEMPLATE,
    ]
    assert main(["sft-round2", "--run-dir", str(run), "--no-progress", *argv]) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]  # after the progress lines
    assert last.startswith("error: ") and "left no attempt to correct" in last
    collected = json.loads((run / "sft_round2" / COLLECTION_FILE).read_text())
    assert collected["episodes"] == 1 and collected["attempts"] == 0
    assert sum(collected["dropped"].values()) == 1
    assert not (run / "sft_round2" / "result.json").exists()


# --- a quickly trained policy that makes one mistake ---------------------------------------


def _round2_settings(**phase: object) -> dict[str, object]:
    return {
        "tasks": 2,
        "samples": 2,
        "templates": [TEMPLATE],
        **QUICK,
        "phase": {
            "name": "sft_round2",
            "steps": 8,
            "seq_len": 512,
            "rows_per_step": 2,
            "eval_every": 4,
            "eval_rows": 2,
            "checkpoint_every": 2,
            "optim": {"warmup_steps": 1},
            **phase,
        },
    }


@pytest.fixture(scope="module")
def mistaken_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stage-one run directory whose SFT policy was trained on one careless demonstration
    with a wrong edit (120 steps, as test_agent_episode's replaying model): at T=1 it reads,
    makes that edit and finishes. Round one's demonstrations are careful and recovering ones
    of the round's tasks, tokenized by `stages.sft.demonstrations`."""
    run = tmp_path_factory.mktemp("round2") / "run"
    tasks = round2_tasks(SftRound2Config.model_validate(_round2_settings()))
    careless = play_demonstration(tasks[0], DemonstrationMix(careless_wrong=1.0), "careless")
    assert careless.details["wrong"]["source"] == "template"
    mix = DemonstrationMix.only(Behaviour.CAREFUL, recovering=1.0)
    texts = [careless.transcript.text, *(play_demonstration(t, mix).transcript.text for t in tasks)]
    tokenizer = train_tokenizer(texts * 4, vocab_size=400)
    ids, mask = careless.transcript.encode(tokenizer)
    torch.manual_seed(0)
    model = ComposerModel(preset("tiny", vocab_size=tokenizer.vocab_size, num_hidden_layers=2))
    rows = pack_documents(
        [ids], len(ids) + 1, tokenizer.eos_id, masks=[mask], split_documents=False
    )
    phase = PhaseConfig(
        name="overfit", steps=120, seq_len=len(ids) + 1, rows_per_step=1, eval_every=120,
        eval_rows=1, checkpoint_every=120, mtp_weight=0.0,
        optim=OptimConfig(lr=3e-3, warmup_steps=2, weight_decay=0.0),
    )  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        train_phase(model, phase, rows, rows, Path(tmp), show_progress=False)
    final = run / "sft" / "final"
    save_pretrained(model, final)
    tokenizer.save(final / "tokenizer.json")
    tokenizer.save(run / "tokenizer.json")
    train_ids, train_masks, _ = demonstrations(tasks, tokenizer, show_progress=False, mix=mix)
    save_torch(
        {"train": (train_ids, train_masks), "heldout": (train_ids[:1], train_masks[:1])},
        run / "sft_tokens.pt",
    )
    return run


@pytest.mark.slow  # trains the mistaken policy (about 25 s of CPU), then runs its episodes
def test_attempts_of_a_trained_policy_fail_the_visible_tests_and_are_corrected(
    mistaken_run: Path,
) -> None:
    settings = SftRound2Config.model_validate(_round2_settings())
    tasks = round2_tasks(settings)
    assert all(is_training_task(t) for t in tasks)
    collection = collect_policy_attempts(mistaken_run / "sft" / "final", tasks, settings)
    assert collection.episodes == len(tasks) * settings.samples
    assert collection.attempts, collection.summary(tasks)
    by_id = {t.id: t for t in tasks}
    for own in collection.attempts:
        task = by_id[own.task_id]
        assert own.attempt.source == "policy" and "failed" in own.visible
        assert visible_tests_fail(task, apply_edits(dict(task.files), own.attempt.edits) or {})
        demo = play_recovering_from(task, own.attempt)
        run = replay(task, demo)
        first, second = run.test_runs()
        assert not run.results[first].ok and run.results[second].ok
        assert run.report.all_passed, run.report.output


def _command(config: Path, run: Path) -> list[str]:
    return [
        sys.executable, "-c", "import sys; from composer_rl.cli import main; sys.exit(main())",
        "sft-round2", "--config", str(config), "--run-dir", str(run), "--no-progress",
    ]  # fmt: skip


@pytest.mark.slow  # three runs of the round in subprocesses (episodes, demonstrations, 8 steps)
def test_the_round_trains_and_resumes_after_a_kill_as_if_uninterrupted(
    mistaken_run: Path, tmp_path: Path
) -> None:
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps({"threads": 1, "sft_demonstration_workers": 1, "sft_round2": _round2_settings()})
    )
    killed, clean = tmp_path / "killed", tmp_path / "clean"
    shutil.copytree(mistaken_run, killed)
    phase = killed / "sft_round2"
    kill_at_first_checkpoint(_command(config, killed), phase / "checkpoints", timeout=900)
    assert not (phase / "result.json").exists()
    assert '"source": "policy"' in (phase / "attempts.jsonl").read_text()
    # The uninterrupted reference trains on the same data: the demonstrations' test runs
    # print their timings, so demonstrations played again differ in those tokens.
    shutil.copytree(mistaken_run, clean)
    (clean / "sft_round2").mkdir()
    shutil.copytree(phase / CHUNKS_DIR, clean / "sft_round2" / CHUNKS_DIR)
    for name in (ATTEMPTS_FILE, COLLECTION_FILE, DEMONSTRATIONS_FILE):
        shutil.copy(phase / name, clean / "sft_round2" / name)

    for run in (killed, clean):
        subprocess.run(_command(config, run), check=True, capture_output=True, timeout=900)
    result = json.loads((phase / "result.json").read_text())
    assert result["steps"] == 8 and result["own_mistake_demonstrations"] >= 1
    assert result["collection"]["attempts"] >= 1 and result["share"] == 0.25
    assert result["own_mistake_ce_after"] < result["own_mistake_ce_before"]

    assert_same_phase(killed / "sft_round2", clean / "sft_round2")
