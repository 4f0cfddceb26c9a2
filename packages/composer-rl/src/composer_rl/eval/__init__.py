"""Evaluation of checkpoints on the held-out task split."""

from composer_rl.eval.evaluate import EvalConfig, run_eval, summarize, write_report
from composer_rl.eval.passk import pass_at_k
from composer_rl.eval.table import print_summary

__all__ = ["EvalConfig", "pass_at_k", "print_summary", "run_eval", "summarize", "write_report"]
