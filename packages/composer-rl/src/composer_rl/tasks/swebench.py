"""SWE-bench-format tasks from git repositories on local disk.

Each JSONL line is a SWE-bench instance: `instance_id`, `repo` ("owner/name"),
`base_commit`, `problem_statement`, `patch` (the reference fix), `test_patch` (the tests
that check it), `FAIL_TO_PASS` and `PASS_TO_PASS` (pytest node ids, as lists or as the
JSON-encoded strings the published data sets use). No network is used: `repo` is looked
up under a local folder, as `<repos>/<owner>/<name>`, `<repos>/<owner>__<name>` or
`<repos>/<name>`.

For each instance the source clones the repository (`git clone --shared`, nothing is
written to the original) at `base_commit`; the workspace is its tracked text files. The
reference `patch` applied there gives the oracle (one whole-file edit per changed file).
The files `test_patch` touches, and the files of every listed test, taken after applying
it, become the hidden tests under `_grading/<their path>`, and the test command runs
exactly the listed tests there, so grading is "FAIL_TO_PASS and PASS_TO_PASS all pass".

An instance that cannot be loaded is skipped, and `skipped` says why, one line each: a
missing field, a repository not on disk, a commit not in it, a patch that does not apply,
a patch that deletes or renames a file (task edits write files, they cannot delete them),
a binary file the patch touches, a test id that is not a pytest node id, a listed test
file that does not exist, a test file or a patched file over `max_file_bytes` (named with
its size), a repository whose text files pass `max_total_bytes`.

Size limits: a file over `max_file_bytes` (default 2 MB) is left out of the workspace and
listed in the task's `metadata["left_out"]` with its size; if the instance's tests or its
fix need it, the instance is skipped saying so. The test files of real repositories can
be well past 200 KB (the old default, which dropped them and then reported a listed test
file "not in the repository"); 2 MB a file holds them, and the whole workspace is capped
by `max_total_bytes` (default 200 MB) instead, as each task holds its files in memory.

Limitations: the hidden tests run from `_grading/`, so a `conftest.py` next to the
original tests applies only if `test_patch` touches it; binary files of the repository
are left out of the workspace; the repository's dependencies must already be importable.

Register it through the `composer_task_sources` hook::

    class MyBench:
        @hookimpl
        def composer_task_sources(self):
            return [SWEBenchTaskSource("swe", Path("instances.jsonl"), Path("repos/"))]
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from composer_rl.tasks.model import GRADING_DIR, Category, Edit, Split, Task

REQUIRED = (
    "instance_id",
    "repo",
    "base_commit",
    "problem_statement",
    "patch",
    "test_patch",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
)


class InstanceError(ValueError):
    """Why one instance cannot be loaded."""


@dataclass(frozen=True)
class Skipped:
    """One instance left out, with where it is and why."""

    where: str
    instance_id: str
    reason: str

    def __str__(self) -> str:
        return f"{self.where} ({self.instance_id}): {self.reason}"


def _git(cwd: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-c", "core.quotepath=off", *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _test_ids(value: Any, field: str) -> list[str]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise InstanceError(f"{field} is a string but not a JSON list: {exc.msg}") from exc
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InstanceError(f"{field} must be a list of pytest node ids")
    for test_id in value:
        path = test_id.split("::", 1)[0]
        if "::" not in test_id or not path.endswith(".py"):
            raise InstanceError(
                f"{field} entry {test_id!r} is not a pytest node id (path/to/test_x.py::name); "
                "only pytest repositories are supported"
            )
    return list(value)


class SWEBenchTaskSource:
    """Tasks from a SWE-bench-format JSONL file against local git repositories."""

    def __init__(
        self,
        name: str,
        path: Path,
        repos: Path,
        split: Split = Split.HELDOUT,
        category: Category = Category.DEBUGGING,
        max_file_bytes: int = 2_000_000,
        max_total_bytes: int = 200_000_000,
    ) -> None:
        self.name = name
        self.path = Path(path)
        self.repos = Path(repos)
        self.split = split
        self.category = category
        self.max_file_bytes = max_file_bytes
        self.max_total_bytes = max_total_bytes
        self.skipped: list[Skipped] = []
        self._tasks: list[Task] | None = None

    def tasks(self, split: Split) -> Iterator[Task]:
        if Split(split) == self.split:
            yield from self.load()

    def load(self) -> list[Task]:
        """Every loadable instance (read once); the rest are in `skipped`."""
        if self._tasks is not None:
            return self._tasks
        if not self.path.is_file():
            raise FileNotFoundError(f"{self.path}: no such SWE-bench JSONL file")
        tasks: list[Task] = []
        seen: set[str] = set()
        for number, line in enumerate(self.path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            where = f"{self.path}:{number}"
            instance_id = "?"
            try:
                try:
                    data = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise InstanceError(f"invalid JSON: {exc.msg}") from exc
                if not isinstance(data, dict):
                    raise InstanceError("a line must hold a JSON object")
                instance_id = str(data.get("instance_id", "?"))
                task = self._load_instance(data)
                if task.id in seen:
                    raise InstanceError(f"instance id {task.id!r} appears twice")
                seen.add(task.id)
                tasks.append(task)
            except InstanceError as exc:
                self.skipped.append(Skipped(where, instance_id, str(exc)))
        self._tasks = tasks
        return tasks

    def _repository(self, repo: str) -> Path:
        owner, _, name = repo.partition("/")
        candidates = [self.repos / repo, self.repos / f"{owner}__{name}", self.repos / name]
        for candidate in candidates:
            if candidate.is_dir() and _git(candidate, "rev-parse", "--git-dir").returncode == 0:
                return candidate
        looked = ", ".join(str(c) for c in candidates)
        raise InstanceError(f"repository {repo!r} is not on disk (looked for {looked})")

    def _tree(self, root: Path) -> tuple[dict[str, str], dict[str, int]]:
        """The text files of the checkout at `root` (tracked, and created by a patch), and
        the files left out for being over `max_file_bytes`, with their sizes."""
        ls = _git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
        listing = ls.stdout.split("\0")
        files: dict[str, str] = {}
        too_large: dict[str, int] = {}
        total = 0
        for rel in filter(None, listing):
            path = root / rel
            if not path.is_file() or path.is_symlink():
                continue
            size = path.stat().st_size
            if size > self.max_file_bytes:
                too_large[rel] = size
                continue
            try:
                files[rel] = path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue
            total += size
            if total > self.max_total_bytes:
                raise InstanceError(
                    f"the repository's text files pass max_total_bytes={self.max_total_bytes:,} "
                    f"(at {rel!r}); raise SWEBenchTaskSource(max_total_bytes=...) to load it"
                )
        return files, too_large

    def _too_large(self, rel: str, size: int, role: str) -> InstanceError:
        return InstanceError(
            f"{role} {rel!r} is {size:,} bytes, over max_file_bytes={self.max_file_bytes:,}, so "
            "it was left out of the workspace; raise SWEBenchTaskSource(max_file_bytes=...) "
            "to load this instance"
        )

    def _apply(self, root: Path, patch: str, what: str) -> None:
        if not patch.strip():
            raise InstanceError(f"{what} is empty")
        check = _git(root, "apply", "--check", "-", stdin=patch)
        if check.returncode != 0:
            detail = (check.stderr.strip().splitlines() or ["no detail"])[0]
            raise InstanceError(f"{what} does not apply at base_commit: {detail}")
        _git(root, "apply", "-", stdin=patch).check_returncode()

    def _load_instance(self, data: dict[str, Any]) -> Task:
        missing = [f for f in REQUIRED if f not in data]
        if missing:
            raise InstanceError(f"missing field(s) {missing}")
        fail_to_pass = _test_ids(data["FAIL_TO_PASS"], "FAIL_TO_PASS")
        pass_to_pass = _test_ids(data["PASS_TO_PASS"], "PASS_TO_PASS")
        if not fail_to_pass:
            raise InstanceError("FAIL_TO_PASS is empty: nothing would check the fix")
        task_id = re.sub(r"[^A-Za-z0-9_.\-]", "-", str(data["instance_id"]))
        source = self._repository(str(data["repo"]))
        commit = str(data["base_commit"])
        if _git(source, "cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
            raise InstanceError(f"base_commit {commit} is not a commit of {source}")
        with tempfile.TemporaryDirectory(prefix="composer-swebench-") as tmp:
            root = Path(tmp) / "repo"
            clone = _git(Path(tmp), "clone", "-q", "--shared", "--no-checkout", str(source), "repo")
            if clone.returncode != 0:
                raise InstanceError(f"cannot clone {source}: {clone.stderr.strip()}")
            _git(root, "checkout", "-q", commit).check_returncode()
            base, left_out = self._tree(root)
            solution = self._changes(root, str(data["patch"]), "patch", base)
            for edit in solution:
                if edit.path in left_out:
                    raise self._too_large(edit.path, left_out[edit.path], "the patched file")
            _git(root, "checkout", "-q", "--", ".")
            _git(root, "clean", "-qfd")
            touched = self._touched(root, str(data["test_patch"]))
            self._apply(root, str(data["test_patch"]), "test_patch")
            after_tests, too_large = self._tree(root)
        hidden: dict[str, str] = {}
        listed = {t.split("::", 1)[0] for t in fail_to_pass + pass_to_pass}
        for rel in sorted(listed | touched):
            if rel in too_large:
                role = "listed test file" if rel in listed else "test file"
                raise self._too_large(rel, too_large[rel], role)
            if rel not in after_tests:
                if rel in listed:
                    raise InstanceError(f"listed test file {rel!r} is not in the repository")
                continue
            hidden[f"{GRADING_DIR}/{rel}"] = after_tests[rel]
        node_ids = [f"{GRADING_DIR}/{t}" for t in fail_to_pass + pass_to_pass]
        # Plain `-m`: the instance's tests import the repository (the grader appends the
        # workspace after the standard library; docs/grading.md says what that leaves open).
        command = "python -m pytest -q -p no:cacheprovider " + " ".join(map(shlex.quote, node_ids))
        try:
            return Task(
                id=task_id,
                category=self.category,
                difficulty=3,
                instruction=str(data["problem_statement"]),
                files=base,
                tests=hidden,
                test_command=command,
                solution=solution,
                metadata={
                    "source": f"swebench:{self.name}",
                    "instance_id": data["instance_id"],
                    "repo": data["repo"],
                    "base_commit": commit,
                    "split": self.split.value,
                    "FAIL_TO_PASS": fail_to_pass,
                    "PASS_TO_PASS": pass_to_pass,
                    "left_out": left_out,  # path -> bytes, over max_file_bytes
                },
            )
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()
            )
            raise InstanceError(f"not a valid task: {problems}") from exc

    def _touched(self, root: Path, patch: str) -> set[str]:
        """Paths a patch changes, from `git apply --numstat` (nothing is applied)."""
        stat = _git(root, "apply", "--numstat", "-", stdin=patch)
        return {line.split("\t")[-1] for line in stat.stdout.splitlines() if "\t" in line}

    def _changes(self, root: Path, patch: str, what: str, base: dict[str, str]) -> list[Edit]:
        """Apply `patch` and return one whole-file edit per changed file."""
        summary = _git(root, "apply", "--summary", "-", stdin=patch).stdout
        for line in summary.splitlines():
            line = line.strip()
            if line.startswith(("delete mode", "rename ")):
                raise InstanceError(
                    f"{what} deletes or renames a file ({line}); task edits can only write files"
                )
        touched = sorted(self._touched(root, patch))
        self._apply(root, patch, what)
        edits: list[Edit] = []
        for rel in touched:
            path = root / rel
            try:
                text = path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, FileNotFoundError) as exc:
                raise InstanceError(f"{what} touches {rel!r}, which is not a text file") from exc
            if base.get(rel) != text:
                edits.append(Edit(path=rel, new=text))
        if not edits:
            raise InstanceError(f"{what} changes nothing")
        return edits
