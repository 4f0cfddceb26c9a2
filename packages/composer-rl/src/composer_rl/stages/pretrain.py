"""Continued pretraining and the long-context phase.

`run_pretrain` trains the policy from scratch (the tiny default) on the corpus at
`pretrain.seq_len`, with the MTP module joining at `pretrain.mtp_join_step` and then trained
by self-distillation onto the main head; with `copy_warmup.steps` it first trains on
stretches of the corpus written twice (`composer_rl.stages.copying`), and its summary's
`copy_ce` (cross-entropy on the second copy of held-out stretches) says how well the model
copies from context after each. `run_long_context` continues at
`long_context.seq_len` with YaRN rope scaling (factor `long_context.factor` over the
pretraining length) and measures held-out loss per position bucket before and after, so the
gain at long positions is visible (`position_loss.png`, `result.json`).

`run_pretrain` also runs under torchrun with `config.parallel` (dp x cp processes): rank 0
makes the tokenizer and token cache first, every rank builds the same seeded model and
`parallelize`s it before the optimizer, and the exported `final/` model is the full one
(expert shards gathered to rank 0), loadable by a single process.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from composer_model import ComposerModel, ComposerTokenizer, YarnScaling, load_pretrained, preset
from composer_parallel import Parallel, full_state_dict
from composer_rl.progress import Show, phase_line
from composer_rl.stages.config import Stage1Config
from composer_rl.stages.copying import (
    copy_documents,
    repeated_rows,
    repeated_share,
    with_planted_rows,
)
from composer_rl.stages.corpus import load_corpus
from composer_rl.stages.data import tokenizer_and_tokens
from composer_rl.stages.loop import evaluate, train_phase
from composer_rl.stages.metrics import plot_position_loss
from composer_rl.stages.packing import PackedRows, concatenate, pack_documents
from composer_rl.stages.phases import export_final, open_phase, previous_final
from composer_rl.stages.renaming import renamed_texts


def run_pretrain(config: Stage1Config, show_progress: Show = True) -> dict[str, Any]:
    import torch.distributed as dist

    distributed = config.parallel.world_size > 1 and dist.is_initialized()
    main = not distributed or dist.get_rank() == 0
    phase_dir, done = open_phase(config.run_dir, config.pretrain.name, config.threads)
    show = show_progress if main else False
    if done is not None:
        phase_line(config.pretrain.name, f"finished already, reused ({phase_dir})", show)
        return done
    began = time.monotonic()
    if main:  # the tokenizer and the token cache are written once, by rank 0
        corpus = config.corpus.path or "the Python standard library"
        phase_line(config.pretrain.name, f"tokenizer and token cache of {corpus}", show)
        tokenizer_and_tokens(config.run_dir, config.corpus)
    if distributed:
        dist.barrier()
    tokenizer, train_docs, heldout_docs = tokenizer_and_tokens(config.run_dir, config.corpus)
    pretrain_docs = renamed_documents(train_docs, tokenizer, config)
    if config.corpus.copy_documents:
        # Added here, not to the corpus: the tokenizer and the token cache stay those of the
        # text, so stage-one runs with and without them share SFT's tokenized demonstrations.
        texts = copy_documents(config.corpus.copy_documents, seed=config.pretrain.seed)
        extra = tokenizer.encode_batch(texts)
        train_docs, pretrain_docs = [*train_docs, *extra], [*pretrain_docs, *extra]
    eos = tokenizer.eos_id
    train = pack_documents(pretrain_docs, config.pretrain.seq_len, eos)
    heldout = pack_documents(heldout_docs, config.pretrain.seq_len, eos)
    warmup = config.copy_warmup
    if warmup.pretrain_share:
        # Pairs drawn with another seed than the warm-up's, so pretraining sees new ones.
        kept = repeated_share(
            pretrain_docs,
            len(train),
            warmup.pretrain_share,
            config.pretrain.seq_len,
            eos,
            min_tokens=warmup.min_tokens,
            max_tokens=warmup.max_tokens,
            seed=config.pretrain.seed + 2,
        )
        train = concatenate([train, kept])
    torch.manual_seed(config.pretrain.seed)
    model = ComposerModel(
        preset(config.preset, vocab_size=tokenizer.vocab_size, **config.model_overrides)
    ).to(config.device)
    parameters = model.num_parameters()
    parameters_with_mtp = model.num_parameters(include_mtp=True)
    parallel = config.parallel.apply(model)
    copy_probe = _copy_probe(heldout_docs, config, eos)
    copy_ce: dict[str, float] = {}
    if warmup.steps:
        phase = warmup.phase(config.pretrain)
        stretches = repeated_rows(
            train_docs,
            phase.seq_len,
            eos,
            count=warmup.stretches,
            min_tokens=warmup.min_tokens,
            max_tokens=warmup.max_tokens,
            seed=config.pretrain.seed,
        )
        # Its own directory and checkpoints: a kill during the warm-up resumes it, and one
        # after it reloads its last step (the pretrain phase then starts from those weights).
        train_phase(
            model,
            phase,
            stretches,
            copy_probe or stretches,
            phase_dir / phase.name,
            show_progress=show,
            parallel=parallel,
        )
        if copy_probe is not None:
            copy_ce["after copy warm-up"] = _copy_ce(model, copy_probe, config, parallel)
    result = train_phase(
        model,
        config.pretrain,
        train,
        heldout,
        phase_dir,
        show_progress=show,
        parallel=parallel,
    )
    summary: dict[str, Any] = {
        "phase": config.pretrain.name,
        "steps": result.steps_done,
        "stopped_by_time_limit": result.stopped_early,
        "mtp_joined_at": result.mtp_joined_at,
        "seconds": time.monotonic() - began,
        "parameters": parameters,
        "parameters_with_mtp": parameters_with_mtp,
        "train_tokens_available": int(train.tokens.numel()),
        "copy_documents": config.corpus.copy_documents,
        "renamed_documents": sum(
            a is not b for a, b in zip(train_docs, pretrain_docs, strict=True)
        ),
        "copy_warmup_steps": warmup.steps,
        "copy_pretrain_share": warmup.pretrain_share,
        **result.final_eval,
    }
    if copy_probe is not None:
        copy_ce["after pretraining"] = _copy_ce(model, copy_probe, config, parallel)
    summary["copy_ce"] = copy_ce
    if parallel is not None:
        summary["parallel"] = config.parallel.model_dump()
        state = full_state_dict(model, parallel)  # collective: every rank gathers
        if parallel.is_main:
            full = ComposerModel(model.config)
            full.load_state_dict(state)
            export_final(full, tokenizer, phase_dir, summary)
        parallel.barrier()  # the others return once final/ and result.json exist
        return summary
    export_final(model, tokenizer, phase_dir, summary)
    return summary


def renamed_documents(
    train_docs: list[list[int]], tokenizer: ComposerTokenizer, config: Stage1Config
) -> list[list[int]]:
    """`train_docs` with the `corpus.renamed_share` of Python files renamed
    (`composer_rl.stages.renaming`), tokenized again: what pretraining reads."""
    share = config.corpus.renamed_share
    if not share:
        return train_docs
    corpus = load_corpus(config.corpus)
    if len(corpus.train) != len(train_docs):
        raise ValueError(
            f"{config.run_dir / 'tokens.pt'} holds {len(train_docs)} training files and the "
            f"corpus {len(corpus.train)}: delete the token cache so it is made again"
        )
    texts = renamed_texts([(d.name, d.text) for d in corpus.train], share, config.pretrain.seed)
    out = list(train_docs)
    for index, ids in zip(texts, tokenizer.encode_batch(list(texts.values())), strict=True):
        out[index] = ids
    return out


def _copy_probe(heldout_docs: list[list[int]], config: Stage1Config, eos: int) -> PackedRows | None:
    """Held-out stretches written twice; None when no held-out document is long enough
    (a small corpus), and then the summary's `copy_ce` stays empty."""
    warmup = config.copy_warmup
    try:
        return repeated_rows(
            heldout_docs,
            config.pretrain.seq_len,
            eos,
            count=400,
            min_tokens=warmup.min_tokens,
            max_tokens=warmup.max_tokens,
            seed=config.pretrain.seed + 1,
        )
    except ValueError:
        return None


def _copy_ce(
    model: ComposerModel, probe: PackedRows, config: Stage1Config, parallel: Parallel | None
) -> float:
    """Held-out CE on the second copy of repeated stretches: low only if the model copies."""
    rows = config.pretrain.eval_rows
    return float(
        evaluate(model, probe, rows, config.pretrain.rows_per_step, parallel=parallel)["heldout_ce"]
    )


def long_rows(heldout_docs: list[list[int]], seq_len: int, eos: int, max_rows: int) -> PackedRows:
    """Held-out documents at least `seq_len` long, one per row, so every position is real
    context (falls back to ordinary packing when the corpus has too few long files)."""
    long_docs = [d[: seq_len - 1] for d in heldout_docs if len(d) >= seq_len - 1][:max_rows]
    if long_docs:
        return pack_documents(long_docs, seq_len, eos, split_documents=False)
    return pack_documents(heldout_docs, seq_len, eos)


def run_long_context(config: Stage1Config, show_progress: Show = True) -> dict[str, Any]:
    phase = config.long_context
    phase_dir, done = open_phase(config.run_dir, phase.name, config.threads)
    if done is not None:
        phase_line(phase.name, f"finished already, reused ({phase_dir})", show_progress)
        return done
    began = time.monotonic()
    source = previous_final(
        config.run_dir / config.pretrain.name, "run the pretrain phase first (composer-rl pretrain)"
    )
    tokenizer, train_docs, heldout_docs = tokenizer_and_tokens(config.run_dir, config.corpus)
    eos = tokenizer.eos_id
    base = load_pretrained(source, device=config.device)
    scaled = base.config.model_copy(
        update={
            "rope_scaling": YarnScaling(
                factor=config.long_context.factor,
                original_max_position_embeddings=config.pretrain.seq_len,
            ),
            "max_position_embeddings": max(phase.seq_len, base.config.max_position_embeddings),
        }
    )
    train = pack_documents(train_docs, phase.seq_len, eos)
    if phase.copy_share:
        train = with_planted_rows(
            train, train_docs, phase, phase.copy_share, eos, phase.seed, phase.copy_loss
        )
    probe = long_rows(heldout_docs, phase.seq_len, eos, max_rows=phase.eval_rows)
    bucket = config.pretrain.seq_len // 2
    before_plain = evaluate(base, probe, phase.eval_rows, phase.rows_per_step, bucket=bucket)
    model = load_pretrained(source, device=config.device, config=scaled)
    before_yarn = evaluate(model, probe, phase.eval_rows, phase.rows_per_step, bucket=bucket)
    result = train_phase(model, phase, train, probe, phase_dir, show_progress=show_progress)
    after = evaluate(
        model, probe, phase.eval_rows, phase.rows_per_step, with_mtp=True, bucket=bucket
    )
    curves = {
        "before (no scaling)": list(before_plain["position_ce"].items()),
        "before (YaRN, untrained)": list(before_yarn["position_ce"].items()),
        "after long-context phase": list(after["position_ce"].items()),
    }
    plot_position_loss(
        phase_dir / "position_loss.png",
        curves,
        f"held-out CE by position ({config.pretrain.seq_len} -> {phase.seq_len})",
    )
    long_from = config.pretrain.seq_len

    def beyond(ev: dict[str, Any]) -> float:
        items = [(k, v) for k, v in ev["position_ce"].items() if k >= long_from]
        return sum(v for _, v in items) / max(1, len(items))

    summary: dict[str, Any] = {
        "phase": phase.name,
        "steps": result.steps_done,
        "stopped_by_time_limit": result.stopped_early,
        "seconds": time.monotonic() - began,
        "position_ce": {label: dict(points) for label, points in curves.items()},
        f"ce_beyond_{long_from}_before": beyond(before_plain),
        f"ce_beyond_{long_from}_before_yarn": beyond(before_yarn),
        f"ce_beyond_{long_from}_after": beyond(after),
        "heldout_ce": after["heldout_ce"],
        "mtp_acceptance": after.get("mtp_acceptance"),
        "copy_share": phase.copy_share,
        "copy_loss": phase.copy_loss if phase.copy_share else None,
    }
    export_final(model, tokenizer, phase_dir, summary)
    return summary
