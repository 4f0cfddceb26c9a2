"""User errors that can be found before anything starts, said in one line.

The one configuration system (`composer_rl.config`: every command's settings read from a
TOML file and flags) and every command's own checks raise `ConfigError`;
`composer_rl.cli.main` prints it as one `error: ...` line and exits with status 2 before
any service, phase or process starts. A pydantic `ValidationError` goes through
`composer_rl.config.explain_validation`, so that an unknown key is named by its full
dotted name with what its section accepts, instead of pydantic's multi-line dump with a
URL.
"""

from __future__ import annotations

from pathlib import Path


class ConfigError(ValueError):
    """A setting to change, said in terms of the key or flag (one line, exit status 2)."""


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


__all__ = ["ConfigError", "require_model_dir"]
