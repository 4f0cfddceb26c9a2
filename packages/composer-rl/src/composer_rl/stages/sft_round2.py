"""Stage one's second SFT round: recovering demonstrations from the SFT policy's own mistakes.

Round one's recovering demonstrations open with somebody else's mistake (a template's wrong
edit, a generic mutation). Issue 29 asks for the policy's own: corrections of its own
mistakes teach more. This phase (off by default: `Stage1Config.sft_round2.tasks` 0)

1. runs the SFT checkpoint (`RUN/sft/final`, or `sft_round2.source`) on `tasks` training
   tasks, `samples` episodes each at `temperature` (1 by default), through the evaluation
   code (`composer_rl.eval.evaluate.run_eval`: the episode runner, sandboxes, the hidden
   tests). Validation and held-out tasks are never used (`check_training_tasks` refuses
   them). Episodes go in chunks of `tasks_per_chunk` tasks, each saved when done
   (`collection/chunk-NNNN.json`), so a killed collection resumes at its next chunk;
2. keeps each failed episode's attempt (`composer_rl.agent.own_mistakes.policy_attempt`:
   the edits from the original repository to its final one, kept only if the visible tests
   fail after them), at most `max_attempts_per_task` distinct ones a task
   (`attempts.jsonl`, `collection.json`);
3. plays a recovering demonstration from each (`play_recovering_from`: look around, the
   policy's attempt, the failing run, the correction to the oracle's state, the passing run,
   finish), graded with the hidden tests; only those whose first run failed and whose end
   state is solved are kept (`demonstrations.pt`);
4. continues SFT from the checkpoint for `phase.steps` steps on round one's demonstrations
   (`RUN/sft_tokens.pt`) with the own-mistake ones making `share` of the rows
   (`rows_at_share`), checkpointed and resumable like every phase, and exports `final/`.

Everything lives in `RUN/sft_round2/` (the phase's name), beside `sft/`.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from composer_infra.checkpoint import atomic_write_bytes
from composer_model import ComposerTokenizer, load_pretrained
from composer_rl.agent.demonstrations import play_recovering_from
from composer_rl.agent.episode import EpisodeResult, RunnerConfig
from composer_rl.agent.own_mistakes import PolicyAttempt, policy_attempt
from composer_rl.errors import ConfigError
from composer_rl.eval.evaluate import EvalConfig, run_eval
from composer_rl.progress import Show, StepProgress, phase_line
from composer_rl.stages.config import SftRound2Config, Stage1Config
from composer_rl.stages.data import TOKENIZER_FILE
from composer_rl.stages.loop import evaluate, train_phase
from composer_rl.stages.packing import PackedRows, pack_documents, rows_at_share
from composer_rl.stages.phases import export_final, final_dir, open_phase, save_torch
from composer_rl.tasks import BUILTIN_TEMPLATES, Split, Task, collect_tasks, sample_tasks
from composer_rl.tasks.sources import BuiltinTaskSource
from composer_rl.tasks.templates.base import Template, is_validation

ROUND_ONE_FILE = "sft_tokens.pt"
CHUNKS_DIR = "collection"
ATTEMPTS_FILE = "attempts.jsonl"
COLLECTION_FILE = "collection.json"
DEMONSTRATIONS_FILE = "demonstrations.pt"


class NoOwnMistakes(RuntimeError):
    """The policy's episodes left no attempt (or no demonstration) to train on."""


def is_training_task(task: Task) -> bool:
    """Whether `task` may be trained on: the training split, not its validation part."""
    return task.split == Split.TRAIN.value and not is_validation(task)


def check_training_tasks(tasks: Sequence[Task]) -> None:
    """Refuse any validation or held-out task (settings are chosen on the first, figures
    are reported on the second: neither may shape training)."""
    for task in tasks:
        if not is_training_task(task):
            kind = "a validation" if task.split == Split.TRAIN.value else "a held-out"
            raise ValueError(
                f"task {task.id} is {kind} task: the second SFT round runs the policy on "
                "training tasks only"
            )


def templates_named(names: Sequence[str] | None) -> list[Template]:
    """The built-in templates of `names` (None: all of them); a ConfigError names any
    unknown one and what there is."""
    if names is None:
        return list(BUILTIN_TEMPLATES)
    known = {t.name: t for t in BUILTIN_TEMPLATES}
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise ConfigError(
            f"sft_round2.templates {list(names)}: "
            + (f"no template {', '.join(unknown)}; " if unknown else "give at least one; ")
            + f"choose from {', '.join(sorted(known))}"
        )
    return [known[n] for n in names]


def round2_tasks(settings: SftRound2Config, pool: Sequence[Task] | None = None) -> list[Task]:
    """`settings.tasks` training tasks spread evenly over the templates (seeded), from
    `pool` (default: every built-in training task of `settings.templates`). Validation
    and held-out tasks in the pool are left out."""
    templates = templates_named(settings.templates)
    if pool is None:
        pool = collect_tasks(Split.TRAIN, [BuiltinTaskSource(templates)], pm=None)
    names = {t.name for t in templates}
    train = [
        t
        for t in pool
        if is_training_task(t)
        and (settings.templates is None or t.metadata.get("template") in names)
    ]
    groups = {_group(t) for t in train}
    per_group = max(1, math.ceil(settings.tasks / max(1, len(groups))))
    chosen = sample_tasks(train, per_group=per_group, seed=settings.seed)
    if len(chosen) > settings.tasks:
        keep = {t.id for t in random.Random(settings.seed).sample(chosen, settings.tasks)}
        chosen = [t for t in chosen if t.id in keep]
    return chosen


def _group(task: Task) -> str:
    """A task's template (its category for a task without one), as `sample_tasks` groups."""
    return str(task.metadata.get("template", task.category.value))


def source_checkpoint(config: Stage1Config) -> Path:
    """The SFT checkpoint the round continues: `sft_round2.source`, else `RUN/sft/final`."""
    return config.sft_round2.source or final_dir(config.run_dir / config.sft.name)


def check_round2_inputs(config: Stage1Config) -> Path:
    """The checks of the round's inputs that need nothing started: the SFT checkpoint
    (with its tokenizer), round one's demonstrations, and that both use one tokenizer.
    A ConfigError says what to run or give; returns the checkpoint."""
    templates_named(config.sft_round2.templates)
    source = source_checkpoint(config)
    run = config.run_dir
    if not (source / "config.json").is_file() or not (source / TOKENIZER_FILE).is_file():
        raise ConfigError(
            f"{source} is not an SFT checkpoint (no config.json and tokenizer.json): run "
            f"`uv run composer-rl sft --run-dir {run}` first, or give --source"
        )
    if not (run / ROUND_ONE_FILE).is_file():
        raise ConfigError(
            f"{run / ROUND_ONE_FILE} does not exist: the second round trains on round one's "
            f"demonstrations too; run `uv run composer-rl sft --run-dir {run}` first"
        )
    run_tokenizer = run / TOKENIZER_FILE
    if (
        not run_tokenizer.is_file()
        or run_tokenizer.read_bytes() != (source / TOKENIZER_FILE).read_bytes()
    ):
        raise ConfigError(
            f"{run / ROUND_ONE_FILE} was tokenized with {run_tokenizer}, which is missing or "
            f"differs from {source / TOKENIZER_FILE}: give a --source of this run"
        )
    return source


def checkpoint_digest(checkpoint: Path) -> str:
    """A digest of a checkpoint's weights, config and tokenizer: collected attempts are
    reused only for the very checkpoint that made them."""
    digest = hashlib.sha256()
    for name in ("config.json", "model.safetensors", TOKENIZER_FILE):
        path = checkpoint / name
        digest.update(name.encode())
        if path.is_file():
            with path.open("rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
    return digest.hexdigest()


@dataclass
class Collection:
    """What the policy's episodes gave: the kept attempts and how many episodes ended how."""

    attempts: list[PolicyAttempt] = field(default_factory=list)
    tasks: int = 0
    episodes: int = 0
    solved: int = 0
    dropped: Counter[str] = field(default_factory=Counter)

    def add(self, part: dict[str, Any]) -> None:
        self.attempts += [PolicyAttempt.from_record(r) for r in part["attempts"]]
        self.tasks += int(part["tasks"])
        self.episodes += int(part["episodes"])
        self.solved += int(part["solved"])
        self.dropped.update(part["dropped"])

    def summary(self, tasks: Sequence[Task]) -> dict[str, Any]:
        group = {t.id: _group(t) for t in tasks}
        by_template = Counter(group[a.task_id] for a in self.attempts)
        return {
            "tasks": self.tasks,
            "episodes": self.episodes,
            "solved": self.solved,
            "solved_rate": self.solved / self.episodes if self.episodes else 0.0,
            "attempts": len(self.attempts),
            "tasks_with_attempts": len({a.task_id for a in self.attempts}),
            "dropped": dict(sorted(self.dropped.items())),
            "attempts_by_template": dict(sorted(by_template.items())),
        }


def _episodes(
    checkpoint: Path,
    tasks: list[Task],
    settings: SftRound2Config,
    chunk: int,
    threads: int | None,
    show: Show,
) -> list[EpisodeResult]:
    """The chunk's episodes, through the evaluation code (engine, runner, grading)."""
    runner = RunnerConfig(
        max_turns=settings.max_turns,
        max_new_tokens=settings.max_new_tokens,
        temperature=settings.temperature,
        seed=settings.seed * 1_000_003 + chunk,
    )
    config = EvalConfig(
        samples=settings.samples,
        max_batch_size=settings.max_batch_size,
        max_seq_len=settings.max_seq_len,
        runner=runner,
        tasks_per_step=len(tasks),  # one pass: continuous batching over the whole chunk
        show_progress=show,
    )
    _, results = run_eval(checkpoint, tasks, config, threads)
    return results


def _kept(
    results: list[EpisodeResult], settings: SftRound2Config, workers: int
) -> tuple[list[PolicyAttempt], Counter[str]]:
    """Each episode's attempt (visible tests run in `workers` threads), at most
    `max_attempts_per_task` distinct end states a task, in (task, sample) order."""
    dropped: Counter[str] = Counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        outcomes = list(pool.map(policy_attempt, results))
    kept: list[PolicyAttempt] = []
    seen: dict[str, set[tuple[tuple[str, str | None, str], ...]]] = {}
    for attempt, reason in outcomes:
        if attempt is None:
            dropped[reason] += 1
            continue
        states = seen.setdefault(attempt.task_id, set())
        state = tuple((e.path, e.old, e.new) for e in attempt.attempt.edits)
        if state in states:
            dropped["a repeated attempt"] += 1
        elif len(states) >= settings.max_attempts_per_task:
            dropped["over max_attempts_per_task"] += 1
        else:
            states.add(state)
            kept.append(attempt)
    return kept, dropped


def collect_policy_attempts(
    checkpoint: Path,
    tasks: list[Task],
    settings: SftRound2Config,
    *,
    save_dir: Path | None = None,
    threads: int | None = None,
    workers: int = 1,
    show: Show = True,
) -> Collection:
    """Run `checkpoint` on `tasks` (training tasks only: anything else is refused before an
    episode runs) and keep its failed episodes' attempts. With `save_dir`, each chunk of
    `settings.tasks_per_chunk` tasks is saved there when done and reused by a later call
    with the same checkpoint, tasks and settings (a killed collection resumes)."""
    check_training_tasks(tasks)
    key = {
        "checkpoint": checkpoint_digest(checkpoint),
        "tasks": [t.id for t in tasks],
        **settings.model_dump(
            include={
                "samples",
                "temperature",
                "max_attempts_per_task",
                "max_turns",
                "max_new_tokens",
                "max_seq_len",
                "max_batch_size",
                "tasks_per_chunk",
                "seed",
            }
        ),
    }
    size = settings.tasks_per_chunk
    chunks = [tasks[i : i + size] for i in range(0, len(tasks), size)]
    collection = Collection()
    for index, chunk in enumerate(chunks):
        path = save_dir / f"chunk-{index:04d}.json" if save_dir is not None else None
        if path is not None and path.is_file():
            part = json.loads(path.read_text())
            if part.get("key") == key:
                collection.add(part)
                continue
        results = _episodes(checkpoint, chunk, settings, index, threads, show)
        attempts, dropped = _kept(results, settings, workers)
        part = {
            "key": key,
            "tasks": len(chunk),
            "episodes": len(results),
            "solved": sum(r.solved for r in results),
            "dropped": dict(dropped),
            "attempts": [a.record() for a in attempts],
        }
        if path is not None:
            atomic_write_bytes(path, (json.dumps(part) + "\n").encode())
        collection.add(part)
        phase_line(
            "sft_round2",
            f"episodes of {collection.tasks}/{len(tasks)} tasks: {collection.episodes} run, "
            f"{collection.solved} solved, {len(collection.attempts)} attempts kept",
            show,
        )
    return collection


def own_mistake_demonstrations(
    attempts: Sequence[PolicyAttempt],
    tasks: Sequence[Task],
    tokenizer: ComposerTokenizer,
    workers: int = 1,
    show: Show = True,
) -> tuple[list[list[int]], list[list[bool]], dict[str, int]]:
    """A recovering demonstration from each attempt, graded with the hidden tests; those
    whose first visible run did not fail or whose end state is not solved are dropped (and
    counted). Returns token ids, loss masks and the counts."""
    by_id = {t.id: t for t in tasks}
    ids: list[list[int]] = []
    masks: list[list[bool]] = []
    counts: Counter[str] = Counter()
    progress = StepProgress(
        "own-mistake demonstrations", len(attempts), unit="demonstrations", show=show
    )
    with ThreadPoolExecutor(max_workers=workers) as pool, progress:
        played = pool.map(
            lambda a: play_recovering_from(by_id[a.task_id], a.attempt, grade=True), attempts
        )
        for index, demo in enumerate(played):
            progress.update(index + 1)
            if not demo.details["tests_failed_first"]:
                counts["dropped:first run did not fail"] += 1
            elif not demo.solved:
                counts["dropped:not solved"] += 1
            else:
                counts[demo.kind] += 1
                tokens, mask = demo.transcript.encode(tokenizer)
                ids.append(tokens)
                masks.append(mask)
    return ids, masks, dict(sorted(counts.items()))


def _write_collection(
    phase_dir: Path, source: Path, collection: Collection, tasks: Sequence[Task]
) -> dict[str, Any]:
    summary = {"source": str(source), **collection.summary(tasks)}
    lines = "".join(json.dumps(a.record()) + "\n" for a in collection.attempts)
    atomic_write_bytes(phase_dir / ATTEMPTS_FILE, lines.encode())
    atomic_write_bytes(phase_dir / COLLECTION_FILE, (json.dumps(summary, indent=2) + "\n").encode())
    return summary


def _demonstrations(
    phase_dir: Path,
    collection: Collection,
    tasks: list[Task],
    tokenizer: ComposerTokenizer,
    digest: str,
    workers: int,
    show: Show,
) -> dict[str, Any]:
    """The own-mistake demonstrations, tokenized once (`demonstrations.pt`, keyed by the
    attempts and the checkpoint they came from)."""
    key = {"checkpoint": digest, "attempts": [a.record() for a in collection.attempts]}
    cache = phase_dir / DEMONSTRATIONS_FILE
    if cache.is_file():
        cached = dict(torch.load(cache, weights_only=False))
        if cached.get("key") == key:
            return cached
    ids, masks, counts = own_mistake_demonstrations(
        collection.attempts, tasks, tokenizer, workers, show
    )
    data = {"key": key, "ids": ids, "masks": masks, "counts": counts}
    save_torch(data, cache)
    return data


def run_sft_round2(config: Stage1Config, show_progress: Show = True) -> dict[str, Any]:
    """Run (or resume, or reuse when finished) the second SFT round; its summary."""
    settings = config.sft_round2
    phase = settings.phase
    phase_dir, done = open_phase(config.run_dir, phase.name, config.threads)
    if done is not None:
        phase_line(phase.name, f"finished already, reused ({phase_dir})", show_progress)
        return done
    began = time.monotonic()
    source = check_round2_inputs(config)
    if settings.tasks == 0:
        raise ConfigError("sft_round2.tasks is 0: give how many training tasks the policy tries")
    tokenizer = ComposerTokenizer.from_file(source / TOKENIZER_FILE)
    round_one = torch.load(config.run_dir / ROUND_ONE_FILE, weights_only=False)
    tasks = round2_tasks(settings)
    phase_line(
        phase.name,
        f"{source} tries {len(tasks)} training tasks, {settings.samples} episodes each at "
        f"T={settings.temperature:g}",
        show_progress,
    )
    phase_dir.mkdir(parents=True, exist_ok=True)
    digest = checkpoint_digest(source)
    collection = collect_policy_attempts(
        source,
        tasks,
        settings,
        save_dir=phase_dir / CHUNKS_DIR,
        threads=config.threads,
        workers=config.sft.demonstration_workers,
        show=show_progress,
    )
    collected = _write_collection(phase_dir, source, collection, tasks)
    if not collection.attempts:
        raise NoOwnMistakes(
            f"{collection.episodes} episodes of {source} left no attempt to correct "
            f"(dropped: {collected['dropped']}); try more --tasks or --samples "
            f"({phase_dir / COLLECTION_FILE})"
        )
    own = _demonstrations(
        phase_dir,
        collection,
        tasks,
        tokenizer,
        digest,
        config.sft.demonstration_workers,
        show_progress,
    )
    if not own["ids"]:
        raise NoOwnMistakes(
            f"none of the {len(collection.attempts)} attempts gave a recovering demonstration "
            f"that fails first and ends solved ({own['counts']})"
        )
    eos = tokenizer.eos_id
    base_ids, base_masks = round_one["train"]
    heldout_ids, heldout_masks = round_one["heldout"]

    def packed(ids: list[list[int]], masks: list[list[bool]]) -> PackedRows:
        return pack_documents(ids, phase.seq_len, eos, masks=masks, split_documents=False)

    own_rows = packed(own["ids"], own["masks"])
    base_rows = packed(base_ids, base_masks)
    train = rows_at_share(base_rows, own_rows, settings.share)
    heldout = packed(heldout_ids, heldout_masks)
    model = load_pretrained(source, device=config.device)
    rows = min(phase.eval_rows, len(own_rows))
    own_before = evaluate(model, own_rows, rows, phase.rows_per_step)["heldout_ce"]
    result = train_phase(model, phase, train, heldout, phase_dir, show_progress=show_progress)
    own_after = evaluate(model, own_rows, rows, phase.rows_per_step)["heldout_ce"]
    summary: dict[str, Any] = {
        "phase": phase.name,
        "steps": result.steps_done,
        "stopped_by_time_limit": result.stopped_early,
        "seconds": time.monotonic() - began,
        "source": str(source),
        "collection": collected,
        "own_mistake_demonstrations": len(own["ids"]),
        "own_mistake_counts": own["counts"],
        "share": settings.share,
        "round_one_rows": len(base_rows) if settings.share < 1 else 0,
        "own_mistake_rows": len(own_rows),
        "train_rows": len(train),
        "own_mistake_ce_before": own_before,
        "own_mistake_ce_after": own_after,
        "demonstrations_truncated": sum(len(x) > phase.seq_len for x in own["ids"]),
        **result.final_eval,
    }
    export_final(model, tokenizer, phase_dir, summary)
    return summary
