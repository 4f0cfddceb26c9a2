"""The agent: its text format for tool calls, oracle demonstrations, the episode runner and
its self-summarization (`composer_rl.agent.summarize`)."""

from composer_rl.agent.episode import EpisodeResult, EpisodeRunner, RunnerConfig, episode_view
from composer_rl.agent.format import parse_output, render_call, render_prompt
from composer_rl.agent.oracle import oracle_calls, play_oracle
from composer_rl.agent.transcript import Transcript

__all__ = [
    "EpisodeResult",
    "EpisodeRunner",
    "RunnerConfig",
    "Transcript",
    "episode_view",
    "oracle_calls",
    "parse_output",
    "play_oracle",
    "render_call",
    "render_prompt",
]
