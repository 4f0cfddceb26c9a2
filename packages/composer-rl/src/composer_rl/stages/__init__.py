"""Stage one: continued pretraining, the long-context phase and SFT (and an opt-in second SFT
round from the SFT policy's own mistakes), each a resumable phase of a fixed number of steps
writing checkpoints (composer-infra's `StepCheckpointer`), metrics (JSONL and TensorBoard),
plots and a final model. Every phase steps with `composer_model.train_step` on
`composer_model.lm_forward_loss` (the step's forward, then the one loss,
`composer_model.compute_loss`, on its outputs), as the training service does."""

from composer_rl.stages.config import (
    CorpusConfig,
    OptimConfig,
    PhaseConfig,
    Stage1Config,
    load_stage1_config,
)
from composer_rl.stages.corpus import CorpusError, load_corpus
from composer_rl.stages.loop import evaluate, phase_step, train_phase
from composer_rl.stages.packing import make_batch, pack_documents
from composer_rl.stages.pretrain import run_long_context, run_pretrain
from composer_rl.stages.sft import run_sft
from composer_rl.stages.sft_round2 import run_sft_round2

__all__ = [
    "CorpusConfig",
    "CorpusError",
    "OptimConfig",
    "PhaseConfig",
    "Stage1Config",
    "evaluate",
    "load_corpus",
    "load_stage1_config",
    "make_batch",
    "pack_documents",
    "phase_step",
    "run_long_context",
    "run_pretrain",
    "run_sft",
    "run_sft_round2",
    "train_phase",
]
