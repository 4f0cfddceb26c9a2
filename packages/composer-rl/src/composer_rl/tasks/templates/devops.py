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
import re
from typing import ClassVar

from composer_rl.tasks.model import GRADING_DIR, VISIBLE_TESTS_DIR, Category, Edit
from composer_rl.tasks.templates.base import Params, Template, named_grid
from composer_rl.tasks.templates.common import diff_edits
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


LOG_APP = '''"""python app.py FILE: the total per region of FILE's 'region,cents' lines."""

{imports}import sys

from loader import read_rows
from {mod} import {fn}
{logger}

def main(argv=None):
{configure}    path = (sys.argv[1:] if argv is None else argv)[0]
    rows = read_rows(path)
    totals = {fn}(rows)
    {debug}f"{{len(rows)}} rows in, {{len(totals)}} regions out")
    for region, cents in totals.items():
        print(f"{{region}} {{cents}}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
'''
LOG_CONFIGURE = (
    '    wanted = os.environ.get("LOG_LEVEL", "WARNING").upper()\n'
    "    logging.basicConfig(level={level}, stream=sys.stderr)\n"
)
LOG_LOADER = '''{imports}def read_rows(path):
    """(region, cents) of each 'region,cents' line; a malformed line is skipped."""
    rows = []
    with open(path) as handle:
        for number, line in enumerate(handle, 1):
            parts = line.strip().split(",")
            if len(parts) != 2 or not parts[1].isdigit():
                {warning}f"skipped line {{number}}: {{line.strip()!r}}")
                continue
            rows.append((parts[0], int(parts[1])))
    {debug}f"read {{len(rows)}} rows from {{path}}")
    return rows
'''
LOG_SUMS = '''{imports}def {fn}(rows):
    """{{region: total cents}}, regions sorted."""
    totals = {{}}
    for region, cents in rows:
        totals[region] = totals.get(region, 0) + cents
    {debug}f"{{len(totals)}} regions")
    return dict(sorted(totals.items()))
'''
LOG_IMPORTS = "import logging\n\nlog = logging.getLogger(__name__)\n\n\n"

LOG_VISIBLE = '''"""python app.py prints only the totals; diagnostics go to stderr through logging."""

import os
import subprocess
import sys

DATA = "north,120\\nsouth,45\\nnorth,x\\neast,300\\nsouth,5\\n"


def run_app(tmp_path, log_level=None):
    data = tmp_path / "sales.csv"
    data.write_text(DATA)
    env = {k: v for k, v in os.environ.items() if k != "LOG_LEVEL"}
    if log_level:
        env["LOG_LEVEL"] = log_level
    return subprocess.run(
        [sys.executable, "app.py", str(data)], capture_output=True, text=True, env=env, timeout=60
    )


def test_stdout_holds_only_the_totals(tmp_path):
    out = run_app(tmp_path).stdout
    assert out == "east 300\\nnorth 120\\nsouth 50\\n", (
        f"stdout should hold only the totals (a pipeline reads it), not diagnostics: {out!r}"
    )


def test_warnings_reach_stderr_by_default(tmp_path):
    proc = run_app(tmp_path)
    assert "skipped line 3" in proc.stderr, "the skipped line should be a warning on stderr"
    assert "rows from" not in proc.stderr, "debug messages should be hidden unless LOG_LEVEL=DEBUG"


def test_log_level_debug_shows_the_debug_messages(tmp_path):
    err = run_app(tmp_path, "DEBUG").stderr
    for said in ("read 4 rows", "3 regions", "4 rows in, 3 regions out"):
        assert said in err, f"with LOG_LEVEL=DEBUG, {said!r} should be logged to stderr"
'''

LOG_TESTS = """import ast

import pytest

from workspace_probe import run, workspace_text

DATA = "west,70\\nwest,oops\\nhill,15\\n\\ncity,9\\nhill,1\\n"
TOTALS = "city 9\\nhill 16\\nwest 70\\n"
DEBUG = ["read 4 rows from", "3 regions", "4 rows in, 3 regions out"]
WARNINGS = ["skipped line 2", "skipped line 4"]


def _run(tmp_path, **env):
    data = tmp_path / "in.csv"
    data.write_text(DATA)
    proc = run(["python", "app.py", str(data)], env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == TOTALS
    return proc.stderr


def test_default_level_shows_warnings_only(tmp_path):
    err = _run(tmp_path)
    assert all(w in err for w in WARNINGS), err
    assert not any(d in err for d in DEBUG), err


def test_debug_level(tmp_path):
    err = _run(tmp_path, LOG_LEVEL="DEBUG")
    assert all(said in err for said in DEBUG + WARNINGS), err


def test_error_level_is_quiet(tmp_path):
    assert _run(tmp_path, LOG_LEVEL="error") == ""


@pytest.mark.parametrize("path", ["loader.py", {module!r}])
def test_modules_log_instead_of_printing(path):
    tree = ast.parse(workspace_text(path))
    calls = [n.func for n in ast.walk(tree) if isinstance(n, ast.Call)]
    assert not [f for f in calls if isinstance(f, ast.Name) and f.id == "print"]
    assert "logging" in {{a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}}
"""


class PrintsToLogging(Template):
    """A script's diagnostics are prints on stdout, which a pipeline reads: move them to
    module loggers on stderr, the level from `LOG_LEVEL`; graded by running the script."""

    name: ClassVar[str] = "prints_to_logging"
    category: ClassVar[Category] = Category.DEVOPS
    difficulty: ClassVar[int] = 3
    name_params: ClassVar[tuple[str, ...]] = ("module", "function")

    def parameter_space(self) -> list[Params]:
        return named_grid(
            self.name,
            {"module": MODULES, "function": FUNCTIONS},
            train=100,
            heldout=25,
            phrasing=list(PHRASINGS),
        )

    def context_files(self, params: Params) -> list[str]:
        return ["app.py", "loader.py", f"{params['module']}.py"]

    def _files(
        self, params: Params, *, logged: bool, level: str = "wanted", warning: str = "warning"
    ) -> dict[str, str]:
        """Printing (`logged` False) or logging; `level` is what `basicConfig` is given and
        `warning` the level of the skipped-line message."""
        mod, fn = params["module"], params["function"]
        if logged:
            debug, warn, imports = "log.debug(", f"log.{warning}(", LOG_IMPORTS
        else:
            debug, warn, imports = 'print("debug: " + ', 'print("warning: " + ', ""
        files = {
            "app.py": LOG_APP.format(
                mod=mod,
                fn=fn,
                imports="import logging\nimport os\n" if logged else "",
                logger='\nlog = logging.getLogger("app")\n' if logged else "",
                configure=LOG_CONFIGURE.format(level=level) if logged else "",
                debug=debug,
            ),
            "loader.py": LOG_LOADER.format(imports=imports, warning=warn, debug=debug),
            f"{mod}.py": LOG_SUMS.format(imports=imports, fn=fn, debug=debug),
        }
        return {path: _one_fstring(text) for path, text in files.items()}

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod = params["module"]
        files = self._files(params, logged=False)
        files[f"{VISIBLE_TESTS_DIR}/test_app.py"] = LOG_VISIBLE
        tests = {f"{GRADING_DIR}/test_task.py": LOG_TESTS.format(module=f"{mod}.py")}
        instruction = [
            f"`python app.py` prints diagnostics from `loader.py` and `{mod}.py` into its "
            "output. Send them to logging on stderr, the level from `LOG_LEVEL` (default "
            "WARNING).",
            "stdout must hold only the results. Route the diagnostics through logging to "
            "stderr, each at the level its prefix says; LOG_LEVEL sets the level (default "
            "WARNING).",
            "A pipeline reads this script's output and chokes on its debug lines. Make the "
            "diagnostics log records on stderr, filtered by `LOG_LEVEL` (default WARNING).",
        ][params["phrasing"]]
        return instruction, files, tests, self._edits(params)

    def _edits(self, params: Params, **after: str) -> list[Edit]:
        before = self._files(params, logged=False)
        return diff_edits(before, self._files(params, logged=True, **after))

    def wrong_edits(self, params: Params) -> list[list[Edit]]:
        """The skipped lines logged as debug, so hidden by default; logging at a fixed
        level, `LOG_LEVEL` ignored; the prints moved to stderr (no levels). The recovering
        demonstrations open with the first that fails the visible tests: the one-line
        slip first keeps them inside an SFT row."""
        before = self._files(params, logged=False)
        to_stderr = {path: _to_stderr(text) for path, text in before.items()}
        return [
            self._edits(params, warning="debug"),
            self._edits(params, level="logging.WARNING"),
            diff_edits(before, to_stderr),
        ]


def _one_fstring(text: str) -> str:
    """`print("debug: " + f"...")` of the printing version written as one f-string."""
    return re.sub(r'print\("(\w+): " \+ f"(.*)"\)', r'print(f"\1: \2")', text)


def _to_stderr(text: str) -> str:
    """Every diagnostic print sent to stderr (a wrong first attempt: no levels)."""
    found = re.compile(r'print\(f"(debug|warning): (.*)"\)$', re.MULTILINE)
    text = found.sub(r'print(f"\1: \2", file=sys.stderr)', text)
    if "file=sys.stderr" in text and "import sys" not in text:
        text = "import sys\n\n\n" + text
    return text
