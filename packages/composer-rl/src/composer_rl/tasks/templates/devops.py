"""DevOps: a broken config or CI setup fixed, graded by running it in the sandbox.

The hidden tests run the repository's own entry point (`python app.py`, `python ci.py`) in
a subprocess from the repository root and check its exit status and output, and that the
files the instruction says to leave alone were left alone.
"""

from __future__ import annotations

import json
from typing import ClassVar

from composer_rl.tasks.model import GRADING_DIR, Category, Edit
from composer_rl.tasks.templates.base import Params, Template, grid
from composer_rl.tasks.templates.vocab import FUNCTIONS, MODULES

APP = """import json
from pathlib import Path


def main():
    cfg = json.loads(Path("settings.json").read_text())
    print(f"{cfg['name']} on {cfg['host']}:{cfg['port']} with {cfg['workers']} workers")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
"""

RUN_TESTS = """import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
UNTOUCHED = {untouched!r}


def test_it_runs():
    proc = subprocess.run(
        [sys.executable, {script!r}], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for line in {expected!r}:
        assert line in proc.stdout, proc.stdout


def test_left_alone():
    for path, text in UNTOUCHED.items():
        assert (ROOT / path).read_text() == text, f"{{path}} was changed"
"""

BREAKAGES = ["trailing_comma", "single_quotes", "renamed_key"]


class FixConfig(Template):
    """`python app.py` crashes on its JSON settings; fix the settings, not the code."""

    name: ClassVar[str] = "fix_config"
    category: ClassVar[Category] = Category.DEVOPS
    difficulty: ClassVar[int] = 2

    def parameter_space(self) -> list[Params]:
        return grid(service=MODULES, port=[8000, 8080, 9000], workers=[1, 2, 4], breakage=BREAKAGES)

    def context_files(self, params: Params) -> list[str]:
        return ["app.py", "settings.json"]

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        service, port, workers = params["service"], params["port"], params["workers"]
        good = json.dumps(
            {"name": service, "host": "127.0.0.1", "port": port, "workers": workers}, indent=2
        )
        good += "\n"
        breakage = params["breakage"]
        if breakage == "trailing_comma":
            bad = good.replace(f'"workers": {workers}', f'"workers": {workers},')
        elif breakage == "single_quotes":
            bad = good.replace(f'"{service}"', f"'{service}'")
        else:
            bad = good.replace('"workers"', '"worker_count"')
        files = {"app.py": APP, "settings.json": bad}
        tests = {
            f"{GRADING_DIR}/test_task.py": RUN_TESTS.format(
                script="app.py",
                expected=[f"{service} on 127.0.0.1:{port} with {workers} workers"],
                untouched={"app.py": APP},
            )
        }
        instruction = "`python app.py` crashes. Fix `settings.json`; leave `app.py` as it is."
        return instruction, files, tests, [Edit(path="settings.json", new=good)]


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


def _modules(module: str) -> list[str]:
    """The package's modules: `module` and the next two names of the vocabulary."""
    start = FUNCTIONS.index(module)
    return [FUNCTIONS[(start + i) % len(FUNCTIONS)] for i in range(3)]


def _ci_json(folder: str, module: str) -> str:
    """The CI config with every module of the package under `folder` (one path a line)."""
    paths = [f"{folder}/__init__.py", *(f"{folder}/{m}.py" for m in _modules(module))]
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

    def parameter_space(self) -> list[Params]:
        return grid(package=MODULES, module=FUNCTIONS, version=["0.1.0", "1.2.3", "2.0.0"])

    def context_files(self, params: Params) -> list[str]:
        return ["ci.py", "ci.json", "tools/check_version.py", "tools/smoke.py"]

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        pkg, module, version = params["package"], params["module"], params["version"]
        code = {f"src/{pkg}/__init__.py": f'__version__ = "{version}"\n'}
        for number, name in enumerate(_modules(module)):
            code[f"src/{pkg}/{name}.py"] = f"def {name}(a, b):\n    return a + b + {number}\n"
        files = {
            "ci.py": CI,
            "ci.json": _ci_json(f"lib/{pkg}", module),
            "VERSION": f"{version}\n",
            "tools/check_version.py": CHECK_VERSION.format(init=f"lib/{pkg}/__init__.py"),
            "tools/smoke.py": SMOKE.format(path="lib", pkg=pkg, module=module, fn=module),
            **code,
        }
        tests = {
            f"{GRADING_DIR}/test_task.py": RUN_TESTS.format(
                script="ci.py",
                expected=["step compile ok", "step version ok", "smoke ok", "step smoke ok"],
                untouched={"ci.py": CI, **code},
            )
        }
        instruction = (
            f"The code moved from `lib/{pkg}/` to `src/{pkg}/` and `python ci.py` broke. Fix the CI "
            "setup, not `ci.py` or the code."
        )
        edits = [
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
        return instruction, files, tests, edits
