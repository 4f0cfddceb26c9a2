"""Test sessions for the Composer workspace.

Every package is tested in an environment of its own that holds only that package,
what it declares, and its `test` dependency group, all at the versions in `uv.lock`.
That is what catches a package importing something it does not declare.

    uv run nox                         # everything below (the matrix on the newest Python only)
    uv run nox -s tests                # every package on the primary Python
    uv run nox -s "tests(package='composer-model')"
    uv run nox -s matrix               # every package on every other Python found here
    uv run nox -s matrix-3.12          # ... on one of them
    uv run nox -s kernels_alone lint typecheck
    uv run nox -s benchmarks           # every README benchmark command, quickest settings (not default)
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import nox

ROOT = Path(__file__).parent
PACKAGES = sorted(p.name for p in (ROOT / "packages").iterdir() if (p / "pyproject.toml").exists())
PRIMARY_PYTHON = "3.11"
# Every CPython from 3.11 up that we know of; the ones not on this machine are skipped.
CANDIDATE_PYTHONS = ["3.11", "3.12", "3.13", "3.14"]

nox.options.default_venv_backend = "uv"
nox.options.reuse_venv = "yes"
nox.options.error_on_missing_interpreters = False
DEFAULT_SESSIONS = ["lint", "typecheck", "kernels_alone", "tests"]

# Never let uv fetch an interpreter from the network: a missing Python is skipped.
os.environ.setdefault("UV_PYTHON_DOWNLOADS", "never")


def _find_python(version: str) -> Path | None:
    """The interpreter for `version` on this machine, without downloading one.

    pyenv's shims answer only for the selected version, so its install folders are
    searched directly as well.
    """
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    for candidate in sorted(pyenv_root.glob(f"versions/{version}.*/bin/python{version}")):
        return candidate
    result = subprocess.run(
        ["uv", "python", "find", "--no-python-downloads", version],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode == 0 and result.stdout.strip():
        return Path(result.stdout.strip())
    return None


FOUND_PYTHONS = {v: p for v in CANDIDATE_PYTHONS if (p := _find_python(v)) is not None}
_OTHER_PYTHONS = [v for v in FOUND_PYTHONS if v != PRIMARY_PYTHON]  # ascending
# By default the matrix runs on the newest Python found: with the primary (the oldest we
# support) that brackets the range, and a failure only the versions between would show is
# rare next to the 8-10 minutes of CI each extra version costs. `-s matrix` runs them all.
nox.options.sessions = DEFAULT_SESSIONS + (
    [f"matrix-{_OTHER_PYTHONS[-1]}"] if _OTHER_PYTHONS else ["matrix"]
)
# Put the real interpreters ahead of any shims, so that nox and uv pick them up.
os.environ["PATH"] = os.pathsep.join(
    [*(str(p.parent) for p in FOUND_PYTHONS.values()), os.environ.get("PATH", "")]
)


def _sync(session: nox.Session, *args: str) -> None:
    """Install from the lock into this session's virtualenv (and nothing else)."""
    env = {"UV_PROJECT_ENVIRONMENT": session.virtualenv.location}
    session.run_install(
        "uv",
        "sync",
        "--frozen",
        "--exact",
        "--no-default-groups",
        f"--python={Path(session.virtualenv.location) / 'bin' / 'python'}",
        *args,
        env=env,
        external=True,
    )


# Packages whose suites run in parallel pytest-xdist workers, one test file a worker (a
# file's module-scoped fixtures, such as a two-node Ray cluster, stay in one process).
# composer-rl's suite is mostly integration tests that start Ray, sandboxes and subprocess
# trainers and spend much of their time waiting on them; one after another it took 62 of about
# 100 minutes of `uv run nox` on the 2-core box (a scoring job beside it). composer-infra's
# sandbox and cluster tests wait on bwrap, runsc, Ray nodes and a moto server: 6.9 min serial
# against 3.8-3.9 min in two workers (three runs, idle 2-core box, all green). Its tests that
# scan /proc for leftover processes look only for their own: a uuid marker in the command
# line, the sandbox's own random uid, or the descendants of a pid they started; Ray nodes and
# moto take free ports. The other packages' suites take under three minutes each.
PARALLEL_PACKAGES = {"composer-infra", "composer-rl"}
# Two workers is what was measured (2-core box: 62 -> 40.5 min). With bytecode cached (below)
# the two keep both cores busy (vmstat: 4% idle over the suite), so a third would not help
# there. Each holds a few Ray actors and engines (2-3 GB), and a container can report more
# CPUs than its quota lets it use, so more workers are left for someone who measures them.
MAX_TEST_WORKERS = 2


def _parallel_args(package: str) -> tuple[list[str], dict[str, str]]:
    """pytest-xdist arguments and environment for `package`'s suite (none if it runs serially)."""
    workers = min(MAX_TEST_WORKERS, len(os.sched_getaffinity(0)))
    if package not in PARALLEL_PACKAGES or workers < 2:
        return [], {}
    # One BLAS thread a worker, so that the workers share the cores instead of fighting over them.
    return ["-n", str(workers), "--dist", "loadfile"], {"OMP_NUM_THREADS": "1"}


def _bytecode_cache_env(session: nox.Session) -> dict[str, str]:
    """Let every process a session starts cache its bytecode, under the session's venv.

    uv installs without compiling, and many images set PYTHONDONTWRITEBYTECODE=1 (the
    development box's does): then every process that imports torch compiles it from source
    again, 7.7 s against 4.0 s from bytecode on the 2-core box, and the suites start hundreds
    of such processes (Ray actors, torchrun ranks, CLI subprocesses). Written lazily, by the
    first process that imports a module, into the venv (PYTHONPYCACHEPREFIX): nothing is
    added to the install, nothing lands in the source tree, and the sandboxes' commands,
    whose environment is built clean, are unchanged. Measured on the idle 2-core box:
    composer-rl's suite 21.5 min without, 13.7 min with; all of `uv run nox` 40 min (a rerun
    on 2026-12-03 with composer-infra's suite also in workers: 18.4 min).
    (`uv sync --compile-bytecode` does the same eagerly: 28 s a fresh venv, for every file.)
    """
    return {
        "PYTHONDONTWRITEBYTECODE": "",  # empty is unset to Python
        "PYTHONPYCACHEPREFIX": str(Path(session.virtualenv.location) / "pycache"),
    }


def _run_package_tests(session: nox.Session, package: str, *pytest_args: str) -> None:
    _sync(session, f"--package={package}", "--group=test")
    session.chdir(ROOT / "packages" / package)
    parallel, env = _parallel_args(package)
    env = {**env, **_bytecode_cache_env(session)}
    # Exit code 5 (no tests collected) is a failure: nox fails on any non-zero status.
    # The slowest tests are listed so that CI's log shows where the suite's time goes.
    session.run(
        "python", "-m", "pytest", "--durations=10", *parallel, *pytest_args, *session.posargs,
        env=env,
    )  # fmt: skip


@nox.session(python=PRIMARY_PYTHON)
@nox.parametrize("package", PACKAGES)
def tests(session: nox.Session, package: str) -> None:
    """One package's whole test suite, alone in a fresh environment."""
    _run_package_tests(session, package)


@nox.session(python=[v for v in CANDIDATE_PYTHONS if v != PRIMARY_PYTHON])
@nox.parametrize("package", PACKAGES)
def matrix(session: nox.Session, package: str) -> None:
    """One package's tests on another Python version (the slow ones run in `tests`)."""
    if str(session.python) not in FOUND_PYTHONS:
        session.skip(f"Python {session.python} is not installed on this machine")
    _run_package_tests(session, package, "-m", "not slow")


@nox.session(python=PRIMARY_PYTHON)
def kernels_alone(session: nox.Session) -> None:
    """Build the composer-kernels wheel and test it next to torch and nothing else."""
    dist = Path(session.create_tmp()).resolve() / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    session.run(
        "uv",
        "build",
        "--package",
        "composer-kernels",
        "--wheel",
        "--out-dir",
        str(dist),
        external=True,
    )
    requirements = dist / "requirements.txt"
    session.run(
        "uv",
        "export",
        "--frozen",
        "--package",
        "composer-kernels",
        "--group",
        "test",
        "--no-emit-workspace",
        "--no-hashes",
        "--no-header",
        "-o",
        str(requirements),
        external=True,
        silent=True,
    )
    wheel = next(dist.glob("composer_kernels-*.whl"))
    requirements.write_text(requirements.read_text() + f"{wheel}\n")
    # `uv pip sync` leaves exactly these packages in the (reused) venv. Only our wheel is
    # reinstalled: `--reinstall` for all would imply `--refresh` and download torch's
    # 3 GB of CUDA wheels again on every run.
    python = str(Path(session.virtualenv.location) / "bin" / "python")
    session.run(
        "uv",
        "pip",
        "sync",
        "--python",
        python,
        "--reinstall-package",
        "composer-kernels",
        str(requirements),
        external=True,
    )
    tests_copy = Path(session.create_tmp()).resolve() / "kernels-tests"
    shutil.rmtree(tests_copy, ignore_errors=True)
    shutil.copytree(ROOT / "packages" / "composer-kernels" / "tests", tests_copy)
    session.chdir(tests_copy)
    # Prove the tests ran against the wheel, not the source tree.
    session.run(
        "python",
        "-c",
        "import composer_kernels, sys; p = composer_kernels.__file__; print(p); "
        "sys.exit('site-packages' not in p)",
    )
    session.run(
        "python",
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "--rootdir",
        str(tests_copy),
        *session.posargs,
        env=_bytecode_cache_env(session),
    )


@nox.session(python=PRIMARY_PYTHON)
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check over the whole workspace, then the import contracts.

    `lint-imports` (import-linter) checks `[tool.importlinter]` of the root pyproject.toml:
    the package DAG, the layers of composer-rl and no import cycle inside a package. It reads
    the sources and imports none of them, so the packages are found on PYTHONPATH instead of
    being installed here.
    """
    _sync(session, "--only-group=dev", "--no-install-workspace")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    sources = os.pathsep.join(str(ROOT / "packages" / p / "src") for p in PACKAGES)
    session.run("lint-imports", "--no-cache", env={"PYTHONPATH": sources})


@nox.session(python=PRIMARY_PYTHON)
def typecheck(session: nox.Session) -> None:
    """mypy over the source of every package, with all of them installed."""
    _sync(session, "--all-packages", "--group=dev")
    sources = [str(ROOT / "packages" / p / "src") for p in PACKAGES]
    session.run("mypy", *sources)


# The quickest settings of every benchmark a README prints (appended to the printed command;
# argparse keeps the last value). A README command for a script missing here fails the session.
QUICK_BENCHMARK_ARGS: dict[str, list[str]] = {
    "packages/composer-infra/benchmarks/sandbox_throughput.py": [
        "--backends", "process", "--repeats", "1", "--pool", "2", "--calls", "4",
        "--concurrency", "2",
    ],
    "packages/composer-infra/benchmarks/store_delta_bench.py": ["--lrs", "1e-4", "--steps", "2"],
    "packages/composer-kernels/benchmarks/bench_quantize.py": [
        "--rows", "128", "--cols", "256", "--repeats", "1",
    ],
    "packages/composer-kernels/benchmarks/bench_grouped_mm.py": [
        "--tokens", "64", "--experts", "4", "--hidden", "32", "--ffn", "64", "--repeats", "1",
    ],
    "packages/composer-kernels/benchmarks/bench_attention.py": ["--repeats", "1"],
    "packages/composer-rewards/benchmarks/bench_scoring.py": ["--repeats", "1", "--number", "5"],
    "packages/composer-model/benchmarks/bench_vs_transformers.py": ["--quick"],
    "packages/composer-model/benchmarks/profile_model.py": ["--quick", "--repeats", "1"],
    "packages/composer-model/benchmarks/induction_formation.py": ["--quick"],
    "packages/composer-model/benchmarks/bench_speculative.py": [
        "--steps", "2", "--prompts", "1", "--new-tokens", "4", "--repeats", "1",
    ],
    "packages/composer-rl/benchmarks/bench_async_vs_sync.py": ["--quick", "--local"],
    "packages/composer-rl/benchmarks/learning_margin.py": ["--quick"],
    "packages/composer-rl/benchmarks/name_copy.py": ["--quick"],
    "packages/composer-rl/benchmarks/view_bench.py": ["--episodes", "200", "--repeats", "1"],
    "packages/composer-infra/benchmarks/grading_bench.py": [
        "--backends", "process", "--repeats", "1",
    ],
    "packages/composer-rl/benchmarks/mtp_gradient_share.py": ["--quick"],
    "packages/composer-rl/benchmarks/rl_fit_fixed_tasks.py": ["--quick"],
    "packages/composer-rl/benchmarks/bench_rollout.py": [
        "--templates", "1", "--steps", "1", "--max-turns", "1", "--max-new-tokens", "4",
        "--repeats", "1", "--backend", "process",
    ],
}  # fmt: skip


def readme_benchmark_commands() -> list[list[str]]:
    """Every `uv run ... benchmarks/<script>.py ...` line printed in a package README."""
    commands = []
    for readme in sorted((ROOT / "packages").glob("*/README.md")):
        for line in readme.read_text().splitlines():
            words = line.strip().split()
            if words[:2] == ["uv", "run"] and any("/benchmarks/" in w for w in words):
                commands.append(words)
    return commands


@nox.session(python=PRIMARY_PYTHON)
def benchmarks(session: nox.Session) -> None:
    """Run every benchmark command printed in a README, as printed, with its quickest settings.

    Not in the default sessions: even at these settings the commands took about 25 minutes
    one after another on the loaded 2-core box (store_delta_bench's moto round alone 697 s,
    bench_quantize 262 s, bench_attention 194 s), far above the 2 minutes CI could spare.
    Run it as `uv run nox -s benchmarks` when a benchmark or a README command changes.
    """
    commands = readme_benchmark_commands()
    if not commands:
        session.error("no benchmark commands found in packages/*/README.md")
    env = {"UV_PROJECT_ENVIRONMENT": session.virtualenv.location, **_bytecode_cache_env(session)}
    for words in commands:
        script = next(w for w in words if w.endswith(".py"))
        if script not in QUICK_BENCHMARK_ARGS:
            session.error(f"{script} is printed in a README but has no QUICK_BENCHMARK_ARGS entry")
        # The command exactly as printed (uv resolves its groups into this session's venv).
        session.run(*words, *QUICK_BENCHMARK_ARGS[script], env=env, external=True)
