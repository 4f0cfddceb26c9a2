"""Supervised fine-tuning on agent demonstrations.

The demonstrations are the oracle trajectories of the task suite's training split, played
in real sandboxes so that the tool results are what the policy will see, written in the
agent's tool-call format. Loss is on the model's own tokens (tool calls and the end of
turn), not on the prompt or tool output; the MTP module keeps training by
self-distillation. Held-out CE is measured on demonstrations of held-out tasks.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch
from rich.progress import track

from composer_model import ComposerTokenizer, load_pretrained
from composer_rl.agent.oracle import play_oracle, summary_demonstration
from composer_rl.stages.config import Stage1Config
from composer_rl.stages.loop import train_phase
from composer_rl.stages.packing import pack_documents
from composer_rl.stages.phases import export_final, open_phase, previous_final, save_torch
from composer_rl.tasks import BUILTIN_TEMPLATES, Split, Task, collect_tasks, sample_tasks


def demonstrations(
    tasks: list[Task],
    tokenizer: ComposerTokenizer,
    show_progress: bool = True,
    summary_every: int = 0,
) -> tuple[list[list[int]], list[list[bool]]]:
    """Each task's oracle episode; every `summary_every`-th task also as a self-summarized
    chain (its two segments are separate examples), or the tiny model never learns to
    summarize when the RL loop asks it to."""
    ids: list[list[int]] = []
    masks: list[list[bool]] = []
    for index, task in enumerate(
        track(tasks, description="demonstrations", disable=not show_progress)
    ):
        transcripts = [play_oracle(task, grade=False).transcript]
        if summary_every and index % summary_every == 0:
            transcripts += summary_demonstration(task)
        for transcript in transcripts:
            tokens, mask = transcript.encode(tokenizer)
            ids.append(tokens)
            masks.append(mask)
    return ids, masks


def sft_data(
    root: Path, config: Stage1Config, tokenizer: ComposerTokenizer, show_progress: bool = True
) -> dict[str, Any]:
    """Tokenized demonstrations of both splits, made once per run directory."""
    cache = root / "sft_tokens.pt"
    if cache.is_file():
        return dict(torch.load(cache, weights_only=False))
    train_tasks = collect_tasks(Split.TRAIN)
    per_template = max(1, config.sft_max_tasks // len(BUILTIN_TEMPLATES))
    train_tasks = sample_tasks(train_tasks, per_group=per_template, seed=config.sft.seed)
    heldout_tasks = sample_tasks(collect_tasks(Split.HELDOUT), per_group=2, seed=1)
    train_ids, train_masks = demonstrations(
        train_tasks, tokenizer, show_progress, summary_every=config.sft_summary_every
    )
    heldout_ids, heldout_masks = demonstrations(heldout_tasks, tokenizer, show_progress)
    data = {
        "train": (train_ids, train_masks),
        "heldout": (heldout_ids, heldout_masks),
        "train_tasks": len(train_tasks),
    }
    save_torch(data, cache)
    return data


def run_sft(config: Stage1Config, show_progress: bool = True) -> dict[str, Any]:
    phase = config.sft
    phase_dir, done = open_phase(config.run_dir, phase.name, config.threads)
    if done is not None:
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
    model = load_pretrained(source)
    result = train_phase(model, phase, train, heldout, phase_dir, show_progress=show_progress)
    summary: dict[str, Any] = {
        "phase": phase.name,
        "steps": result.steps_done,
        "stopped_by_time_limit": result.stopped_early,
        "seconds": time.monotonic() - began,
        "demonstrations": data["train_tasks"],
        "longest_demonstration_tokens": max(len(x) for x in train_ids),
        **result.final_eval,
    }
    export_final(model, tokenizer, phase_dir, summary)
    return summary
