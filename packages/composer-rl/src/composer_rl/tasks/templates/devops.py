"""DevOps: a broken config or CI setup fixed, graded by running it.

The hidden tests run the repository's own entry point (`python app.py`, `python ci.py`)
through the probe's `run`, which starts Python isolated with the standard library first on
`sys.path`: a workspace `json.py` shadows nothing, so a settings file that is still broken
still crashes the app (issue 30: with the workspace first on the path, a planted `json.py`
returning the expected settings was paid). Files are read as data (`workspace_text`), both to
check that what the instruction says to leave alone was left alone and to parse the fixed
settings in the grader itself. The CI task also runs the repository's CI on broken copies
of the package, so a CI made to pass by checking nothing does not pass.
"""

from __future__ import annotations

import json
from typing import ClassVar

from composer_rl.tasks.model import GRADING_DIR, VISIBLE_TESTS_DIR, Category, Edit
from composer_rl.tasks.templates.base import Params, Template, named_grid
from composer_rl.tasks.templates.vocab import FUNCTIONS, MODULES, name_split, names

PHRASINGS = (0, 1, 2)

APP = """import json
from pathlib import Path


def main():
    cfg = json.loads(Path("settings.json").read_text())
    print(f"{cfg['name']} on {cfg['host']}:{cfg['port']} with {cfg['workers']} workers")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
"""

APP_LENIENT = """import json
from pathlib import Path

DEFAULTS = {"name": "app", "host": "127.0.0.1", "port": 8000, "workers": 1}


def main():
    try:
        cfg = json.loads(Path("settings.json").read_text())
    except ValueError:
        cfg = {}
    cfg = {**DEFAULTS, **cfg}
    print(f"{cfg['name']} on {cfg['host']}:{cfg['port']} with {cfg['workers']} workers")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
"""
"""A wrong first attempt: the code made to tolerate the broken file, which stays broken."""

CONFIG_TESTS = """import json

from workspace_probe import run, workspace_text

APP = {app!r}
EXPECTED = {expected!r}


def test_it_runs():
    proc = run(["python", "app.py"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert {line!r} in proc.stdout, proc.stdout


def test_settings_are_valid_json():
    settings = json.loads(workspace_text("settings.json"))
    assert {{key: settings.get(key) for key in EXPECTED}} == EXPECTED


def test_left_alone():
    assert workspace_text("app.py") == APP, "app.py was changed"
"""

CONFIG_VISIBLE = '''"""The app starts from its settings file."""

import json
import re
import subprocess
import sys
from pathlib import Path

KEYS = {{"name": str, "host": str, "port": int, "workers": int}}


def test_settings_are_valid_json():
    text = Path("settings.json").read_text()
    try:
        settings = json.loads(text)
    except ValueError as exc:
        raise AssertionError(f"settings.json is not valid JSON: {{exc}}") from None
    for key, kind in KEYS.items():
        assert key in settings, f"settings.json has no {{key!r}} key, which app.py reads"
        assert isinstance(settings[key], kind), f"{{key}} should be a {{kind.__name__}}"


def test_app_starts():
    proc = subprocess.run([sys.executable, "app.py"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"python app.py failed:\\n{{proc.stderr}}"
    assert re.fullmatch(r"\\S+ on \\S+:\\d+ with \\d+ workers\\n", proc.stdout), proc.stdout
'''

BREAKAGES = ["trailing_comma", "single_quotes", "renamed_key", "missing_comma", "comment"]


def _break(good: str, breakage: str, service: str, workers: int) -> str:
    """`good` (the settings' JSON) broken in one of the ways hand-edited JSON breaks."""
    if breakage == "trailing_comma":
        return good.replace(f'"workers": {workers}', f'"workers": {workers},')
    if breakage == "single_quotes":
        return good.replace(f'"{service}"', f"'{service}'")
    if breakage == "renamed_key":
        return good.replace('"workers"', '"worker_count"')
    if breakage == "missing_comma":
        return good.replace('"127.0.0.1",', '"127.0.0.1"')
    return good.replace("{\n", f"{{\n  // settings of {service}\n", 1)


class FixConfig(Template):
    """`python app.py` crashes on its JSON settings; fix the settings, not the code."""

    name: ClassVar[str] = "fix_config"
    category: ClassVar[Category] = Category.DEVOPS
    difficulty: ClassVar[int] = 2
    name_params: ClassVar[tuple[str, ...]] = ("service",)

    def parameter_space(self) -> list[Params]:
        return named_grid(
            self.name,
            {"service": MODULES},
            train=165,
            heldout=50,
            port=[8000, 8080, 9000],
            workers=[1, 2, 4],
            breakage=BREAKAGES,
            phrasing=list(PHRASINGS),
        )

    def context_files(self, params: Params) -> list[str]:
        return ["app.py", "settings.json"]

    def _settings(self, params: Params) -> dict[str, object]:
        return {
            "name": params["service"],
            "host": "127.0.0.1",
            "port": params["port"],
            "workers": params["workers"],
        }

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        service, port, workers = params["service"], params["port"], params["workers"]
        settings = self._settings(params)
        good = json.dumps(settings, indent=2) + "\n"
        bad = _break(good, params["breakage"], service, workers)
        files = {
            "app.py": APP,
            "settings.json": bad,
            f"{VISIBLE_TESTS_DIR}/test_app.py": CONFIG_VISIBLE.format(),
        }
        tests = {
            f"{GRADING_DIR}/test_task.py": CONFIG_TESTS.format(
                app=APP,
                expected=settings,
                line=f"{service} on 127.0.0.1:{port} with {workers} workers",
            )
        }
        instruction = [
            "`python app.py` crashes. Fix `settings.json`; leave `app.py` as it is.",
            "The service does not start: `python app.py` fails on its settings file. Fix the "
            "settings, not the code.",
            f"Starting the {service} service fails. Find out why and fix its configuration; "
            "the code is right and must stay as it is.",
        ][params["phrasing"]]
        return instruction, files, tests, [Edit(path="settings.json", new=good)]

    def wrong_edits(self, params: Params) -> list[list[Edit]]:
        """The code made to tolerate the broken file; the settings rewritten by hand with
        the port as a string; the settings rewritten with `workers` misspelt."""
        settings = self._settings(params)
        as_text = {**settings, "port": str(params["port"])}
        misspelt = {k if k != "workers" else "worker": v for k, v in settings.items()}
        return [
            [Edit(path="app.py", new=APP_LENIENT)],
            [Edit(path="settings.json", new=json.dumps(as_text, indent=2) + "\n")],
            [Edit(path="settings.json", new=json.dumps(misspelt, indent=2) + "\n")],
        ]


CI = '''"""Run every step of ci.json from the repository root; stop at the first failure."""

import json
import subprocess
import sys
from pathlib import Path


def main():
    steps = json.loads(Path("ci.json").read_text())["steps"]
    for step in steps:
        argv = [sys.executable if a == "python" else a for a in step["run"]]
        if subprocess.run(argv).returncode != 0:
            print(f"step {step['name']} failed")
            return 1
        print(f"step {step['name']} ok")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
'''

CHECK_VERSION = '''"""The VERSION file and the package's __version__ must agree."""

import re
import sys
from pathlib import Path

PACKAGE_INIT = Path("{init}")


def main():
    wanted = Path("VERSION").read_text().strip()
    found = re.search(r'__version__ = "(.+)"', PACKAGE_INIT.read_text()).group(1)
    if wanted != found:
        print(f"VERSION says {{wanted}}, {{PACKAGE_INIT}} says {{found}}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''

SMOKE = '''"""Import the package and check one result."""

import sys

sys.path.insert(0, "{path}")

from {pkg}.{module} import {fn}  # noqa: E402

assert {fn}(2, 3) == 5, {fn}(2, 3)
print("smoke ok")
'''

CI_TESTS = """import json

import pytest

from workspace_probe import run, workspace_text

UNTOUCHED = {untouched!r}
SOURCES = {sources!r}
COPIED = ["ci.py", "ci.json", "VERSION", "tools/check_version.py", "tools/smoke.py", *SOURCES]
MUTANTS = {mutants!r}
\"\"\"Broken copies of the package, each of which a working CI must reject.\"\"\"


def test_ci_passes():
    proc = run(["python", "ci.py"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for line in {expected!r}:
        assert line in proc.stdout, proc.stdout


def test_left_alone():
    for path, text in UNTOUCHED.items():
        assert workspace_text(path) == text, f"{{path}} was changed"


def test_every_step_kept():
    steps = json.loads(workspace_text("ci.json"))["steps"]
    assert [step["name"] for step in steps] == ["compile", "version", "smoke"]
    for path in SOURCES:
        assert path in steps[0]["run"], f"the compile step does not compile {{path}}"


@pytest.mark.parametrize("broken", sorted(MUTANTS))
def test_ci_fails_on_a_broken_package(tmp_path, broken):
    for path in COPIED:
        target = tmp_path / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(MUTANTS[broken].get(path, workspace_text(path)))
    proc = run(["python", "ci.py"], cwd=tmp_path)
    assert proc.returncode != 0, f"ci passed with {{broken}}: " + proc.stdout
"""

CI_VISIBLE = '''"""CI runs green, and its compile step covers the whole package."""

import json
import subprocess
import sys
from pathlib import Path


def test_compile_step_covers_the_package():
    steps = {{step["name"]: step for step in json.loads(Path("ci.json").read_text())["steps"]}}
    listed = set(steps["compile"]["run"])
    for path in sorted(Path("src").rglob("*.py")):
        assert path.as_posix() in listed, f"ci.json's compile step misses {{path.as_posix()}}"


def test_ci_passes():
    proc = subprocess.run([sys.executable, "ci.py"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"python ci.py failed:\\n{{proc.stdout}}{{proc.stderr}}"
'''


def _modules(module: str) -> list[str]:
    """The package's modules: `module` and the next two function names of its split (so a
    task's names stay of one split)."""
    pool = names(FUNCTIONS, name_split(module))
    start = pool.index(module)
    return [pool[(start + i) % len(pool)] for i in range(3)]


def _ci_json(folder: str, module: str, skip_last: bool = False) -> str:
    """The CI config with every module of the package under `folder` (one path a line)."""
    modules = _modules(module)[: 2 if skip_last else 3]
    paths = [f"{folder}/__init__.py", *(f"{folder}/{m}.py" for m in modules)]
    steps = [
        {"name": "compile", "run": ["python", "-m", "py_compile", *paths]},
        {"name": "version", "run": ["python", "tools/check_version.py"]},
        {"name": "smoke", "run": ["python", "tools/smoke.py"]},
    ]
    return json.dumps({"steps": steps}, indent=2) + "\n"


class FixCI(Template):
    """The code moved from `lib/<pkg>/` to `src/<pkg>/`; the CI config and two tools did not."""

    name: ClassVar[str] = "fix_ci"
    category: ClassVar[Category] = Category.DEVOPS
    difficulty: ClassVar[int] = 3
    name_params: ClassVar[tuple[str, ...]] = ("package", "module")

    def parameter_space(self) -> list[Params]:
        return named_grid(
            self.name,
            {"package": MODULES, "module": FUNCTIONS},
            train=160,
            heldout=32,
            version=["0.1.0", "1.2.3", "2.0.0"],
            phrasing=list(PHRASINGS),
        )

    def context_files(self, params: Params) -> list[str]:
        return ["ci.py", "ci.json", "tools/check_version.py", "tools/smoke.py"]

    def _code(self, params: Params) -> dict[str, str]:
        pkg = params["package"]
        code = {f"src/{pkg}/__init__.py": f'__version__ = "{params["version"]}"\n'}
        for number, name in enumerate(_modules(params["module"])):
            code[f"src/{pkg}/{name}.py"] = f"def {name}(a, b):\n    return a + b + {number}\n"
        return code

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        pkg, module, version = params["package"], params["module"], params["version"]
        code = self._code(params)
        files = {
            "ci.py": CI,
            "ci.json": _ci_json(f"lib/{pkg}", module),
            "VERSION": f"{version}\n",
            "tools/check_version.py": CHECK_VERSION.format(init=f"lib/{pkg}/__init__.py"),
            "tools/smoke.py": SMOKE.format(path="lib", pkg=pkg, module=module, fn=module),
            **code,
            f"{VISIBLE_TESTS_DIR}/test_ci.py": CI_VISIBLE.format(),
        }
        last = list(code)[-1]
        name = last.rpartition("/")[2].removesuffix(".py")
        mutants = {
            "a VERSION that disagrees": {"VERSION": "9.9.9\n"},
            "a module that does not compile": {last: f"def {name}(a, b):\n    return a +\n"},
            f"{module} giving a wrong result": {
                f"src/{pkg}/{module}.py": f"def {module}(a, b):\n    return a - b\n"
            },
        }
        tests = {
            f"{GRADING_DIR}/test_task.py": CI_TESTS.format(
                untouched={"ci.py": CI, **code},
                sources=list(code),
                mutants=mutants,
                expected=["step compile ok", "step version ok", "smoke ok", "step smoke ok"],
            )
        }
        instruction = [
            f"The code moved from `lib/{pkg}/` to `src/{pkg}/` and `python ci.py` broke. Fix "
            "the CI setup, not `ci.py` or the code.",
            f"`python ci.py` fails since the package moved from `lib/{pkg}/` to `src/{pkg}/`. "
            "Update `ci.json` and the tools it runs; leave `ci.py` and the code alone.",
            f"CI is red since the {pkg} package moved to `src/`. Make it pass again by fixing "
            "what still points at the old place; the CI runner and the package are right.",
        ][params["phrasing"]]
        return instruction, files, tests, self._fixes(params)

    def _fixes(self, params: Params) -> list[Edit]:
        pkg, module = params["package"], params["module"]
        return [
            Edit(path="ci.json", new=_ci_json(f"src/{pkg}", module)),
            Edit(
                path="tools/check_version.py",
                old=f'Path("lib/{pkg}/__init__.py")',
                new=f'Path("src/{pkg}/__init__.py")',
            ),
            Edit(
                path="tools/smoke.py",
                new=SMOKE.format(path="src", pkg=pkg, module=module, fn=module),
            ),
        ]

    def wrong_edits(self, params: Params) -> list[list[Edit]]:
        """Only `ci.json` moved; the two tools' paths moved but not the smoke test's; every
        path moved but the compile step missing a module."""
        ci_json, check_version, smoke = self._fixes(params)
        short = Edit(
            path="ci.json", new=_ci_json(f"src/{params['package']}", params["module"], True)
        )
        return [[ci_json], [ci_json, check_version], [short, check_version, smoke]]
