"""Snapshots (content-addressed), forks and restores, on every backend present."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
import zstandard

from composer_infra.sandbox import BackendUnavailable, Sandbox, SnapshotError, SnapshotStore

MakeSandbox = Callable[..., Sandbox]


def test_snapshot_restore_round_trip(
    backend: str, make_sandbox: MakeSandbox, tmp_path: Path
) -> None:
    store = SnapshotStore(tmp_path / "store")
    sandbox = make_sandbox(backend)
    sandbox.edit_file("calc.py", "a - b", "a + b")
    sandbox.run("mkdir -p data && echo 42 > data/answer && ln -s data/answer link")
    sandbox.todo("add", item="run the tests")
    snap = sandbox.snapshot(store)
    assert (store.root / f"{snap.digest}.tar.zst").is_file()
    assert snap.backend == backend
    # The original goes on after a snapshot.
    assert sandbox.run("echo still here").ok

    restored = Sandbox.restore(snap, store, work_dir=tmp_path / "run")
    try:
        assert restored.id != sandbox.id
        assert "a + b" in restored.read_file("calc.py").output
        assert restored.read_file("link").output == "42\n"
        assert [i.text for i in restored.todos.items] == ["run the tests"]
        assert restored.run_tests().all_passed
        # Commands in the restored sandbox can change its files (ownership carried over).
        assert restored.run("echo more >> data/answer").ok
    finally:
        restored.close()


def test_same_state_same_digest(make_sandbox: MakeSandbox, tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path / "store")
    sandbox = make_sandbox("bwrap")
    first = sandbox.snapshot(store)
    second = sandbox.snapshot(store)
    assert first.digest == second.digest
    sandbox.write_file("calc.py", "changed\n")
    assert sandbox.snapshot(store).digest != first.digest
    assert len(list(store.root.glob("*.tar.zst"))) == 2


def test_fork_is_independent(backend: str, make_sandbox: MakeSandbox) -> None:
    original = make_sandbox(backend)
    original.todo("add", item="shared item")
    fork = original.fork()
    try:
        fork.edit_file("calc.py", "a - b", "a + b")
        fork.run("echo fork-only > only.txt")
        fork.todo("complete", id=1)
        assert "a - b" in original.read_file("calc.py").output
        assert not original.read_file("only.txt").ok
        assert original.todos.items[0].status == "open"
        assert fork.run("grep -q 'a + b' calc.py && test -f only.txt").ok
        assert original.run("grep -q 'a - b' calc.py && test ! -e only.txt").ok
    finally:
        fork.close()


def test_corrupt_snapshot_is_refused(make_sandbox: MakeSandbox, tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path / "store")
    snap = make_sandbox("bwrap").snapshot(store)
    before = set((tmp_path / "run").iterdir())
    path = store.root / f"{snap.digest}.tar.zst"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(SnapshotError, match="corrupt"):
        Sandbox.restore(snap.digest, store, work_dir=tmp_path / "run")
    with pytest.raises(SnapshotError, match="not a snapshot digest"):
        Sandbox.restore("../../etc/passwd", store, work_dir=tmp_path / "run")
    with pytest.raises(SnapshotError, match="is not in"):
        Sandbox.restore("0" * 64, store, work_dir=tmp_path / "run")
    assert set((tmp_path / "run").iterdir()) == before  # nothing left of the failed restores


def test_crafted_archive_cannot_escape(tmp_path: Path) -> None:
    """A snapshot from an untrusted store cannot write outside the restore directory."""
    store = SnapshotStore(tmp_path / "store")
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        body = b"pwned"
        info = tarfile.TarInfo("../../escaped.txt")
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
    blob = zstandard.ZstdCompressor().compress(raw.getvalue())
    import hashlib

    digest = hashlib.sha256(blob).hexdigest()
    (store.root / f"{digest}.tar.zst").write_bytes(blob)
    (tmp_path / "run").mkdir()
    with pytest.raises(SnapshotError, match="cannot be unpacked"):
        Sandbox.restore(digest, store, work_dir=tmp_path / "run")
    assert not (tmp_path / "escaped.txt").exists()


@pytest.mark.slow
def test_memory_snapshot_needs_a_memory_backend(tmp_path: Path) -> None:
    from _sandbox_support import backend_unavailable

    if backend_unavailable("gvisor"):
        pytest.skip(f"gvisor is not available here: {backend_unavailable('gvisor')}")
    from _sandbox_support import CALC_TASK, TEST_CONFIG

    store = SnapshotStore(tmp_path / "store")
    with Sandbox.create(CALC_TASK, "gvisor", config=TEST_CONFIG, work_dir=tmp_path) as sandbox:
        snap = sandbox.snapshot(store)
    assert snap.memory
    with pytest.raises(BackendUnavailable, match="memory image"):
        Sandbox.restore(snap, store, backend="bwrap", work_dir=tmp_path)


def test_restore_uses_this_workers_interpreters(make_sandbox: MakeSandbox, tmp_path: Path) -> None:
    """Where Python lives is the worker's business: a snapshot does not carry it along."""
    from _sandbox_support import TEST_CONFIG

    elsewhere = TEST_CONFIG.model_copy(update={"toolchain_paths": (Path("/opt/other/python"),)})
    store = SnapshotStore(tmp_path / "store")
    sandbox = make_sandbox("bwrap", config=elsewhere)
    assert not sandbox.run("python -c 'print(1)'").ok  # no interpreter at that path here
    snap = sandbox.snapshot(store)
    with Sandbox.restore(snap, store, work_dir=tmp_path / "run") as restored:
        assert restored.config.toolchain_paths == type(TEST_CONFIG)().toolchain_paths
        assert restored.config.limits == TEST_CONFIG.limits
        assert restored.run("python -c 'print(1)'").output.strip() == "1"
