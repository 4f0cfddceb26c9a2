"""``composer-rl view``: browse run directories (episodes, groups, curves) in a browser."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from composer_rl.errors import ConfigError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "view",
        help="a rollout viewer in the browser, live during a run",
        description=(
            "Serve a local web app over RL run directories: curves, the episode table, one "
            "episode's transcript and tokens coloured by policy version, groups; pages follow "
            "a running job without reload. Binds 127.0.0.1 unless --host says otherwise."
        ),
    )
    parser.add_argument(
        "run_dirs",
        nargs="*",
        type=Path,
        metavar="RUN_DIR",
        help="run directories (default: every run found under ./runs)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument(
        "--port", type=int, default=8765, help="port (default 8765; 0 picks a free one)"
    )
    parser.set_defaults(handler=view)


def view(args: argparse.Namespace) -> int:
    from composer_rl.view.rundir import find_runs
    from composer_rl.view.server import serve

    if not 0 <= args.port <= 65535:
        # Checked here: binding raises OverflowError, not OSError, so it came out as a
        # traceback after the run directories were read.
        raise ConfigError(f"--port {args.port}: give 0 to 65535 (0 picks a free one)")
    paths: list[Path] = []
    for given in args.run_dirs or [Path("runs")]:
        if not given.exists():
            print(f"composer-rl view: {given} does not exist", file=sys.stderr)
            return 2
        found = find_runs(given)
        # A directory given by name is served even if nothing is in it yet (a run starting).
        paths += found or ([given] if args.run_dirs else [])
    if not paths:
        print(
            "composer-rl view: no run directories found under ./runs; give RUN_DIR",
            file=sys.stderr,
        )
        return 2
    try:
        serve([p.resolve() for p in paths], args.host, args.port)
    except OSError as error:
        print(
            f"composer-rl view: cannot listen on {args.host}:{args.port}: {error}", file=sys.stderr
        )
        return 2
    except KeyboardInterrupt:
        pass
    return 0
