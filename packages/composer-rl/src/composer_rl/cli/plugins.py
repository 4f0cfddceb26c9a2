"""``composer-rl plugins add|remove|list``: change the plugins of a running job.

The command only writes a request under ``RUN_DIR/plugins/``; the job applies it at its
next step boundary and records it in its metrics with the step number. ``add`` first
checks that the job can load the plugin, using the job's own interpreter and import
path when the job runs on this machine (and this environment otherwise), so a typo or a
missing package is reported here instead of in the job's log.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from composer_rl.plugins.requests import (
    JobState,
    PluginRequest,
    pending,
    processed,
    read_state,
    recent,
    submit,
)

EXIT_BAD_SPEC = 2
EXIT_REJECTED = 1


class CommandError(Exception):
    """A problem the user can fix; printed as ``error: ...`` with exit status 2."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "plugins",
        help="add, remove or list the plugins of a running job",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="plugins_action", metavar="ACTION", required=True)

    def common(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "--run", required=True, type=Path, metavar="RUN_DIR", help="the job's run directory"
        )

    add = actions.add_parser("add", help="register a plugin at the job's next step boundary")
    common(add)
    add.add_argument("spec", metavar="package.module:Plugin", help="a class, instance or module")
    add.add_argument("--name", help="the name to register it under (default: the spec)")
    add.add_argument("--no-check", action="store_true", help="queue without checking the spec")
    add.add_argument(
        "--wait", type=float, default=0.0, metavar="SECONDS", help="wait for the job's answer"
    )
    add.set_defaults(handler=_add)

    remove = actions.add_parser(
        "remove", help="unregister a plugin at the job's next step boundary"
    )
    common(remove)
    remove.add_argument("target", metavar="NAME_OR_SPEC")
    remove.add_argument(
        "--wait", type=float, default=0.0, metavar="SECONDS", help="wait for the job's answer"
    )
    remove.set_defaults(handler=_remove)

    listing = actions.add_parser("list", help="show the job's plugins and queued requests")
    common(listing)
    listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
    listing.set_defaults(handler=_list)


def _run_dir(path: Path) -> Path:
    if not path.is_dir():
        raise CommandError(f"no run directory at {path}; pass the --run of a started job")
    return path


def _check_interpreter(state: JobState | None) -> tuple[str, dict[str, str], str]:
    """The interpreter and environment to check a spec with, and a word on which one."""
    env = dict(os.environ)
    if state is not None and state.host == socket.gethostname() and Path(state.python).exists():
        env["PYTHONPATH"] = os.pathsep.join(state.sys_path)
        return state.python, env, f"the job's environment (pid {state.pid})"
    return sys.executable, env, "this environment (the job's is not on this machine)"


def check_spec(run_dir: Path, spec: str) -> list[str]:
    """The hooks `spec` implements, as the job would load it; CommandError if it cannot."""
    python, env, where = _check_interpreter(read_state(run_dir))
    completed = subprocess.run(
        [python, "-m", "composer_rl.plugins.check", spec],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    try:
        answer = json.loads(completed.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        raise CommandError(
            f"could not check {spec!r} in {where}: {completed.stderr.strip()[-2000:]}"
        ) from None
    if not answer["ok"]:
        raise CommandError(f"{answer['error']} (checked in {where})")
    return list(answer["hooks"])


def _wait(run_dir: Path, request: PluginRequest, seconds: float) -> int:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        answer = processed(run_dir, request.id)
        if answer is not None:
            event = answer.event
            if event.ok:
                print(f"step {event.step}: {event.action} {event.name!r} applied")
                return 0
            print(
                f"step {event.step}: {event.action} {event.name!r} rejected: {event.error}",
                file=sys.stderr,
            )
            return EXIT_REJECTED
        time.sleep(0.05)
    print(
        f"the job did not answer within {seconds:g} s; request {request.id} stays queued",
        file=sys.stderr,
    )
    return EXIT_REJECTED


def _queued(run_dir: Path, request: PluginRequest, wait: float) -> int:
    state = read_state(run_dir)
    where = f"job pid {state.pid}, last at step {state.step}" if state else "no job has started yet"
    print(f"queued {request.action} {request.target!r} as {request.id} ({where})")
    return _wait(run_dir, request, wait) if wait > 0 else 0


Handler = Callable[[argparse.Namespace], int]


def _handle_errors(function: Handler) -> Handler:
    def handler(args: argparse.Namespace) -> int:
        try:
            return int(function(args))
        except CommandError as error:
            print(f"error: {error}", file=sys.stderr)
            return EXIT_BAD_SPEC

    return handler


@_handle_errors
def _add(args: argparse.Namespace) -> int:
    run_dir = _run_dir(args.run)
    if not args.no_check:
        hooks = check_spec(run_dir, args.spec)
        print(f"{args.spec} implements {', '.join(hooks)}")
    request = submit(run_dir, "add", args.spec, args.name)
    return _queued(run_dir, request, args.wait)


@_handle_errors
def _remove(args: argparse.Namespace) -> int:
    run_dir = _run_dir(args.run)
    state = read_state(run_dir)
    if state is not None:
        known = {p.name for p in state.plugins} | {p.spec for p in state.plugins if p.spec}
        if args.target not in known:
            raise CommandError(
                f"the job has no plugin {args.target!r}; it has {sorted(p.name for p in state.plugins)}"
            )
    request = submit(run_dir, "remove", args.target)
    return _queued(run_dir, request, args.wait)


@_handle_errors
def _list(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    run_dir = _run_dir(args.run)
    state = read_state(run_dir)
    queued = pending(run_dir)
    history = recent(run_dir)
    if args.json:
        print(
            json.dumps(
                {
                    "state": state.model_dump() if state else None,
                    "pending": [r.model_dump() for r in queued],
                    "recent": [h.event.model_dump() for h in history],
                },
                indent=2,
            )
        )
        return 0
    console = Console()
    if state is None:
        console.print(f"no job has written {run_dir / 'plugins' / 'state.json'} yet")
    else:
        console.print(f"job pid {state.pid} on {state.host}, step {state.step}")
        table = Table("name", "source", "spec", "hooks")
        for plugin in state.plugins:
            table.add_row(plugin.name, plugin.source, plugin.spec, ", ".join(plugin.hooks))
        console.print(table)
    for request in queued:
        console.print(f"queued: {request.action} {request.target} ({request.id})")
    for item in history:
        event = item.event
        outcome = "ok" if event.ok else f"rejected: {event.error}"
        console.print(f"step {event.step}: {event.action} {event.name} {outcome}")
    return 0
