"""Every command a README prints runs as printed in a fresh shell of a fresh clone.

The shell blocks (```bash, ```sh, ```console, ```shell, and unlabelled blocks that start
with a command) of every README and of the topic pages under docs/ (below) are read line by
line. Each command must start with `uv run`, `uv` itself, or a documented setup step (`git
clone`, `pip install`, `bash .ci/...`), never a bare `python`, `pytest`, `torchrun` or `composer-rl`,
which a fresh shell does not have (they live in the workspace's venv). Then, without
running anything heavy: files the command names exist; `composer-rl ...` parses with the
real argparse parser (an `rl` command's settings also validate as an `RLConfig`); a
script's `--flags` are declared in its source; `python -m X` names an importable module;
`nox -s S` names a session of noxfile.py; `uv run --group G` a group of the root
pyproject.toml. Synopsis lines are read as written: `[--name N]` is an optional part
(checked as if given) and `A|B` an alternative (the first is checked).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _is_dated_record(page: Path) -> bool:
    """A dated record (docs/rl/2026-12-04-copy-kept.md) keeps its commands as they were run
    that day (heredocs, shell loops, flags since renamed): a record, not instructions."""
    return page.name[:1].isdigit()


# Every README of the repository (the packages', the example plugin's, the studies') and the
# topic pages under docs/ that the READMEs were cut into: a reader follows a link from a
# README and types what the page prints.
READMES = [
    ROOT / "README.md",
    *sorted((ROOT / "packages").glob("*/README.md")),
    *sorted((ROOT / "examples").glob("*/README.md")),
    *sorted(p for p in (ROOT / "docs").rglob("*.md") if not _is_dated_record(p)),
]
SHELL_LANGUAGES = {"bash", "sh", "console", "shell"}
# Words that start a command line in a fresh shell: uv and documented setup steps.
SETUP = {"uv", "git", "pip", "bash", "cd", "export", "mkdir", "curl"}
# Programs that live in the workspace's venv: only behind `uv run`.
VENV_ONLY = {"python", "python3", "pytest", "torchrun", "composer-rl", "nox", "ruff", "mypy"}
UV_RUN_OPTIONS_WITH_VALUE = {
    "--group",
    "--package",
    "--with",
    "--python",
    "--extra",
    "--only-group",
}


@dataclass(frozen=True)
class Command:
    readme: Path
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.readme.relative_to(ROOT)}:{self.line}: {self.text}"


def _blocks(text: str) -> list[tuple[str, int, list[str]]]:
    """(language, first line number, lines) of every fenced block."""
    blocks = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"^```(\w*)\s*$", lines[i])
        if fence:
            start = i + 1
            end = start
            while end < len(lines) and not lines[end].startswith("```"):
                end += 1
            blocks.append((fence.group(1), start + 1, lines[start:end]))
            i = end + 1
        else:
            i += 1
    return blocks


def readme_commands() -> list[Command]:
    commands = []
    for readme in READMES:
        for language, first, lines in _blocks(readme.read_text()):
            words = lines[0].split() if lines else []
            looks_like_shell = bool(words) and words[0] in SETUP | VENV_ONLY
            if language not in SHELL_LANGUAGES and not (language == "" and looks_like_shell):
                continue
            pending, start = "", first
            for number, raw in enumerate(lines, first):
                line = raw.removeprefix("$ ").rstrip()
                if not pending:
                    start = number
                if line.endswith("\\"):
                    pending += line[:-1] + " "
                    continue
                full = (pending + line).strip()
                pending = ""
                if full and not full.startswith("#"):
                    for part in full.split("&&"):
                        commands.append(Command(readme, start, part.strip()))
    return commands


def _words(text: str) -> list[str]:
    """The command's words: the comment dropped, synopsis brackets read as given, the
    first of `A|B` alternatives, leading VAR=value assignments dropped."""
    words = shlex.split(text, comments=True)
    out = []
    for word in words:
        word = word.replace("[", "").replace("]", "")
        if "|" in word and not word.startswith(("'", '"')):
            word = word.split("|", 1)[0]
        if word:
            out.append(word)
    while out and re.match(r"^[A-Z_][A-Z0-9_]*=", out[0]):
        out.pop(0)
    return out


def _check_paths(words: list[str]) -> list[str]:
    """Repository files a command names must exist (outputs under dist/, runs/, out/ and
    globs are the command's to make)."""
    problems = []
    for word in words:
        candidate = word.split("=", 1)[-1]
        top = candidate.split("/", 1)[0]
        if "/" not in candidate or "*" in candidate or candidate.startswith(("-", "s3:", "http")):
            continue
        in_repository = top in {"packages", "docs", "examples", ".ci"} or top == "."
        if in_repository and not (ROOT / candidate).exists():
            problems.append(f"{candidate} does not exist in the repository")
    return problems


def _parse_composer_rl(args: list[str]) -> list[str]:
    """Problems argparse (and, for `rl`, the RL config) finds in `composer-rl ARGS`."""
    from composer_rl.cli import build_parser

    parser = build_parser()
    err, out = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            namespace = parser.parse_args(args)
    except SystemExit as exit:
        if exit.code in (0, None):  # --help
            return []
        message = err.getvalue().strip().splitlines()[-1]
        placeholder = re.search(r"invalid \w+ value: '([A-Z][A-Z0-9_]*)'$", message)
        return [] if placeholder else [message]  # `--wait S` in a synopsis
    if args and args[0] == "rl":
        from composer_rl.rl.config import ConfigError, config_from_args

        namespace.config = None  # the file a user writes; its keys are checked elsewhere
        try:
            config_from_args(namespace)
        except ConfigError as error:
            return [str(error)]
    return []


def _nox_sessions() -> set[str]:
    text = (ROOT / "noxfile.py").read_text()
    return set(re.findall(r"@nox\.session[^\n]*\n(?:@[^\n]*\n)*def (\w+)\(", text))


def _check_script(script: str, args: list[str]) -> list[str]:
    path = ROOT / script
    if not path.is_file():
        return [f"{script} does not exist"]
    source = path.read_text()
    return [
        f"{script} declares no {flag}"
        for flag in (a.split("=", 1)[0] for a in args if a.startswith("--"))
        if f'"{flag}"' not in source and f"'{flag}'" not in source
    ]


def _check_uv_run(words: list[str]) -> list[str]:
    i = 2
    groups = tomllib.loads((ROOT / "pyproject.toml").read_text()).get("dependency-groups", {})
    problems = []
    while i < len(words) and words[i].startswith("-"):
        option = words[i]
        if option in UV_RUN_OPTIONS_WITH_VALUE:
            if option == "--group" and words[i + 1] not in groups:
                problems.append(f"the root pyproject.toml has no dependency group {words[i + 1]}")
            i += 2
        else:
            i += 1
    if i >= len(words):
        return ["`uv run` with no program"]
    program, args = words[i], words[i + 1 :]
    if program == "composer-rl":
        return problems + _parse_composer_rl(args)
    if program in ("python", "python3"):
        if args[:1] == ["-m"]:
            module, rest = args[1], args[2:]
            if importlib.util.find_spec(module) is None:
                return [*problems, f"no module {module}"]
            if module == "torch.distributed.run" and "-m" in rest:
                target = rest[rest.index("-m") + 1 :]
                if target[0] == "composer_rl.cli":
                    return problems + _parse_composer_rl(target[1:])
            return problems
        return problems + _check_script(args[0], args[1:])
    if program == "pytest":
        return problems + [
            f"{a} does not exist" for a in args if not a.startswith("-") and not (ROOT / a).exists()
        ]
    if program == "nox":
        for j, arg in enumerate(args):
            if arg == "-s":
                for name in args[j + 1 :]:
                    if name.startswith("-"):
                        break
                    base = name.split("(", 1)[0].split("-", 1)[0]
                    if base not in _nox_sessions():
                        problems.append(f"noxfile.py has no session {name}")
        return problems
    return [*problems, f"`uv run {program}`: not a program this workspace installs"]


def check(command: Command) -> list[str]:
    words = _words(command.text)
    if not words:
        return []
    first = words[0]
    if first in VENV_ONLY:
        return [
            f"starts with a bare `{first}`, which a fresh shell does not have: `uv run {first}`"
        ]
    if first not in SETUP:
        return [f"starts with `{first}`: not uv or a documented setup step"]
    problems = _check_paths(words)
    if words[:2] == ["uv", "run"]:
        problems += _check_uv_run(words)
    elif first == "uv" and words[1:2] == ["build"]:
        packages = {p.name for p in (ROOT / "packages").iterdir()}
        if "--package" in words and words[words.index("--package") + 1] not in packages:
            problems.append(f"no workspace package {words[words.index('--package') + 1]}")
    elif first == "bash" and len(words) > 1 and not (ROOT / words[1]).exists():
        problems.append(f"{words[1]} does not exist")
    return problems


COMMANDS = readme_commands()


def test_the_readmes_print_commands() -> None:
    assert len(COMMANDS) > 30
    read = {c.readme.relative_to(ROOT).as_posix() for c in COMMANDS}
    # The example plugin's README and a topic page are read, not only the packages' READMEs.
    assert {"examples/reward-plugin/README.md", "docs/rl/plugins.md"} <= read, sorted(read)
    assert any("torch.distributed.run" in c.text for c in COMMANDS)  # unlabelled blocks too


@pytest.mark.parametrize("command", COMMANDS, ids=str)
def test_a_readme_command_runs_as_printed(command: Command) -> None:
    assert check(command) == [], str(command)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("python -m torch.distributed.run -m composer_rl.cli pretrain", "bare `python`"),
        ("composer-rl tasks list", "bare `composer-rl`"),
        ("uv run composer-rl tasks lst", "invalid choice"),
        ("uv run composer-rl eval --no-such-flag", "unrecognized arguments"),
        ("uv run composer-rl rl --loop.steps -1", "loop.steps"),
        ("uv run python packages/composer-rl/benchmarks/nothing.py", "does not exist"),
        ("uv run python packages/composer-rl/benchmarks/bench_rollout.py --nope", "no --nope"),
        ("uv run nox -s \"nothing(package='x')\"", "no session"),
        ("uv run pytest packages/composer-nothing/tests", "does not exist"),
        ("uv run --group nothing python -m json.tool", "no dependency group"),
    ],
)
def test_the_check_catches_a_broken_command(text: str, says: str) -> None:
    problems = check(Command(ROOT / "README.md", 1, text))
    assert any(says in p for p in problems), problems


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\[<>=!~; ]", r, maxsplit=1)[0].lower() for r in requirements}


def test_a_package_test_command_finds_its_test_dependencies() -> None:
    """`uv run pytest packages/<name>/tests` (as the READMEs print it) runs in the root's
    environment: its default `test` group must hold every member's `test` group, or the
    suite fails at collection (hypothesis, moto, torchao ... missing)."""
    root = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert {"dev", "test"} <= set(root["tool"]["uv"]["default-groups"])
    union = _names(root["dependency-groups"]["test"])
    for pyproject in sorted((ROOT / "packages").glob("*/pyproject.toml")):
        member = tomllib.loads(pyproject.read_text()).get("dependency-groups", {})
        missing = _names(member.get("test", [])) - union
        assert not missing, f"{pyproject.parent.name}'s test group: add {missing} to the root's"
