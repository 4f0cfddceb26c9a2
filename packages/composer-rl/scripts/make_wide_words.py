"""Write `composer_rl/tasks/wide_words.txt`: the wide word list invented names draw from.

Run once, and again only to change the list (the committed file is what every machine
uses, so demonstrations and their caches are the same everywhere):

    uv run --with wordfreq python packages/composer-rl/scripts/make_wide_words.py

Why these words: the SFT policy copied names of the 371 training words no better than it
recalled them (docs/rl/2026-12-05-distant-copy.md: 0.15 of a new word's later tokens given
its first). A word naming about four demonstrations can be learnt as a name; one drawn from a few
thousand, seen once or twice, can only be copied. Held-out names are common English words,
so these are too: wordfreq's most frequent English words (a maintained frequency list) that
also occur in the Python standard library's source, which keeps words of the kind code and
its comments use and drops many names of people and places. Words of `invented.WORDS`
(both halves, validation included), identifiers of the tasks' code and every name
`invented.is_free_name` refuses are left out.
"""

from __future__ import annotations

import re
import sys
import sysconfig
from collections import Counter
from pathlib import Path

import wordfreq

from composer_rl.tasks import BUILTIN_TEMPLATES, Split
from composer_rl.tasks.invented import WORDS, is_free_name

TOP_WORDS = 40_000
MIN_STDLIB_FILES = 3
SHAPE = re.compile(r"[a-z]{4,9}")
OUT = Path(__file__).resolve().parents[1] / "src" / "composer_rl" / "tasks" / "wide_words.txt"


def stdlib_file_counts() -> Counter[str]:
    """In how many standard-library source files each lower-case word occurs."""
    counts: Counter[str] = Counter()
    root = Path(sysconfig.get_paths()["stdlib"])
    for path in root.rglob("*.py"):
        if "site-packages" in path.parts:
            continue
        text = path.read_text(encoding="utf-8", errors="replace").lower()
        counts.update(set(re.findall(r"[a-z]+", text)))
    return counts


def task_identifiers(per_template: int = 40) -> set[str]:
    """Every identifier-like word of the first tasks of every template, both splits: a word
    that already names something in a task's code would clash with it as a new name."""
    found: set[str] = set()
    for template in BUILTIN_TEMPLATES:
        for split in (Split.TRAIN, Split.HELDOUT):
            for index, task in enumerate(template.tasks(split)):
                text = task.instruction + "".join(task.files.values())
                text += "".join(task.tests.values())
                found |= {w.lower() for w in re.findall(r"[A-Za-z]+", text)}
                if index == per_template:
                    break
    return found


def main() -> None:
    in_stdlib = stdlib_file_counts()
    excluded = {w.lower() for w in WORDS} | task_identifiers()
    excluded |= {"self", "args", "kwargs", "none", "true", "false", "hell"}
    words = sorted(
        {
            word
            for word in wordfreq.top_n_list("en", TOP_WORDS)
            if SHAPE.fullmatch(word)
            and in_stdlib[word] >= MIN_STDLIB_FILES
            and word not in excluded
            and is_free_name(word)
        }
    )
    OUT.write_text("\n".join(words) + "\n", encoding="utf-8")
    print(f"{len(words)} words -> {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
