"""Style: ruff's findings on the Python lines the episode wrote, per changed line.

A real ruff binary (the one the ``ruff`` package installs) lints the changed Python files
as they stand after the episode, in an isolated temporary tree and with ``--isolated`` so
the repository's own configuration cannot relax or tighten the rules. Only findings on
lines the diff added count, so the policy is not blamed for the code it was given, and
the count is divided by the number of added Python lines so a large change is not
punished for being large.

    value = -min(1, findings / max(added_lines, 1) / full_penalty_density)
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, ConfigDict, Field
from ruff.__main__ import find_ruff_bin

from composer_hooks import hookimpl
from composer_rewards.diff import parse_diff
from composer_rewards.episode import Episode
from composer_rewards.plugin import ConfiguredPlugin
from composer_rewards.results import RewardComponent


class StyleSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    select: list[str] = Field(default_factory=lambda: ["E", "F", "W", "B", "SIM", "UP"])
    line_length: int = Field(default=100, gt=0)
    full_penalty_density: float = Field(
        default=0.1, gt=0, description="findings per added line that earn the full -1"
    )
    only_added_lines: bool = True
    weight: float = 0.1
    timeout_s: float = Field(default=60.0, gt=0)


class RuffFinding(BaseModel):
    path: str
    row: int
    code: str
    message: str


def _safe_relative(path: str) -> PurePosixPath:
    relative = PurePosixPath(path)
    if relative.is_absolute() or ".." in relative.parts:
        raise ValueError(f"changed file path {path!r} must be relative to the workspace")
    return relative


def run_ruff(files: dict[str, str], settings: StyleSettings) -> list[RuffFinding]:
    """Lint `files` (path -> content) with the ruff binary and return its findings."""
    if not files:
        return []
    with tempfile.TemporaryDirectory(prefix="composer-style-") as tmp:
        root = Path(tmp)
        for path, content in files.items():
            target = root / _safe_relative(path)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
        command = [
            find_ruff_bin(),
            "check",
            "--isolated",
            "--no-cache",
            "--exit-zero",
            "--output-format=json",
            f"--line-length={settings.line_length}",
            f"--select={','.join(settings.select)}",
            # Paths are the policy's: one named "-x.py" must not be read as an option
            # (found by RL: a file named "- " made ruff fail and the reward go missing).
            "--",
            *sorted(str(_safe_relative(path)) for path in files),
        ]
        completed = subprocess.run(
            command,
            cwd=root,
            capture_output=True,
            text=True,
            timeout=settings.timeout_s,
            check=False,
        )
        if completed.returncode != 0:
            raise RuntimeError(f"ruff failed ({completed.returncode}): {completed.stderr.strip()}")
        findings = []
        for item in json.loads(completed.stdout or "[]"):
            filename = Path(item["filename"])
            relative = filename.relative_to(root.resolve()) if filename.is_absolute() else filename
            findings.append(
                RuffFinding(
                    path=relative.as_posix(),
                    row=item["location"]["row"],
                    code=item["code"] or "syntax",
                    message=item["message"],
                )
            )
        return findings


class StyleReward(ConfiguredPlugin[StyleSettings]):
    name = "style"
    settings_type = StyleSettings

    @hookimpl
    def composer_reward(self, episode: Episode) -> RewardComponent | None:
        changes = {p: c for p, c in parse_diff(episode.diff).items() if p.endswith(".py")}
        files = {
            path: content
            for path, content in episode.changed_files.items()
            if path in changes and content is not None
        }
        added = sum(len(changes[path].added) for path in files)
        if not files or added == 0:
            return None  # nothing in Python was written: no style signal
        findings = run_ruff(files, self.settings)
        if self.settings.only_added_lines:
            findings = [f for f in findings if f.row in changes[f.path].added_line_numbers]
        density = len(findings) / added
        value = -min(1.0, density / self.settings.full_penalty_density)
        codes = sorted({f.code for f in findings})
        return RewardComponent(
            name="style",
            value=value,
            weight=self.settings.weight,
            details=f"{len(findings)} ruff findings on {added} added lines {codes}",
        )
