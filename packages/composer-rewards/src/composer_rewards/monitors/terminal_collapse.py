"""Collapse onto the terminal tool alone.

A policy can learn to do everything through ``run`` (``cat`` to read, ``sed -i`` or a
heredoc to write) and stop using the file tools. Metrics: the share of tool calls that
are ``run`` (``finish`` not counted) and how many ``run`` commands write files. Flag
``terminal_only`` when at least ``min_calls`` calls were made and all of them were
``run``.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field

from composer_hooks import hookimpl
from composer_rewards.episode import FINISH_TOOL, TERMINAL_TOOL, Episode
from composer_rewards.plugin import ConfiguredPlugin
from composer_rewards.results import MonitorReport

_WRITES_FILE = re.compile(
    r"(\bsed\s+-i\b|\bcat\s*>|>>?\s*[\w./-]+\.\w+|<<\s*'?EOF|\btee\b|\bopen\([^)]*['\"][wa])"
)


class TerminalCollapseSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    min_calls: int = Field(default=3, gt=0)


class TerminalCollapseMonitor(ConfiguredPlugin[TerminalCollapseSettings]):
    kind = "monitors"
    name = "terminal_collapse"
    settings_type = TerminalCollapseSettings

    @hookimpl
    def composer_monitor(self, episode: Episode) -> MonitorReport:
        calls = [c for c in episode.tool_calls if c.name != FINISH_TOOL]
        terminal = [c for c in calls if c.name == TERMINAL_TOOL]
        writes = sum(
            1 for c in terminal if _WRITES_FILE.search(str(c.arguments.get("command", "")))
        )
        flags = {}
        if len(calls) >= self.settings.min_calls and len(terminal) == len(calls):
            flags["terminal_only"] = (
                f"all {len(calls)} tool calls were {TERMINAL_TOOL!r}, {writes} of them wrote files"
            )
        return MonitorReport(
            metrics={
                "terminal_share": len(terminal) / len(calls) if calls else 0.0,
                "terminal_file_writes": writes,
            },
            flags=flags,
        )
