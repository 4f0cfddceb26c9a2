"""The rollout viewer's reading side, without a browser: the incremental JSONL reader, the
episode index's filters and pages, transcript blocks, run status and notes, and the HTTP
answers of a real server on loopback (headers, errors as JSON, the Host check)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from _rl_helpers import trajectory

from composer_infra.checkpoint import FinishedGroup, GroupStore
from composer_rl.rl.fates import FATES_LOG, Fate, FateLog, fate_record
from composer_rl.view.index import EpisodeIndex, Query, template_of
from composer_rl.view.jsonl import JsonlTail
from composer_rl.view.rundir import RunDir, find_runs
from composer_rl.view.server import ViewerServer
from composer_rl.view.transcript import split_transcript


def _episode(n: int, **fields: Any) -> dict[str, Any]:
    """An episode line in the RL loop's format (`composer_rl.rl.episodes.score_result`)."""
    group = f"g{n // 2 + 1:06d}-fix_operator-{n // 2:010x}"
    line = {
        "group": group,
        "episode": f"{group}.s{n % 2}",
        "task": f"fix_operator-{n // 2:010x}",
        "category": "debugging" if n % 3 else "refactor",
        "difficulty": 1 + n % 3,
        "reward": round(n / 10, 3),
        "components": {"correctness": float(n % 2), "length": -0.01},
        "flags": {"open_todos": "a TODO was left"} if n % 4 == 0 else {},
        "solved": n % 2 == 1,
        "stop_reason": "finish",
        "grading_error": None,
        "grading_failure": None,
        "turns": n % 5,
        "generated_tokens": 10 * n,
        "versions": [n // 4] if n % 5 else [n // 4, n // 4 + 1],
        "segments": 1,
        "summaries": [],
        "compactions": 0,
        "transcript": "<|system|>sys<|end_of_turn|><|user|>do it<|end_of_turn|><|assistant|>ok",
        "scored_after_step": n // 3,
    }
    line.update(fields)
    return line


def _write_lines(path: Path, records: list[dict[str, Any]], mode: str = "a") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open(mode) as out:
        for record in records:
            out.write(json.dumps(record) + "\n")


def test_tail_reads_only_whole_lines_and_then_only_what_was_appended(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text('{"a": 1}\nnot json\n{"a": 2}\n{"a": ')
    seen: list[int] = []
    tail = JsonlTail(path)
    assert tail.poll(lambda r, _o, _n: seen.append(r["a"])) == 2
    assert seen == [1, 2]
    notes = " ".join(tail.notes())
    assert "half-written" in notes and "line 2" in notes
    with path.open("a") as out:
        out.write('3}\n{"a": 4}\n')
    assert tail.poll(lambda r, _o, _n: seen.append(r["a"])) == 2
    assert seen == [1, 2, 3, 4] and tail.partial_bytes == 0
    offsets: list[tuple[int, int]] = []
    JsonlTail(path).poll(lambda _r, o, n: offsets.append((o, n)))
    assert tail.read_at(*offsets[-1]) == {"a": 4}


def test_index_filters_sorts_and_pages_on_the_server(tmp_path: Path) -> None:
    path = tmp_path / "episodes" / "episodes.jsonl"
    _write_lines(path, [_episode(n) for n in range(40)])
    index = EpisodeIndex(path)
    assert index.refresh() == 40
    every = index.query(Query())
    assert every["total"] == every["matched"] == 40 and len(every["rows"]) == 40
    solved = index.query(Query.parse({"solved": "yes"}))
    assert solved["matched"] == 20 and all(r["solved"] for r in solved["rows"])
    narrow = index.query(Query.parse({"category": "refactor", "reward_min": "1", "flag": "any"}))
    assert narrow["matched"] > 0
    assert all(
        r["category"] == "refactor" and r["reward"] >= 1 and r["flags"] for r in narrow["rows"]
    )
    spanning = index.query(Query.parse({"q": "fix_operator", "lag_min": "0"}))
    assert spanning["matched"] == 40
    by_reward = index.query(Query.parse({"sort": "reward", "order": "desc", "page_size": "7"}))
    rewards = [r["reward"] for r in by_reward["rows"]]
    assert rewards == sorted(rewards, reverse=True) and len(rewards) == 7
    page2 = index.query(Query.parse({"page": "5", "page_size": "7"}))
    assert [r["index"] for r in page2["rows"]] == [35, 36, 37, 38, 39]
    with pytest.raises(ValueError, match="reward_min"):
        Query.parse({"reward_min": "lots"})
    with pytest.raises(ValueError, match="sort"):
        Query.parse({"sort": "__class__"})
    facets = index.facets()
    assert set(facets["categories"]) == {"debugging", "refactor"}
    assert facets["flags"] == {"open_todos": 10}
    # Appended lines are indexed by offset, without reading the file again.
    _write_lines(path, [_episode(40)])
    assert index.refresh() == 1 and index.record(_episode(40)["episode"])["turns"] == 0


def test_template_of_task_ids() -> None:
    assert template_of("rename_function-f97e90b2e9") == "rename_function"
    assert template_of("my task") == "my task"


def test_transcript_blocks_of_a_tool_using_episode_and_of_noise() -> None:
    text = (
        "<|system|>sys<|end_of_turn|><|user|>fix<|end_of_turn|><|assistant|><|tool_call|>edit_file\n"
        "@@path\na.py\n@@old\nx\n@@new\ny\n<|/tool_call|><|tool_result|>ok<|/tool_result|>"
        "<|summary|>did it<|/summary|><|system|>sys<|end_of_turn|><|user|>fix, summary<|end_of_turn|>"
    )
    blocks = split_transcript(text)
    kinds = [(b.kind, b.segment) for b in blocks]
    assert kinds == [
        ("system", 0),
        ("user", 0),
        ("tool_call", 0),
        ("tool_result", 0),
        ("summary", 0),
        ("system", 1),
        ("user", 1),
    ]
    call = blocks[2]
    assert call.tool == "edit_file" and call.arguments == {"path": "a.py", "old": "x", "new": "y"}
    for noise in ("<|/tool_call|><|tool_call|>", "<|x|>", "<|tool_result|>" * 3, "\x00\ud800"):
        split_transcript(noise)  # never raises


def test_status_and_notes_from_files(tmp_path: Path) -> None:
    empty = RunDir(tmp_path / "empty", "empty")
    (tmp_path / "empty").mkdir()
    empty.refresh()
    assert empty.status()["state"] == "empty"
    notes = " ".join(empty.notes())
    for missing in ("config.toml", "metrics.jsonl", "episodes.jsonl", "eval.jsonl", "groups/"):
        assert missing in notes
    run_path = tmp_path / "killed"
    _write_lines(run_path / "metrics.jsonl", [{"step": 1, "version": 1, "kl_k1": 0.1}])
    _write_lines(run_path / "episodes" / "episodes.jsonl", [_episode(0)])
    (run_path / "checkpoints" / "step-00000001-abc").mkdir(parents=True)
    (run_path / "checkpoints" / "step-00000001-abc" / "state.json").write_text("{}")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (run_path / "plugins").mkdir()
    (run_path / "plugins" / "state.json").write_text(
        json.dumps({"finished": False, "pid": dead.pid, "host": os.uname().nodename})
    )
    killed = RunDir(run_path, "killed")
    killed.refresh()
    assert killed.status()["state"] == "running"  # written just now
    old = time.time() - 3600
    for path in [run_path / "metrics.jsonl", run_path / "episodes" / "episodes.jsonl"]:
        os.utime(path, (old, old))
    os.utime(run_path / "plugins" / "state.json", (old, old))
    status = killed.status()
    assert status["state"] == "stopped" and "step-1 checkpoint" in status["why"]
    assert find_runs(tmp_path) == [tmp_path / "killed"]


def _get(url: str, host: str | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers={"Host": host} if host else {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def test_server_answers_json_with_strict_headers_and_never_a_traceback(tmp_path: Path) -> None:
    run_path = tmp_path / "r"
    _write_lines(run_path / "episodes" / "episodes.jsonl", [_episode(0), _episode(1)])
    (run_path / "groups").mkdir()
    (run_path / "groups" / f"{_episode(0)['group']}.json").write_text("{broken")
    with ViewerServer([run_path]) as server:
        status, headers, body = _get(server.url)
        assert status == 200
        csp = headers["content-security-policy"]
        assert "default-src 'self'" in csp and "script-src 'self'" in csp
        assert "unsafe-inline" not in csp
        assert headers["x-content-type-options"] == "nosniff"
        status, _, body = _get(server.url + "api/runs/r/episodes?reward_min=lots")
        assert status == 400 and "reward_min" in json.loads(body)["error"]
        status, _, body = _get(server.url + "api/runs/nope")
        assert status == 404 and "error" in json.loads(body)
        status, _, body = _get(server.url + "api/runs/r/tokens?id=" + _episode(0)["episode"])
        assert (
            status == 500
            and b"Traceback" not in body
            and "could not read" in json.loads(body)["error"]
        )
        status, _, _ = _get(server.url + "api/runs", host="attacker.example")
        assert status == 400  # DNS rebinding: a loopback-bound viewer answers loopback names only
        status, headers, _ = _get(server.url + "static/app.js")
        assert status == 200 and "content-security-policy" in headers


def test_the_group_api_answers_the_recorded_fate_and_infers_only_for_older_runs(
    tmp_path: Path,
) -> None:
    """The fate log as the loop writes it (`FateLog`, the orchestrator's `fate_record`):
    a trained and a stale group, one whose fate a resume voided, a torn last line."""
    run_path = tmp_path / "r"
    lines = [_episode(n) for n in range(6)]
    _write_lines(run_path / "episodes" / "episodes.jsonl", lines)
    trained, stale, voided = sorted({line["group"] for line in lines})
    for gid in (trained, stale, voided):
        task = gid.split("-", 1)[1]
        GroupStore(run_path / "groups").put(
            FinishedGroup(group_id=gid, prompt_id=task, episodes=[trajectory([0, 0])])
        )
    _write_lines(run_path / "metrics.jsonl", [{"step": 1, "trained_groups": [trained]}])
    older = tmp_path / "older"  # the same run, written before fates were recorded
    shutil.copytree(run_path, older)
    log = FateLog(run_path / FATES_LOG)
    decided: list[tuple[str, Fate, int]] = [(trained, "trained", 0), (stale, "dropped_stale", 5)]
    for gid, what, lag in decided:
        why = f"its oldest token was {lag} optimizer steps behind (loop.max_off_policy_steps)"
        log.record(
            fate_record(gid, gid.split("-", 1)[1], what, step=1, life=0, reason=why,
                        staleness=(lag, 3))
        )  # fmt: skip
    log.record(fate_record(voided, "t", "trained", step=2, life=0, reason="lost with step 2"))
    log.restart(
        from_step=1, life=1, version=3, restored_version=1, consumed=[trained], dropped=[stale],
        trained_at={}, task_of=lambda gid: gid.split("-", 1)[1],
    )  # fmt: skip
    log.close()
    with (run_path / FATES_LOG).open("a") as out:
        out.write('{"kind": "fate", "group": "g0000')  # a writer killed mid-line
    with ViewerServer([run_path, older]) as server:

        def fate(run: str, gid: str) -> dict[str, Any]:
            status, _, body = _get(f"{server.url}api/runs/{run}/group?id={gid}")
            assert status == 200, body
            answer: dict[str, Any] = json.loads(body)["fate"]
            return answer

        got = fate("r", trained)
        assert got["source"] == "recorded" and got["text"] == "trained at step 1 (lag 0, bound 3)"
        assert got["record"]["fate"] == "trained" and got["record"]["task"] in trained
        assert "groups/fates.jsonl" in got["note"]
        got = fate("r", stale)
        assert got["text"] == "dropped as stale after step 1 (lag 5, bound 3)"
        assert "max_off_policy_steps" in got["reason"]
        got = fate("r", voided)  # the resume voided it; not decided again yet
        assert got["source"] == "undecided" and got["record"] is None
        assert "trained at step 2" in got["reason"] and "decides it again" in got["reason"]
        # An older run's fates are inferred, and the answer says so.
        got = fate("older", trained)
        assert got["source"] == "inferred" and got["text"].startswith("trained at step 1")
        assert got["note"].startswith("inferred: this run predates recorded fates")
        _, _, body = _get(server.url + "api/runs/r")
        assert "fates.jsonl: the last line is half-written" in " ".join(json.loads(body)["notes"])
        _, _, body = _get(server.url + "api/runs/older")
        assert "predates recorded fates" in " ".join(json.loads(body)["notes"])


def test_static_assets_ship_in_the_wheel(tmp_path: Path) -> None:
    """hatch packs everything under src/composer_rl, the page's scripts and styles included."""
    root = Path(__file__).resolve().parents[3]
    result = subprocess.run(
        ["uv", "build", "--package", "composer-rl", "--wheel", "--out-dir", str(tmp_path)],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        pytest.skip(f"uv build is not available here: {result.stderr[-300:]}")
    import zipfile

    (wheel,) = tmp_path.glob("composer_rl-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for asset in ("index.html", "app.js", "charts.js", "style.css", "favicon.svg"):
        assert f"composer_rl/view/static/{asset}" in names


def test_the_command_prints_its_loopback_url(tmp_path: Path) -> None:
    run_path = tmp_path / "r"
    _write_lines(run_path / "episodes" / "episodes.jsonl", [_episode(0)])
    process = subprocess.Popen(
        [sys.executable, "-m", "composer_rl.cli", "view", str(run_path), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert "http://127.0.0.1:" in line, line
        url = line.split()[-1]
        status, _, body = _get(url + "api/runs")
        assert status == 200 and json.loads(body)[0]["status"]["episodes"] == 1
    finally:
        process.terminate()
        process.wait(timeout=30)
