"""The built-in plugins, by the name each is registered under.

The composition root registers an instance of each (unless its run config disables it);
the optional ones (the chat judge) are added by spec when wanted.
"""

from __future__ import annotations

from composer_rewards.monitors.clarify_without_edit import ClarifyWithoutEditMonitor
from composer_rewards.monitors.comment_reasoning import CommentReasoningMonitor
from composer_rewards.monitors.failed_read_again import FailedReadAgainMonitor
from composer_rewards.monitors.grader_tampering import GraderTamperingMonitor
from composer_rewards.monitors.malformed_calls import MalformedCallsMonitor
from composer_rewards.monitors.reread import RereadMonitor
from composer_rewards.monitors.terminal_collapse import TerminalCollapseMonitor
from composer_rewards.rewards.communication import CommunicationReward
from composer_rewards.rewards.correctness import CorrectnessReward
from composer_rewards.rewards.length import LengthPenalty
from composer_rewards.rewards.redundant_reads import RedundantReadsPenalty
from composer_rewards.rewards.style import StyleReward
from composer_rewards.rewards.unfinished import UnfinishedWorkPenalty

BUILTIN_PLUGINS: dict[str, type] = {
    "correctness": CorrectnessReward,
    "style": StyleReward,
    "communication": CommunicationReward,
    "unfinished": UnfinishedWorkPenalty,
    "redundant_reads": RedundantReadsPenalty,
    "length": LengthPenalty,
    "comment_reasoning": CommentReasoningMonitor,
    "terminal_collapse": TerminalCollapseMonitor,
    "malformed_calls": MalformedCallsMonitor,
    "clarify_without_edit": ClarifyWithoutEditMonitor,
    "grader_tampering": GraderTamperingMonitor,
    "reread": RereadMonitor,
    "failed_read_again": FailedReadAgainMonitor,
}
"""Plugin name -> class; each class takes no arguments and reads ``composer_configure``."""

OPTIONAL_PLUGINS: dict[str, str] = {
    "judge": "composer_rewards.rewards.judge:ChatJudgeReward",
    "failed_reads_again": "composer_rewards.rewards.failed_reads:FailedReadsAgainPenalty",
}
"""Plugin name -> spec of the built-ins that are off unless added."""


def builtin_plugins(disabled: frozenset[str] = frozenset()) -> dict[str, object]:
    """Fresh instances of the default built-ins, minus `disabled`."""
    unknown = disabled - BUILTIN_PLUGINS.keys()
    if unknown:
        raise ValueError(
            f"unknown built-in plugins {sorted(unknown)}; the built-ins are {sorted(BUILTIN_PLUGINS)}"
        )
    return {name: cls() for name, cls in BUILTIN_PLUGINS.items() if name not in disabled}
