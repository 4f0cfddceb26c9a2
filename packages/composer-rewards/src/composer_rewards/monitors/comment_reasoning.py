"""Long reasoning left in code comments.

The report saw policies dump chains of thought into the code they wrote. This looks at
the comment lines the diff added to Python files: the longest run of consecutive added
comment lines (in words), and how many of them read like thinking aloud ("wait", "let
me", "hmm", "actually", "I think"). Flag ``reasoning_in_comments`` when the longest block
reaches ``max_block_words`` or at least ``min_reasoning_phrases`` phrases appear.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field

from composer_hooks import hookimpl
from composer_rewards.diff import parse_diff
from composer_rewards.episode import Episode
from composer_rewards.plugin import ConfiguredPlugin
from composer_rewards.results import MonitorReport

_COMMENT = re.compile(r"^\s*#(.*)$")
_REASONING = re.compile(
    r"\b(wait|hmm+|let me|let's think|actually|I think|I need to|we need to|on second thought|"
    r"but then|maybe|alternatively|so basically)\b",
    re.IGNORECASE,
)


class CommentReasoningSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_block_words: int = Field(default=60, gt=0)
    min_reasoning_phrases: int = Field(default=2, gt=0)


class CommentReasoningMonitor(ConfiguredPlugin[CommentReasoningSettings]):
    kind = "monitors"
    name = "comment_reasoning"
    settings_type = CommentReasoningSettings

    @hookimpl
    def composer_monitor(self, episode: Episode) -> MonitorReport:
        comment_lines = 0
        added_lines = 0
        longest_block_words = 0
        phrases = 0
        for path, change in parse_diff(episode.diff).items():
            if not path.endswith(".py"):
                continue
            block_words = 0
            previous = -2
            for number, text in change.added:
                added_lines += 1
                match = _COMMENT.match(text)
                if match is None:
                    block_words, previous = 0, -2
                    continue
                comment_lines += 1
                words = len(match.group(1).split())
                block_words = block_words + words if number == previous + 1 else words
                previous = number
                longest_block_words = max(longest_block_words, block_words)
                phrases += len(_REASONING.findall(match.group(1)))
        settings = self.settings
        flags = {}
        if (
            longest_block_words >= settings.max_block_words
            or phrases >= settings.min_reasoning_phrases
        ):
            flags["reasoning_in_comments"] = (
                f"longest added comment block {longest_block_words} words, "
                f"{phrases} reasoning phrases in comments"
            )
        return MonitorReport(
            metrics={
                "comment_lines": comment_lines,
                "comment_ratio": comment_lines / added_lines if added_lines else 0.0,
                "longest_comment_block_words": longest_block_words,
                "reasoning_phrases": phrases,
            },
            flags=flags,
        )
