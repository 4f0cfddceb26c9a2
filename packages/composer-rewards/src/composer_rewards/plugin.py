"""A base for built-in plugins whose settings come from one section of the run config."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from composer_hooks import hookimpl

SettingsT = TypeVar("SettingsT", bound=BaseModel)


class ConfiguredPlugin(Generic[SettingsT]):
    """Holds validated settings read from ``config[kind][name]`` in ``composer_configure``.

    Until the hook runs (for example in a unit test) the settings are the defaults, so a
    plugin is usable on its own: ``LengthPenalty().composer_reward(episode)``.
    """

    kind: ClassVar[str] = "rewards"
    name: ClassVar[str]
    settings_type: ClassVar[type[BaseModel]]

    def __init__(self, settings: SettingsT | None = None) -> None:
        self.settings: SettingsT = settings or self.settings_type()  # type: ignore[assignment]

    @hookimpl
    def composer_configure(self, config: Mapping[str, Any]) -> None:
        section = (config.get(self.kind) or {}).get(self.name) or {}
        try:
            self.settings = self.settings_type.model_validate(section)  # type: ignore[assignment]
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join([self.kind, self.name, *map(str, e['loc'])])}: {e['msg']}"
                f" (got {e['input']!r})"
                for e in error.errors()
            )
            raise ValueError(f"invalid plugin configuration: {problems}") from error

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.settings!r})"
