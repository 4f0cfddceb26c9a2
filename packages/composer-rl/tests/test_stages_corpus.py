"""The corpus: the standard library by default, split by file, deterministic; errors say what to give."""

from __future__ import annotations

from pathlib import Path

import pytest

from composer_rl.stages.config import CorpusConfig
from composer_rl.stages.corpus import CorpusError, load_corpus


def test_stdlib_default_split_is_by_file_and_deterministic() -> None:
    config = CorpusConfig(max_train_chars=400_000, max_heldout_chars=100_000)
    first, second = load_corpus(config), load_corpus(config)
    assert [d.name for d in first.train] == [d.name for d in second.train]
    assert first.heldout and first.train
    assert not {d.name for d in first.train} & {d.name for d in first.heldout}
    assert all(d.name.endswith(".py") for d in first.train)
    assert sum(len(d.text) for d in first.train) <= 400_000


def test_directory_and_jsonl_corpora(tmp_path: Path) -> None:
    for i in range(40):
        (tmp_path / f"m{i}.py").write_text(f"x = {i}\n")
    corpus = load_corpus(CorpusConfig(path=tmp_path, heldout_fraction=0.3))
    assert len(corpus.train) + len(corpus.heldout) == 40
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n{"body": "no text"}\n')
    with pytest.raises(CorpusError, match=r"bad.jsonl:2: each line must be an object"):
        load_corpus(CorpusConfig(path=bad))


def test_unusable_corpus_paths(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match="give a directory"):
        load_corpus(CorpusConfig(path=tmp_path / "nothing.txt"))
    (tmp_path / "one.py").write_text("x = 1\n")
    with pytest.raises(CorpusError, match="both sides of the split"):
        load_corpus(CorpusConfig(path=tmp_path, heldout_fraction=0.01))
