"""No default setting is derived from held-out scores.

Settings are chosen on the training split or the validation split carved from it; the
held-out split only scores a policy once they are frozen. A default derived from held-out
results would come to the code one of two ways: a file of results read when the config is
built (a `default_factory` reading `docs/rl/learning-margin.json`), or held-out tasks rendered
and scored while it is built. These tests build every command's defaults with both refused,
and fail if building them reaches for either.
"""

from __future__ import annotations

import builtins
import io
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

from composer_rl.agent.behaviours import DemonstrationMix
from composer_rl.agent.episode import RunnerConfig
from composer_rl.cli.eval import EvalCommandConfig
from composer_rl.rl.config import load_config
from composer_rl.rl.loss import RLLossConfig
from composer_rl.rl.orchestrator import OrchestratorConfig
from composer_rl.rl.sampler import LearnabilityConfig, UpsamplingConfig
from composer_rl.rl.services.training import TrainingConfig
from composer_rl.stages.config import Stage1Config
from composer_rl.tasks.model import Split
from composer_rl.tasks.templates.base import Template


class Reached(AssertionError):
    """A default reached for a file or a held-out task."""


@pytest.fixture
def refused(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """File reads and held-out task rendering raise `Reached` (and are recorded)."""
    reached: list[str] = []

    def refuse(what: str) -> Any:
        def call(*args: object, **kwargs: object) -> Any:
            reached.append(f"{what}{args[:2]}")
            raise Reached(f"a default reached for {what}: {args[:2]}")

        return call

    for owner, name in (
        (builtins, "open"),
        (io, "open"),
        (pathlib.Path, "open"),
        (pathlib.Path, "read_text"),
        (pathlib.Path, "read_bytes"),
    ):
        monkeypatch.setattr(owner, name, refuse(f"{owner.__name__}.{name}"))
    build = Template.build

    def build_unless_heldout(self: Template, params: Any, split: Split | None = None) -> Any:
        if (split or self.split(params)) == Split.HELDOUT:
            reached.append(f"held-out task {type(self).__name__}")
            raise Reached(f"a default rendered a held-out task of {type(self).__name__}")
        return build(self, params, split)

    monkeypatch.setattr(Template, "build", build_unless_heldout)
    yield reached


def test_the_refusals_bite(refused: list[str], tmp_path: pathlib.Path) -> None:
    from composer_rl.tasks.templates import BUILTIN_TEMPLATES

    template = BUILTIN_TEMPLATES[0]
    with pytest.raises(Reached):
        next(template.tasks(Split.HELDOUT))
    with pytest.raises(Reached):
        (tmp_path / "learning-margin.json").read_text()
    assert len(refused) == 2
    assert next(template.tasks(Split.TRAIN)).split == "train"  # training tasks still render


def test_every_command_default_is_built_without_files_or_heldout_tasks(
    refused: list[str],
) -> None:
    configs: list[BaseModel] = [
        Stage1Config(),  # `composer-rl stage1` and the default command's stage one
        load_config(None, {}),  # `composer-rl rl`
        EvalCommandConfig(),  # `composer-rl eval`: scores held-out, chooses nothing
        DemonstrationMix(),
        RunnerConfig(),
        TrainingConfig(),
        RLLossConfig(),
        OrchestratorConfig(),
        LearnabilityConfig(),
        UpsamplingConfig(),
    ]
    assert refused == []
    # What they hold is plain data: no default is a callable or a path to a file of results.
    for config in configs:
        dumped = repr(config.model_dump())
        assert "learning-margin" not in dumped and "scores-" not in dumped, type(config)
