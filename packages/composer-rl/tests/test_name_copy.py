"""`benchmarks/name_copy.py`: teacher-forced accuracy at the names a policy writes."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import torch

from composer_model import ComposerTokenizer
from composer_rl.agent.quick import random_checkpoint

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "name_copy.py"


class Guesses(torch.nn.Module):
    """A model whose greedy guess is the next token of `ids` except at `wrong` positions:
    the input to the scoring, so its counts can be checked by hand."""

    def __init__(self, ids: list[int], wrong: set[int], vocab: int) -> None:
        super().__init__()
        self.ids, self.wrong, self.vocab = ids, wrong, vocab

    def forward(self, tokens: torch.Tensor) -> object:
        logits = torch.zeros(1, len(self.ids), self.vocab)
        for position in range(len(self.ids) - 1):
            guess = self.ids[position + 1]
            if position in self.wrong:
                guess = (guess + 1) % self.vocab
            logits[0, position, guess] = 1.0
        return type("Output", (), {"logits": logits})()


def test_a_name_whose_first_token_is_right_and_the_rest_wrong_is_not_a_whole_name(
    tmp_path: Path, benchmark_script: Callable[[str], ModuleType]
) -> None:
    accuracies = benchmark_script("name_copy").accuracies
    tokenizer = ComposerTokenizer.from_file(random_checkpoint(tmp_path) / "tokenizer.json")
    head = tokenizer.encode("<|tool_call|>read_file\n@@path\n")
    name = tokenizer.encode("brushwood_total.py")
    tail = tokenizer.encode("\n<|/tool_call|>")
    assert len(name) >= 2
    ids = head + name + tail
    mask = [True] * len(ids)
    first = len(head) - 1  # the position whose guess is the name's first token
    right = accuracies(Guesses(ids, set(), tokenizer.vocab_size), tokenizer, ids, mask)
    assert right[0] == [True] and right[2] == [True] and right[3] == ["known, not in context"]
    assert right[4] == [True]
    later = accuracies(Guesses(ids, {first + 1}, tokenizer.vocab_size), tokenizer, ids, mask)
    assert later[0] == [True] and later[2] == [False] and later[4] == [False]
    wrong_start = accuracies(Guesses(ids, {first}, tokenizer.vocab_size), tokenizer, ids, mask)
    # A wrong first token is not the copying's fault: the rest, given it, is right.
    assert wrong_start[0] == [False] and wrong_start[2] == [False] and wrong_start[4] == [True]
    after = accuracies(Guesses(ids, {len(ids) - 2}, tokenizer.vocab_size), tokenizer, ids, mask)
    assert after[2] == [True] and False in after[1]  # a miss after the name is elsewhere


@pytest.mark.slow  # about a minute: 66 demonstrations through a random tiny model
def test_quick_run_writes_first_token_and_whole_name_figures(tmp_path: Path) -> None:
    out = tmp_path / "diag" / "names.json"  # a folder not there yet: made, not a crash
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--quick",
            "--splits",
            "validation_words",
            "heldout",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    figures = json.loads(out.read_text())
    for split in ("validation_words", "heldout"):
        assert 0 <= figures[split]["whole_names"][0] <= figures[split]["at_names"][0] <= 1
        assert (
            figures[split]["whole_names_by_task"].keys()
            == figures[split]["at_names_by_task"].keys()
        )
    new_words = figures["validation_words"]["whole_new_words_by_task"]
    # validation_words tasks write names of new words (not at every cue); held-out ones never
    assert (
        new_words and new_words.keys() <= figures["validation_words"]["whole_names_by_task"].keys()
    )
    assert not figures["heldout"]["whole_new_words_by_task"]
    by_distance = figures["validation_words"]["whole_names_by_mention_distance"]
    wheres = {"within 64", "65-256", "beyond 256", "not in context"}
    kinds = {f"{kind}, {where}" for kind in ("new word", "known") for where in wheres}
    assert by_distance and set(by_distance) <= kinds
    assert set(figures["validation_words"]["rest_of_names_by_kind"]) == {"new word", "known"}
    # The same (seeded) model against itself: every paired margin is exactly zero.
    again = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--quick",
            "--splits",
            "validation_words",
            "--against",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert again.returncode == 0, again.stderr
    for rate in ("at_names", "whole_names", "whole_new_words"):
        tasks = len(figures["validation_words"][f"{rate}_by_task"])
        line = next(x for x in again.stdout.splitlines() if f"validation_words: {rate} minus" in x)
        assert "+0.000 ± 0.000" in line and f"over {tasks} tasks" in line
    missing = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--against", str(tmp_path / "nope.json")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert missing.returncode == 2 and "--against" in missing.stderr


def test_a_name_is_found_back_as_text_whatever_its_tokens(
    benchmark_script: Callable[[str], ModuleType],
) -> None:
    """The instruction's ` brush.py` and the call's `brush.py` are other tokens and the
    same name; the distance counts tokens back to the start of the last mention."""
    script = benchmark_script("name_copy")
    pieces = ["in ", " brush", ".py", " now", "\n", "@@path\n", "brush", ".py", "\n"]
    assert script.mention_distance(pieces, 6, "brush.py") == 5
    assert script.mention_distance(pieces, 6, "broom.py") is None
    assert script.mention_distance(pieces, 1, "brush.py") is None  # not before the start
    word = sorted(script.VALIDATION_SET)[0]
    assert script.name_kind(f"{word}_total.py") == "new word"
    assert script.name_kind("cli.py") == "known"
    labels = [script.bucket(d) for d in (5, 64, 65, 256, 257, None)]
    assert labels == [
        "within 64", "within 64", "65-256", "65-256", "beyond 256", "not in context"
    ]  # fmt: skip
