"""A job-like process for the plugin tests: a long job's plugin duties and nothing else.

    python plugins_job.py RUN_DIR [MAX_STEPS]

It drives :class:`composer_rl.plugins.PluginSession` the way ``composer-rl eval`` does
(and the RL run is to): at every step boundary it applies queued plugin requests, scores
one fixed episode with every registered plugin, and appends the step's metrics as one JSON
line to ``RUN_DIR/metrics.jsonl``; no model, so a step takes milliseconds. It stops when
``RUN_DIR/stop`` exists (marking the job finished) or when killed (leaving it resumable).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from composer_rewards import Episode, TestResults
from composer_rl.plugins import PluginSession

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
    session = PluginSession(CONFIG, run_dir, command="test-job")
    with session, (run_dir / "metrics.jsonl").open("a") as metrics:
        for step in range(max_steps):
            plugin_metrics = session.step_boundary(step)
            score = session.score(EPISODE)
            record = {
                "step": step,
                **score.metrics(),
                **plugin_metrics,
                "plugin_events": [e.model_dump() for e in session.events],
                "failures": [f.model_dump() for f in score.failures],
            }
            metrics.write(json.dumps(record) + "\n")
            metrics.flush()
            if (run_dir / "stop").exists():
                break
            time.sleep(0.02)


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 100_000)
