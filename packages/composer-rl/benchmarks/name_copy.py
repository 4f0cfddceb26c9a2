"""Can the policy copy a name from its context? Teacher-forced accuracy at the names.

On the suite of 2026-12-03 (names drawn from 148, split by hash) the SFT policy runs the
visible tests in three quarters of its greedy episodes and still solves almost nothing:
it reads `payroll.py` when the instruction names `museum.py`. This measures why, without
sampling an episode: each task's demonstration (the one stage one would play for it) goes
through the model teacher-forced, and the greedy next-token guess is scored separately

- at **names**: the first token of every `path` argument and of every function name after
  `def ` in the policy's own tokens, each a name the instruction or a tool result showed
  earlier in the same context, so a model that copies gets them right; and
- at **every other** policy token.

- at **whole names**: every token of the name and the one that ends it, also by how many
  tokens back the context last mentioned the name (`mention_distance`).

A policy whose accuracy is high elsewhere and low at the names has learned the format and
the behaviours but not to copy: no RL reward can select a solution it never produces.
Printed per split, with the standard error over tasks:

    uv run python packages/composer-rl/benchmarks/name_copy.py --model runs/stage1/sft/final
    uv run python packages/composer-rl/benchmarks/name_copy.py --quick   # random tiny model
"""

from __future__ import annotations

import argparse
import bisect
import json
import re
import sys
import tempfile
from pathlib import Path

import torch

from composer_model import ComposerTokenizer
from composer_model.checkpoint import load_pretrained
from composer_rl.agent.behaviours import DemonstrationMix
from composer_rl.agent.demonstrations import play_demonstration
from composer_rl.agent.quick import random_checkpoint
from composer_rl.eval.stats import format_se, mean_se
from composer_rl.rl.compare import SPLITS, paired_margin
from composer_rl.tasks.invented import VALIDATION_WORDS

VALIDATION_SET = frozenset(VALIDATION_WORDS)

NEW_WORD = "new word"
KNOWN = "known"

NAME_CUES = ("@@path\n", "def ")
"""Text after which the policy's next token starts a name it has seen in its context."""


NAME_ENDS = ("\n", "(")
"""What ends a name after its cue: the line of a path, the parenthesis of a `def`."""

DISTANCES = ((64, "within 64"), (256, "65-256"), (None, "beyond 256"))
"""Buckets of the tokens back to a name's last mention. Stage one's models copy a stretch
64 tokens back less well than one side by side, and one 256 or more back not at all
(`benchmarks/copy_distance.py`): these say how much of a policy's naming lies where."""


def mention_distance(pieces: list[str], start: int, name: str) -> int | None:
    """Tokens from the name's last mention before token `start` to `start` (None when the
    context before it never holds the name). Matched as text: the instruction's ` brush.py`
    and the call's `brush.py` are other tokens, the same name."""
    offsets = [0]
    for piece in pieces[:start]:
        offsets.append(offsets[-1] + len(piece))
    found = "".join(pieces[:start]).rfind(name)
    if not name or found < 0:
        return None
    return start - (bisect.bisect_right(offsets, found) - 1)


def bucket(distance: int | None) -> str:
    if distance is None:
        return "not in context"
    return next(label for most, label in DISTANCES if most is None or distance <= most)


def name_kind(name: str) -> str:
    """ "new word" when a word of the name is one `validation_words` tasks are named with
    (no demonstration uses it: only copying gets it right), else "known" (a template's
    fixed file, a training name). Far mentions are mostly known names, which recall
    gets right at any distance, so distance is read within a kind."""
    words = re.findall(r"[a-z]+", name.lower())
    return NEW_WORD if any(word in VALIDATION_SET for word in words) else KNOWN


def accuracies(model: torch.nn.Module, tokenizer: ComposerTokenizer, ids: list[int],
               mask: list[bool]) -> tuple[list[bool], list[bool], list[bool], list[str], list[bool]]:  # fmt: skip
    """Greedy-guess hits at name positions (a name's first token), at the other policy
    positions, for whole names (every token of the name and the one that ends it), how
    far back each name was last mentioned (`bucket`), and for the rest of each name (its
    tokens after the first, and its end, given the first: the copying alone, which a
    model that does not know the agent format can show too).

    A name's first token asks which name; the rest asks to go on copying it. The SFT
    policy's failed reads get the first right and lose the rest (`brigh.py` for
    `brush.py`), which first-token accuracy alone does not see."""
    with torch.no_grad():
        guesses = model(torch.tensor([ids])).logits[0, :-1].argmax(-1).tolist()
    names: list[bool] = []
    others: list[bool] = []
    whole: list[bool] = []
    distances: list[str] = []
    rests: list[bool] = []
    pieces = [tokenizer.decode([token]) for token in ids]
    for position in range(len(ids) - 1):
        if not mask[position + 1]:
            continue
        hit = guesses[position] == ids[position + 1]
        before = tokenizer.decode(ids[max(0, position - 6) : position + 1])
        if not before.endswith(NAME_CUES):
            others.append(hit)
            continue
        names.append(hit)
        end = position
        while end < len(ids) - 2 and not any(
            mark in tokenizer.decode([ids[end + 1]]) for mark in NAME_ENDS
        ):
            end += 1
        whole.append(all(guesses[q] == ids[q + 1] for q in range(position, end + 1)))
        rests.append(all(guesses[q] == ids[q + 1] for q in range(position + 1, end + 1)))
        written = "".join(pieces[position + 1 : end + 2])
        name = written[: min((written.find(m) for m in NAME_ENDS if m in written), default=None)]
        where = bucket(mention_distance(pieces, position + 1, name.strip()))
        distances.append(f"{name_kind(name)}, {where}")
    return names, others, whole, distances, rests


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, help="a stage-one checkpoint (sft/final)")
    parser.add_argument("--splits", nargs="*", default=["validation", "heldout"],
                        choices=sorted(SPLITS))  # fmt: skip
    parser.add_argument("--per-template", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="a random tiny model, 1 a template")
    parser.add_argument("--out", type=Path, help="also write the figures here (JSON)")
    parser.add_argument("--against", type=Path, nargs="*", default=[],
                        help="--out files of other checkpoints: this one minus each, paired "
                        "over the tasks both scored")  # fmt: skip
    args = parser.parse_args()
    for other in args.against:
        if not other.is_file():
            print(f"error: --against {other} does not exist: give a file name_copy.py "
                  "wrote with --out", file=sys.stderr)  # fmt: skip
            return 2
    model_dir = args.model
    if args.quick or model_dir is None:
        model_dir = random_checkpoint(Path(tempfile.mkdtemp(prefix="name-copy-")))
        args.per_template = 1
    if not (model_dir / "tokenizer.json").is_file():
        print(f"error: --model {model_dir} has no tokenizer.json: give a stage-one checkpoint",
              file=sys.stderr)  # fmt: skip
        return 2
    torch.set_num_threads(1)
    tokenizer = ComposerTokenizer.from_file(model_dir / "tokenizer.json")
    model = load_pretrained(model_dir).eval()
    mix = DemonstrationMix()
    figures: dict[str, dict[str, object]] = {}
    for split in args.splits:
        name_rates: list[float] = []
        other_rates: list[float] = []
        whole_rates: list[float] = []
        per_task_whole: dict[str, float] = {}
        per_task_new: dict[str, float] = {}  # whole names of new words only
        per_task: dict[str, float] = {}  # at names, by task: two policies pair on these
        by_distance: dict[str, list[bool]] = {}  # whole-name hits, pooled over names
        rest_by_kind: dict[str, list[bool]] = {}
        for task in SPLITS[split](args.per_template, seed=0):
            ids, mask = play_demonstration(task, mix).transcript.encode(tokenizer)
            names, others, whole, distances, rests = accuracies(model, tokenizer, ids, mask)
            for hit, rest, where in zip(whole, rests, distances, strict=True):
                by_distance.setdefault(where, []).append(hit)
                rest_by_kind.setdefault(where.split(",")[0], []).append(rest)
            if names:
                name_rates.append(sum(names) / len(names))
                per_task[task.id] = name_rates[-1]
                whole_rates.append(sum(whole) / len(whole))
                per_task_whole[task.id] = whole_rates[-1]
            new = [hit for hit, where in zip(whole, distances, strict=True)
                   if where.startswith(NEW_WORD)]  # fmt: skip
            if new:
                per_task_new[task.id] = sum(new) / len(new)
            if others:
                other_rates.append(sum(others) / len(others))
        figures[split] = {
            "tasks": len(other_rates),
            "at_names": mean_se(name_rates),
            "elsewhere": mean_se(other_rates),
            "at_names_by_task": per_task,
            "whole_names": mean_se(whole_rates),
            "whole_names_by_task": per_task_whole,
            "whole_new_words": mean_se(per_task_new.values()),
            "whole_new_words_by_task": per_task_new,
            "whole_names_by_mention_distance": {
                where: (*mean_se(map(float, hits)), len(hits))
                for where, hits in sorted(by_distance.items())
            },
            "rest_of_names_by_kind": {
                kind: (*mean_se(map(float, hits)), len(hits))
                for kind, hits in sorted(rest_by_kind.items())
            },
        }
        print(f"{split}: {len(other_rates)} demonstrations; greedy-guess accuracy at names "
              f"{figures[split]['at_names'][0]:.3f} ± {figures[split]['at_names'][1]:.3f}, "
              f"elsewhere {figures[split]['elsewhere'][0]:.3f} ± "
              f"{figures[split]['elsewhere'][1]:.3f}; whole names "
              f"{figures[split]['whole_names'][0]:.3f} ± "
              f"{figures[split]['whole_names'][1]:.3f}")  # fmt: skip
        shown = "; ".join(f"{where} {format_se(mean, se)} ({n})" for where, (mean, se, n)
                          in figures[split]["whole_names_by_mention_distance"].items())  # type: ignore[attr-defined]  # fmt: skip
        print(f"{split}: whole names by kind and tokens back to the name's last mention "
              f"(± s.e. over names): {shown}")  # fmt: skip
        rest = "; ".join(f"{kind} {format_se(mean, se)} ({n})" for kind, (mean, se, n)
                         in figures[split]["rest_of_names_by_kind"].items())  # type: ignore[attr-defined]  # fmt: skip
        print(f"{split}: the rest of a name given its first token, by kind: {rest}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"model": str(model_dir), **figures}, indent=2))
    for other_file in args.against:
        other = json.loads(other_file.read_text())
        for split, mine in figures.items():
            if split not in other:
                continue
            for rate in ("at_names", "whole_names", "whole_new_words"):
                if f"{rate}_by_task" not in other[split]:
                    continue  # written before the figure existed
                mean, se, n = paired_margin(
                    other[split][f"{rate}_by_task"],
                    mine[f"{rate}_by_task"],  # type: ignore[arg-type]
                )
                print(f"{split}: {rate} minus {other['model']}: "
                      f"{format_se(mean, se, sign=True)} paired over {n} tasks")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
