"""gVisor's memory-level snapshots: a fork of a running sandbox carries on where it was."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from _sandbox_support import backend_unavailable

from composer_infra.sandbox import Sandbox, SnapshotStore

MakeSandbox = Callable[..., Sandbox]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        backend_unavailable("gvisor") is not None,
        reason=f"gVisor (runsc) is not available here: {backend_unavailable('gvisor')}",
    ),
]

# A counter that lives only in memory: it never reads the file it appends to. A random
# token fixed at start-up tells this process's lines from those of a restarted one.
COUNTER = (
    "import os, time\n"
    "token = os.urandom(8).hex()\n"
    "n = 0\n"
    "while True:\n"
    "    n += 1\n"
    "    with open('/workspace/counter.log', 'a') as out:\n"
    "        out.write(f'{token} {n}\\n')\n"
    "    time.sleep(0.05)\n"
)


def lines(sandbox: Sandbox) -> list[tuple[str, int]]:
    text = sandbox.read_file("counter.log").output
    return [(t, int(n)) for t, n in (line.split() for line in text.splitlines() if line)]


def wait_for_lines(sandbox: Sandbox, count: int, limit: float = 30.0) -> list[tuple[str, int]]:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if sandbox.read_file("counter.log").ok and len(got := lines(sandbox)) >= count:
            return got
        time.sleep(0.05)
    raise AssertionError(f"counter did not reach {count} lines")


def assert_continues(copy: Sandbox, token: str, last: int) -> None:
    """The copy's process is the same one: same token, counting on from `last`."""
    new = wait_for_lines(copy, last + 5)[last:]
    assert {t for t, _ in new} == {token}, "a new process started instead of the saved one"
    assert [n for _, n in new[:5]] == list(range(last + 1, last + 6))


def test_restore_twice_continues_from_same_memory(
    make_sandbox: MakeSandbox, tmp_path: Path
) -> None:
    original = make_sandbox("gvisor")
    original.write_file("counter.py", COUNTER)
    original.start_background("python counter.py")
    wait_for_lines(original, 5)
    store = SnapshotStore(tmp_path / "store")
    snap = original.snapshot(store)
    assert snap.memory
    restored = [Sandbox.restore(snap, store, work_dir=tmp_path / "run") for _ in range(2)]
    try:
        _, workspace, memory = store.load(snap.digest, tmp_path / "unpacked")
        assert memory is not None and any(memory.iterdir())
        saved = [
            (t, int(n))
            for t, n in (ln.split() for ln in (workspace / "counter.log").read_text().splitlines())
        ]
        token, last = saved[-1]
        for copy in restored:
            assert lines(copy)[: len(saved)] == saved
            assert_continues(copy, token, last)
        # The original was resumed, too, and goes on independently.
        assert lines(original)[-1][1] > last
        # Commands still run in a restored sandbox, and its background process survives them.
        assert restored[0].run("echo hello").output.strip() == "hello"
        count = len(lines(restored[0]))
        wait_for_lines(restored[0], count + 3)
    finally:
        for copy in restored:
            copy.close()


def test_fork_of_a_running_sandbox(make_sandbox: MakeSandbox) -> None:
    original = make_sandbox("gvisor")
    original.write_file("counter.py", COUNTER)
    original.start_background("python counter.py")
    wait_for_lines(original, 5)
    fork = original.fork()
    try:
        token, last = lines(fork)[-1]
        assert_continues(fork, token, last)
        assert_continues(original, token, last)
        # Independent from here on: the fork's file is its own.
        fork.write_file("counter.log", "")
        assert lines(original)
    finally:
        fork.close()


def test_init_reaps_orphans_and_survives_a_restore(
    make_sandbox: MakeSandbox, tmp_path: Path
) -> None:
    """The container's init (a shell around `sleep`, not Python) reaps reparented orphans
    before and after a checkpoint: zombies would hold RLIMIT_NPROC slots for good."""
    sandbox = make_sandbox("gvisor")
    sandbox.start_background("for i in 1 2 3 4 5 6; do sh -c 'sleep 0.1 &'; done; sleep 300")
    count_zombies = (
        'python3 -c "import os\n'
        "n = 0\n"
        "for p in os.listdir('/proc'):\n"
        "    if p.isdigit():\n"
        "        n += open(f'/proc/{p}/stat').read().rsplit(')', 1)[1].split()[0] == 'Z'\n"
        "print('zombies', n)\""
    )
    time.sleep(2)
    assert sandbox.run(count_zombies).output.strip() == "zombies 0"
    store = SnapshotStore(tmp_path / "store")
    restored = Sandbox.restore(sandbox.snapshot(store), store, work_dir=tmp_path)
    try:
        restored.start_background("for i in 1 2 3 4 5 6; do sh -c 'sleep 0.1 &'; done")
        time.sleep(2)
        assert restored.run(count_zombies).output.strip() == "zombies 0"
    finally:
        restored.close()
