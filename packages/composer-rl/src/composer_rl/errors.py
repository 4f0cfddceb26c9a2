"""User errors that can be found before anything starts, said in one line.

Both configuration systems (the RL run's `RLConfig`, read from TOML and flags, and stage
one's `Stage1Config`, read from JSON and flags) and every command's own checks raise
`ConfigError`; `composer_rl.cli.main` prints it as one `error: ...` line and exits with
status 2 before any service, phase or process starts. A pydantic `ValidationError` goes
through `explain_validation`, so that an unknown key is named by its full dotted name
with what its section accepts, instead of pydantic's multi-line dump with a URL.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError


class ConfigError(ValueError):
    """A setting to change, said in terms of the key or flag (one line, exit status 2)."""


def section_type(annotation: Any) -> type[BaseModel] | None:
    """The model of a nested section (a field whose type is a pydantic model), else None."""
    return (
        annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
    )


def accepted_keys(root: type[BaseModel], section: tuple[Any, ...]) -> str:
    """'; <section> accepts a, b, c': the keys valid where an unknown one was found."""
    model: type[BaseModel] | None = root
    for part in section:
        info = model.model_fields.get(str(part)) if model is not None else None
        model = section_type(info.annotation) if info is not None else None
    if model is None:
        return ""
    where = ".".join(str(p) for p in section) or "the top level"
    return f"; {where} accepts {', '.join(sorted(model.model_fields))}"


def explain_validation(error: ValidationError, origin: str, root: type[BaseModel]) -> ConfigError:
    """One line for every problem pydantic found validating `root` from `origin` (a file,
    'flags' or both): unknown keys by their dotted name with what the section accepts, bad
    values with the key, the reason and the value given."""
    problems = []
    for item in error.errors():
        key = ".".join(str(p) for p in item["loc"])
        if item["type"] == "extra_forbidden":
            problems.append(f"{origin}: unknown key {key!r}{accepted_keys(root, item['loc'][:-1])}")
        elif item["type"] == "missing":
            problems.append(f"{origin}: {key}: required")
        else:
            message = str(item["msg"]).removeprefix("Value error, ")
            value = item.get("input")
            # A whole section (what a model validator sees) is noise next to its message.
            given = "" if isinstance(value, dict) else f" (got {value!r})"
            problems.append(f"{origin}: {key + ': ' if key else ''}{message}{given}")
    return ConfigError("; ".join(problems))


def require_model_dir(path: Path, flag: str, hint: str) -> None:
    """A ConfigError unless `path` is a model directory with its tokenizer.json: every
    command that takes a checkpoint says the same thing when it is wrong."""
    if (path / "tokenizer.json").is_file():
        return
    what = (
        "does not exist"
        if not path.exists()
        else "is not a directory"
        if not path.is_dir()
        else "has no tokenizer.json"
    )
    raise ConfigError(f"{flag} {path} {what}: give {hint}")


__all__ = [
    "ConfigError",
    "accepted_keys",
    "explain_validation",
    "require_model_dir",
    "section_type",
]
