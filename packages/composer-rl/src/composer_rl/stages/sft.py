"""Supervised fine-tuning on agent demonstrations.

The demonstrations are a seeded mix of behaviours on the task suite's training split
(careful, recovering, careless and the habits the reward plugins exist for: configured by
`Stage1Config.sft.demonstrations`, played by `composer_rl.agent.demonstrations`), each played
in a real sandbox so that the tool results are what the policy will see, written in the
agent's tool-call format; the summary counts the demonstrations of each behaviour. Loss
is on the model's own tokens (tool calls and the end of turn), not on the prompt or tool
output; the MTP module keeps training by self-distillation. Held-out CE is measured on
demonstrations of held-out tasks.
"""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from composer_model import ComposerTokenizer, load_pretrained
from composer_rl.agent.behaviours import DemonstrationMix
from composer_rl.agent.demonstrations import play_demonstration
from composer_rl.agent.oracle import summary_demonstration
from composer_rl.progress import Show, StepProgress, phase_line
from composer_rl.stages.config import Stage1Config
from composer_rl.stages.copying import with_planted_rows
from composer_rl.stages.data import tokenizer_and_tokens
from composer_rl.stages.loop import train_phase
from composer_rl.stages.packing import pack_documents
from composer_rl.stages.phases import export_final, open_phase, previous_final, save_torch
from composer_rl.tasks import BUILTIN_TEMPLATES, Split, Task, collect_tasks, sample_tasks
from composer_rl.tasks.invented import invented_name_tasks
from composer_rl.tasks.templates.base import is_validation


def demonstrations(
    tasks: list[Task],
    tokenizer: ComposerTokenizer,
    show_progress: Show = True,
    summary_every: int = 0,
    mix: DemonstrationMix | None = None,
    workers: int = 1,
    label: str = "demonstrations",
) -> tuple[list[list[int]], list[list[bool]], dict[str, int]]:
    """Each task's demonstration, of the behaviour `mix` deals it (`play_demonstration`),
    and every `summary_every`-th task also as a self-summarized chain (its two segments are
    separate examples), or the tiny model never learns to summarize when the RL loop asks
    it to. Also returns how many demonstrations each behaviour got (after fallbacks), with
    `fallback:<planned>` counting those that fell back, `careless:wrong` the careless
    ones whose edit is wrong and `last_run:failed` those whose last test run failed.

    `workers` threads play demonstrations at once: their time goes to sandbox processes
    (test runs), and each demonstration depends only on its task and the mix, so the
    result is the same for any number of workers."""
    mix = mix or DemonstrationMix()
    ids: list[list[int]] = []
    masks: list[list[bool]] = []
    counts: Counter[str] = Counter()
    progress = StepProgress(label, len(tasks), unit="demonstrations", show=show_progress)
    with ThreadPoolExecutor(max_workers=workers) as pool, progress:
        played = pool.map(lambda task: play_demonstration(task, mix), tasks)
        for index, (task, demo) in enumerate(zip(tasks, played, strict=True)):
            progress.update(index + 1)
            counts[demo.kind] += 1
            if "fallback" in demo.details:
                counts[f"fallback:{demo.details['planned']}"] += 1
            if demo.kind == "careless" and "wrong" in demo.details:
                counts["careless:wrong"] += 1
            if demo.details["test_runs"] and not demo.details["tests_passed_last"]:
                counts["last_run:failed"] += 1  # a template whose visible tests the oracle fails
            transcripts = [demo.transcript]
            if summary_every and index % summary_every == 0:
                transcripts += summary_demonstration(task)
            for transcript in transcripts:
                tokens, mask = transcript.encode(tokenizer)
                ids.append(tokens)
                masks.append(mask)
    return ids, masks, dict(sorted(counts.items()))


def demonstration_tasks(config: Stage1Config) -> tuple[list[Task], list[Task]]:
    """(training tasks, held-out tasks) stage one demonstrates. Validation tasks stay out:
    settings are chosen on them. The built-in templates' only: demonstrations are played by
    their oracles."""
    train_tasks = [t for t in collect_tasks(Split.TRAIN, pm=None) if not is_validation(t)]
    per_template = max(1, config.sft.max_tasks // len(BUILTIN_TEMPLATES))
    train_tasks = sample_tasks(train_tasks, per_group=per_template, seed=config.sft.seed)
    heldout_tasks = sample_tasks(collect_tasks(Split.HELDOUT, pm=None), per_group=2, seed=1)
    return train_tasks, heldout_tasks


def sft_data(
    root: Path, config: Stage1Config, tokenizer: ComposerTokenizer, show_progress: Show = True
) -> dict[str, Any]:
    """Tokenized demonstrations of both splits, made once per run directory (and again if
    the tasks or the demonstration mix changed), and the invented-name ones added to the
    training side. Held-out demonstrations follow the same mix, so held-out CE measures the
    distribution SFT trains on."""
    data = _suite_demonstrations(root, config, tokenizer, show_progress)
    invented = invented_demonstrations(root, config, tokenizer, show_progress)
    train_ids, train_masks = data["train"]
    return {
        **data,
        "train": (train_ids + invented["ids"], train_masks + invented["masks"]),
        "invented_name_demonstrations": len(invented["tasks"]),
    }


def _suite_demonstrations(
    root: Path, config: Stage1Config, tokenizer: ComposerTokenizer, show_progress: Show
) -> dict[str, Any]:
    """The suite's demonstrations, cached in `sft_tokens.pt` under the ids of the tasks
    played (a hash of template and parameters) and the settings of their playing. A cache
    keyed by the mix alone served 23 templates' demonstrations to a stage one of 33
    (2026-12-05): an added or changed template now replays them."""
    cache = root / "sft_tokens.pt"
    mix = config.sft.demonstrations
    train_tasks, heldout_tasks = demonstration_tasks(config)
    key = {
        "train_tasks": [t.id for t in train_tasks],
        "heldout_tasks": [t.id for t in heldout_tasks],
        "mix": mix.model_dump(),
        "summary_every": config.sft.summary_every,
    }
    if cache.is_file():
        cached = dict(torch.load(cache, weights_only=False))
        if cached.get("key") == key:
            return cached
    train_ids, train_masks, train_kinds = demonstrations(
        train_tasks,
        tokenizer,
        show_progress,
        summary_every=config.sft.summary_every,
        mix=mix,
        workers=config.sft.demonstration_workers,
    )
    heldout_ids, heldout_masks, _ = demonstrations(
        heldout_tasks,
        tokenizer,
        show_progress,
        mix=mix,
        workers=config.sft.demonstration_workers,
        label="held-out demonstrations",
    )
    data = {
        "train": (train_ids, train_masks),
        "heldout": (heldout_ids, heldout_masks),
        "train_tasks": len(train_tasks),
        "demonstration_kinds": train_kinds,
        "demonstration_mix": mix.model_dump(),
        "key": key,
    }
    save_torch(data, cache)
    return data


def invented_demonstrations(
    root: Path, config: Stage1Config, tokenizer: ComposerTokenizer, show_progress: Show = True
) -> dict[str, Any]:
    """Demonstrations of `config.sft.invented_name_tasks` training tasks rendered with
    invented names, cached apart from the others (`sft_invented_tokens.pt`) so that changing
    the count replays only these. The cache is keyed by the ids of the tasks drawn (an id is a
    hash of the template and every parameter, names included) and the settings of their
    playing, so a changed word list, template or seed replays them rather than reusing
    demonstrations of other names."""
    if not config.sft.invented_name_tasks:
        return {"ids": [], "masks": [], "tasks": []}
    train_tasks, _ = demonstration_tasks(config)
    tasks = invented_name_tasks(
        train_tasks, config.sft.invented_name_tasks, config.sft.seed, config.sft.invented_names
    )
    key = {
        "tasks": [t.id for t in tasks],
        "mix": config.sft.demonstrations.model_dump(),
        "summary_every": config.sft.summary_every,
    }
    cache = root / "sft_invented_tokens.pt"
    if cache.is_file():
        cached = dict(torch.load(cache, weights_only=False))
        if cached.get("key") == key:
            return cached
    ids, masks, kinds = demonstrations(
        tasks,
        tokenizer,
        show_progress,
        summary_every=config.sft.summary_every,
        mix=config.sft.demonstrations,
        workers=config.sft.demonstration_workers,
        label="invented-name demonstrations",
    )
    data = {"key": key, "ids": ids, "masks": masks, "tasks": [t.id for t in tasks], "kinds": kinds}
    save_torch(data, cache)
    return data


def run_sft(config: Stage1Config, show_progress: Show = True) -> dict[str, Any]:
    phase = config.sft
    phase_dir, done = open_phase(config.run_dir, phase.name, config.threads)
    if done is not None:
        phase_line(phase.name, f"finished already, reused ({phase_dir})", show_progress)
        return done
    began = time.monotonic()
    source = previous_final(
        config.run_dir / config.long_context.name,
        "run the pretrain and long-context phases first (composer-rl pretrain)",
    )
    tokenizer = ComposerTokenizer.from_file(source / "tokenizer.json")
    data = sft_data(config.run_dir, config, tokenizer, show_progress)
    eos = tokenizer.eos_id
    train_ids, train_masks = data["train"]
    heldout_ids, heldout_masks = data["heldout"]
    train = pack_documents(train_ids, phase.seq_len, eos, masks=train_masks, split_documents=False)
    heldout = pack_documents(
        heldout_ids, phase.seq_len, eos, masks=heldout_masks, split_documents=False
    )
    if phase.copy_share:
        _, corpus_docs, _ = tokenizer_and_tokens(config.run_dir, config.corpus)
        train = with_planted_rows(
            train, corpus_docs, config.long_context, phase.copy_share, eos, phase.seed + 1, "copies"
        )
    model = load_pretrained(source, device=config.device)
    result = train_phase(model, phase, train, heldout, phase_dir, show_progress=show_progress)
    summary: dict[str, Any] = {
        "phase": phase.name,
        "steps": result.steps_done,
        "stopped_by_time_limit": result.stopped_early,
        "seconds": time.monotonic() - began,
        "demonstrations": data["train_tasks"],
        "invented_name_demonstrations": data["invented_name_demonstrations"],
        "demonstration_kinds": data["demonstration_kinds"],
        "demonstration_shares": {b.value: s for b, s in config.sft.demonstrations.shares().items()},
        "longest_demonstration_tokens": max(len(x) for x in train_ids),
        "demonstrations_truncated": sum(len(x) > phase.seq_len for x in train_ids),
        "copy_share": phase.copy_share,
        **result.final_eval,
    }
    export_final(model, tokenizer, phase_dir, summary)
    return summary
