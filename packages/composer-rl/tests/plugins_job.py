"""A job-like process for the plugin tests: the RL loop's plugin duties and nothing else.

    python plugin_job.py RUN_DIR [MAX_STEPS]

At every step boundary it applies queued plugin requests, scores one fixed episode with
every registered plugin, and appends the step's metrics as one JSON line to
``RUN_DIR/metrics.jsonl``, as the real loop does. It stops when ``RUN_DIR/stop`` exists.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from composer_rewards import Episode, TestResults, score_episode
from composer_rl.plugins import PluginRegistry, build_plugin_manager, event_metrics

EPISODE = Episode(
    task="make total() include n",
    diff="--- a/tests/test_calc.py\n+++ b/tests/test_calc.py\n@@ -1 +1,2 @@\n x\n+y\n",
    changed_files={"tests/test_calc.py": "x\ny\n"},
    final_message="Updated tests/test_calc.py. Ran pytest: all 3 tests pass.",
    test_results=TestResults(passed=3),
)
CONFIG = {
    "plugins": {"block": ["style"]},  # keep the loop light: no ruff run per step
    "runtime_test": {"bonus": 0.5},
    "example_reward": {"bonus": 0.25},
}


def main(run_dir: Path, max_steps: int) -> None:
    pm = build_plugin_manager(CONFIG)
    registry = PluginRegistry(pm, run_dir)
    restored = registry.restore()
    with (run_dir / "metrics.jsonl").open("a") as metrics:
        for step in range(max_steps):
            events = registry.step_boundary(step)
            if step == 0:
                events = restored + events
            score = score_episode(pm, EPISODE)
            record = {
                "step": step,
                **score.metrics(),
                **event_metrics(events),
                "plugin_events": [e.model_dump() for e in events],
                "failures": [f.model_dump() for f in score.failures],
            }
            metrics.write(json.dumps(record) + "\n")
            metrics.flush()
            if (run_dir / "stop").exists():
                break
            time.sleep(0.02)


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 100_000)
