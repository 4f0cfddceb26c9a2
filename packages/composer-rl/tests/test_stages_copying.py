"""The copying documents of pretraining: invented names, defined then used again, never a
name of the task suite (so no held-out name is pretrained on)."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest
import torch

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


def test_a_stretch_is_written_twice_and_only_its_second_copy_is_a_target() -> None:
    from composer_rl.stages.copying import repeated_stretches

    documents = [list(range(100, 160)), list(range(200, 205))]  # the short one is never used
    pairs, masks = repeated_stretches(documents, 50, min_tokens=4, max_tokens=10, seed=0)
    assert (pairs, masks) == repeated_stretches(documents, 50, 4, 10, seed=0)
    assert pairs != repeated_stretches(documents, 50, 4, 10, seed=1)[0]
    for pair, mask in zip(pairs, masks, strict=True):
        length = len(pair) // 2
        assert 4 <= length <= 10 and pair[:length] == pair[length:]
        assert all(100 <= t < 160 for t in pair)
        # the first token of the copy is not predictable from context: not a target
        assert mask == [False] * (length + 1) + [True] * (length - 1)
    with pytest.raises(ValueError, match="no document holds 10 tokens"):
        repeated_stretches([[1, 2, 3]], 5, 4, 10, seed=0)


def test_packed_rows_keep_each_pair_whole() -> None:
    from composer_rl.stages.copying import repeated_rows

    rows = repeated_rows(
        [list(range(100, 400))], 64, eos_id=0, count=40, min_tokens=8, max_tokens=16, seed=0
    )
    for r in range(len(rows)):
        ends = rows.boundaries[r]
        for a, b in itertools.pairwise(ends):
            doc = rows.tokens[r, a:b].tolist()
            if doc[0] == 0:
                continue  # the padding after a row's last pair (end-of-text tokens)
            assert doc[-1] == 0
            body = doc[:-1]
            half = len(body) // 2
            assert body[:half] == body[half:], (r, a, b)
            assert rows.mask[r, a : a + half + 1].sum() == 0


def test_the_warm_up_is_validated_and_off_by_default() -> None:
    assert load_stage1_config().copy_warmup.steps == 0
    with pytest.raises(ValueError, match=r"copy_warmup\.max_tokens"):
        load_stage1_config(**{"copy_warmup.steps": 5, "copy_warmup.max_tokens": 200})
    with pytest.raises(ValueError, match="below min_tokens"):
        load_stage1_config(**{"copy_warmup.min_tokens": 9, "copy_warmup.max_tokens": 8})


def test_the_warm_up_trains_first_in_its_own_directory_and_resumes(tmp_path) -> None:
    """A real (tiny) pretraining phase with and without the warm-up: the warm-up's steps
    are logged apart, they change what pretraining starts from, and both runs report how
    well the model copies (`copy_ce`)."""
    import json

    from _stage_helpers import tiny_config, write_corpus

    from composer_rl.stages.config import Stage1Config
    from composer_rl.stages.pretrain import run_pretrain

    corpus = write_corpus(tmp_path / "corpus.jsonl")
    results = {}
    for steps in (0, 4):
        config = tiny_config(tmp_path / f"run{steps}", corpus)
        config["copy_warmup"] = {"steps": steps, "min_tokens": 4, "max_tokens": 12}
        config["pretrain"]["steps"] = 2  # type: ignore[index]
        results[steps] = run_pretrain(Stage1Config.model_validate(config), show_progress=False)
    assert results[0]["copy_warmup_steps"] == 0
    assert list(results[0]["copy_ce"]) == ["after pretraining"]
    assert list(results[4]["copy_ce"]) == ["after copy warm-up", "after pretraining"]
    logged = (tmp_path / "run4" / "pretrain" / "copy_warmup" / "metrics.jsonl").read_text()
    train_steps = [r["step"] for r in map(json.loads, logged.splitlines()) if r["kind"] == "train"]
    assert train_steps == [1, 2, 3, 4]
    assert not (tmp_path / "run0" / "pretrain" / "copy_warmup").exists()
    assert results[4]["heldout_ce"] != results[0]["heldout_ce"]
    # A killed run whose warm-up finished starts pretraining from the warm-up's last step.
    import shutil

    again = tmp_path / "run4"
    shutil.rmtree(again / "pretrain" / "checkpoints", ignore_errors=True)
    (again / "pretrain" / "result.json").unlink()
    config = tiny_config(again, corpus)
    config["copy_warmup"] = {"steps": 4, "min_tokens": 4, "max_tokens": 12}
    config["pretrain"]["steps"] = 2  # type: ignore[index]
    rerun = run_pretrain(Stage1Config.model_validate(config), show_progress=False)
    logged = (again / "pretrain" / "copy_warmup" / "metrics.jsonl").read_text()
    rows = [r for r in map(json.loads, logged.splitlines()) if r["kind"] == "train"]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]  # reloaded, not trained again
    assert rerun["copy_ce"] == results[4]["copy_ce"]
    assert rerun["heldout_ce"] == results[4]["heldout_ce"]


def test_a_share_of_pretraining_rows_keeps_the_repeated_stretches(tmp_path) -> None:
    """`copy_warmup.pretrain_share` adds rows of repeated pairs beside the corpus rows, in
    that share, each pair whole with its first copy out of the loss; a real (tiny)
    pretraining phase trains on them and says so in its summary."""
    from _stage_helpers import tiny_config, write_corpus

    from composer_rl.stages.config import Stage1Config
    from composer_rl.stages.copying import repeated_share
    from composer_rl.stages.pretrain import run_pretrain

    documents = [list(range(1, 200)), list(range(300, 420))]
    rows = repeated_share(documents, 30, 0.25, 64, 0, min_tokens=4, max_tokens=12, seed=3)
    assert len(rows) == 10  # 10 of 40 rows
    for r in range(len(rows)):
        for a, b in itertools.pairwise(rows.boundaries[r]):
            body = rows.tokens[r, a : b - 1].tolist()
            if not body or body[0] == 0:
                continue  # the padding after the row's last pair
            half = len(body) // 2
            assert body[:half] == body[half:]
            assert rows.mask[r, a : a + half + 1].sum() == 0
            assert rows.mask[r, a + half + 1 : b].all()
    with pytest.raises(ValueError, match="share"):
        repeated_share(documents, 30, 1.0, 64, 0, min_tokens=4, max_tokens=12, seed=3)
    with pytest.raises(ValueError, match="pretrain_share"):
        load_stage1_config(**{"copy_warmup.pretrain_share": 1.0})

    corpus = write_corpus(tmp_path / "corpus.jsonl")
    results = {}
    for share in (0.0, 0.5):
        config = tiny_config(tmp_path / f"run{share}", corpus)
        config["copy_warmup"] = {"pretrain_share": share, "min_tokens": 4, "max_tokens": 12}
        config["pretrain"]["steps"] = 2  # type: ignore[index]
        results[share] = run_pretrain(Stage1Config.model_validate(config), show_progress=False)
    assert results[0.5]["copy_pretrain_share"] == 0.5
    assert results[0.5]["train_tokens_available"] > results[0.0]["train_tokens_available"]
    assert results[0.5]["heldout_ce"] != results[0.0]["heldout_ce"]


def test_planted_copies_repeat_earlier_text_at_a_distance_and_never_overlap() -> None:
    """In a window of distinct tokens a planted copy shows as a run of earlier tokens: every
    changed position holds a token from before it, runs ascend by one, and as many
    positions change as the copies' lengths allow."""
    import random

    from composer_rl.stages.copying import plant_copies

    window = list(range(500))
    for seed in range(20):
        row, copied = plant_copies(window, 6, 4, 16, random.Random(seed))
        assert len(row) == len(copied) == len(window)
        changed = [i for i, token in enumerate(row) if token != i]
        assert all(row[i] < i for i in changed)
        assert 6 * 4 <= len(changed) <= 6 * 16
        # Only copying predicts a copy's tokens after its first: those, and only those.
        assert sum(copied) == len(changed) - 6
        assert all(row[i] != i and row[i - 1] != i - 1 for i in range(500) if copied[i])
        runs = [[changed[0]]]
        for i in changed[1:]:
            (runs[-1] if i == runs[-1][-1] + 1 else runs.append([i]) or runs[-1]).append(i)
        # Adjacent copies may touch, so runs can be fewer than copies, never more.
        assert 1 <= len(runs) <= 6
        assert row == plant_copies(window, 6, 4, 16, random.Random(seed))[0]
    distances = [
        i - row[i]
        for seed in range(20)
        for row in [plant_copies(window, 6, 4, 16, random.Random(seed))[0]]
        for i in range(len(row))
        if row[i] != i
    ]
    assert max(distances) > 250  # copies span the window, not only side by side
    with pytest.raises(ValueError, match="cannot hold"):
        plant_copies(list(range(40)), 6, 4, 16, random.Random(0))
    with pytest.raises(ValueError, match="min_tokens"):
        plant_copies(window, 2, 1, 4, random.Random(0))


def test_planted_rows_are_whole_windows_of_one_long_document_all_targets() -> None:
    from composer_rl.stages.copying import planted_rows

    documents = [list(range(1, 40)), list(range(100, 400)), list(range(500, 700))]
    rows = planted_rows(documents, 128, 0, count=10, copies=3, min_tokens=2, max_tokens=8, seed=1)
    assert rows.tokens.shape == (10, 128) and bool(rows.mask.all())
    for r in range(10):
        body = rows.tokens[r, :-1].tolist()
        assert rows.tokens[r, -1] == 0 and rows.boundaries[r] == [0, 128]
        assert all(100 <= t < 700 for t in body)  # never the 39-token document
        assert len({t >= 500 for t in body}) == 1  # one document a row
    only = planted_rows(
        documents, 128, 0, count=10, copies=3, min_tokens=2, max_tokens=8, seed=1, loss_on="copies"
    )
    assert torch.equal(only.tokens, rows.tokens)  # the same rows, another loss
    assert int(only.mask.sum(dim=1).min()) >= 3 and int(only.mask.sum(dim=1).max()) <= 3 * 7
    for r in range(10):
        tokens = only.tokens[r].tolist()
        for i in only.mask[r].nonzero().flatten().tolist():
            assert tokens[i] in tokens[: i - 1]  # each target repeats an earlier token
    with pytest.raises(ValueError, match="no document"):
        planted_rows(documents, 400, 0, count=2, copies=1, min_tokens=2, max_tokens=4, seed=0)


def test_the_long_context_copies_are_validated_off_by_default_and_trained_on(tmp_path) -> None:
    """`long_context.copy_share` mixes planted rows into a real (tiny) long-context phase:
    the phase trains on other rows than without it, and a share whose copies cannot fit
    in a row is refused before anything runs."""
    import random
    import shutil

    from _stage_helpers import tiny_config, write_corpus

    from composer_rl.stages.config import Stage1Config
    from composer_rl.stages.copying import plant_copies
    from composer_rl.stages.pretrain import run_long_context, run_pretrain

    assert load_stage1_config().long_context.copy_share == 0.0
    with pytest.raises(ValueError, match="do not fit in a row"):
        load_stage1_config(**{"long_context.copy_share": 0.5, "long_context.copies_per_row": 200})
    # The most copies that fit: 119 x 16 + 16 + 119 = 2,039 of a 2,047-token window.
    fits = load_stage1_config(
        **{"long_context.copy_share": 0.5, "long_context.copies_per_row": 119}
    )
    plant_copies(list(range(2047)), 119, 16, 16, random.Random(0))
    with pytest.raises(ValueError, match="do not fit in a row"):
        load_stage1_config(**{"long_context.copy_share": 0.5, "long_context.copies_per_row": 120})
    assert fits.long_context.copies_per_row == 119
    with pytest.raises(ValueError, match="copy_max_tokens"):
        load_stage1_config(**{"long_context.copy_min_tokens": 9, "long_context.copy_max_tokens": 8})
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    base = tiny_config(tmp_path / "base", corpus)
    run_pretrain(Stage1Config.model_validate(base), show_progress=False)
    results = {}
    for share, loss in ((0.0, "all"), (0.5, "all"), (0.5, "copies")):
        run_dir = tmp_path / f"run{share}-{loss}"
        shutil.copytree(tmp_path / "base", run_dir)  # the same pretrained model for each
        config = tiny_config(run_dir, corpus)
        config["long_context"] = {  # type: ignore[assignment]
            **config["long_context"],  # type: ignore[dict-item]
            "steps": 3,
            "copy_share": share,
            "copies_per_row": 2,
            "copy_min_tokens": 2,
            "copy_max_tokens": 6,
            "copy_rows": 8,
            "copy_loss": loss,
        }
        results[share, loss] = run_long_context(
            Stage1Config.model_validate(config), show_progress=False
        )
    assert all(result["steps"] == 3 for result in results.values())
    assert [(r["copy_share"], r["copy_loss"]) for r in results.values()] == [
        (0.0, None), (0.5, "all"), (0.5, "copies")
    ]  # fmt: skip
    ces = {arm: result["heldout_ce"] for arm, result in results.items()}
    assert len(set(ces.values())) == 3, ces  # each arm trained on other targets


def test_sft_keeps_copy_rows_beside_the_demonstrations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sft.copy_share` mixes planted-copy rows (loss on the copies) into a real (tiny) SFT
    phase, says so in its result, and trains differently from one without; copies that
    cannot fit an SFT row are refused before anything runs."""
    import json
    import shutil

    from _stage_helpers import tiny_config

    from composer_rl.stages import sft
    from composer_rl.stages.config import Stage1Config
    from composer_rl.stages.pretrain import run_long_context, run_pretrain
    from composer_rl.tasks import BUILTIN_TEMPLATES, Split

    with pytest.raises(ValueError, match="do not fit in an SFT row"):
        load_stage1_config(
            **{"sft.copy_share": 0.2, "sft.seq_len": 256, "long_context.copies_per_row": 16}
        )
    corpus = tmp_path / "corpus.jsonl"
    body = "".join(f"def f{j}(value):\n    return value * {j}\n\n\n" for j in range(80))
    corpus.write_text(
        "\n".join(json.dumps({"id": f"d{i}", "text": f"# {i}\n{body}"}) for i in range(20))
    )
    base = tiny_config(tmp_path / "base", corpus)
    run_pretrain(Stage1Config.model_validate(base), show_progress=False)
    run_long_context(Stage1Config.model_validate(base), show_progress=False)
    tasks = [t for _, t in zip(range(2), BUILTIN_TEMPLATES[0].tasks(Split.TRAIN), strict=False)]
    heldout = [next(iter(BUILTIN_TEMPLATES[0].tasks(Split.HELDOUT)))]
    monkeypatch.setattr(sft, "demonstration_tasks", lambda _config: (tasks, heldout))
    results = {}
    for share in (0.0, 0.5):
        run_dir = tmp_path / f"run{share}"
        shutil.copytree(tmp_path / "base", run_dir)
        config = tiny_config(run_dir, corpus)
        config["sft"] = {  # type: ignore[assignment]
            **config["sft"],  # type: ignore[dict-item]
            "copy_share": share,
            "summary_every": 0,
            "demonstration_workers": 1,
        }
        config["long_context"] = {  # type: ignore[assignment]
            **config["long_context"],  # type: ignore[dict-item]
            "copies_per_row": 4,
            "copy_rows": 6,
        }
        results[share] = sft.run_sft(Stage1Config.model_validate(config), show_progress=False)
    assert results[0.0]["copy_share"] == 0.0 and results[0.5]["copy_share"] == 0.5
    assert results[0.5]["heldout_ce"] != results[0.0]["heldout_ce"]
