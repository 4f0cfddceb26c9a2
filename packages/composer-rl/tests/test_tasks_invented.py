"""Training tasks rendered with invented names (`composer_rl.tasks.invented`): still valid
tasks (the oracle passes the hidden and visible tests, the untouched repository fails
them), of the training split, with names no task of either split uses."""

from __future__ import annotations

import random
import re
from itertools import islice
from pathlib import Path

import pytest
from test_tasks_visible import check_visible

from composer_rl.tasks import BUILTIN_TEMPLATES, Split, Task, Template, invented
from composer_rl.tasks.grading import grade_files
from composer_rl.tasks.invented import (
    RESERVED_NAMES,
    TASK_NAMES,
    TRAINING_WORDS,
    VALIDATION_WORDS,
    WIDE_WORDS,
    WORDS,
    NameKind,
    invented_name,
    invented_name_tasks,
    renamed_share,
    with_invented_names,
)
from composer_rl.tasks.templates.vocab import POOLS, names

NOT_RENAMABLE = {"fix_ci", "move_callers"}
"""Templates that look further names up in the vocabulary while rendering."""


def _first(template: Template) -> Task:
    return next(iter(template.tasks(Split.TRAIN)))


def _words(task: Task) -> set[str]:
    text = task.instruction + "".join(task.files.values()) + "".join(task.tests.values())
    return set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))


@pytest.mark.parametrize("kind", ["syllables", "words", "wide_words"])
@pytest.mark.parametrize("template", BUILTIN_TEMPLATES, ids=lambda t: t.name)
def test_an_invented_task_is_valid_and_holds_no_held_out_name(
    template: Template, kind: NameKind
) -> None:
    original = _first(template)
    task = with_invented_names(original, random.Random(0), kind)
    if template.name in NOT_RENAMABLE:
        assert task is None
        return
    assert task is not None
    assert task.split == Split.TRAIN.value and task.metadata["names"] == "invented"
    assert task.id != original.id and task.metadata["renamed_from"] == original.id
    heldout = {n for pool in POOLS.values() for n in names(pool, Split.HELDOUT)}
    # no held-out name the training task did not already hold as a plain word of its code
    assert _words(task) & heldout <= _words(original) & heldout
    renamed = {
        v
        for key in template.name_params
        for v in re.findall(r"\w+", str(original.metadata["params"].get(key)))
    }
    # the instruction names none of the training task's own names any more
    assert not set(re.findall(r"\w+", task.instruction)) & renamed, task.instruction
    assert grade_files(task, task.solved_files()).success
    assert not grade_files(task, task.files).success
    check_visible(template, task)


def test_invented_names_are_never_task_names_keywords_or_modules() -> None:
    import keyword
    import sys

    rng = random.Random(0)
    drawn = {invented_name(rng) for _ in range(5000)}
    assert not drawn & TASK_NAMES
    assert not {n for n in drawn if keyword.iskeyword(n) or n in sys.stdlib_module_names}


def test_the_words_are_no_task_name_keyword_module_or_identifier_of_a_training_task() -> None:
    """A word that is already an identifier of a task's code (`label`, `items`) would clash
    with it once it names the module or function, and a task name is no new name."""
    identifiers = set()
    for template in BUILTIN_TEMPLATES:
        for index, task in enumerate(template.tasks(Split.TRAIN)):
            identifiers |= {w.lower() for w in _words(task)}
            if index == 20:
                break
    assert len(set(WORDS)) == len(WORDS) >= 400
    assert not set(WORDS) & (TASK_NAMES | RESERVED_NAMES | identifiers)
    assert set(TRAINING_WORDS) | set(VALIDATION_WORDS) == set(WORDS)
    assert not set(TRAINING_WORDS) & set(VALIDATION_WORDS) and len(VALIDATION_WORDS) >= 80
    # demonstrations draw one half, the validation proxy the other: it must not be recall
    drawn = {invented_name(random.Random(seed), "words") for seed in range(400)}
    assert drawn <= set(TRAINING_WORDS) and len(drawn) > 150
    drawn = {invented_name(random.Random(seed), "validation_words") for seed in range(400)}
    assert drawn <= set(VALIDATION_WORDS) and len(drawn) > 60


def test_the_wide_words_are_many_new_words_no_task_or_proxy_uses() -> None:
    """The wide list exists so that a name recurs too rarely to be learnt as a name; it must
    also keep every rule `WORDS` keeps, and never name a `validation_words` task's word, or
    the proxy would measure recall again."""
    identifiers = set()
    for template in BUILTIN_TEMPLATES:
        for split in (Split.TRAIN, Split.HELDOUT):
            for index, task in enumerate(template.tasks(split)):
                identifiers |= {w.lower() for w in re.findall(r"[A-Za-z]+", " ".join(_words(task)))}
                if index == 20:
                    break
    assert len(set(WIDE_WORDS)) == len(WIDE_WORDS) >= 3000
    assert list(WIDE_WORDS) == sorted(WIDE_WORDS)
    assert all(re.fullmatch(r"[a-z]{4,9}", w) for w in WIDE_WORDS)
    assert not set(WIDE_WORDS) & (set(WORDS) | TASK_NAMES | RESERVED_NAMES | identifiers)
    rng = random.Random(0)
    wide = [invented_name(rng, "wide_words") for _ in range(1500)]
    words = [invented_name(rng, "words") for _ in range(1500)]
    assert set(wide) <= set(WIDE_WORDS)
    # a function named `tester` is collected by pytest once a visible test imports it, and the
    # oracle's visible run fails (a rename_field task of the wide list did, 2026-12-05)
    assert not [w for w in WIDE_WORDS if w.startswith("test")]
    for kind in ("syllables", "words", "wide_words", "validation_words"):
        drawn = [invented_name(random.Random(seed), kind) for seed in range(300)]
        assert not [n for n in drawn if n.startswith("test")], kind
    # 1,500 names: a wide word recurs about 1.3 times, a training word about 4 times
    assert len(wide) / len(set(wide)) < 1.5 < 3 < len(words) / len(set(words))


def test_the_tasks_are_the_same_for_a_seed_and_come_from_the_given_tasks() -> None:
    given = [_first(t) for t in BUILTIN_TEMPLATES]
    first = invented_name_tasks(given, 30, seed=5)
    assert [t.id for t in first] == [t.id for t in invented_name_tasks(given, 30, seed=5)]
    assert [t.id for t in first] != [t.id for t in invented_name_tasks(given, 30, seed=6)]
    assert len(first) == 30
    assert {t.metadata["renamed_from"] for t in first} <= {t.id for t in given}
    assert len({t.id for t in first}) == 30  # a task drawn twice gets other names


def test_rl_renames_a_share_of_its_tasks_in_place_with_words_no_task_uses() -> None:
    given = [t for template in BUILTIN_TEMPLATES for t in islice(template.tasks(Split.TRAIN), 3)]
    every = renamed_share(given, 1.0, seed=3, kind="wide_words")
    assert len(every) == len(given)
    assert [t.id for t in every] == [t.id for t in renamed_share(given, 1.0, 3, "wide_words")]
    for original, task in zip(given, every, strict=True):
        if original.metadata["template"] in NOT_RENAMABLE:
            assert task is original
            continue
        # In place: the sampler's order and categories are the given tasks'.
        assert task.metadata["renamed_from"] == original.id
        assert task.category == original.category and task.split == Split.TRAIN.value
        assert _words(task) & set(WIDE_WORDS)
        assert not _words(task) & set(VALIDATION_WORDS)
    renamable = sum(t.metadata["template"] not in NOT_RENAMABLE for t in given)
    half = renamed_share(given, 0.5, seed=3, kind="wide_words")
    share = sum(t.metadata.get("names") == "invented" for t in half) / renamable
    assert 0.3 < share < 0.7
    assert [t.id for t in half] != [t.id for t in renamed_share(given, 0.5, 4, "wide_words")]


def test_the_rl_run_trains_on_renamed_tasks_when_asked_and_refuses_validation_words() -> None:
    from composer_rl.config import ConfigError
    from composer_rl.plugins import JobPlugins
    from composer_rl.rl.config import load_config
    from composer_rl.rl.run import training_tasks
    from composer_rl.tasks.templates.base import is_validation

    def tasks_of(**settings: object) -> list[Task]:
        config = load_config(None, {"tasks.per_template": 2, "seed": 1, **settings})
        return training_tasks(config, JobPlugins(config.plugin_run_config()))

    plain = tasks_of()
    renamed = tasks_of(**{"tasks.invented_names": "wide_words"})
    assert len(renamed) == len(plain)
    assert not any(t.metadata.get("names") == "invented" for t in plain)
    assert {t.metadata["renamed_from"] for t in renamed if t.metadata.get("names")} <= {
        t.id for t in plain
    }
    assert sum(t.metadata.get("names") == "invented" for t in renamed) == sum(
        t.metadata["template"] not in NOT_RENAMABLE for t in plain
    )
    # Renamed from training tasks, never from the validation tasks settings are chosen on.
    assert not any(is_validation(t) for t in plain)
    with pytest.raises(ConfigError, match="invented_names"):
        load_config(None, {"tasks.invented_names": "validation_words"})


def test_the_invented_validation_split_renames_validation_tasks_only() -> None:
    """Settings are chosen on it, so it must hold validation tasks (never held-out ones),
    each with names no task uses; and be the same on every call."""
    from composer_rl.rl.compare import SPLITS, validation_invented_tasks, validation_tasks

    assert SPLITS["validation_invented"] is validation_invented_tasks
    words = SPLITS["validation_words"](2)
    assert {t.metadata["renamed_from"] for t in words} <= {t.id for t in validation_tasks(2)}
    assert all(_words(t) & set(VALIDATION_WORDS) for t in words)
    assert not any(_words(t) & set(TRAINING_WORDS) for t in words)
    validation = {t.id: t for t in validation_tasks(2)}
    renamed = validation_invented_tasks(2)
    assert [t.id for t in renamed] == [t.id for t in validation_invented_tasks(2)]
    templates = {str(t.metadata["template"]) for t in validation.values()}
    assert len(renamed) == sum(
        1 for t in validation.values() if t.metadata["template"] not in NOT_RENAMABLE
    )
    assert {str(t.metadata["template"]) for t in renamed} == templates - NOT_RENAMABLE
    for task in renamed:
        assert task.metadata["renamed_from"] in validation
        assert task.id not in validation and task.split == Split.TRAIN.value
        original = validation[task.metadata["renamed_from"]]
        assert task.metadata["params"] != original.metadata["params"]


@pytest.mark.parametrize("seed", range(12))
def test_a_two_name_task_renames_whatever_the_names_hash_to(seed: int) -> None:
    """Vocabulary names hash into a split one by one and a task's names must share one; an
    invented pair that hashes apart once made keep_items drop out of the validation split."""
    template = next(t for t in BUILTIN_TEMPLATES if t.name == "keep_items")
    assert with_invented_names(_first(template), random.Random(seed)) is not None


def test_stage_one_takes_the_kind_of_invented_names_and_refuses_others() -> None:
    from pydantic import ValidationError

    from composer_rl.stages.config import Stage1Config

    assert Stage1Config().sft.invented_names == "syllables"
    fields = Stage1Config().model_dump()
    for kind in ("words", "wide_words"):
        fields["sft"]["invented_names"] = kind
        assert Stage1Config.model_validate(fields).sft.invented_names == kind
    fields["sft"]["invented_names"] = "klingon"
    with pytest.raises(ValidationError, match="syllables"):
        Stage1Config.model_validate(fields)


def test_the_invented_demonstrations_are_replayed_when_their_names_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cache of invented-name demonstrations is keyed by the tasks drawn: the same
    settings reuse it, other names (words for syllables, a changed word list) replay it."""
    from composer_model import ComposerTokenizer
    from composer_rl.agent.quick import random_checkpoint
    from composer_rl.stages.config import Stage1Config
    from composer_rl.stages.sft import invented_demonstrations

    tokenizer = ComposerTokenizer.from_file(random_checkpoint(tmp_path / "m") / "tokenizer.json")
    fields = Stage1Config().model_dump()
    fields["sft"].update(
        invented_name_tasks=2, max_tasks=len(BUILTIN_TEMPLATES), summary_every=0,
        demonstration_workers=1,
    )  # fmt: skip
    config = Stage1Config.model_validate(fields)
    first = invented_demonstrations(tmp_path, config, tokenizer, show_progress=False)
    cache = tmp_path / "sft_invented_tokens.pt"
    written = cache.stat().st_mtime_ns
    assert len(first["tasks"]) == 2 and len(first["ids"]) == 2
    again = invented_demonstrations(tmp_path, config, tokenizer, show_progress=False)
    assert again["tasks"] == first["tasks"] and cache.stat().st_mtime_ns == written
    fields["sft"]["invented_names"] = "words"
    words = Stage1Config.model_validate(fields)
    replayed = invented_demonstrations(tmp_path, words, tokenizer, show_progress=False)
    assert set(replayed["tasks"]).isdisjoint(first["tasks"])
    assert cache.stat().st_mtime_ns != written
    # the same settings with another word list (an edit of `WORDS`) are other demonstrations
    monkeypatch.setattr(invented, "TRAINING_WORDS", invented.TRAINING_WORDS[::-1])
    other = invented_demonstrations(tmp_path, words, tokenizer, show_progress=False)
    assert set(other["tasks"]).isdisjoint(replayed["tasks"])


def test_the_suite_demonstrations_are_replayed_when_their_tasks_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sft_tokens.pt` is keyed by the tasks played: the same tasks reuse it, another task
    set (a template added to the suite) replays it, as a changed mix does. Keyed by the mix
    alone it once served 23 templates' demonstrations to a stage one of 33."""
    from composer_model import ComposerTokenizer
    from composer_rl.agent.quick import random_checkpoint
    from composer_rl.stages import sft
    from composer_rl.stages.config import Stage1Config

    tokenizer = ComposerTokenizer.from_file(random_checkpoint(tmp_path / "m") / "tokenizer.json")
    fields = Stage1Config().model_dump()
    fields["sft"].update(summary_every=0, demonstration_workers=1)
    config = Stage1Config.model_validate(fields)
    train = [t for _, t in zip(range(3), BUILTIN_TEMPLATES[0].tasks(Split.TRAIN), strict=False)]
    heldout = [next(iter(BUILTIN_TEMPLATES[0].tasks(Split.HELDOUT)))]
    monkeypatch.setattr(sft, "demonstration_tasks", lambda _config: (train[:2], heldout))
    first = sft.sft_data(tmp_path, config, tokenizer, show_progress=False)
    cache = tmp_path / "sft_tokens.pt"
    written = cache.stat().st_mtime_ns
    assert first["train_tasks"] == 2 and len(first["train"][0]) == 2
    again = sft.sft_data(tmp_path, config, tokenizer, show_progress=False)
    assert again["train"] == first["train"] and cache.stat().st_mtime_ns == written
    monkeypatch.setattr(sft, "demonstration_tasks", lambda _config: (train, heldout))
    replayed = sft.sft_data(tmp_path, config, tokenizer, show_progress=False)
    assert replayed["train_tasks"] == 3 and len(replayed["train"][0]) == 3
    assert cache.stat().st_mtime_ns != written
