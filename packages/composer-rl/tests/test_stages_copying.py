"""The copying documents of pretraining: invented names, defined then used again, never a
name of the task suite (so no held-out name is pretrained on)."""

from __future__ import annotations

import re

import pytest

from composer_rl.stages.config import load_stage1_config
from composer_rl.stages.copying import copy_document, copy_documents
from composer_rl.tasks.invented import TASK_NAMES
from composer_rl.tasks.invented import invented_name as identifier
from composer_rl.tasks.templates.vocab import POOLS, Split, names


def test_the_documents_are_the_same_for_a_seed_and_differ_across_seeds() -> None:
    assert copy_documents(5, seed=3) == copy_documents(5, seed=3)
    assert copy_documents(5, seed=3) != copy_documents(5, seed=4)


def test_no_identifier_is_a_task_name_of_either_split() -> None:
    heldout = {n.lower() for pool in POOLS.values() for n in names(pool, Split.HELDOUT)}
    assert heldout and heldout <= TASK_NAMES
    import random

    rng = random.Random(0)
    drawn = {identifier(rng) for _ in range(5000)}
    assert not drawn & TASK_NAMES


def test_every_name_defined_is_used_again_later() -> None:
    """A later occurrence is predictable only by finding the earlier one: the point."""
    import random

    document = copy_document(random.Random(1))
    module = re.match(r"# (\w+)\.py", document)
    function = re.search(r"def (?!test_)(\w+)\((\w+)\):\n    return \w+\(", document)
    assert module and function
    for name in (module.group(1), function.group(1), function.group(2)):
        assert document.count(name) >= 3, name


def test_the_setting_is_validated_and_off_by_default() -> None:
    assert load_stage1_config().corpus.copy_documents == 0
    assert load_stage1_config(**{"corpus.copy_documents": 10}).corpus.copy_documents == 10
    with pytest.raises(ValueError, match="copy_documents"):
        load_stage1_config(**{"corpus.copy_documents": -1})


def test_pretraining_trains_on_them_and_keeps_the_text_tokenizer(tmp_path) -> None:
    """The documents join the training side of a real (tiny) pretraining phase; the
    tokenizer and token cache stay those of the text, so SFT's demonstrations are shared."""
    from _stage_helpers import tiny_config, write_corpus

    from composer_rl.stages.config import Stage1Config
    from composer_rl.stages.pretrain import run_pretrain

    corpus = write_corpus(tmp_path / "corpus.jsonl")
    results = {}
    for count in (0, 40):
        config = tiny_config(tmp_path / f"run{count}", corpus)
        config["corpus"]["copy_documents"] = count  # type: ignore[index]
        config["pretrain"]["steps"] = 2  # type: ignore[index]
        results[count] = run_pretrain(Stage1Config.model_validate(config), show_progress=False)
    assert results[40]["copy_documents"] == 40
    assert results[40]["train_tokens_available"] > results[0]["train_tokens_available"]
    tokenizers = [(tmp_path / f"run{c}" / "tokenizer.json").read_text() for c in (0, 40)]
    assert tokenizers[0] == tokenizers[1]
