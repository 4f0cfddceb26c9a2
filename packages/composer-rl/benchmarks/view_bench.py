"""How fast the rollout viewer's episode table answers on a 20,000-episode run directory.

Synthesizes a run directory in the RL loop's record format (`episodes/episodes.jsonl`
lines as `composer_rl.rl.episodes.score_result` writes them, each with a transcript of
tool calls and results), starts the viewer on loopback, and times three requests of the
table endpoint over HTTP: the first page, a filtered page (category + solved + reward
range) and a page sorted by reward. The named peer, in the same run, is the naive
endpoint: `json.loads` of every line per request, then the same filter, sort and page
(timed in-process, without HTTP, which favours the peer). Prints medians and the ratio.

    uv run python packages/composer-rl/benchmarks/view_bench.py
    uv run python packages/composer-rl/benchmarks/view_bench.py --episodes 2000 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from composer_rl.view.index import Query, row_of
from composer_rl.view.server import ViewerServer

CATEGORIES = ["debugging", "refactor", "new_feature", "feature_iteration", "testing"]
TEMPLATES = ["fix_operator", "rename_function", "add_sort_flag", "implement_stub", "read_constant"]
REQUESTS = {
    "first page": {},
    "filtered page": {"category": "debugging", "solved": "no", "reward_min": "-0.5"},
    "sorted page": {"sort": "reward", "order": "desc", "page": "3"},
}


def transcript(rng: random.Random) -> str:
    calls = "".join(
        f"<|tool_call|>edit_file\n@@path\nmod{t}.py\n@@old\n    return a - b\n@@new\n"
        f"    return a + b  # {rng.random():.6f}\n<|/tool_call|><|tool_result|>"
        + "ok\n" * rng.randint(1, 40)
        + "<|/tool_result|>"
        for t in range(rng.randint(1, 6))
    )
    return (
        "<|system|>You are a coding agent.<|end_of_turn|><|user|>Fix the operator in "
        f"`scores.py`.<|end_of_turn|><|assistant|>{calls}<|end_of_turn|>"
    )


def synthesize(run: Path, episodes: int, seed: int = 0) -> None:
    """A run directory with `episodes` episode lines in the real format (2 KB to 6 KB each)."""
    rng = random.Random(seed)
    (run / "episodes").mkdir(parents=True)
    (run / "config.toml").write_text('model = "none"\n[loop]\nsteps = 5000\ngroup_size = 8\n')
    with (run / "episodes" / "episodes.jsonl").open("w") as out:
        for n in range(episodes):
            template = TEMPLATES[(n // 8) % len(TEMPLATES)]
            task = f"{template}-{n // 8:010x}"
            group = f"g{n // 8 + 1:06d}-{task}"
            solved = rng.random() < 0.3
            length = -rng.random() * 0.05
            version = n // 64
            line = {
                "group": group,
                "episode": f"{group}.s{n % 8}",
                "task": task,
                "category": CATEGORIES[(n // 8) % len(CATEGORIES)],
                "difficulty": 1 + n % 3,
                "reward": float(solved) + length,
                "components": {"correctness": float(solved), "length": length},
                "flags": {"open_todos": "a TODO was left"} if rng.random() < 0.1 else {},
                "solved": solved,
                "stop_reason": "finish",
                "grading_error": None,
                "grading_failure": None,
                "turns": rng.randint(1, 6),
                "generated_tokens": rng.randint(50, 2000),
                "versions": [version] if rng.random() < 0.8 else [version, version + 1],
                "segments": 1,
                "summaries": [],
                "compactions": 0,
                "transcript": transcript(rng),
                "scored_after_step": version + rng.randint(0, 3),
            }
            out.write(json.dumps(line) + "\n")


def naive_page(path: Path, params: dict[str, str]) -> dict[str, Any]:
    """The peer: every line parsed on every request, then the same filter, sort and page."""
    query = Query.parse(params)
    rows = [
        row_of(json.loads(line), i, 0, 0)
        for i, line in enumerate(path.read_text().splitlines())
        if line.strip()
    ]
    matched = [r for r in rows if query.keep(r)]
    if query.sort != "index":
        key = "tokens" if query.sort == "tokens" else query.sort
        matched.sort(key=lambda r: getattr(r, key), reverse=query.order == "desc")
    start = query.page * query.page_size
    return {"matched": len(matched), "rows": [r.as_json() for r in matched[start : start + 50]]}


def median_s(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        start = time.perf_counter()
        synthesize(run, args.episodes)
        log = run / "episodes" / "episodes.jsonl"
        size = log.stat().st_size / 2**20
        print(
            f"synthesized {args.episodes} episodes ({size:.1f} MiB) in "
            f"{time.perf_counter() - start:.1f} s"
        )
        with ViewerServer([run]) as server:
            (rid,) = server.app.state.viewer.runs

            def fetch(params: dict[str, str]) -> dict[str, Any]:
                q = urllib.parse.urlencode(params)
                url = f"{server.url}api/runs/{rid}/episodes?{q}"
                with urllib.request.urlopen(url, timeout=600) as response:
                    return dict(json.loads(response.read()))

            start = time.perf_counter()
            first = fetch({})
            cold = time.perf_counter() - start
            assert first["total"] == args.episodes
            print(f"cold first request (builds the index once): {cold:.3f} s")
            print(f"{'request':<15} {'viewer (HTTP)':>14} {'naive json.loads':>17} {'ratio':>8}")
            worst = 0.0
            for name, params in REQUESTS.items():
                ours = fetch(params)
                peer = naive_page(log, params)
                assert ours["matched"] == peer["matched"], name
                assert [r["episode"] for r in ours["rows"]] == [
                    r["episode"] for r in peer["rows"]
                ], name
                t_ours = median_s(lambda p=params: fetch(p), args.repeats)  # type: ignore[misc]
                t_peer = median_s(lambda p=params: naive_page(log, p), max(3, args.repeats // 2))  # type: ignore[misc]
                worst = max(worst, t_ours)
                print(
                    f"{name:<15} {t_ours * 1e3:>11.1f} ms {t_peer * 1e3:>14.1f} ms {t_peer / t_ours:>7.0f}x"
                )
        goal = "met" if worst < 1.0 else "NOT met"
        print(f"slowest indexed request {worst * 1e3:.1f} ms: goal of under 1 s {goal}")


if __name__ == "__main__":
    main()
