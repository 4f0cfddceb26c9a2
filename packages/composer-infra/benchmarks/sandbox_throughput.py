"""Sandbox throughput: latency of each operation and commands per second, per backend.

For every backend present (bwrap, gvisor, process) this measures the median latency
of sandbox creation, a command round trip (`true` through the `run` tool), snapshot
(to a content-addressed tar.zst), fork and restore, and the commands per second an
`EnvironmentService` pool sustains with many episodes' calls in flight. The named
peer is a plain `subprocess.run(["/bin/sh", "-c", "true"])` measured in the same run:
latencies are reported as multiples of its median, throughput as a fraction of the
same thread pool running plain subprocesses.

    uv run python packages/composer-infra/benchmarks/sandbox_throughput.py
    uv run python packages/composer-infra/benchmarks/sandbox_throughput.py --backends bwrap --repeats 5

A second table compares one command's latency on the bwrap exec channel (`bwrap`, one
long-lived bwrap per sandbox) with one bwrap per command (`bwrap-per-command`) and the
plain `subprocess.run` peer, interleaved round by round in the same run (so machine
load hits all three alike), and breaks the channel's time down by step from the
timestamps the host, the in-sandbox supervisor and the command's init record
(`ExecChannel.last_trace`), next to a floor measured in the same run: a `posix_spawn`
of `sh -c true` from this process (what starting the shell costs when warm).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from composer_infra.environment import EnvironmentConfig, EnvironmentService, ToolCallRequest
from composer_infra.sandbox import Sandbox, SnapshotStore, Task, default_registry

COMMAND = "true"
TASK = Task(
    id="bench",
    instruction="benchmark",
    files={
        "calc.py": "def add(a, b):\n    return a + b\n",
        "tests/test_calc.py": "from calc import add\n\ndef test_add():\n    assert add(1, 2) == 3\n",
        "README.md": "a small repository\n" * 50,
    },
)


def median_seconds(action: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def subprocess_rate(calls: int, concurrency: int) -> float:
    def one(_: int) -> None:
        subprocess.run(["/bin/sh", "-c", COMMAND], check=True)

    with ThreadPoolExecutor(concurrency) as pool:
        start = time.perf_counter()
        list(pool.map(one, range(calls)))
        return calls / (time.perf_counter() - start)


def measure_backend(
    name: str, work: Path, repeats: int, pool_size: int, calls: int, concurrency: int
) -> dict[str, float]:
    store = SnapshotStore(work / f"store-{name}")
    made: list[Sandbox] = []

    def create() -> None:
        made.append(Sandbox.create(TASK, name, work_dir=work))

    result = {"create": median_seconds(create, repeats)}
    sandbox = made[0]
    result["run"] = median_seconds(lambda: sandbox.run(COMMAND), repeats * 2)
    snaps = []
    result["snapshot"] = median_seconds(lambda: snaps.append(sandbox.snapshot(store)), repeats)
    result["fork"] = median_seconds(lambda: made.append(sandbox.fork()), repeats)
    result["restore"] = median_seconds(
        lambda: made.append(Sandbox.restore(snaps[-1], store, work_dir=work)), repeats
    )
    for each in made:
        each.close()

    config = EnvironmentConfig(
        backend=name,
        warm_sandboxes=pool_size,
        max_concurrency=concurrency,
        work_dir=work / f"env-{name}",
    )
    with EnvironmentService(config) as service:
        ids = [service.open(TASK) for _ in range(pool_size)]
        requests = [
            ToolCallRequest(
                sandbox_id=ids[n % pool_size], tool="run", arguments={"command": COMMAND}
            )
            for n in range(calls)
        ]
        service.call_many(requests[:pool_size])  # warm up
        start = time.perf_counter()
        results = service.call_many(requests)
        result["commands_per_s"] = calls / (time.perf_counter() - start)
        assert all(r.ok for r in results), [r.error for r in results if not r.ok][:3]
    return result


CHANNEL_STEPS = (
    ("host: pipe, socket pair, sendmsg", "start", "sent"),
    ("supervisor wakes, reads, hands over to the prepared init", "sent", "received"),
    ("the prepared init wakes with the command", "received", "started"),
    ("init: posix_spawn of sh returns", "started", "spawned"),
    ("sh runs and exits, init wakes", "spawned", "ended"),
    ("init kills and reaps what is left, checks its /proc", "ended", "emptied"),
    ("host wakes on init's message", "emptied", "replied"),
    ("host: output EOF, result", "replied", "done"),
)


def _spawn_sh() -> None:
    pid = os.posix_spawn("/bin/sh", ["/bin/sh", "-c", COMMAND], {})
    os.waitpid(pid, 0)


def channel_breakdown(work: Path, rounds: int, console: Console, gap_ms: float = 20.0) -> None:
    """Interleaved per-command latency: subprocess.run, the channel, one bwrap per command.

    Every timed command comes `gap_ms` after the previous one ended, as tool calls come in
    an episode (generation runs between them); 0 times them back to back, where the
    channel's next command may find its namespace still being made."""
    from composer_infra.sandbox.backends.bwrap import BwrapRuntime

    channel_box = Sandbox.create(TASK, "bwrap", work_dir=work)
    per_command_box = Sandbox.create(TASK, "bwrap-per-command", work_dir=work)
    try:
        runtime = channel_box.runtime
        if not isinstance(runtime, BwrapRuntime) or runtime.channel is None:
            console.print("[yellow]the bwrap channel is not in use here (not root?)")
            return
        channel = runtime.channel
        per_command = per_command_box.runtime
        for box in (channel_box, per_command_box):
            box.run(COMMAND)  # the channel's first command waits for its startup
        actions: dict[str, Callable[[], object]] = {
            "subprocess.run (peer)": lambda: subprocess.run(["/bin/sh", "-c", COMMAND]),
            "channel, Runtime.run": lambda: runtime.run(COMMAND, timeout=60),
            "channel, Sandbox.run (tool call)": lambda: channel_box.run(COMMAND),
            "one bwrap per command, Runtime.run": lambda: per_command.run(COMMAND, timeout=60),
            "floor: posix_spawn sh -c true": _spawn_sh,
        }
        times: dict[str, list[float]] = {name: [] for name in actions}
        steps: dict[str, list[float]] = {name: [] for name, _, _ in CHANNEL_STEPS}
        for _ in range(rounds):
            for name, action in actions.items():
                time.sleep(gap_ms / 1000)
                start = time.perf_counter()
                action()
                times[name].append(time.perf_counter() - start)
                if name == "channel, Runtime.run":
                    trace = channel.last_trace
                    for step, begin, end in CHANNEL_STEPS:
                        if begin in trace and end in trace:  # not "emptied": init's exit
                            steps[step].append(trace[end] - trace[begin])
    finally:
        channel_box.close()
        per_command_box.close()
    peer = statistics.median(times["subprocess.run (peer)"])
    table = Table(
        title=f"one `{COMMAND}` command {gap_ms:g} ms after the previous, median of {rounds} "
        f"interleaved rounds (x = multiple of subprocess.run); load average "
        f"{os.getloadavg()[0]:.1f}"
    )
    table.add_column("path")
    table.add_column("ms", justify="right")
    table.add_column("x subprocess.run", justify="right")
    for name, values in times.items():
        median = statistics.median(values)
        table.add_row(name, f"{median * 1e3:.2f}", f"{median / peer:.2f}")
    console.print(table)
    breakdown = Table(title="where the channel's time goes (medians of each step, same rounds)")
    breakdown.add_column("step")
    breakdown.add_column("ms", justify="right")
    for step, values in steps.items():
        breakdown.add_row(step, f"{statistics.median(values) * 1e3:.2f}" if values else "-")
    console.print(breakdown)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--backends", nargs="*", default=["bwrap", "bwrap-per-command", "gvisor", "process"]
    )
    parser.add_argument(
        "--channel-rounds", type=int, default=200, help="rounds of the per-command table (0: skip)"
    )
    parser.add_argument(
        "--gap-ms",
        type=float,
        default=20.0,
        help="per-command table: pause before each timed command (0: back to back)",
    )
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--pool", type=int, default=8, help="sandboxes in the pool")
    parser.add_argument("--calls", type=int, default=200, help="commands for the rate")
    parser.add_argument("--concurrency", type=int, default=8, help="calls in flight")
    args = parser.parse_args()
    console = Console(width=180)
    warnings.simplefilter("ignore")
    registry = default_registry()
    backends = []
    for name in args.backends:
        reason = registry.backends()[name].unavailable_reason()
        if reason:
            console.print(f"[yellow]skipping {name}: {reason}")
        else:
            backends.append(name)

    baseline = median_seconds(
        lambda: subprocess.run(["/bin/sh", "-c", COMMAND], check=True), args.repeats * 2
    )
    baseline_rate = subprocess_rate(args.calls, args.concurrency)
    rows: dict[str, dict[str, float]] = {}
    with (
        tempfile.TemporaryDirectory(prefix="composer-bench-") as tmp,
        Progress(console=console, transient=True) as progress,
    ):
        task = progress.add_task("backends", total=len(backends))
        for name in backends:
            progress.update(task, description=f"measuring {name}")
            rows[name] = measure_backend(
                name, Path(tmp), args.repeats, args.pool, args.calls, args.concurrency
            )
            progress.advance(task)

    table = Table(
        title=(
            f"sandbox latency, median of {args.repeats} (x = multiple of subprocess.run "
            f"{baseline * 1e3:.2f} ms); rate: {args.calls} `{COMMAND}` calls, pool "
            f"{args.pool}, {args.concurrency} in flight (x = fraction of subprocess.run's "
            f"{baseline_rate:.0f}/s)"
        )
    )
    table.add_column("backend")
    for column in ("create", "run", "snapshot", "fork", "restore"):
        table.add_column(f"{column} ms (x)", justify="right")
    table.add_column("commands/s (x)", justify="right")
    table.add_row(
        "subprocess.run",
        "",
        f"{baseline * 1e3:.2f} (1.0)",
        "",
        "",
        "",
        f"{baseline_rate:.0f} (1.00)",
    )
    for name, row in rows.items():
        cells = [
            f"{row[c] * 1e3:.1f} ({row[c] / baseline:.1f})"
            for c in ("create", "run", "snapshot", "fork", "restore")
        ]
        rate = row["commands_per_s"]
        table.add_row(name, *cells, f"{rate:.0f} ({rate / baseline_rate:.2f})")
    console.print(table)
    if args.channel_rounds and "bwrap" in backends:
        with tempfile.TemporaryDirectory(prefix="composer-bench-") as tmp:
            channel_breakdown(Path(tmp), args.channel_rounds, console, args.gap_ms)


if __name__ == "__main__":
    main()
