"""Typed configuration of the stage-one phases (continued pretraining, long context, SFT).

Defaults are sized for the `tiny` preset on a 2-core CPU box. A phase is defined by its
step count: it runs every step however busy the machine is, so the same config gives the
same policy on a fast box and a loaded one. A wall-clock budget is an explicit opt-in
(`time_limit_s`, `--<phase>.time-limit-s`; default none).

`Stage1Config` is the `CommandConfig` of `composer-rl stage1`, `pretrain` and `sft`
(`composer_rl.config`: the TOML file and the `--section.field` flags every command reads):
one file serves all three. Each phase is a section of its own with its own defaults
(``[pretrain]``, ``[long_context]``, ``[sft]``, and their ``optim`` tables), so a knob such
as the learning rate has one default where it is: 3e-3 for pretraining, 3e-4 for the long
context, 2.5e-3 for SFT, 1e-3 for the copy warm-up (and RL's trainer its own, 1e-4,
`composer_rl.rl.services.TrainingConfig`). The optimizer settings are
`composer_model.OptimConfig` (re-exported here), the one optimizer configuration the stages
and the training service share. The SFT phase holds what only it uses: the demonstrations
and their mix of behaviours (`composer_rl.agent.behaviours.DemonstrationMix`, also
re-exported).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from composer_model import OptimConfig
from composer_rl.agent.behaviours import DemonstrationMix
from composer_rl.agent.episode import MAX_TURN_TOKENS, MAX_TURNS
from composer_rl.config import CommandConfig, load

if TYPE_CHECKING:
    from composer_model import ComposerModel
    from composer_parallel import Parallel


class PhaseConfig(BaseModel):
    """One training phase writing to its own run directory."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="the phase's directory under the run directory")
    steps: int = Field(gt=0, description="optimizer steps of the phase")
    seq_len: int = Field(gt=8, description="tokens a packed row")
    rows_per_step: int = Field(default=8, gt=0, description="Packed rows of seq_len per step.")
    optim: OptimConfig = Field(
        default_factory=OptimConfig,
        description="the phase's AdamW and schedule (its own defaults: "
        "composer_model.OptimConfig's are pretraining's)",
    )
    eval_every: int = Field(default=20, gt=0, description="steps between held-out evaluations")
    eval_rows: int = Field(default=16, gt=0, description="Held-out rows per evaluation.")
    checkpoint_every: int = Field(default=20, gt=0, description="steps between checkpoints")
    keep_checkpoints: int = Field(default=2, gt=0, description="step checkpoints kept")
    mtp_weight: float = Field(default=0.3, ge=0, description="weight of the MTP loss")
    mtp_join_step: int | None = Field(
        default=None,
        description="Step from which the MTP loss is on (None: from the start of the phase; "
        "a value past `steps` keeps it off). Only with an opt-in time limit does it also "
        "join once the same fraction of the limit has passed.",
    )
    seed: int = Field(default=0, description="seed of the phase's data order and model")
    time_limit_s: float | None = Field(
        default=None,
        gt=0,
        description="Opt-in wall-clock budget: stop early (after a checkpoint) past this many "
        "seconds. None (the default): the phase runs all its steps.",
    )

    @model_validator(mode="after")
    def _warmup_fits(self) -> PhaseConfig:
        if self.optim.warmup_steps >= self.steps:
            raise ValueError(
                f"phase {self.name}: warmup_steps ({self.optim.warmup_steps}) must be below "
                f"steps ({self.steps})"
            )
        return self

    @property
    def tokens_per_step(self) -> int:
        return self.rows_per_step * self.seq_len


class CorpusConfig(BaseModel):
    """Where pretraining text comes from. None: the Python standard library on this machine."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: Path | None = Field(
        default=None,
        description='a directory of text files or a .jsonl file of {"text": ...} records '
        "(none: the Python standard library on this machine)",
    )
    heldout_fraction: float = Field(
        default=0.05, gt=0, lt=1, description="share of the files held out (by a hash of the name)"
    )
    max_train_chars: int = Field(default=6_000_000, gt=0, description="training text kept")
    max_heldout_chars: int = Field(default=600_000, gt=0, description="held-out text kept")
    tokenizer_chars: int = Field(
        default=2_000_000, gt=0, description="text the tokenizer is trained on"
    )
    vocab_size: int = Field(default=4096, ge=300, description="the tokenizer's vocabulary")
    copy_documents: int = Field(
        default=0,
        ge=0,
        description="synthetic documents of invented names defined and used again "
        "(composer_rl.stages.copying), added to pretraining's training side after the "
        "tokenizer is made: data that can only be predicted by copying from context",
    )
    renamed_share: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="share of the training files (by a hash of the name) whose own "
        "identifiers pretraining reads renamed to invented words, the same way throughout "
        "a file (composer_rl.stages.renaming): past a name's first mention only copying "
        "predicts it. The tokenizer, the token cache and the copy warm-up keep the text as "
        "it is",
    )


class CopyWarmupConfig(BaseModel):
    """A phase before pretraining on stretches of the corpus written twice (issue 29).

    Trained on the second copy only, it makes the model form induction heads (find the
    earlier occurrence of the current token, copy what followed) before pretraining proper,
    which in 400 steps forms none (`composer_rl.stages.copying`). Off by default (0 steps);
    it runs in the pretrain phase's directory (`pretrain/copy_warmup/`), at the pretrain
    phase's sequence length and rows per step."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    steps: int = Field(default=0, ge=0, description="warm-up steps; 0: no warm-up")
    stretches: int = Field(
        default=30_000, gt=0, description="repeated stretches drawn from the training text"
    )
    min_tokens: int = Field(default=8, ge=2, description="shortest stretch, in tokens")
    max_tokens: int = Field(default=32, ge=2, description="longest stretch, in tokens")
    lr: float = Field(default=1e-3, gt=0, description="constant after a 10-step warm-up")
    pretrain_share: float = Field(
        default=0.0,
        ge=0.0,
        lt=1.0,
        description="share of pretraining's rows that are repeated stretches too, so the "
        "copying the warm-up formed is kept while the model learns the corpus (without it "
        "400 pretraining steps at lr 3e-3 took copy_ce from 0.96 to 3.44); 0: none",
    )

    @model_validator(mode="after")
    def _lengths_ordered(self) -> CopyWarmupConfig:
        if self.max_tokens < self.min_tokens:
            raise ValueError(
                f"copy_warmup.max_tokens ({self.max_tokens}) is below min_tokens "
                f"({self.min_tokens})"
            )
        return self

    def phase(self, pretrain: PhaseConfig) -> PhaseConfig:
        """The warm-up as a training phase at `pretrain`'s shape (MTP stays off)."""
        every = max(1, self.steps // 10)
        return PhaseConfig(
            name="copy_warmup",
            steps=self.steps,
            seq_len=pretrain.seq_len,
            rows_per_step=pretrain.rows_per_step,
            optim=OptimConfig(
                lr=self.lr,
                min_lr_ratio=1.0,
                warmup_steps=min(10, self.steps - 1),
                weight_decay=0.0,
            ),
            eval_every=every,
            eval_rows=pretrain.eval_rows,
            checkpoint_every=every,
            mtp_join_step=self.steps + 1,
            seed=pretrain.seed,
        )


class SftRound2Config(BaseModel):
    """A second SFT round from the SFT policy's own mistakes (issue 29; off by default).

    The SFT checkpoint runs `samples` episodes at `temperature` on `tasks` training tasks
    (never validation or held-out ones); each failed episode whose final workspace differs
    from the original repository and fails the visible tests gives a wrong first attempt
    (`composer_rl.agent.own_mistakes`), and a recovering demonstration opens with it. SFT
    then continues from the checkpoint for `phase.steps` steps on round one's
    demonstrations (`sft_tokens.pt`) with those recovering demonstrations making `share` of
    the rows, in its own directory (`phase.name`, `sft_round2/` by default)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tasks: int = Field(
        default=0,
        ge=0,
        description="training tasks the SFT policy attempts (spread over the templates); "
        "0: no second round",
    )
    samples: int = Field(default=4, ge=1, description="episodes per task")
    temperature: float = Field(default=1.0, gt=0, description="sampling temperature")
    templates: list[str] | None = Field(
        default=None, description="only these templates' tasks (None: every built-in one)"
    )
    max_attempts_per_task: int = Field(
        default=2, ge=1, description="own attempts kept per task (distinct end states)"
    )
    share: float = Field(
        default=0.25,
        gt=0,
        le=1,
        description="share of the training rows that are own-mistake recovering "
        "demonstrations (repeated as needed); the rest are round one's",
    )
    max_turns: int = Field(default=MAX_TURNS, ge=1, description="tool calls an episode may make")
    max_new_tokens: int = Field(
        default=MAX_TURN_TOKENS, ge=8, description="tokens a turn may write"
    )
    max_seq_len: int = Field(default=2048, ge=64, description="an episode's context")
    max_batch_size: int = Field(default=16, ge=1, description="episodes decoded together")
    tasks_per_chunk: int = Field(
        default=16,
        ge=1,
        description="tasks whose episodes are collected (and saved, so a kill loses at "
        "most one chunk) together",
    )
    source: Path | None = Field(
        default=None, description="the SFT checkpoint to continue (None: RUN/sft/final)"
    )
    seed: int = Field(default=0, description="which tasks, and the episodes' sampling")
    phase: PhaseConfig = Field(
        default_factory=lambda: PhaseConfig(
            name="sft_round2",
            steps=200,
            seq_len=2048,
            rows_per_step=1,
            eval_every=50,
            checkpoint_every=50,
            eval_rows=4,
            optim=OptimConfig(lr=1e-3, min_lr_ratio=0.2, warmup_steps=5, weight_decay=0.0),
        )
    )


class ParallelConfig(BaseModel):
    """Degrees of data (`dp`), context (`cp`) and expert (`ep`) parallelism of a phase.

    dp x cp must equal the number of processes (torchrun's WORLD_SIZE); ep divides it.
    All 1 (the default): one process, no process group. See composer-parallel's README."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dp: int = Field(default=1, ge=1, description="data-parallel ranks")
    cp: int = Field(default=1, ge=1, description="context-parallel ranks a sequence is split over")
    ep: int = Field(default=1, ge=1, description="expert-parallel degree, dividing dp x cp")
    cp_mode: Literal["allgather", "ring"] = Field(
        default="allgather", description="how context-parallel attention exchanges keys"
    )

    @property
    def world_size(self) -> int:
        return self.dp * self.cp

    def apply(self, model: ComposerModel) -> Parallel | None:
        """None in one process; else `model` parallelized over this rank's process groups.

        The pretraining phase and the training service both call this, so a launch whose
        process count is not dp x cp fails the same way in either.
        """
        if self.world_size == 1:
            return None
        import torch.distributed as dist

        from composer_parallel import ParallelDims, parallelize

        world = dist.get_world_size() if dist.is_initialized() else 1
        if world != self.world_size:
            raise ValueError(
                f"dp={self.dp} x cp={self.cp} needs {self.world_size} processes joined in a "
                f"process group; this one sees {world} (launch with python -m "
                f"torch.distributed.run --nproc-per-node {self.world_size} ..., or the Ray "
                "rank actors of `composer-rl rl --dp/--cp`)"
            )
        dims = ParallelDims(dp=self.dp, cp=self.cp, ep=self.ep)
        return parallelize(model, dims, cp_mode=self.cp_mode)


class LongContextPhaseConfig(PhaseConfig):
    """The long-context phase: a phase at a longer sequence length, the rope scaled by YaRN."""

    factor: float = Field(
        default=8.0, gt=1, description="YaRN factor over the base phase's sequence length"
    )
    copy_share: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="share of the phase's rows that are windows of one long document with "
        "stretches written again further on (composer_rl.stages.copying.planted_rows), so "
        "the model learns to copy across the whole row, not only side by side as in the "
        "copy warm-up; 0: none",
    )
    copies_per_row: int = Field(default=8, gt=0, description="stretches written again a row")
    copy_min_tokens: int = Field(default=4, ge=2, description="shortest stretch, in tokens")
    copy_max_tokens: int = Field(default=16, ge=2, description="longest stretch, in tokens")
    copy_rows: int = Field(default=2000, gt=0, description="distinct rows with copies drawn")
    copy_loss: Literal["all", "copies"] = Field(
        default="all",
        description="which tokens of those rows are targets: all (the text and its copies) "
        "or copies (each copy's tokens after its first, as in the copy warm-up)",
    )

    def copies_fit(self, seq_len: int) -> bool:
        """Whether plant_copies' worst case fits a row of `seq_len`: every copy at its
        longest, a source before the first, and a token of room for each, in a window of
        seq_len - 1."""
        needed = (self.copies_per_row + 1) * self.copy_max_tokens + self.copies_per_row
        return needed <= seq_len - 1

    @model_validator(mode="after")
    def _copies_fit(self) -> LongContextPhaseConfig:
        if self.copy_max_tokens < self.copy_min_tokens:
            raise ValueError(
                f"long_context.copy_max_tokens ({self.copy_max_tokens}) is below "
                f"copy_min_tokens ({self.copy_min_tokens})"
            )
        if self.copy_share and not self.copies_fit(self.seq_len):
            raise ValueError(
                f"long_context: {self.copies_per_row} copies of up to {self.copy_max_tokens} "
                f"tokens do not fit in a row of {self.seq_len}; lower copies_per_row"
            )
        return self


class SFTPhaseConfig(PhaseConfig):
    """The SFT phase, with what only it uses: the demonstrations it trains on."""

    max_tasks: int = Field(
        default=3000,
        gt=0,
        description="training tasks demonstrated (about 130 a template); a demonstration "
        "that runs the tests takes about 0.3-1 s in its sandbox",
    )
    summary_every: int = Field(
        default=4,
        ge=0,
        description="one training task in N also gets a self-summarized demonstration "
        "(read, summarize, continue from the condensed context); 0: none",
    )
    invented_name_tasks: int = Field(
        default=0,
        ge=0,
        description="extra demonstrations on training tasks rendered again with invented "
        "names (composer_rl.tasks.invented): names no other context holds, so only copying "
        "them from the instruction gets them right; 0: none",
    )
    invented_names: Literal["syllables", "words", "wide_words"] = Field(
        default="syllables",
        description="how the invented names are made: syllable strings no language has "
        "(poncelis), 371 common words no task uses (lantern), or 3,527 of them (wide_words: "
        "each seen once or twice, so it cannot be learnt as a name); held-out names are words",
    )
    copy_share: float = Field(
        default=0.0,
        ge=0.0,
        lt=1.0,
        description="share of SFT's rows that are corpus windows with planted copies, loss "
        "on the copies only (composer_rl.stages.copying.planted_rows, shaped by "
        "long_context's copies_per_row, copy_min_tokens and copy_max_tokens), so copying "
        "keeps its own gradient while the demonstrations teach recall; 0: none",
    )
    demonstration_workers: int = Field(
        default=2,
        ge=1,
        description="threads that play SFT demonstrations at once (their time is spent in "
        "sandbox test runs; the demonstrations do not depend on it)",
    )
    demonstrations: DemonstrationMix = Field(
        default_factory=DemonstrationMix,
        description="the behaviours of the SFT demonstrations and their shares, normalised "
        "by their sum (composer_rl.agent.behaviours)",
    )


class Stage1Config(CommandConfig):
    """The whole default pipeline: base pretraining, long context, SFT.

    Each phase is its own section with its own defaults (a phase's learning rate is its
    own knob: ``pretrain.optim.lr`` 3e-3, ``long_context.optim.lr`` 3e-4, ``sft.optim.lr``
    2.5e-3)."""

    run_dir: Path = Field(
        default=Path("runs/stage1"), description="where every phase writes its directory"
    )
    preset: str = Field(default="tiny", description="model preset (composer_model.PRESETS)")
    model_overrides: dict[str, bool | int | float | str] = Field(
        default_factory=dict,
        description="fields of the preset's model configuration replaced, as a table "
        '(kv_lora_rank = 128, attention = "mha"): the pretrain phase builds its model from '
        "them, and every later phase reads the shape from the checkpoint it starts from",
    )
    threads: int | None = Field(
        default=None, gt=0, description="torch CPU threads (none: torch's default)"
    )
    device: str = Field(
        default="cpu",
        description="where the phases train and evaluate: cpu, cuda or cuda:N (one process: "
        "the parallel base phase runs on CPU); checkpoints and exported models load on either",
    )
    corpus: CorpusConfig = Field(default_factory=CorpusConfig)
    copy_warmup: CopyWarmupConfig = Field(default_factory=CopyWarmupConfig)
    pretrain: PhaseConfig = Field(
        default_factory=lambda: PhaseConfig(
            name="pretrain",
            steps=400,
            seq_len=256,
            rows_per_step=8,
            mtp_join_step=200,
            eval_every=100,
            checkpoint_every=100,
        ),
        description="the base phase: next-token pretraining on the corpus, MTP joining "
        "mid-run (its own defaults: lr 3e-3, 400 steps of 8 rows of 256 tokens)",
    )
    long_context: LongContextPhaseConfig = Field(
        default_factory=lambda: LongContextPhaseConfig(
            name="long_context",
            steps=20,
            seq_len=2048,
            rows_per_step=1,
            eval_every=10,
            eval_rows=4,
            checkpoint_every=10,
            optim=OptimConfig(lr=3e-4, warmup_steps=2),
        ),
        description="the long-context phase, from the base phase's model (its own "
        "defaults: lr 3e-4, 20 steps of one 2048-token row)",
    )
    sft: SFTPhaseConfig = Field(
        default_factory=lambda: SFTPhaseConfig(
            name="sft",
            steps=1400,
            # A recovering demonstration (two test runs, their output) is a median 720
            # tokens and at most about 2,100 of the tiny tokenizer's; 1,024 cut a third of the
            # multi-file ones (2026-12-03, one task a template and behaviour).
            seq_len=2048,
            rows_per_step=1,
            eval_every=100,
            checkpoint_every=100,
            eval_rows=4,
            optim=OptimConfig(lr=2.5e-3, min_lr_ratio=0.2, warmup_steps=5, weight_decay=0.0),
        ),
        description="SFT on the demonstrations, from the long-context model (its own "
        "defaults: lr 2.5e-3, 1400 steps of one 2048-token row)",
    )
    parallel: ParallelConfig = Field(
        default_factory=ParallelConfig,
        description="data, context and expert parallelism of the base phase "
        "(`composer-rl pretrain` under torchrun; also --dp, --cp, --ep)",
    )
    sft_round2: SftRound2Config = Field(
        default_factory=SftRound2Config,
        description="a second SFT round from the SFT policy's own mistakes, after SFT "
        "(`composer-rl sft-round2`, or stage1 with sft_round2.tasks above 0; off: tasks 0)",
    )

    flag_aliases: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "corpus.path": ("--corpus",),
        "copy_warmup.steps": ("--copy-warmup-steps",),
        "sft.steps": ("--sft-steps",),
        "sft.demonstrations.seed": ("--demo-seed",),
        "parallel.dp": ("--dp",),
        "parallel.cp": ("--cp",),
        "parallel.ep": ("--ep",),
        "parallel.cp_mode": ("--cp-mode",),
        "sft_round2.tasks": ("--round2-tasks",),
        "sft_round2.templates": ("--round2-templates",),
    }
    renamed: ClassVar[Mapping[str, str]] = {
        "long_context_factor": "long_context.factor",
        "sft_max_tasks": "sft.max_tasks",
        "sft_summary_every": "sft.summary_every",
        "sft_invented_name_tasks": "sft.invented_name_tasks",
        "sft_demonstration_workers": "sft.demonstration_workers",
        "demonstrations": "sft.demonstrations",
    }

    @model_validator(mode="after")
    def _copy_pairs_fit(self) -> Stage1Config:
        longest = 2 * self.copy_warmup.max_tokens + 1  # a stretch twice and its end of text
        repeats = self.copy_warmup.steps or self.copy_warmup.pretrain_share
        if repeats and longest > self.pretrain.seq_len:
            raise ValueError(
                f"copy_warmup.max_tokens ({self.copy_warmup.max_tokens}) written twice does "
                f"not fit in pretrain.seq_len ({self.pretrain.seq_len}); give at most "
                f"{(self.pretrain.seq_len - 1) // 2}"
            )
        return self

    @field_validator("device")
    @classmethod
    def _device_kind(cls, value: str) -> str:
        try:
            kind = torch.device(value).type
        except RuntimeError:
            kind = None
        if kind not in ("cpu", "cuda"):
            raise ValueError(
                f"{value!r} is not a device stage one trains on; give cpu, cuda or cuda:N"
            )
        return value

    @model_validator(mode="after")
    def _phase_names_differ(self) -> Stage1Config:
        names = [self.pretrain.name, self.long_context.name, self.sft.name]
        if self.sft_round2.phase.name in names:
            raise ValueError(
                f"sft_round2.phase.name {self.sft_round2.phase.name!r} is another phase's "
                "directory; give it a name of its own (default sft_round2)"
            )
        return self

    @model_validator(mode="after")
    def _sft_copies_fit(self) -> Stage1Config:
        if self.sft.copy_share and not self.long_context.copies_fit(self.sft.seq_len):
            raise ValueError(
                f"sft.copy_share: {self.long_context.copies_per_row} copies of up to "
                f"{self.long_context.copy_max_tokens} tokens (long_context's settings) do not "
                f"fit in an SFT row of {self.sft.seq_len}; lower long_context.copies_per_row"
            )
        return self

    @model_validator(mode="after")
    def _model_overrides_valid(self) -> Stage1Config:
        from composer_model import PRESETS, preset

        if self.preset not in PRESETS:
            return self
        try:
            model = preset(self.preset, vocab_size=self.corpus.vocab_size, **self.model_overrides)
        except ValidationError as error:
            problem = "; ".join(f"{e['loc'][0]}: {e['msg']}" for e in error.errors())
            raise ValueError(
                f"model_overrides do not make a {self.preset} model ({problem}); give "
                "fields of composer_model.ModelConfig with values it accepts"
            ) from None
        if model.attention != "mla" and self.parallel.cp > 1:
            raise ValueError(
                "parallel.cp > 1 shards MLA's latents and the model's attention is "
                f"{model.attention!r}: set parallel.cp = 1 or attention = 'mla'"
            )
        return self

    @model_validator(mode="after")
    def _long_context_is_longer(self) -> Stage1Config:
        if self.long_context.seq_len <= self.pretrain.seq_len:
            raise ValueError(
                f"long_context.seq_len ({self.long_context.seq_len}) must exceed "
                f"pretrain.seq_len ({self.pretrain.seq_len})"
            )
        return self


__all__ = [
    "CopyWarmupConfig",
    "CorpusConfig",
    "DemonstrationMix",
    "LongContextPhaseConfig",
    "OptimConfig",
    "ParallelConfig",
    "PhaseConfig",
    "SFTPhaseConfig",
    "SftRound2Config",
    "Stage1Config",
    "load_stage1_config",
]


def load_stage1_config(path: Path | None = None, **overrides: object) -> Stage1Config:
    """A Stage1Config from an optional TOML (or JSON) file, then dotted overrides such as
    ``{"pretrain.steps": 10}`` (None values are ignored), validated as a whole
    (`composer_rl.config.load`, what every command reads its configuration with).

    The file gives any subset of the settings: each section it names is laid over that
    section's defaults (``[pretrain] steps = 3`` changes only the step count), so a file
    never has to repeat a phase's name or its other fields. A problem is a `ConfigError`
    that names the key by its dotted name (and what its section accepts), which the CLI
    prints as one line."""
    given = {dotted: value for dotted, value in overrides.items() if value is not None}
    return load(Stage1Config, path, given)
