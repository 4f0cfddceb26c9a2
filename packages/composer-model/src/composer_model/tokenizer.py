"""Byte-level BPE tokenizer (HF `tokenizers`) with Composer's chat and tool special tokens.

Byte-level means every string round-trips, whatever its script or bytes; the special tokens
mark roles, tool calls and results, thinking and self-summaries, and are never split or
produced by the BPE merges. Any HF `tokenizer.json` can be loaded as well (e.g. Kimi K2's or
DeepSeek-V3's), in which case the special tokens are whatever that file defines.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

SPECIAL_TOKENS: list[str] = [
    "<|endoftext|>",
    "<|pad|>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|tool_call|>",
    "<|/tool_call|>",
    "<|tool_result|>",
    "<|/tool_result|>",
    "<|think|>",
    "<|/think|>",
    "<|summary|>",
    "<|/summary|>",
    "<|end_of_turn|>",
]

EOS_TOKEN = "<|endoftext|>"
PAD_TOKEN = "<|pad|>"


class ComposerTokenizer:
    """A thin, typed wrapper over `tokenizers.Tokenizer`."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tok = tokenizer

    @property
    def backend(self) -> Tokenizer:
        return self._tok

    @property
    def vocab_size(self) -> int:
        return int(self._tok.get_vocab_size(with_added_tokens=True))

    def token_to_id(self, token: str) -> int:
        idx = self._tok.token_to_id(token)
        if idx is None:
            raise KeyError(f"token {token!r} is not in this tokenizer's vocabulary")
        return int(idx)

    def id_to_token(self, idx: int) -> str | None:
        token = self._tok.id_to_token(idx)
        return None if token is None else str(token)

    @property
    def eos_id(self) -> int:
        return self.token_to_id(EOS_TOKEN)

    @property
    def pad_id(self) -> int:
        return self.token_to_id(PAD_TOKEN)

    @property
    def special_ids(self) -> dict[str, int]:
        """The Composer special tokens this vocabulary holds, by name."""
        out = {}
        for token in SPECIAL_TOKENS:
            idx = self._tok.token_to_id(token)
            if idx is not None:
                out[token] = int(idx)
        return out

    def encode(self, text: str) -> list[int]:
        """Token ids; special-token strings in `text` become their single ids."""
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [list(e.ids) for e in self._tok.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return str(self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens))

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        if path.is_dir():
            path = path / "tokenizer.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        self._tok.save(str(path))
        return path

    @classmethod
    def from_file(cls, path: str | Path) -> ComposerTokenizer:
        """Load any HF tokenizer.json (a directory holding one works too)."""
        path = Path(path)
        if path.is_dir():
            path = path / "tokenizer.json"
        if not path.exists():
            raise FileNotFoundError(f"no tokenizer at {path}")
        try:
            return cls(Tokenizer.from_file(str(path)))
        except Exception as error:  # tokenizers raises a bare Exception on bad JSON
            raise ValueError(f"{path} is not a valid HF tokenizer.json: {error}") from error


def train_tokenizer(
    texts: Iterable[str],
    vocab_size: int,
    min_frequency: int = 2,
    show_progress: bool = False,
) -> ComposerTokenizer:
    """Train a byte-level BPE on `texts` (e.g. source files); special tokens get the first ids."""
    if vocab_size < 256 + len(SPECIAL_TOKENS):
        raise ValueError(
            f"vocab_size must be at least {256 + len(SPECIAL_TOKENS)} (256 bytes + special tokens); got {vocab_size}"
        )
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=show_progress,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return ComposerTokenizer(tok)


__all__ = ["EOS_TOKEN", "PAD_TOKEN", "SPECIAL_TOKENS", "ComposerTokenizer", "train_tokenizer"]
