"""From a finished rollout to a scored episode: trajectories, rewards, monitors, the log line.

Scoring runs through the run's one plugin manager (the job's `PluginSession.score` over
the torch-free `Episode` view, budgeted, each plugin's failure captured), so the reward the policy is trained on is the reward every
other tool of the project reports. An episode whose grader failed (sandbox crash, grader
timeout) gets no reward at all: the orchestrator leaves it out of its group's baseline.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from composer_infra.checkpoint import Trajectory
from composer_model import ComposerTokenizer
from composer_rewards import Episode, EpisodeScore
from composer_rl.agent.episode import EpisodeResult, episode_view, unified_diff
from composer_rl.rl.orchestrator import ScoredEpisode


def trajectories_of(result: EpisodeResult) -> list[Trajectory]:
    """The episode's trajectories, labelled: one per segment of a self-summarized chain
    (they share the episode's reward), cut where their routing ends (a trailing tool output
    no request processed has none); segments the policy wrote nothing in are left out."""
    episode_id = f"{result.key or result.task.id}.s{result.sample}"
    out = []
    for index, record in enumerate(result.records):
        n = record.routed_prefix if record.routing else len(record.tokens)
        if n < 2 or not any(record.sampled[:n]):
            continue
        trajectory = record.prefix(n)  # checked again: what the trainer gets lines up
        trajectory.episode_id, trajectory.segment = episode_id, index
        out.append(trajectory)
    return out


RECORDED_TEXT_CHARS = 32_000
"""Longest diff and hidden-test output an episode line keeps (the rest is cut, said so):
a policy that writes a megabyte file must not make every line of the log a megabyte."""


def _capped(text: str) -> str:
    if len(text) <= RECORDED_TEXT_CHARS:
        return text
    return text[:RECORDED_TEXT_CHARS] + f"\n[... {len(text) - RECORDED_TEXT_CHARS} characters cut]"


def score_result(
    result: EpisodeResult,
    score: Callable[[Episode], EpisodeScore],
    tokenizer: ComposerTokenizer,
) -> ScoredEpisode:
    """Rewards and monitor flags of one episode; reward None when the infrastructure failed."""
    trajectories = trajectories_of(result)
    if result.grading_error is not None or result.report is None:
        reward = None
        components: dict[str, float] = {}
        flags: dict[str, str] = {}
    else:
        scored = score(episode_view(result, tokenizer))
        reward = scored.total
        components = {sc.component.name: sc.component.weighted for sc in scored.components}
        flags = scored.flags
    line: dict[str, Any] = {
        "episode": f"{result.key or result.task.id}.s{result.sample}",
        "task": result.task.id,
        "category": result.task.category.value,
        "difficulty": result.task.difficulty,
        "reward": reward,
        "components": components,
        "flags": flags,
        "solved": result.solved,
        "stop_reason": result.stop_reason,
        "grading_error": result.grading_error,
        # Why the grader refused a verdict (no report, a kill, an undeclared skip, ...):
        # a failure of the episode, kept so the monitors and the viewer can show it.
        "grading_failure": result.report.failure_reason if result.report else None,
        "turns": len(result.calls),
        "generated_tokens": result.generated_tokens,
        "versions": sorted({v for t in trajectories for v in t.sampled_versions}),
        "segments": len(result.records),
        "summaries": result.summaries,
        "compactions": len(result.compactions),
        "transcript": result.transcript.text,
        # What the episode left and what the hidden tests said of it, for a reader (the
        # viewer); the policy never sees this log.
        "diff": _capped(unified_diff(result.task.files, result.files_after))
        if result.files_after
        else None,
        "test_output": _capped(result.report.output) if result.report else None,
    }
    return ScoredEpisode(
        trajectories=trajectories,
        reward=reward,
        components=components,
        flags=dict(flags),
        solved=result.solved,
        turns=len(result.calls),
        generated_tokens=result.generated_tokens,
        sandbox_seconds=result.sandbox_seconds,
        record=line,
    )


EPISODES_LOG = Path("episodes") / "episodes.jsonl"
"""Where a run directory keeps one JSON line per finished episode."""


def read_episodes(run_dir: Path, scored_only: bool = True) -> list[dict[str, Any]]:
    """A run's episode lines, in the order they finished; `scored_only` leaves out the
    episodes whose sandbox or grader failed (they have no reward)."""
    lines = (run_dir / EPISODES_LOG).read_text().splitlines()
    episodes = [json.loads(line) for line in lines if line.strip()]
    return [e for e in episodes if e["reward"] is not None] if scored_only else episodes


__all__ = ["EPISODES_LOG", "read_episodes", "score_result", "trajectories_of"]
