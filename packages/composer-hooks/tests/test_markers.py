"""The marker pair marks hooks pluggy finds under project "composer", and nothing else."""

from __future__ import annotations

import pluggy

from composer_hooks import PROJECT, hookimpl, hookspec


class _Spec:
    @hookspec
    def composer_answer(self, question: str) -> str:  # type: ignore[empty-body]
        """A spec declared with the pair."""


class _Plugin:
    @hookimpl
    def composer_answer(self, question: str) -> str:
        return question.upper()


class _ForeignPlugin:
    @pluggy.HookimplMarker("someone-else")
    def composer_answer(self, question: str) -> str:
        return "foreign"


def test_a_hookimpl_of_the_pair_is_called_and_a_foreign_project_is_not() -> None:
    manager = pluggy.PluginManager(PROJECT)
    manager.add_hookspecs(_Spec)
    manager.register(_Plugin())
    manager.register(_ForeignPlugin())
    assert manager.hook.composer_answer(question="ok") == ["OK"]


def test_the_project_is_the_entry_point_group() -> None:
    assert PROJECT == "composer"
    assert hookspec.project_name == hookimpl.project_name == PROJECT
