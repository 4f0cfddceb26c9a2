"""The environment service: warm pool, many episodes' tool calls at once, fork and restore."""

from __future__ import annotations

from pathlib import Path

from _sandbox_support import CALC_TASK, TEST_CONFIG

from composer_infra.environment import EnvironmentConfig, EnvironmentService, ToolCallRequest


def test_concurrent_episodes(tmp_path: Path) -> None:
    config = EnvironmentConfig(
        warm_sandboxes=2, max_concurrency=4, work_dir=tmp_path / "run", sandbox=TEST_CONFIG
    )
    with EnvironmentService(config) as service:
        ids = [service.open(CALC_TASK) for _ in range(4)]
        assert len(set(ids)) == 4
        calls = [
            ToolCallRequest(sandbox_id=sid, tool="run", arguments={"command": f"echo episode-{n}"})
            for n, sid in enumerate(ids)
        ] + [
            ToolCallRequest(
                sandbox_id=sid, tool="write_file", arguments={"path": "mine.txt", "content": sid}
            )
            for sid in ids
        ]
        results = service.call_many(calls)
        assert [r.output.strip() for r in results[:4]] == [f"episode-{n}" for n in range(4)]
        assert all(r.ok for r in results)
        for sid in ids:  # each episode sees only its own workspace
            assert service.call(sid, "read_file", {"path": "mine.txt"}).output == sid
        # Warm sandboxes hold the task's files like fresh ones.
        assert service.call(ids[0], "read_file", {"path": "calc.py"}).ok
        report = service.run_tests(ids[0])
        assert (report.passed, report.failed) == (1, 1)

        forked = service.fork(ids[0])
        service.call(forked, "edit_file", {"path": "calc.py", "old": "a - b", "new": "a + b"})
        snap = service.snapshot(forked)
        restored = service.restore(snap.digest)
        assert service.run_tests(restored).all_passed
        hidden = {
            "_grading/test_hidden.py": "from calc import add\n\n\ndef test_h():\n    assert add(2, 2) == 4\n"
        }
        assert service.run_tests(restored, hidden).passed == 3  # the task's two and the hidden one
        service.close(ids[1])
        assert ids[1] not in service.open_sandboxes
        gone = service.call(ids[1], "read_file", {"path": "calc.py"})
        assert not gone.ok and "no open sandbox" in (gone.error or "")
        bad = service.call(ids[0], "no_such_tool", {})
        assert not bad.ok
    assert not any((tmp_path / "run").glob("sbx-*"))


def test_owned_work_dir_is_removed() -> None:
    service = EnvironmentService(EnvironmentConfig(warm_sandboxes=1, sandbox=TEST_CONFIG))
    work_dir = service.work_dir
    sid = service.open(CALC_TASK)
    assert service.call(sid, "run", {"command": "true"}).ok
    service.shutdown()
    assert not work_dir.exists()


def test_an_episode_may_name_another_backend_and_stats_count_it(tmp_path: Path) -> None:
    config = EnvironmentConfig(warm_sandboxes=1, work_dir=tmp_path / "run", sandbox=TEST_CONFIG)
    with EnvironmentService(config) as service:
        own = service.open(CALC_TASK, "bwrap")  # the service's own backend: from the pool
        other = service.open(CALC_TASK, "bwrap-per-command")  # started for this episode
        assert service.sandbox(own).backend.name == "bwrap"
        assert service.sandbox(other).backend.name == "bwrap-per-command"
        assert all(service.call(sid, "run", {"command": "true"}).ok for sid in (own, other))
        service.close(own)
        stats = service.stats()
        assert (stats["opened"], stats["closed"], stats["calls"]) == (2, 1, 2)
        assert stats["open"] == [other] and stats["work_dir"] == str(tmp_path / "run")
