"""Reward integrity and a host side that a hostile workspace cannot hang, crash or leak.

Each test reproduces one finding of the hardening issue (#15) through the public API,
on every backend present. A policy is optimised to get reward, so anything that lets
a process it started outlive its command, rewrite the grading, or wedge the host
side will be found and learned.
"""

from __future__ import annotations

import json
import os
import stat
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
from _sandbox_support import CALC_TASK, TEST_CONFIG, backend_unavailable

from composer_infra.environment import EnvironmentConfig, EnvironmentService, ShutdownError
from composer_infra.sandbox import (
    Sandbox,
    SandboxConfig,
    SnapshotStore,
    Task,
    UnsandboxedWarning,
)
from composer_infra.sandbox.backend import Runtime
from composer_infra.sandbox.backends.process import ProcessBackend
from composer_infra.sandbox.cgroups import cgroup_unavailable
from composer_infra.sandbox.mounts import workspace_mount_unavailable

MakeSandbox = Callable[..., Sandbox]

# Writes a heartbeat (its pid and a counter) to `name` every 20 ms, forever.
HEARTBEAT = (
    "import os, sys, time\n"
    "def beat(name):\n"
    "    n = 0\n"
    "    while True:\n"
    "        n += 1\n"
    "        with open(name, 'a') as out:\n"
    "            out.write(f'{os.getpid()} {n}\\n')\n"
    "        time.sleep(0.02)\n"
)


def needs_cgroup_on_process(request: pytest.FixtureRequest, backend: str) -> None:
    """The process backend contains survivors only through a cgroup."""
    reason = cgroup_unavailable()
    if backend == "process" and reason is not None:
        request.applymarker(
            pytest.mark.xfail(reason=f"process backend without a cgroup: {reason}", strict=True)
        )


def assert_stays_still(sandbox: Sandbox, name: str, settle: float = 0.6) -> None:
    """`name` was being written, and nothing writes it any more."""
    path = sandbox.workspace / name
    assert path.exists() and path.stat().st_size > 0, "the survivor never started"
    before = path.read_bytes()
    time.sleep(settle)
    assert path.read_bytes() == before, "a process of the policy outlived its command"


# -- reward integrity ---------------------------------------------------------------------


@pytest.mark.slow  # test_daemon_does_not_outlive_its_command stays quick
def test_newline_named_daemon_does_not_survive(
    backend: str, make_sandbox: MakeSandbox, request: pytest.FixtureRequest
) -> None:
    """A detached process whose name holds a newline (it once fooled a /proc/PID/stat
    parse that spared it) ends with its command."""
    needs_cgroup_on_process(request, backend)
    sandbox = make_sandbox(backend)
    sandbox.write_file(
        "newline.py",
        HEARTBEAT + "import ctypes\n"
        "if os.fork(): os._exit(0)\n"
        "os.setsid()\n"
        "if os.fork(): os._exit(0)\n"
        "ctypes.CDLL(None).prctl(15, b'x\\n1 2 3 4 5 6', 0, 0, 0)  # PR_SET_NAME\n"
        "for fd in (0, 1, 2): os.close(fd)\n"
        "beat('newline.beat')\n",
    )
    result = sandbox.run("python newline.py; sleep 0.3; echo started")
    assert "started" in result.output, result.output
    assert_stays_still(sandbox, "newline.beat")
    later = sandbox.run("sleep 0.3; echo later")
    assert later.ok
    assert_stays_still(sandbox, "newline.beat", settle=0.1)


@pytest.mark.slow  # test_daemon_does_not_outlive_its_command stays quick
def test_fork_chain_does_not_survive(
    backend: str, make_sandbox: MakeSandbox, request: pytest.FixtureRequest
) -> None:
    """A process that forks and exits over and over (its pid never the same twice)."""
    needs_cgroup_on_process(request, backend)
    sandbox = make_sandbox(backend)
    sandbox.write_file(
        "chain.py",
        "import os, time\n"
        "if os.fork(): os._exit(0)\n"
        "os.setsid()\n"
        "for fd in (0, 1, 2): os.close(fd)\n"
        "n = 0\n"
        "while True:\n"
        "    n += 1\n"
        "    if n % 5 == 0:\n"
        "        with open('chain.beat', 'a') as out: out.write(f'{os.getpid()}\\n')\n"
        "    if os.fork(): os._exit(0)\n",
    )
    result = sandbox.run("python chain.py; sleep 1; echo started")
    assert "started" in result.output, result.output
    pids = set((sandbox.workspace / "chain.beat").read_text().split())
    assert len(pids) > 1, "the chain did not run"
    assert_stays_still(sandbox, "chain.beat")


FAKE_REPORT = (
    '<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="1">'
    '<testcase classname="tests.test_calc" name="test_add"/></testsuite></testsuites>'
)

# Rewrites every XML file it can find (the report included) with a passing one.
FAKER = (
    "import glob, os, time\n"
    f"FAKE = {FAKE_REPORT!r}\n"
    "if os.fork(): os._exit(0)\n"
    "os.setsid()\n"
    "for fd in (0, 1, 2): os.close(fd)\n"
    "open('faker.started', 'w').write('1')\n"
    "while True:\n"
    "    for pattern in ('/workspace/**/*.xml', '/workspace/.*.xml', '/tmp/**/*.xml',\n"
    "                    '/composer-grading/**/*.xml', os.getcwd() + '/.*.xml',\n"
    "                    '/composer-grading/**/*.json', os.getcwd() + '/.*/*.json'):\n"
    "        for path in glob.glob(pattern, recursive=True):\n"
    "            try:\n"
    "                open(path, 'w').write(FAKE)\n"
    "            except OSError:\n"
    "                pass\n"
    "    time.sleep(0.001)\n"
)


def test_survivor_cannot_fake_grading(
    backend: str, make_sandbox: MakeSandbox, request: pytest.FixtureRequest
) -> None:
    """The issue's exploit: a left-behind process rewrites the JUnit report after the
    host replaced the test with `assert False`; the grade must still be a failure."""
    needs_cgroup_on_process(request, backend)
    sandbox = make_sandbox(backend)
    sandbox.write_file("faker.py", FAKER)
    sandbox.run("python faker.py; sleep 0.3")
    assert (sandbox.workspace / "faker.started").exists()
    if backend == "gvisor":
        # gVisor also keeps host-started background processes between commands;
        # grading must end those too.
        sandbox.start_background("python faker.py")
    sandbox.write_file("tests/test_calc.py", "def test_add():\n    assert False\n")
    report = sandbox.run_tests()
    assert report.source == "grader", report.output
    assert report.failed == 1 and report.passed == 0, report


HIDDEN_TASK = Task(
    id="calc-hidden",
    instruction="Make `add` add.",
    files={"calc.py": "def add(a, b):\n    return a - b\n"},
    test_command="python -P -m pytest -q _grading",
)
HIDDEN_TESTS = {
    "_grading/conftest.py": "import pytest\n\n\n@pytest.fixture\ndef pair():\n    return 1, 2\n",
    "_grading/test_hidden.py": (
        "from workspace_probe import call\n\n\n"
        "def test_add(pair):\n    assert call('calc', 'add', *pair) == 3\n"
    ),
}
# What a policy can leave in the workspace to be paid without fixing `add`.
PASS_EVERYTHING_HOOK = (
    "import pytest\n\n\n@pytest.hookimpl(hookwrapper=True)\n"
    "def pytest_runtest_makereport(item, call):\n"
    "    outcome = yield\n"
    "    outcome.get_result().outcome = 'passed'\n"
)
PLANTS = {
    "conftest.py": PASS_EVERYTHING_HOOK,  # a root conftest: its hook passes every test
    "evil.py": PASS_EVERYTHING_HOOK,  # a plugin module, loaded by the ini file below
    "pytest.ini": "[pytest]\naddopts = -p evil\n",
    "pyproject.toml": "[tool.pytest.ini_options]\naddopts = '-p evil'\n",
    "pytest.py": "raise SystemExit(0)\n",  # shadows pytest under `python -m` without -P
    "_grading/conftest.py": PASS_EVERYTHING_HOOK,  # planted where the hidden tests go
    "_grading/test_hidden.py": "def test_add():\n    pass\n",
}
# Keeps rewriting the hidden test file with one that passes (a process left behind).
TEST_REWRITER = (
    "import os, time\n"
    "if os.fork(): os._exit(0)\n"
    "os.setsid()\n"
    "for fd in (0, 1, 2): os.close(fd)\n"
    "open('rewriter.started', 'w').write('1')\n"
    "while True:\n"
    "    try:\n"
    "        os.makedirs('_grading', exist_ok=True)\n"
    "        open('_grading/test_hidden.py', 'w').write('def test_add():\\n    pass\\n')\n"
    "    except OSError:\n"
    "        pass\n"
    "    time.sleep(0.001)\n"
)


def test_hidden_tests_are_graded_as_written(backend: str, make_sandbox: MakeSandbox) -> None:
    """The control: the hidden tests (with their own conftest) fail on the bug and pass
    on the fix, so the exploits below are measured against a grader that works."""
    sandbox = make_sandbox(backend, HIDDEN_TASK)
    report = sandbox.run_tests(hidden_tests=HIDDEN_TESTS)
    assert report.source == "grader" and (report.passed, report.failed) == (0, 1), report
    sandbox.write_file("calc.py", "def add(a, b):\n    return a + b\n")
    report = sandbox.run_tests(hidden_tests=HIDDEN_TESTS)
    assert report.source == "grader" and (report.passed, report.failed) == (1, 0), report


def test_workspace_files_cannot_change_the_grade(backend: str, make_sandbox: MakeSandbox) -> None:
    """A root conftest whose hook passes every test (the exploit found in this repo's
    own sandbox), an ini file loading a plugin from the workspace, a `pytest.py` that
    shadows pytest, and files planted where the hidden tests go: the bug still fails."""
    sandbox = make_sandbox(backend, HIDDEN_TASK)
    for path, text in PLANTS.items():
        sandbox.write_file(path, text)
    report = sandbox.run_tests(hidden_tests=HIDDEN_TESTS)
    assert report.source == "grader", report.output
    assert (report.passed, report.failed) == (0, 1), report


def test_a_link_where_the_hidden_tests_go_is_replaced(
    backend: str, make_sandbox: MakeSandbox, tmp_path: Path
) -> None:
    """`_grading` as a link out of the workspace: the grader removes the link (never
    what it points at) and writes the tests into a real folder."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("host file")
    sandbox = make_sandbox(backend, HIDDEN_TASK)
    os.symlink(outside, sandbox.workspace / "_grading")
    report = sandbox.run_tests(hidden_tests=HIDDEN_TESTS)
    assert (report.passed, report.failed) == (0, 1), report
    assert (outside / "keep.txt").read_text() == "host file"
    assert sorted(os.listdir(outside)) == ["keep.txt"]


def test_survivor_cannot_rewrite_the_hidden_tests(
    backend: str, make_sandbox: MakeSandbox, request: pytest.FixtureRequest
) -> None:
    """The hidden tests go in after every process the policy started is gone."""
    needs_cgroup_on_process(request, backend)
    sandbox = make_sandbox(backend, HIDDEN_TASK)
    sandbox.write_file("rewriter.py", TEST_REWRITER)
    sandbox.run("python rewriter.py; sleep 0.3")
    assert (sandbox.workspace / "rewriter.started").exists()
    if backend == "gvisor":
        sandbox.start_background("python rewriter.py")
    report = sandbox.run_tests(hidden_tests=HIDDEN_TESTS)
    assert report.source == "grader", report.output
    assert (report.passed, report.failed) == (0, 1), report


@pytest.mark.parametrize(
    ("tests", "message"),
    [
        ({"test_x.py": "def test_x(): pass\n"}, "inside a folder"),
        ({"a/test_x.py": "", "b/test_y.py": ""}, "one top-level folder"),
    ],
)
def test_hidden_tests_need_one_folder(
    make_sandbox: MakeSandbox, tests: dict[str, str], message: str
) -> None:
    sandbox = make_sandbox("bwrap", HIDDEN_TASK)
    with pytest.raises(ValueError, match=message):
        sandbox.run_tests(hidden_tests=tests)


def test_grading_report_is_not_in_the_workspace(backend: str, make_sandbox: MakeSandbox) -> None:
    """Nothing the policy's commands can list is the report (bwrap and gvisor give the
    test command a directory of its own; every backend leaves no report, runner or nonce
    behind)."""
    sandbox = make_sandbox(backend)
    report = sandbox.run_tests()
    assert report.source == "grader" and report.failed == 1 and report.passed == 1
    assert not [p for p in os.listdir(sandbox.workspace) if p.startswith(".composer")]
    graded = make_sandbox(backend, HIDDEN_TASK)
    hidden = graded.run_tests(hidden_tests=HIDDEN_TESTS)
    assert hidden.source == "grader" and hidden.failed == 1, hidden
    assert not [p for p in os.listdir(graded.workspace) if p != "calc.py"]


# -- the host side must not hang ------------------------------------------------------


def call_with_limit(action: Callable[[], object], limit: float = 20.0) -> object:
    """Run `action` on a thread; fail (rather than hang the suite) if it does not return."""
    box: list[object] = []
    thread = threading.Thread(target=lambda: box.append(action()), daemon=True)
    thread.start()
    thread.join(limit)
    assert not thread.is_alive(), "the host side hung"
    return box[0]


def test_fifo_in_the_workspace_hangs_nothing(backend: str, make_sandbox: MakeSandbox) -> None:
    sandbox = make_sandbox(backend)
    assert sandbox.run("mkfifo pipe").ok
    if backend == "gvisor":
        # gVisor keeps named pipes in the Sentry: nothing reaches the host's files.
        assert not os.path.lexists(sandbox.workspace / "pipe")
        os.mkfifo(sandbox.workspace / "pipe")  # as if it had: the host must still not hang
    for action in (
        lambda: sandbox.read_file("pipe"),
        lambda: sandbox.edit_file("pipe", "a", "b"),
        lambda: sandbox.write_file("pipe", "data"),
    ):
        result = call_with_limit(action)
        assert not result.ok and "fifo" in (result.error or ""), result
    listing = call_with_limit(lambda: sandbox.list_files())
    assert "pipe [fifo]" in listing.output.splitlines()
    after = call_with_limit(lambda: sandbox.run("echo next"))
    assert after.ok and "next" in after.output


DEEP = "import os\nfor _ in range(1500):\n    os.mkdir('d')\n    os.chdir('d')\nopen('leaf', 'w').write('deep')\n"


@pytest.mark.slow  # about 12-20 s over the backends
def test_deep_tree_snapshot_fork_close(
    backend: str, make_sandbox: MakeSandbox, tmp_path: Path
) -> None:
    """A 1,500-level directory chain: no RecursionError anywhere, nothing left behind."""
    sandbox = make_sandbox(backend)
    sandbox.write_file("deep.py", DEEP)
    made = sandbox.run("python deep.py")
    assert made.ok, made.output
    listing = sandbox.list_files()
    assert listing.ok and listing.output.count("\n") > 1000
    snap = sandbox.snapshot(SnapshotStore(tmp_path / "store"))
    copies = [sandbox.fork()]
    try:
        copies.append(Sandbox.restore(snap, SnapshotStore(tmp_path / "store"), work_dir=tmp_path))
        leaf = "/".join(["d"] * 1500) + "/leaf"
        for copy in copies:
            assert copy.run(f"cat {leaf}").output.strip() == "deep"
    finally:
        for each in [*copies, sandbox]:
            home = each.home
            each.close()
            assert not home.exists()


def test_nul_bytes_in_a_command_are_a_tool_error(backend: str, make_sandbox: MakeSandbox) -> None:
    sandbox = make_sandbox(backend)
    result = sandbox.call("run", {"command": "echo a\x00b"})
    assert not result.ok and result.data.get("malformed") and "NUL" in (result.error or "")


def test_odd_names_list_unambiguously(backend: str, make_sandbox: MakeSandbox) -> None:
    """Non-UTF-8, newline and arrow names: the listing serialises, one line per entry,
    and a file named like a symlink does not read as one."""
    sandbox = make_sandbox(backend)
    sandbox.write_file(
        "names.py",
        "import os\n"
        "os.makedirs(b'fake -> /etc')\n"
        "for name in (b'bad\\xff', b'two\\nlines', b'fake -> /etc/shadow'):\n"
        "    open(name, 'w').write('x')\n",
    )
    assert sandbox.run("python names.py").ok
    listing = sandbox.list_files()
    json.loads(listing.model_dump_json())  # raised on lone surrogates before
    lines = listing.output.splitlines()
    assert '"bad\\xff"' in lines
    assert '"two\\nlines"' in lines
    assert '"fake -> "/etc/shadow' in lines
    assert not any(line.startswith("fake -> ") for line in lines)
    assert len(lines) == len(os.listdir(sandbox.workspace)) + 3  # + fake -> /, etc/, shadow


def test_links_are_described_not_followed(backend: str, make_sandbox: MakeSandbox) -> None:
    """A link to an existing host directory and one to a missing one look alike: the
    listing says nothing about the host."""
    sandbox = make_sandbox(backend)
    assert sandbox.run("ln -s /usr host_dir && ln -s /no/such/dir missing_dir").ok
    lines = sandbox.list_files().output.splitlines()
    assert "host_dir -> /usr" in lines
    assert "missing_dir -> /no/such/dir" in lines
    assert not any(line.startswith("host_dir/") for line in lines)


SPECIAL = (
    "set -e\n"
    "mkfifo fifo\n"
    "python -c \"import socket; s = socket.socket(socket.AF_UNIX); s.bind('sock')\"\n"
    "ln -s /etc/hostname absolute\n"
    "ln -s /workspace/calc.py inside_absolute\n"
    "ln -s ../../outside outward\n"
    "python -m venv --without-pip venv\n"
)


def test_special_files_links_and_a_venv_survive_fork_and_restore(
    backend: str, make_sandbox: MakeSandbox, tmp_path: Path
) -> None:
    sandbox = make_sandbox(backend)
    made = sandbox.run(SPECIAL)
    assert made.ok, made.output
    store = SnapshotStore(tmp_path / "store")
    restored = Sandbox.restore(sandbox.snapshot(store), store, work_dir=tmp_path)
    copy = sandbox.fork()
    try:
        # gVisor keeps FIFOs and sockets in the Sentry (not on the host's files), so only
        # the links and the venv are there to copy.
        special = backend != "gvisor"
        for each in (copy, restored):
            ws = each.workspace
            assert not special or stat.S_ISFIFO(os.lstat(ws / "fifo").st_mode)
            for link in ("absolute", "inside_absolute", "outward"):
                assert os.readlink(ws / link) == os.readlink(sandbox.workspace / link)
            assert os.readlink(ws / "venv/bin/python") == os.readlink(
                sandbox.workspace / "venv/bin/python"
            )
            assert each.run("venv/bin/python -c 'print(40 + 2)'").output.strip() == "42"
        assert not special or stat.S_ISSOCK(os.lstat(copy.workspace / "sock").st_mode)
    finally:
        copy.close()
        restored.close()


def test_shutdown_closes_everything_and_reports_the_rest(tmp_path: Path) -> None:
    """One sandbox fails to close: the others are closed anyway, and the error names it."""

    class FailingCloseBackend(ProcessBackend):
        """A third-party backend whose runtime cannot be stopped."""

        name = "failing-close"

        def start(self, workspace: Path, config: SandboxConfig, **kwargs: object) -> Runtime:
            runtime = super().start(workspace, config, **kwargs)  # type: ignore[arg-type]

            def close() -> None:
                raise RuntimeError("the container would not stop")

            runtime.close = close  # type: ignore[method-assign]
            return runtime

    config = EnvironmentConfig(
        backend="process", warm_sandboxes=0, work_dir=tmp_path / "env", sandbox=TEST_CONFIG
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnsandboxedWarning)
        service = EnvironmentService(config)
        good = [service.open(CALC_TASK) for _ in range(2)]
        deep = service.sandbox(good[0])
        deep.write_file("deep.py", DEEP)
        assert deep.run("python deep.py").ok
        bad = Sandbox.create(CALC_TASK, FailingCloseBackend(), work_dir=service.work_dir)
    service._add(bad)
    homes = [service.sandbox(sid).home for sid in good]
    with pytest.raises(ShutdownError, match=f"closing sandbox {bad.id}.*would not stop"):
        service.shutdown()
    assert not any(home.exists() for home in homes)
    assert not bad.home.exists()


def test_daemon_holding_output_does_not_hold_the_command(
    backend: str, make_sandbox: MakeSandbox, request: pytest.FixtureRequest
) -> None:
    """`run` returns when the command exits, not when a daemon it left closes stdout."""
    needs_cgroup_on_process(request, backend)
    sandbox = make_sandbox(backend)
    result = sandbox.run("setsid sleep 60 & echo done", timeout=15)
    assert result.ok and not result.data["timed_out"], result
    assert "done" in result.output


def test_output_descriptors_are_blocking(backend: str, make_sandbox: MakeSandbox) -> None:
    """The cause of gVisor's early end of a big output under load: stdout or stderr
    arrived non-blocking (they shared one open file description that runsc marks
    O_NONBLOCK), so a write to a full pipe failed with EAGAIN instead of waiting."""
    sandbox = make_sandbox(backend)
    probe = (
        "import fcntl, os\n"
        "print('NONBLOCK', [bool(fcntl.fcntl(f, fcntl.F_GETFL) & os.O_NONBLOCK) for f in (1, 2)])\n"
    )
    sandbox.write_file("probe.py", probe)
    for _ in range(5):
        result = sandbox.run("python probe.py")
        assert "NONBLOCK [False, False]" in result.output, result.output


# -- limits and ownership -------------------------------------------------------------


def test_tmp_is_writable_and_sized(backend: str, make_sandbox: MakeSandbox) -> None:
    sandbox = make_sandbox(backend)
    small = sandbox.run("echo hello > /tmp/f && cat /tmp/f")
    assert small.ok and "hello" in small.output, small.output
    if backend == "process":
        return  # the host's /tmp
    limit = TEST_CONFIG.limits.tmp_bytes
    pieces = limit // (15 * 1024**2) + 1  # under the per-file RLIMIT_FSIZE each
    big = sandbox.run(f"for i in $(seq {pieces}); do head -c 15M /dev/zero > /tmp/big$i; done")
    assert "No space left" in big.output, big.output


def test_workspace_is_bounded_in_total(backend: str, make_sandbox: MakeSandbox) -> None:
    """Many files each under RLIMIT_FSIZE cannot together pass `workspace_bytes`."""
    reason = workspace_mount_unavailable()
    if reason:
        pytest.skip(reason)
    limits = TEST_CONFIG.limits.model_copy(update={"workspace_bytes": 40 * 1024**2})
    sandbox = make_sandbox(backend, config=TEST_CONFIG.model_copy(update={"limits": limits}))
    result = sandbox.run("for i in 1 2 3 4; do head -c 15M /dev/zero > big$i; done")
    assert "No space left" in result.output, result.output
    total = sum(p.stat().st_size for p in sandbox.workspace.glob("big*"))
    assert total <= 40 * 1024**2
    host = sandbox.write_file("more.txt", "x" * 20 * 1024**2)
    assert not host.ok and "No space left" in (host.error or ""), host
    copy = sandbox.fork()  # the copy has the same bound
    try:
        assert "No space left" in copy.run("head -c 30M /dev/zero > again").output
    finally:
        copy.close()


@pytest.mark.slow  # holds for 8 s by design (about 25 s over the backends)
def test_sandbox_memory_is_bounded_in_total(backend: str, make_sandbox: MakeSandbox) -> None:
    """Four processes each under the per-process limit cannot together pass the
    sandbox's total (cgroup; gVisor's Sentry is put in it by the host)."""
    reason = cgroup_unavailable()
    if reason:
        pytest.skip(f"no cgroups here: {reason}")
    limits = TEST_CONFIG.limits.model_copy(update={"sandbox_memory_bytes": 400 * 1024**2})
    sandbox = make_sandbox(backend, config=TEST_CONFIG.model_copy(update={"limits": limits}))
    # Each holder keeps its 150 MiB until one shared deadline, so the survivors all hold
    # at the same moment (on a busy machine the four would otherwise not overlap in time).
    sandbox.write_file(
        "hold.py",
        "import os, time\n"
        "b = bytearray(b'x') * (150 * 1024**2)\n"
        "deadline = float(open('t0').read()) + 8\n"
        "while time.time() < deadline:\n    time.sleep(0.05)\n"
        "print('HELD', len(b) // 2**20, flush=True)\n",
    )
    command = "python -c 'import time; print(time.time())' > t0; "
    command += "for i in 1 2 3 4; do python hold.py & done; wait"
    result = sandbox.run(command, timeout=30)
    held = result.output.count("HELD")
    assert held <= 2, result.output  # 4 x 150 MiB held together would pass 400 MiB
    if backend == "gvisor":  # the cgroup's OOM killer ends the Sentry: the whole sandbox
        assert "ran out of memory" in result.output, result.output
        assert sandbox.run("echo again").output.endswith("again\n")
    else:  # one process is killed, the others go on
        assert held >= 1, result.output


def test_setid_files_do_not_reach_the_host(
    backend: str, make_sandbox: MakeSandbox, request: pytest.FixtureRequest
) -> None:
    """A set-uid file made in the sandbox is never root's on the host, and no copy of the
    sandbox (fork) keeps the bit; the sandbox's directory is private."""
    if backend == "process":
        request.applymarker(
            pytest.mark.xfail(reason="process backend: commands run as the host user", strict=True)
        )
    sandbox = make_sandbox(backend)
    assert sandbox.run("cp /bin/true suid && chmod 4755 suid").ok
    info = os.lstat(sandbox.workspace / "suid")
    assert info.st_uid != 0 or os.geteuid() != 0
    assert stat.S_IMODE(os.lstat(sandbox.home).st_mode) == 0o700
    copy = sandbox.fork()
    try:
        assert not os.lstat(copy.workspace / "suid").st_mode & (stat.S_ISUID | stat.S_ISGID)
    finally:
        copy.close()


# -- bad arguments ----------------------------------------------------------------------


@pytest.mark.parametrize("timeout", [-5, 0, float("inf"), float("nan"), 10_000])
def test_bad_timeouts_are_clear_errors(make_sandbox: MakeSandbox, timeout: float) -> None:
    sandbox = make_sandbox("bwrap" if not backend_unavailable("bwrap") else "process")
    with pytest.raises(ValueError, match="timeout must be"):
        sandbox.run_tests(timeout=timeout)
    result = sandbox.call("run", {"command": "true", "timeout": timeout})
    assert not result.ok and result.data.get("malformed"), result


def test_missing_work_dir_is_an_error(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such"
    with pytest.raises(FileNotFoundError, match="does not exist"):
        Sandbox.create(CALC_TASK, "process", work_dir=missing)
    assert not missing.exists()


def test_cgroups_of_dead_hosts_are_cleaned_up(backend: str, make_sandbox: MakeSandbox) -> None:
    """A sandbox whose host process died (kill -9) leaves its cgroup; the next host
    process removes it, and a closed sandbox leaves none."""
    from composer_infra.sandbox import cgroups

    if cgroups.cgroup_unavailable() is not None:
        pytest.skip("no per-sandbox cgroups here")
    sandbox = make_sandbox(backend)
    group = sandbox.runtime.cgroup  # type: ignore[attr-defined]
    assert group is not None and all(path.is_dir() for path in group.dirs.values())
    parent = next(iter(group.dirs.values())).parent
    dead = parent / "composer-sbx-999999999-000000000000"  # no such pid
    dead.mkdir()
    cgroups._layout.cache_clear()
    assert cgroups.cgroup_unavailable() is None
    assert not dead.exists()
    sandbox.close()
    assert not any(path.exists() for path in group.dirs.values())
