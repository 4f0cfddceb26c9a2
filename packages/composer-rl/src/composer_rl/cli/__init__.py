"""The `composer-rl` command.

Each subcommand lives in its own module under `composer_rl.cli` and exposes
`register(subparsers)`, so stages, plugins and evaluation grow without touching
each other. `main` is the console-script entry point.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

from composer_rl import __version__


def _command_modules() -> list[str]:
    """Every module in this package: each adds one subcommand (or a group of them)."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="composer-rl",
        description=(
            "Composer: continued pretraining with multi-token prediction and asynchronous RL "
            "for agentic coding models. With no subcommand, runs the default pipeline."
        ),
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in _command_modules():
        importlib.import_module(f"composer_rl.cli.{module_name}").register(subparsers)
    return parser


# What `composer-rl` with no subcommand runs, in order, each on its defaults: stage one
# (reusing finished phases), then asynchronous RL from its SFT checkpoint, which ends with
# the held-out comparison of the final policy against the SFT policy.
DEFAULT_PIPELINE: tuple[tuple[str, ...], ...] = (("stage1",), ("rl",))


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand (or the default pipeline); its exit status.

    A user error found before anything starts (`composer_rl.errors.ConfigError`: a bad
    setting, a missing file, a launch that cannot work) and a corpus that cannot be used
    are printed as one `error: ...` line, with exit status 2 and no traceback."""
    from composer_rl.errors import ConfigError
    from composer_rl.stages.corpus import CorpusError

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if getattr(args, "handler", None) is None:
            print(
                "composer-rl: no subcommand, running the default pipeline: "
                + ", then ".join(" ".join(step) for step in DEFAULT_PIPELINE)
                + " (see --help)",
                flush=True,
            )
            for step in DEFAULT_PIPELINE:
                step_args = parser.parse_args(list(step))
                code = int(step_args.handler(step_args) or 0)
                if code:
                    return code
            return 0
        return int(args.handler(args) or 0)
    except (ConfigError, CorpusError) as error:
        print(f"error: {one_line(str(error))}", file=sys.stderr)
        return 2


def one_line(text: str) -> str:
    """`text` on one line: a log or a terminal shows a user error whole, as one line."""
    return "; ".join(part.strip() for part in text.splitlines() if part.strip())


if __name__ == "__main__":
    sys.exit(main())
