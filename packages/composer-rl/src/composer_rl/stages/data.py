"""The tokenizer and the tokenized corpus of a stage-one run, made once and reused.

The first run trains a byte-level BPE on the training side of the corpus and tokenizes both
sides; later runs (and resumed ones) read `tokenizer.json` and `tokens_*.pt` back.
"""

from __future__ import annotations

from pathlib import Path

import torch

from composer_model import ComposerTokenizer, train_tokenizer
from composer_rl.stages.config import CorpusConfig
from composer_rl.stages.corpus import Corpus, load_corpus
from composer_rl.stages.phases import save_torch

TOKENIZER_FILE = "tokenizer.json"


def corpus_tokenizer(config: CorpusConfig, corpus: Corpus | None = None) -> ComposerTokenizer:
    """The byte-level BPE stage one trains on the first `tokenizer_chars` characters of the
    corpus's training side: deterministic, so a test can count tokens as a stage-one policy
    will see them without a stage-one run."""
    corpus = corpus if corpus is not None else load_corpus(config)
    sample: list[str] = []
    size = 0
    for doc in corpus.train:
        if size >= config.tokenizer_chars:
            break
        sample.append(doc.text)
        size += len(doc.text)
    return train_tokenizer(sample, config.vocab_size)


def tokenizer_and_tokens(
    root: Path, config: CorpusConfig
) -> tuple[ComposerTokenizer, list[list[int]], list[list[int]]]:
    """(tokenizer, train documents as ids, held-out documents as ids)."""
    root.mkdir(parents=True, exist_ok=True)
    tok_path = root / TOKENIZER_FILE
    cache = root / "tokens.pt"
    if tok_path.is_file() and cache.is_file():
        data = torch.load(cache, weights_only=False)
        return ComposerTokenizer.from_file(tok_path), data["train"], data["heldout"]
    corpus = load_corpus(config)
    if tok_path.is_file():
        tokenizer = ComposerTokenizer.from_file(tok_path)
    else:
        tokenizer = corpus_tokenizer(config, corpus)
        tokenizer.save(tok_path)
    train = tokenizer.encode_batch([d.text for d in corpus.train])
    heldout = tokenizer.encode_batch([d.text for d in corpus.heldout])
    save_torch({"train": train, "heldout": heldout}, cache)
    return tokenizer, train, heldout
