"""Reading a file again for nothing: a read of a file the episode has already read, with
nothing in between that could have changed the file or taken it out of the context.

Counted in the ``redundant_reads`` component, one per redundant read, as
``-min(1, per_read * count)``. :func:`redundant_reads` is the one reading; the ``reread``
monitor (:mod:`composer_rewards.monitors.reread`) flags exactly the reads it returns.

- **Reads** are ``read_file`` calls that succeeded, and ``run`` commands that succeeded and
  are nothing but a ``cat`` of one file (``cat a.py``, ``cat -n ./a.py``; no pipe, redirect,
  glob or second command): printing a whole file in the terminal is the same read, so moving
  to it does not escape the charge.
- **One file, one name.** Paths are compared as the sandbox resolves them (composer-infra's
  ``split_workspace_path``): relative to the workspace, a leading ``/workspace/`` dropped,
  empty and ``.`` parts dropped, ``..`` folded. ``a.py``, ``./a.py``, ``.//a.py``,
  ``src/../a.py`` and ``/workspace/a.py`` are one file. Symlinks are not followed (a link
  and its target are two names here).
- **What makes a read new again.** A later read of a file is redundant only if none of
  these came between it and the file's last read:

  - a ``write_file`` or ``edit_file`` of that file that was executed, failed or not (a
    failed ``edit_file`` means the agent's copy was off, and the tool's error tells it to
    read the file again);
  - a ``run`` command that could have written files (``transcript.may_write``: anything
    but looking around and test runs, e.g. ``sed -i``, a redirect, ``python fix.py``,
    ``make``): it could have changed any file, so every earlier read is forgotten;
  - a compaction of the context (self-summarization or truncation): the loop lists in
    ``Episode.metadata["compacted_after_turns"]`` (``episode.COMPACTIONS_KEY``) the turns
    after which the context was condensed; what was read before it is no longer in the
    context. (A truncation keeps the latest turns; their reads are forgotten too, which
    errs towards not charging.)

  And the read must have returned what the file's last read returned: a file that changed
  under something this reading cannot see (a process left running) is read anew.
- Malformed calls were never executed and count for nothing; a read that failed (a missing
  file) read nothing.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from composer_hooks import hookimpl
from composer_rewards.episode import COMPACTIONS_KEY, EDIT_TOOLS, TERMINAL_TOOL, Episode, ToolCall
from composer_rewards.plugin import ConfiguredPlugin
from composer_rewards.results import RewardComponent
from composer_rewards.transcript import may_write

READ_TOOL = "read_file"
SANDBOX_ROOT = "/workspace"
"""Where the workspace is mounted in the sandbox (composer-infra's ``SANDBOX_ROOT``)."""

_SHELL_SYNTAX = frozenset("|&;<>()$`*?[]{}~\n")


class RedundantReadsSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    per_read: float = Field(default=0.25, ge=0, le=1)
    weight: float = Field(default=0.2, ge=0)


def workspace_path(path: str) -> str | None:
    """The one spelling of a workspace path (see the module docstring), or None for a path
    the sandbox refuses (empty, outside the workspace, ``..`` above its root)."""
    if not path or "\x00" in path:
        return None
    if path.startswith("/"):
        if path != SANDBOX_ROOT and not path.startswith(SANDBOX_ROOT + "/"):
            return None
        path = path[len(SANDBOX_ROOT) :]
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                return None
            parts.pop()
        else:
            parts.append(part)
    return "/".join(parts) or None


def cat_path(command: str) -> str | None:
    """The file a command that is only ``cat [options] FILE`` prints, as written; None for
    any other command (several files, a pipe, redirect, glob, variable or second command)."""
    if any(char in _SHELL_SYNTAX for char in command):
        return None
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if not words or words[0] != "cat":
        return None
    paths = [word for word in words[1:] if not word.startswith("-")]
    return paths[0] if len(paths) == 1 else None


@dataclass(frozen=True)
class RedundantRead:
    """A read of `path` at tool call `index` that repeats the read at tool call `first`."""

    index: int
    tool: str
    path: str
    first: int

    def describe(self) -> str:
        return f"{self.tool} #{self.index}: {self.path} (already read at #{self.first})"


def read_path(name: str, arguments: Mapping[str, Any]) -> str | None:
    """The file a call reads, as the workspace resolves it (None: it reads no file)."""
    if name == READ_TOOL:
        return workspace_path(str(arguments.get("path", "")))
    if name == TERMINAL_TOOL:
        path = cat_path(str(arguments.get("command", "")))
        return workspace_path(path) if path is not None else None
    return None


@dataclass(frozen=True)
class ReadEvent:
    """One step of an episode as a reading of files sees it: `forget` names what may have
    changed since (``"all"``: every file, after a compaction or a command that could write;
    ``"path"``: the file `path`, after an edit of it); otherwise tool call `index` read
    `path` (successfully or not: `call.ok`)."""

    index: int
    call: ToolCall
    path: str | None
    forget: Literal["all", "path"] | None = None


def read_events(episode: Episode) -> Iterator[ReadEvent]:
    """The reads of `episode` and what may have changed between them, in order (malformed
    calls were never executed and give nothing). The one account of "what makes a read new"
    for every reading of reads (`redundant_reads`, `failed_reads.failed_reads_again`)."""
    compactions = sorted(int(turn) for turn in episode.metadata.get(COMPACTIONS_KEY, ()) or ())
    turn_seen = None
    for index, call in enumerate(episode.tool_calls):
        if call.malformed:
            continue
        if turn_seen is not None and any(turn_seen <= t < call.turn for t in compactions):
            yield ReadEvent(index, call, None, "all")
        turn_seen = call.turn
        if call.name in EDIT_TOOLS:
            path = workspace_path(str(call.arguments.get("path", "")))
            if path is not None:
                yield ReadEvent(index, call, path, "path")
        elif call.name == TERMINAL_TOOL and may_write(str(call.arguments.get("command", ""))):
            yield ReadEvent(index, call, None, "all")
        elif (path := read_path(call.name, call.arguments)) is not None:
            yield ReadEvent(index, call, path)


def redundant_reads(episode: Episode) -> list[RedundantRead]:
    """Every read of `episode` that learned nothing new, in order (the module docstring
    says what counts)."""
    seen: dict[str, tuple[int, str]] = {}  # path -> (index of its last read, what it showed)
    found: list[RedundantRead] = []
    for event in read_events(episode):
        if event.forget == "all":
            seen.clear()
        elif event.forget == "path":
            seen.pop(event.path or "", None)
        elif event.path is not None and event.call.ok:
            last = seen.get(event.path)
            if last is not None and event.call.output == last[1]:
                found.append(RedundantRead(event.index, event.call.name, event.path, last[0]))
            seen[event.path] = (event.index, event.call.output)
    return found


class RedundantReadsPenalty(ConfiguredPlugin[RedundantReadsSettings]):
    """``redundant_reads`` = -min(1, per_read * the episode's redundant reads)."""

    name = "redundant_reads"
    settings_type = RedundantReadsSettings

    @hookimpl
    def composer_reward(self, episode: Episode) -> RewardComponent:
        found = redundant_reads(episode)
        return RewardComponent(
            name="redundant_reads",
            value=-min(1.0, self.settings.per_read * len(found)),
            weight=self.settings.weight,
            details="; ".join(read.describe() for read in found),
        )
