"""Pretraining documents: the Python standard library by default, or files / JSONL given.

The split into train and held-out is by a hash of each document's name, so it is the same on
every run and machine and a file never sits on both sides. Documents are capped by total
characters (in a stable order) so that tokenizing stays cheap next to the training budget.
"""

from __future__ import annotations

import hashlib
import json
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from composer_rl.stages.config import CorpusConfig

TEXT_SUFFIXES = {".py", ".txt", ".md", ".rst", ".toml", ".cfg", ".json", ".yaml", ".yml"}
STDLIB_SKIP = {
    "test",
    "tests",
    "idlelib",
    "site-packages",
    "dist-packages",
    "__pycache__",
    "turtledemo",
}


class CorpusError(ValueError):
    """The corpus cannot be read; the message says what to give instead."""


@dataclass(frozen=True)
class Document:
    name: str
    text: str


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _iter_stdlib() -> Iterator[Document]:
    root = stdlib_root()
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if STDLIB_SKIP & set(rel.parts[:-1]):
            continue
        try:
            yield Document(rel.as_posix(), path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, OSError):
            continue


def _iter_directory(root: Path) -> Iterator[Document]:
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.suffix in TEXT_SUFFIXES and "__pycache__" not in path.parts:
            try:
                yield Document(path.relative_to(root).as_posix(), path.read_text(encoding="utf-8"))
            except UnicodeDecodeError:
                continue


def _iter_jsonl(path: Path) -> Iterator[Document]:
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise CorpusError(f"{path}:{number}: invalid JSON: {exc.msg}") from exc
            if not isinstance(record, dict) or not isinstance(record.get("text"), str):
                raise CorpusError(
                    f'{path}:{number}: each line must be an object with a "text" string '
                    '(and optionally an "id")'
                )
            yield Document(str(record.get("id", f"{path.name}:{number}")), record["text"])


def iter_documents(path: Path | None) -> Iterator[Document]:
    if path is None:
        yield from _iter_stdlib()
    elif path.is_dir():
        yield from _iter_directory(path)
    elif path.is_file() and path.suffix == ".jsonl":
        yield from _iter_jsonl(path)
    else:
        raise CorpusError(
            f"corpus {path}: give a directory of text files or a .jsonl file of "
            '{"text": ...} records (or nothing, for the Python standard library)'
        )


def is_heldout(name: str, fraction: float) -> bool:
    digest = hashlib.sha256(name.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


@dataclass(frozen=True)
class Corpus:
    train: list[Document]
    heldout: list[Document]


def load_corpus(config: CorpusConfig) -> Corpus:
    train: list[Document] = []
    heldout: list[Document] = []
    sizes = {"train": 0, "heldout": 0}
    for doc in iter_documents(config.path):
        if not doc.text.strip():
            continue
        side = "heldout" if is_heldout(doc.name, config.heldout_fraction) else "train"
        limit = config.max_heldout_chars if side == "heldout" else config.max_train_chars
        if sizes[side] + len(doc.text) > limit:
            continue
        sizes[side] += len(doc.text)
        (heldout if side == "heldout" else train).append(doc)
    if not train or not heldout:
        raise CorpusError(
            f"corpus {config.path or stdlib_root()}: needs documents on both sides of the split "
            f"(got {len(train)} train, {len(heldout)} held-out); add more files or raise "
            "heldout_fraction"
        )
    return Corpus(train, heldout)
