"""Pretraining files with their own identifiers renamed (`corpus.renamed_share`): the same
program under other names, only names the file defines, never a task's or validation name."""

from __future__ import annotations

import contextlib
import io
import random
import re
import sysconfig
import textwrap
from pathlib import Path

import pytest

from composer_rl.stages.config import load_stage1_config
from composer_rl.stages.corpus import is_heldout
from composer_rl.stages.renaming import (
    chosen_for_renaming,
    invented_identifier,
    renamed_source,
    renamed_texts,
)
from composer_rl.tasks.invented import TASK_NAMES, VALIDATION_WORDS, WIDE_WORDS

SOURCE = textwrap.dedent(
    '''\
    import json
    import os.path


    MAX_ITEMS = 3  # MAX_ITEMS stays in this comment


    class ShoppingCart:
        """A cart of items; "ShoppingCart" in this string stays."""

        def __init__(self, owner_name):
            self.owner_name = owner_name
            self.items = []

        def add_item(self, item, price=1):
            if len(self.items) < MAX_ITEMS:
                self.items.append((item, price))
            return self

        def total(self):
            return sum(price for _, price in self.items)


    def summary(cart):
        joined = os.path.join("carts", cart.owner_name)
        return json.dumps({"path": joined, "total": cart.total(), "n": len(cart.items)})


    cart = ShoppingCart("ada").add_item("pen", 2).add_item("ink", 5)
    cart.add_item("pad").add_item("nib")
    print(summary(cart))
    '''
)


def run(source: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(source, "<renamed>", "exec"), {"__name__": "renamed"})
    return out.getvalue()


def test_the_renamed_program_does_what_the_original_does() -> None:
    renamed = renamed_source(SOURCE, random.Random(0))
    assert renamed != SOURCE
    assert run(renamed) == run(SOURCE)


def test_only_names_the_file_defines_change_and_strings_and_comments_stay() -> None:
    renamed = renamed_source(SOURCE, random.Random(0))
    for defined in ("ShoppingCart", "owner_name", "add_item", "summary", "joined", "cart("):
        assert defined not in re.sub(r'"""[\s\S]*?"""|"[^"\n]*"|#.*', "", renamed), defined
    for kept in ("import json", "os.path.join(", "json.dumps(", "len(self.", "def __init__(self",
                 ".append((", "sum("):  # fmt: skip
        assert kept in renamed, kept
    assert "# MAX_ITEMS stays in this comment" in renamed
    assert '"ShoppingCart" in this string stays' in renamed
    assert re.search(r"\b[A-Z]+(_[A-Z]+)? = 3", renamed), "a constant keeps its UPPER style"
    assert re.search(r"class [A-Z][a-z]+[A-Z][a-z]+:", renamed), "a class keeps CamelCase"


def test_each_name_is_renamed_the_same_way_everywhere() -> None:
    renamed = renamed_source(SOURCE, random.Random(1))
    method = re.search(r"def (\w+)\(self, \w+, \w+=1\)", renamed)
    assert method
    assert renamed.count(f".{method.group(1)}(") == 4  # every call of add_item


def test_new_names_are_wide_words_never_a_task_or_validation_word() -> None:
    rng = random.Random(2)
    drawn = {invented_identifier(name, rng, WIDE_WORDS) for name in ["value", "a_b"] * 2000}
    words = {w.lower() for name in drawn for w in name.split("_")}
    assert words <= set(WIDE_WORDS)
    assert not words & set(VALIDATION_WORDS)
    assert not words & TASK_NAMES
    assert invented_identifier("_private_thing", rng, WIDE_WORDS).startswith("_")


def test_a_soft_keyword_bound_as_a_name_keeps_its_statement() -> None:
    """`match = ...` binds a name; renaming it would rename the `match` statement too."""
    source = "match = 1\nmatch match:\n    case 1:\n        print('one')\n"
    renamed = renamed_source(source, random.Random(0))
    assert run(renamed) == run(source) == "one\n"


def test_a_file_that_does_not_parse_is_left_as_it_is() -> None:
    broken = "def f(:\n    return 1\n"
    assert renamed_source(broken, random.Random(0)) == broken


def test_the_standard_library_renamed_still_compiles() -> None:
    """A sample of real files: every renamed one is still Python (the data stays code)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(root.glob("*.py"))[:40]
    changed = 0
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        renamed = renamed_source(text, random.Random(path.name))
        compile(renamed, path.name, "exec")
        changed += renamed != text
    assert changed >= 30


def test_the_files_chosen_are_a_share_by_hash() -> None:
    names = [f"pkg/module_{i}.py" for i in range(4000)]
    chosen = [n for n in names if chosen_for_renaming(n, 0.5, seed=0)]
    assert 0.45 < len(chosen) / len(names) < 0.55
    assert chosen == [n for n in names if chosen_for_renaming(n, 0.5, seed=0)]
    assert not any(chosen_for_renaming(n, 0.0, seed=0) for n in names)
    texts = renamed_texts([(n, SOURCE) for n in names[:40]], 1.0, seed=0)
    assert sorted(texts) == list(range(40))
    assert len(set(texts.values())) == 40, "each file draws its own words"


def test_the_setting_is_validated_and_off_by_default() -> None:
    assert load_stage1_config().corpus.renamed_share == 0
    assert load_stage1_config(**{"corpus.renamed_share": 0.5}).corpus.renamed_share == 0.5
    with pytest.raises(ValueError, match="renamed_share"):
        load_stage1_config(**{"corpus.renamed_share": 1.5})


def test_pretraining_reads_the_renamed_files_and_keeps_the_token_cache(tmp_path) -> None:
    """A real (tiny) pretraining phase: its rows hold the renamed files, the tokenizer and
    the token cache stay those of the text (SFT's demonstrations are shared)."""
    from _stage_helpers import tiny_config

    from composer_rl.stages.config import Stage1Config
    from composer_rl.stages.pretrain import run_pretrain

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(30):
        (corpus / f"m{i}.py").write_text(SOURCE.replace("3", str(i)))
    results, caches = {}, {}
    for share in (0.0, 1.0):
        config = tiny_config(tmp_path / f"run{share}", corpus)
        config["corpus"]["renamed_share"] = share  # type: ignore[index]
        config["pretrain"]["steps"] = 2  # type: ignore[index]
        results[share] = run_pretrain(Stage1Config.model_validate(config), show_progress=False)
        caches[share] = (tmp_path / f"run{share}" / "tokens.pt").read_bytes()
    assert results[0.0]["renamed_documents"] == 0
    training = [f"m{i}.py" for i in range(30) if not is_heldout(f"m{i}.py", 0.2)]
    assert results[1.0]["renamed_documents"] == len(training) > 0
    assert results[1.0]["train_tokens_available"] != results[0.0]["train_tokens_available"]
    assert caches[0.0] == caches[1.0]
