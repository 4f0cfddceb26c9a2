"""Byte-level BPE: training on code, special tokens, round trips, save/load, foreign files."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from composer_model import SPECIAL_TOKENS, ComposerTokenizer, train_tokenizer


def _stdlib_code(max_bytes: int = 2_000_000) -> list[str]:
    root = Path(sysconfig.get_paths()["stdlib"])
    texts, total = [], 0
    for path in sorted(root.glob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        texts.append(text)
        total += len(text)
        if total > max_bytes:
            break
    return texts


@pytest.fixture(scope="module")
def tokenizer() -> ComposerTokenizer:
    return train_tokenizer(_stdlib_code(), vocab_size=2048)


def test_special_tokens_come_first_and_stay_whole(tokenizer: ComposerTokenizer) -> None:
    assert SPECIAL_TOKENS[0] == "<|endoftext|>" and len(SPECIAL_TOKENS) == 14
    assert [tokenizer.token_to_id(t) for t in SPECIAL_TOKENS] == list(range(len(SPECIAL_TOKENS)))
    ids = tokenizer.encode("<|user|>fix it<|end_of_turn|><|assistant|><|think|>hmm<|/think|>")
    assert ids[0] == tokenizer.token_to_id("<|user|>")
    assert tokenizer.token_to_id("<|think|>") in ids and tokenizer.token_to_id("<|/think|>") in ids
    assert tokenizer.eos_id == 0 and tokenizer.pad_id == 1


def test_any_text_round_trips(tokenizer: ComposerTokenizer) -> None:
    for text in [
        "def f(x):\n    return x  # ünïcödé ✓\n",
        "日本語 \t\r\n",
        "\x00\x01 emoji 🚀",
        "",
    ]:
        assert tokenizer.decode(tokenizer.encode(text)) == text


def test_training_learns_code_merges(tokenizer: ComposerTokenizer) -> None:
    assert tokenizer.vocab_size == 2048
    text = "    def __init__(self):\n        return None\n"
    assert len(tokenizer.encode(text)) < len(text.encode()) / 2.5


def test_save_and_load(tokenizer: ComposerTokenizer, tmp_path: Path) -> None:
    path = tokenizer.save(tmp_path / "tokenizer.json")
    loaded = ComposerTokenizer.from_file(path)
    assert ComposerTokenizer.from_file(tmp_path).vocab_size == tokenizer.vocab_size
    text = "import os\nprint(os.getcwd())<|endoftext|>"
    assert loaded.encode(text) == tokenizer.encode(text)


def test_loads_a_foreign_hf_tokenizer(tmp_path: Path) -> None:
    foreign = Tokenizer(models.WordLevel({"hello": 0, "world": 1, "[UNK]": 2}, unk_token="[UNK]"))
    foreign.pre_tokenizer = pre_tokenizers.Whitespace()
    foreign.save(str(tmp_path / "tokenizer.json"))
    loaded = ComposerTokenizer.from_file(tmp_path / "tokenizer.json")
    assert loaded.encode("hello world nope") == [0, 1, 2]
    assert loaded.special_ids == {}
    with pytest.raises(KeyError, match="endoftext"):
        _ = loaded.eos_id


def test_bad_inputs(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least 270"):
        train_tokenizer(["x"], vocab_size=100)
    with pytest.raises(FileNotFoundError):
        ComposerTokenizer.from_file(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"not a valid HF tokenizer\.json"):
        ComposerTokenizer.from_file(tmp_path / "bad.json")
