"""Migration: an episode snapshotted by one worker process is finished by another."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent


def worker(*args: str) -> dict:
    done = subprocess.run(
        [sys.executable, str(HERE / "_sandbox_migration_worker.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=HERE,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_snapshot_on_one_worker_restore_on_another(backend: str, tmp_path: Path) -> None:
    store = tmp_path / "store"  # the directory both workers share (an object store in production)
    started = worker("start", backend, str(store), str(tmp_path / "worker-a"))
    assert (store / f"{started['digest']}.tar.zst").is_file()
    # The first worker is gone, with its whole work directory.
    assert not any((tmp_path / "worker-a").glob("sbx-*"))
    finished = worker("finish", backend, str(store), str(tmp_path / "worker-b"), started["digest"])
    assert finished == {
        "all_passed": True,
        "outcomes": {
            "tests/test_calc.py::test_add": "passed",
            "tests/test_calc.py::test_zero": "passed",
        },
        "todos": ["done", "done"],
        "finished": True,
    }
