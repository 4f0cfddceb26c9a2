"""From a finished rollout to a scored episode: trajectories, rewards, monitors, the log line.

Scoring runs through the run's one plugin manager (`composer_rewards.score_episode` over
the torch-free `Episode` view), so the reward the policy is trained on is the reward every
other tool of the project reports. An episode whose grader failed (sandbox crash, grader
timeout) gets no reward at all: the orchestrator leaves it out of its group's baseline.
"""

from __future__ import annotations

from typing import Any

import pluggy

from composer_model import ComposerTokenizer
from composer_rewards import score_episode
from composer_rl.agent.episode import EpisodeResult, episode_view
from composer_rl.rl.batch import Trajectory
from composer_rl.rl.orchestrator import ScoredEpisode


def trajectories_of(result: EpisodeResult) -> list[Trajectory]:
    """The episode's token records as trajectories: one per segment of a self-summarized
    chain (they share the episode's reward); segments the policy wrote nothing in are left out."""
    episode_id = f"{result.key or result.task.id}.s{result.sample}"
    out = []
    for index, record in enumerate(result.records):
        n = record.routed_prefix if record.routing else len(record.tokens)
        if n < 2 or not any(record.sampled[:n]):
            continue
        out.append(
            Trajectory(
                tokens=record.tokens[:n],
                sampled=record.sampled[:n],
                logprobs=record.logprobs[:n],
                versions=record.versions[:n],
                routing=record.routing[:n] if record.routing else None,
                episode_id=episode_id,
                segment=index,
            )
        )
    return out


def score_result(
    result: EpisodeResult,
    pm: pluggy.PluginManager,
    tokenizer: ComposerTokenizer,
    *,
    strict: bool = False,
) -> ScoredEpisode:
    """Rewards and monitor flags of one episode; reward None when the infrastructure failed."""
    trajectories = trajectories_of(result)
    if result.grading_error is not None or result.report is None:
        reward = None
        components: dict[str, float] = {}
        flags: dict[str, str] = {}
    else:
        score = score_episode(pm, episode_view(result, tokenizer), strict=strict)
        reward = score.total
        components = {sc.component.name: sc.component.weighted for sc in score.components}
        flags = score.flags
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
        "turns": len(result.calls),
        "generated_tokens": result.generated_tokens,
        "versions": sorted({v for t in trajectories for v in t.sampled_versions}),
        "segments": len(result.records),
        "summaries": result.summaries,
        "transcript": result.transcript.text,
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


__all__ = ["score_result", "trajectories_of"]
