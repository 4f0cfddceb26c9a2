"""Every demonstration SFT teaches can be played whole by the runners that score and train
the policy: no more tool calls than their `max_turns`, no call longer than their
`max_new_tokens`, counted with the tokenizer stage one trains. Before 2026-12-07 RL's
rollouts allowed 10 turns of 160 tokens and evaluation 8 of 256, which cut a quarter of the
SFT demonstrations (1,070 of 4,263; 13 of 33 templates): a policy doing what it was shown was
stopped before the edit that solves the task (docs/rl/2026-12-07-demonstration-limits.md)."""

from __future__ import annotations

from itertools import islice

import pytest

from composer_model import ComposerTokenizer
from composer_rewards import ToolCall
from composer_rl.agent.behaviours import Behaviour, DemonstrationMix
from composer_rl.agent.demonstrations import play_demonstration
from composer_rl.agent.episode import RunnerConfig
from composer_rl.agent.summarize import SummaryConfig
from composer_rl.agent.transcript import Transcript
from composer_rl.rl.config import RLConfig
from composer_rl.stages.config import CorpusConfig, SftRound2Config
from composer_rl.stages.data import corpus_tokenizer
from composer_rl.tasks import BUILTIN_TEMPLATES, Split
from composer_rl.tasks.templates.base import Template

RUNNERS = {
    "evaluation": RunnerConfig(),
    "RL rollouts": RLConfig().rollout,
    "sft-round2 episodes": SftRound2Config(),
}
"""Every runner a policy plays episodes under, at its defaults."""

MIXES = [
    DemonstrationMix.only(Behaviour.CAREFUL),
    DemonstrationMix.only(Behaviour.RECOVERING, lost_read=1.0),
    DemonstrationMix.only(Behaviour.REREAD, lost_read=1.0),
]
"""The longest of each kind: careful makes the suite's longest call (its edits and the
message that quotes them), recovering and reread after a missing first read make the most
calls (every behaviour and template measured in the record above)."""


@pytest.fixture(scope="module")
def tokenizer() -> ComposerTokenizer:
    return corpus_tokenizer(CorpusConfig())


def _misfits(calls: list[int]) -> list[str]:
    found = []
    for name, runner in RUNNERS.items():
        if len(calls) > runner.max_turns:
            found.append(f"{name}: {len(calls)} calls > max_turns {runner.max_turns}")
        if max(calls) > runner.max_new_tokens:
            found.append(f"{name}: a {max(calls)}-token call > {runner.max_new_tokens}")
    return found


@pytest.mark.slow
@pytest.mark.parametrize("template", BUILTIN_TEMPLATES, ids=lambda t: t.name)
def test_the_longest_demonstrations_of_every_template_fit_the_default_runners(
    template: Template, tokenizer: ComposerTokenizer
) -> None:
    for task in islice(template.tasks(Split.TRAIN), 1):
        for mix in MIXES:
            demo = play_demonstration(task, mix)
            misfits = _misfits(demo.transcript.call_tokens(tokenizer))
            assert not misfits, (task.id, demo.kind, mix.read_is_lost(task.id), misfits)


def test_a_demonstration_longer_than_a_limit_is_caught(tokenizer: ComposerTokenizer) -> None:
    """The check itself: a transcript one call over the turn limit, and one whose call is
    over the token limit, are both reported (so the slow test above can fail)."""
    turns = max(r.max_turns for r in RUNNERS.values())
    long = Transcript.start("do it")
    for _ in range(turns + 1):
        long.add_call(ToolCall(name="list_files", arguments={}))
    calls = long.call_tokens(tokenizer)
    assert len(calls) == turns + 1 and any("max_turns" in m for m in _misfits(calls))
    wide = Transcript.start("do it")
    wide.add_call(
        ToolCall(name="write_file", arguments={"path": "a.py", "content": "x = 1\n" * 400})
    )
    assert any("-token call" in m for m in _misfits(wide.call_tokens(tokenizer)))


def test_the_summary_budget_leaves_room_for_a_whole_turn() -> None:
    """RL's rollouts condense when the next turn could pass the budget; a budget below a
    turn's worth of context would condense every episode at its first turns."""
    rollout = RLConfig().rollout
    budget = SummaryConfig().context_budget
    assert budget is not None and rollout.summary is not None
    assert budget - rollout.max_new_tokens >= rollout.max_seq_len // 2
    assert budget <= rollout.max_seq_len
