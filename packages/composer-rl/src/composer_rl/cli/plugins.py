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


TAKES_REQUESTS = "eval (its --run-dir) and the RL run"
"""The shipped commands that apply plugin requests at their step boundaries."""


def _run_dir(path: Path) -> Path:
    if not path.is_dir():
        raise CommandError(f"no run directory at {path}; pass the --run of a started job")
    return path


def _job_state(run_dir: Path) -> JobState:
    """The state of the job that can apply a request in `run_dir`, or why there is none."""
    state = read_state(_run_dir(run_dir))
    if state is None:
        raise CommandError(
            f"no job that takes plugin requests has started in {run_dir} (there is no "
            f"plugins/state.json): {TAKES_REQUESTS} write it when they start. To have a "
            "plugin from the first step, list it in the run config's plugins.plugins"
        )
    if state.refusal:
        raise CommandError(f"{run_dir} is a `{state.command}` run: {state.refusal}")
    if state.finished:
        raise CommandError(
            f"the {state.command or 'job'} job of {run_dir} (pid {state.pid}) finished at step "
            f"{state.step}; nothing would apply this request"
        )
    return state


def _liveness(state: JobState) -> str:
    """'running', 'finished', 'not running (killed or crashed)' or 'on host X'."""
    if state.finished:
        return "finished"
    if state.host != socket.gethostname():
        return f"on host {state.host}"
    try:
        os.kill(state.pid, 0)
    except ProcessLookupError:
        return "not running (killed or crashed; a resumed job applies what is queued)"
    except PermissionError:
        pass  # alive, another user's
    return "running"


def _check_interpreter(state: JobState | None) -> tuple[str, dict[str, str], str]:
    """The interpreter and environment to check a spec with, and a word on which one."""
    env = dict(os.environ)
    if state is None:
        return sys.executable, env, "this environment (no job state to take the job's from)"
    if state.host != socket.gethostname():
        return sys.executable, env, f"this environment (the job runs on host {state.host})"
    if not Path(state.python).exists():
        return (
            sys.executable,
            env,
            f"this environment (the job's interpreter {state.python} no longer exists)",
        )
    env["PYTHONPATH"] = os.pathsep.join(state.sys_path)
    return state.python, env, f"the job's environment ({state.python}, pid {state.pid})"


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


def _queued(run_dir: Path, state: JobState, request: PluginRequest, wait: float) -> int:
    what = (
        f"{request.name!r} ({request.target})"
        if request.name and request.name != request.target
        else repr(request.target)
    )
    print(
        f"queued {request.action} {what} as {request.id} (job pid {state.pid}, "
        f"{_liveness(state)}, last at step {state.step})"
    )
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


def _check_name_free(run_dir: Path, state: JobState, name: str) -> None:
    """Refuse a name the job has or a queued add will take, as the job would (exit 2)."""
    taken = {p.name for p in state.plugins if p.status != "disabled"}
    if name in taken:
        raise CommandError(
            f"the job already has a plugin named {name!r}; pick another --name (or remove it first)"
        )
    for request in pending(run_dir):
        if request.action == "add" and (request.name or request.target) == name:
            raise CommandError(
                f"an add of a plugin named {name!r} is already queued ({request.id}); "
                "pick another --name"
            )


@_handle_errors
def _add(args: argparse.Namespace) -> int:
    run_dir = args.run
    state = _job_state(run_dir)
    _check_name_free(run_dir, state, args.name or args.spec)
    if not args.no_check:
        hooks = check_spec(run_dir, args.spec)
        print(f"{args.spec} implements {', '.join(hooks)}")
    request = submit(run_dir, "add", args.spec, args.name)
    return _queued(run_dir, state, request, args.wait)


@_handle_errors
def _remove(args: argparse.Namespace) -> int:
    run_dir = args.run
    state = _job_state(run_dir)
    known = {p.name for p in state.plugins} | {p.spec for p in state.plugins if p.spec}
    queued = {r.name or r.target for r in pending(run_dir) if r.action == "add"}
    if args.target not in known | queued:
        raise CommandError(
            f"the job has no plugin {args.target!r}; it has {sorted(p.name for p in state.plugins)}"
        )
    request = submit(run_dir, "remove", args.target)
    return _queued(run_dir, state, request, args.wait)


@_handle_errors
def _list(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

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
    rows = [
        (
            p.name,
            p.source,
            p.spec,
            ", ".join(p.hooks) if p.status == "registered" else f"{p.status}: {p.error}",
        )
        for p in (state.plugins if state else [])
    ]
    # Names, sources and specs are never cut or wrapped: each column is as wide as its
    # longest entry and the console widens to hold them (rich would otherwise shrink the
    # table to the terminal, or to 80 columns off one, and end a spec with an ellipsis);
    # only the hooks column wraps. Text is printed as is (a spec's [...] is not markup).
    headers = ("name", "source", "spec", "hooks")
    widths = [max([len(h), *(len(row[i]) for row in rows)]) for i, h in enumerate(headers[:3])]
    hooks_width = 24
    needed = sum(widths) + hooks_width + 3 * len(headers) + 1  # padding and rules
    console = Console(width=max(Console().width, needed))

    def say(text: str) -> None:
        console.print(text, markup=False, highlight=False, soft_wrap=True)

    if state is None:
        say(f"no job has written {run_dir / 'plugins' / 'state.json'} yet")
    elif state.refusal:
        say(f"a `{state.command}` run: {state.refusal}")
    else:
        command = f"{state.command} " if state.command else ""
        say(f"{command}job pid {state.pid} on {state.host} ({_liveness(state)}), step {state.step}")
        table = Table()
        for header, width in zip(headers, widths, strict=False):
            table.add_column(header, min_width=width, no_wrap=True, overflow="fold")
        table.add_column(headers[3], min_width=hooks_width, overflow="fold")
        for row in rows:
            table.add_row(*(Text(cell) for cell in row))
        console.print(table)
    for request in queued:
        say(f"queued: {request.action} {request.target} ({request.id})")
    for item in history:
        event = item.event
        outcome = "ok" if event.ok else f"rejected: {event.error}"
        say(f"step {event.step}: {event.action} {event.name} {outcome}")
    return 0
