"""An optional communication judge: an OpenAI-compatible chat endpoint scores the message.

Not registered by default (it needs an endpoint and costs a request per episode). Enable
it with an entry in the run config's plugin list or at run time::

    composer-rl plugins add --run RUN_DIR composer_rewards.rewards.judge:ChatJudgeReward

and configure it under ``rewards.judge``: ``base_url`` (for example
``http://localhost:8000/v1``), ``model``, optionally ``api_key_env`` (the name of the
environment variable holding the key) and ``prompt_file`` (defaults to the prompt shipped
with this package). The endpoint must answer ``POST {base_url}/chat/completions`` with a
message whose content is ``{"score": 0-10, "reason": "..."}``; the component is
``score / 10``. A failed request or an unreadable answer raises, so the plugin is named in
the run's metrics and its component is left out of that episode.
"""

from __future__ import annotations

import json
import os
import re
import urllib.request
from importlib.resources import files
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from composer_hooks import hookimpl
from composer_rewards.episode import Episode
from composer_rewards.plugin import ConfiguredPlugin
from composer_rewards.results import RewardComponent

DEFAULT_PROMPT = "communication_judge.md"


class JudgeSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    base_url: str | None = None
    model: str = "judge"
    api_key_env: str | None = None
    prompt_file: Path | None = None
    timeout_s: float = Field(default=30.0, gt=0)
    max_diff_chars: int = Field(default=6000, gt=0)
    max_message_chars: int = Field(default=4000, gt=0)
    weight: float = 0.2


class JudgeAnswerError(ValueError):
    """The endpoint answered, but not with a score this plugin can read."""


def load_prompt(settings: JudgeSettings) -> str:
    if settings.prompt_file is not None:
        return settings.prompt_file.read_text()
    return files("composer_rewards").joinpath("prompts", DEFAULT_PROMPT).read_text()


def render_episode(episode: Episode, max_diff_chars: int, max_message_chars: int = 4000) -> str:
    """The user message: the evidence the judge scores the final message against.

    The final message goes in as a JSON string, so nothing in it can close its section and
    pose as the prompt (quotes and newlines are escaped); a huge one is cut, with its true
    size stated, so a wall of text neither hides in the judge's context nor costs a fortune.
    """
    results = episode.test_results
    diff = episode.diff
    if len(diff) > max_diff_chars:
        diff = diff[:max_diff_chars] + f"\n... ({len(episode.diff) - max_diff_chars} more chars)"
    message = episode.final_message
    words = len(message.split())
    shown = message[:max_message_chars]
    cut = (
        f", cut to its first {max_message_chars} of {len(message)} characters"
        if len(message) > max_message_chars
        else ""
    )
    return (
        f"## Task\n{episode.task}\n\n## Change (unified diff)\n{diff or '(no change)'}\n\n"
        f"## Test results\n{results.passed} passed, {results.failed} failed, "
        f"{results.errors} errors\n\n## Final message to judge ({words} words{cut})\n"
        f"{json.dumps(shown)}\n"
    )


def parse_score(content: str) -> tuple[float, str]:
    """Read ``{"score": n, "reason": ...}`` from the answer (a code fence around it is fine).

    The score must be a JSON number from 0 to 10: a string ("7"), a boolean (``true`` would
    be read as 1), null, NaN or anything out of range is an unreadable answer, not a score,
    so the component is left out rather than set from a guess.
    """
    match = re.search(r"\{.*\}", content, re.DOTALL)
    if match is None:
        raise JudgeAnswerError(f"judge answer has no JSON object: {content!r:.200}")
    try:
        answer = json.loads(match.group(0))
        raw = answer["score"]
    except (ValueError, KeyError, TypeError) as error:
        raise JudgeAnswerError(f"judge answer has no 'score': {content!r:.200}") from error
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise JudgeAnswerError(f"judge score {raw!r} is not a number: {content!r:.200}")
    score = float(raw)
    if not 0.0 <= score <= 10.0:  # also false for NaN
        raise JudgeAnswerError(f"judge score {score} is outside 0..10")
    return score, str(answer.get("reason", ""))


class ChatJudgeReward(ConfiguredPlugin[JudgeSettings]):
    name = "judge"
    settings_type = JudgeSettings

    def request(self, episode: Episode) -> str:
        settings = self.settings
        if settings.base_url is None:
            raise ValueError("rewards.judge.base_url is not set: give the chat endpoint's URL")
        body = {
            "model": settings.model,
            "temperature": 0,
            "messages": [
                {"role": "system", "content": load_prompt(settings)},
                {
                    "role": "user",
                    "content": render_episode(
                        episode, settings.max_diff_chars, settings.max_message_chars
                    ),
                },
            ],
        }
        headers = {"Content-Type": "application/json"}
        if settings.api_key_env:
            headers["Authorization"] = f"Bearer {os.environ[settings.api_key_env]}"
        request = urllib.request.Request(
            settings.base_url.rstrip("/") + "/chat/completions",
            data=json.dumps(body).encode(),
            headers=headers,
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=settings.timeout_s) as response:
            payload = json.load(response)
        try:
            return str(payload["choices"][0]["message"]["content"])
        except (KeyError, IndexError, TypeError) as error:
            raise JudgeAnswerError(f"not a chat completion: {payload!r:.200}") from error

    @hookimpl
    def composer_reward(self, episode: Episode) -> RewardComponent:
        score, reason = parse_score(self.request(episode))
        return RewardComponent(
            name="communication_judge",
            value=score / 10.0,
            weight=self.settings.weight,
            details=reason,
        )
