"""What safe calling costs: `score_episode` against pluggy's own hook call.

pluggy calls all implementations in one loop and stops at the first exception; our
`score_episode` calls each implementation on its own and validates what it returns. Both
run the same cheap plugins on the same episode (the style reward is left out: it starts a
ruff process, which would dominate both sides).

    uv run python packages/composer-rewards/benchmarks/bench_scoring.py
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import pluggy

from composer_rewards import (
    PROJECT,
    Episode,
    TestResults,
    ToolCall,
    builtin_plugins,
    hookspecs,
    score_episode,
)


def timed(functions: list[Callable[[], object]], repeats: int, number: int) -> list[float]:
    """Median seconds per call of each function; interleaved so load hits both alike."""
    samples: list[list[float]] = [[] for _ in functions]
    for _ in range(repeats):
        for function, bucket in zip(functions, samples, strict=True):
            start = time.perf_counter()
            for _ in range(number):
                function()
            bucket.append((time.perf_counter() - start) / number)
    return [statistics.median(bucket) for bucket in samples]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--number", type=int, default=200)
    args = parser.parse_args()

    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(hookspecs)
    for name, plugin in builtin_plugins(frozenset({"style"})).items():
        pm.register(plugin, name=name)
    episode = Episode(
        task="fix total()",
        diff="--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def total(n):\n-    return sum(range(n))\n+    return sum(range(n + 1))\n",
        changed_files={"calc.py": "def total(n):\n    return sum(range(n + 1))\n"},
        final_message="Fixed total() in calc.py to include n. Ran pytest: all 3 tests pass.",
        test_results=TestResults(passed=3),
        tool_calls=[
            ToolCall(name="edit_file", arguments={"path": "calc.py", "old": "n)", "new": "n + 1)"}),
            ToolCall(name="run", arguments={"command": "pytest -q"}, output="3 passed in 0.01s"),
        ],
    )

    def pluggy_call() -> None:
        pm.hook.composer_reward(episode=episode)
        pm.hook.composer_monitor(episode=episode)

    ours, peer = timed([lambda: score_episode(pm, episode), pluggy_call], args.repeats, args.number)
    print(f"pluggy hook calls (reward + monitor): {peer * 1e6:8.1f} us / episode (median)")
    print(f"score_episode (safe, validated):      {ours * 1e6:8.1f} us / episode (median)")
    print(f"ratio score_episode / pluggy:          {ours / peer:8.2f}x")


if __name__ == "__main__":
    main()
