"""Reading a JSON-lines file that another process is still appending to.

The RL loop appends one line per episode or step and flushes after each, so a reader can
see a last line that is only half written (the writer is mid-line, or was killed there).
`JsonlTail` consumes only whole lines, remembers the byte offset it reached, and on the
next call reads only what was appended since: a run with tens of thousands of episodes is
parsed once, not on every request. A line that is not JSON is counted and skipped (with its
line number) instead of failing the whole file; an unterminated tail is reported so the
viewer can say "last line half-written" rather than guess.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHUNK = 1 << 20


@dataclass
class LineProblem:
    """A line that could not be read: its 1-based number and why."""

    line: int
    error: str


@dataclass
class JsonlTail:
    """Incremental reader of one JSONL file; `poll` hands each new whole line to a callback.

    The callback gets the parsed object, the line's byte offset and length, so a caller can
    keep a small index and read the whole record back later with `read_at`.
    """

    path: Path
    offset: int = 0
    lines: int = 0
    bad: list[LineProblem] = field(default_factory=list)
    partial_bytes: int = 0  # bytes after the last newline (a half-written line), if any
    exists: bool = False
    _inode: int | None = None

    def poll(self, on_record: Callable[[dict[str, Any], int, int], None]) -> int:
        """Read what was appended since the last call; returns how many records were new.

        A file that shrank or was replaced (a new inode) is read again from the start.
        """
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            self.exists = False
            return 0
        self.exists = True
        if self._inode is not None and (stat.st_ino != self._inode or stat.st_size < self.offset):
            self.offset, self.lines, self.bad = 0, 0, []
        self._inode = stat.st_ino
        if stat.st_size == self.offset:
            self.partial_bytes = 0
            return 0
        new = 0
        with self.path.open("rb") as f:
            f.seek(self.offset)
            buffer = b""
            position = self.offset
            while True:
                chunk = f.read(CHUNK)
                if not chunk:
                    break
                buffer += chunk
                start = 0
                while True:
                    end = buffer.find(b"\n", start)
                    if end < 0:
                        break
                    raw = buffer[start:end]
                    self.lines += 1
                    if raw.strip():
                        record = self._parse(raw)
                        if record is not None:
                            on_record(record, position + start, end - start)
                            new += 1
                    start = end + 1
                position += start
                buffer = buffer[start:]
            self.offset = position
            self.partial_bytes = len(buffer)
        return new

    def _parse(self, raw: bytes) -> dict[str, Any] | None:
        try:
            record = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as error:
            self.bad.append(LineProblem(self.lines, f"not JSON: {error}"[:200]))
            return None
        if not isinstance(record, dict):
            self.bad.append(
                LineProblem(self.lines, f"a JSON {type(record).__name__}, not an object")
            )
            return None
        return record

    def read_at(self, offset: int, length: int) -> dict[str, Any]:
        """The record whose line starts at `offset` (as handed to the callback)."""
        fd = os.open(self.path, os.O_RDONLY)
        try:
            raw = os.pread(fd, length, offset)
        finally:
            os.close(fd)
        record = json.loads(raw)
        if not isinstance(record, dict):
            raise ValueError("not a JSON object")
        return record

    def notes(self) -> list[str]:
        """What a reader should know about this file (half-written tail, unreadable lines)."""
        out = []
        name = self.path.name
        if self.partial_bytes:
            out.append(
                f"{name}: the last line is half-written ({self.partial_bytes} bytes without a "
                "newline; a writer is mid-line or was killed there); it is left out until it ends"
            )
        if self.bad:
            shown = ", ".join(f"line {p.line} ({p.error})" for p in self.bad[:3])
            more = f" and {len(self.bad) - 3} more" if len(self.bad) > 3 else ""
            out.append(f"{name}: {len(self.bad)} unreadable line(s) skipped: {shown}{more}")
        return out


def read_all(path: Path) -> tuple[list[dict[str, Any]], JsonlTail]:
    """Every whole record of a small file (metrics, eval), with the reader for its notes."""
    tail = JsonlTail(path)
    records: list[dict[str, Any]] = []
    tail.poll(lambda record, _offset, _length: records.append(record))
    return records, tail


__all__ = ["JsonlTail", "LineProblem", "read_all"]
