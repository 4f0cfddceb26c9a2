"""Grading latency: `Sandbox.run_tests(hidden_tests=...)` on a small task, per backend.

One grading is what the RL loop pays per episode after the policy finished: kill
everything the policy started, write the hidden tests, run the task's test command under
the grader, read its report. The task is a three-function module with three hidden tests
in the two forms a task can have:

- `probe`: the hidden tests call workspace code through `workspace_probe` (a child
  interpreter per test session), as the built-in templates do;
- `in-process`: the hidden tests import the workspace (`from calc import add`), as the
  templates did before the probe and as SWE-bench-format tests still must
  (`python -m pytest`, the workspace importable after the standard library).

Medians of `--repeats` gradings, after one warm-up grading per sandbox; the peer is the
same test command run as a plain `subprocess.run` of pytest on a copy of the repository
on the host (no sandbox, no grader), interleaved round by round so machine load hits all
alike.

    uv run python packages/composer-infra/benchmarks/grading_bench.py
    uv run python packages/composer-infra/benchmarks/grading_bench.py --backends bwrap --repeats 9
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

from composer_infra.sandbox import Sandbox, Task, default_registry
from composer_infra.sandbox.grading import PROBE_MODULE, probe_source

CALC = (
    "def add(a, b):\n    return a + b\n\n\n"
    "def sub(a, b):\n    return a - b\n\n\n"
    "def mul(a, b):\n    return a * b\n"
)
PROBE_TESTS = (
    "from workspace_probe import call\n\n\n"
    "def test_add():\n    assert call('calc', 'add', 2, 3) == 5\n\n\n"
    "def test_sub():\n    assert call('calc', 'sub', 5, 3) == 2\n\n\n"
    "def test_mul():\n    assert call('calc', 'mul', 4, 3) == 12\n"
)
IN_PROCESS_TESTS = (
    "from calc import add, mul, sub\n\n\n"
    "def test_add():\n    assert add(2, 3) == 5\n\n\n"
    "def test_sub():\n    assert sub(5, 3) == 2\n\n\n"
    "def test_mul():\n    assert mul(4, 3) == 12\n"
)
FORMS = {
    # (test command, hidden tests). The probe's own file is passed too: graders that write
    # it themselves put their copy over it, and graders from before they did (53f5303)
    # can still run the probe form.
    "probe": (
        "python -P -m pytest -q -p no:cacheprovider _grading",
        {
            "_grading/test_calc.py": PROBE_TESTS,
            f"_grading/{PROBE_MODULE}.py": probe_source(),
        },
    ),
    "in-process": (
        "python -m pytest -q -p no:cacheprovider _grading",
        {"_grading/test_calc.py": IN_PROCESS_TESTS},
    ),
}


def plain_pytest(root: Path, command: str) -> float:
    """The peer: the test command as a plain subprocess on the host, no grader."""
    argv = command.split()
    argv[0] = sys.executable
    start = time.perf_counter()
    subprocess.run(
        argv,
        cwd=root,
        env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        check=False,
    )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="+", default=["bwrap", "gvisor", "process"])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    registry = default_registry()
    backends = []
    for name in args.backends:
        reason = registry.backends()[name].unavailable_reason()
        if reason:
            print(f"{name}: skipped ({reason})")
        else:
            backends.append(name)
    timings: dict[tuple[str, str], list[float]] = {}
    verdicts: dict[tuple[str, str], bool] = {}
    with tempfile.TemporaryDirectory(prefix="grading-bench-") as tmp:
        work = Path(tmp)
        sandboxes: dict[tuple[str, str], Sandbox] = {}
        peers: dict[str, Path] = {}
        for form, (command, hidden) in FORMS.items():
            task = Task(
                id=f"bench-{form}",
                instruction="x",
                files={"calc.py": CALC},
                test_command=command,
            )
            root = work / f"peer-{form}"
            for rel, text in {"calc.py": CALC, **hidden}.items():
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / rel).write_text(text)
            peers[form] = root
            for name in backends:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    sandbox = Sandbox.create(task, name, work_dir=work)
                sandboxes[(name, form)] = sandbox
                verdicts[(name, form)] = sandbox.run_tests(hidden_tests=hidden).all_passed
        try:
            for _ in range(args.repeats):
                for form, (command, hidden) in FORMS.items():
                    timings.setdefault(("subprocess pytest (peer)", form), []).append(
                        plain_pytest(peers[form], command)
                    )
                    for name in backends:
                        start = time.perf_counter()
                        report = sandboxes[(name, form)].run_tests(hidden_tests=hidden)
                        timings.setdefault((name, form), []).append(time.perf_counter() - start)
                        verdicts[(name, form)] &= report.all_passed
        finally:
            for sandbox in sandboxes.values():
                sandbox.close()
    load = os.getloadavg()[0]
    print(f"medians of {args.repeats} gradings, load average {load:.1f} at the end")
    print(f"{'path':28} {'form':11} {'median s':>9} {'min s':>7} {'max s':>7}  solved")
    for (name, form), values in timings.items():
        solved = verdicts.get((name, form))
        shown = "" if solved is None else str(solved)
        print(
            f"{name:28} {form:11} {statistics.median(values):9.3f} "
            f"{min(values):7.3f} {max(values):7.3f}  {shown}"
        )


if __name__ == "__main__":
    main()
