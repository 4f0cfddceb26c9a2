"""Limits that hold for a sandbox as a whole (issue 30): its memory in total, on every
backend that isolates, and no user namespace of its own (where a process is root again,
and kernel code paths open to unprivileged users only through user namespaces)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from _sandbox_support import TEST_CONFIG

from composer_infra.sandbox import Sandbox
from composer_infra.sandbox.cgroups import cgroup_unavailable

MakeSandbox = Callable[..., Sandbox]

CAP = 384 * 1024**2
# Each holder fills 150 MiB (every page written), says so in a file, and holds until all four
# have (or 4 s passed): four would hold 600 MiB together, past the 384 MiB cap.
HOLD = (
    "import os, sys, time\n"
    "b = bytearray(b'x') * (150 * 1024**2)\n"
    "open(f'ready.{sys.argv[1]}', 'w').close()\n"
    "deadline = time.time() + 4\n"
    "while time.time() < deadline and len([n for n in os.listdir() if n.startswith('ready.')]) < 4:\n"
    "    time.sleep(0.05)\n"
    "print('HELD', len(b) // 2**20, flush=True)\n"
)


def test_memory_is_capped_per_sandbox(backend: str, make_sandbox: MakeSandbox) -> None:
    """Four processes each under the per-process limit (RLIMIT_AS 1 GiB) cannot together
    pass `sandbox_memory_bytes`: past it they are killed (or get MemoryError), while one
    modest allocation works, before and after."""
    reason = cgroup_unavailable()
    if reason:
        pytest.skip(f"no cgroups here: {reason}")
    limits = TEST_CONFIG.limits.model_copy(update={"sandbox_memory_bytes": CAP})
    sandbox = make_sandbox(backend, config=TEST_CONFIG.model_copy(update={"limits": limits}))
    modest = "python -c \"b = bytearray(b'x') * (100 * 1024**2); print('OK', len(b) // 2**20)\""
    assert "OK 100" in sandbox.run(modest).output
    assert sandbox.call("write_file", {"path": "hold.py", "content": HOLD}).ok
    result = sandbox.run("for i in 1 2 3 4; do python hold.py $i & done; wait", timeout=40)
    held = result.output.count("HELD")
    assert held <= 2, result.output  # 4 x 150 MiB held together would pass 384 MiB
    after = sandbox.run(modest)
    assert "OK 100" in after.output, after


UNSHARE_USERNS = (
    "import ctypes, os\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "rc = libc.unshare(0x10000000)  # CLONE_NEWUSER\n"
    "print('unshare', rc, os.strerror(ctypes.get_errno()) if rc else 'ok')\n"
)


def test_no_user_namespace_inside(
    backend: str, make_sandbox: MakeSandbox, request: pytest.FixtureRequest
) -> None:
    """`unshare -Ur` (and the syscall itself) fail inside the sandbox."""
    if backend == "process":
        request.applymarker(
            pytest.mark.xfail(strict=True, reason="the process backend isolates nothing")
        )
    sandbox = make_sandbox(backend)
    tool = sandbox.run("command -v unshare")
    if not tool.ok:
        pytest.skip(f"no unshare in the sandbox: {tool.output}")
    result = sandbox.run("unshare -Ur id -u; echo rc=$?")
    assert "rc=0" not in result.output, result.output
    assert sandbox.call("write_file", {"path": "userns.py", "content": UNSHARE_USERNS}).ok
    syscall = sandbox.run("python userns.py")
    assert "unshare -1" in syscall.output, syscall.output
