"""One worker of the migration test: its own process, its own environment service.

python _sandbox_migration_worker.py start <backend> <store> <work>   -> prints a digest
python _sandbox_migration_worker.py finish <backend> <store> <work> <digest>
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

from _sandbox_support import CALC_TASK, TEST_CONFIG

from composer_infra.environment import EnvironmentConfig, EnvironmentService


def main() -> None:
    stage, backend, store, work = sys.argv[1:5]
    warnings.simplefilter("ignore")
    config = EnvironmentConfig(
        backend=backend,
        warm_sandboxes=0,
        store_dir=Path(store),
        work_dir=Path(work),
        sandbox=TEST_CONFIG,
    )
    with EnvironmentService(config) as service:
        if stage == "start":
            sid = service.open(CALC_TASK)
            service.call(sid, "todo", {"action": "add", "item": "fix add"})
            service.call(sid, "todo", {"action": "add", "item": "run the tests"})
            service.call(sid, "edit_file", {"path": "calc.py", "old": "a - b", "new": "a + b"})
            service.call(sid, "todo", {"action": "complete", "id": 1})
            print(json.dumps({"digest": service.snapshot(sid).digest}))
        else:
            sid = service.restore(sys.argv[5])
            sandbox = service.sandbox(sid)
            report = service.run_tests(sid)
            service.call(sid, "todo", {"action": "complete", "id": 2})
            finished = service.call(sid, "finish", {"message": "add adds"})
            print(
                json.dumps(
                    {
                        "all_passed": report.all_passed,
                        "outcomes": report.outcomes,
                        "todos": [i.status for i in sandbox.todos.items],
                        "finished": finished.ok and sandbox.finished,
                    }
                )
            )


if __name__ == "__main__":
    main()
