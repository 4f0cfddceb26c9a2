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

- at **whole names**: every token of the name and the one that ends it.

A policy whose accuracy is high elsewhere and low at the names has learned the format and
the behaviours but not to copy: no RL reward can select a solution it never produces.
Printed per split, with the standard error over tasks:

    uv run python packages/composer-rl/benchmarks/name_copy.py --model runs/stage1/sft/final
    uv run python packages/composer-rl/benchmarks/name_copy.py --quick   # random tiny model
"""

from __future__ import annotations

import argparse
import json
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

NAME_CUES = ("@@path\n", "def ")
"""Text after which the policy's next token starts a name it has seen in its context."""


NAME_ENDS = ("\n", "(")
"""What ends a name after its cue: the line of a path, the parenthesis of a `def`."""


def accuracies(model: torch.nn.Module, tokenizer: ComposerTokenizer, ids: list[int],
               mask: list[bool]) -> tuple[list[bool], list[bool], list[bool]]:  # fmt: skip
    """Greedy-guess hits at name positions (a name's first token), at the other policy
    positions, and for whole names (every token of the name and the one that ends it).

    A name's first token asks which name; the rest asks to go on copying it. The SFT
    policy's failed reads get the first right and lose the rest (`brigh.py` for
    `brush.py`), which first-token accuracy alone does not see."""
    with torch.no_grad():
        guesses = model(torch.tensor([ids])).logits[0, :-1].argmax(-1).tolist()
    names: list[bool] = []
    others: list[bool] = []
    whole: list[bool] = []
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
    return names, others, whole


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
        per_task: dict[str, float] = {}  # at names, by task: two policies pair on these
        for task in SPLITS[split](args.per_template, seed=0):
            ids, mask = play_demonstration(task, mix).transcript.encode(tokenizer)
            names, others, whole = accuracies(model, tokenizer, ids, mask)
            if names:
                name_rates.append(sum(names) / len(names))
                per_task[task.id] = name_rates[-1]
                whole_rates.append(sum(whole) / len(whole))
                per_task_whole[task.id] = whole_rates[-1]
            if others:
                other_rates.append(sum(others) / len(others))
        figures[split] = {
            "tasks": len(other_rates),
            "at_names": mean_se(name_rates),
            "elsewhere": mean_se(other_rates),
            "at_names_by_task": per_task,
            "whole_names": mean_se(whole_rates),
            "whole_names_by_task": per_task_whole,
        }
        print(f"{split}: {len(other_rates)} demonstrations; greedy-guess accuracy at names "
              f"{figures[split]['at_names'][0]:.3f} ± {figures[split]['at_names'][1]:.3f}, "
              f"elsewhere {figures[split]['elsewhere'][0]:.3f} ± "
              f"{figures[split]['elsewhere'][1]:.3f}; whole names "
              f"{figures[split]['whole_names'][0]:.3f} ± "
              f"{figures[split]['whole_names'][1]:.3f}")  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps({"model": str(model_dir), **figures}, indent=2))
    for other_file in args.against:
        other = json.loads(other_file.read_text())
        for split, mine in figures.items():
            if split not in other:
                continue
            for rate in ("at_names", "whole_names"):
                mean, se, n = paired_margin(
                    other[split][f"{rate}_by_task"],
                    mine[f"{rate}_by_task"],  # type: ignore[arg-type]
                )
                print(f"{split}: {rate} minus {other['model']}: "
                      f"{format_se(mean, se, sign=True)} paired over {n} tasks")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
