"""How far back can the policy copy? CE and greedy accuracy on a stretch written again
after a gap of other text.

The SFT policy copies a new name from its context at about 0.56 of first name tokens on
held-out tasks, and its failed reads look like a copy that gives up after two letters
(`brigh.py` for `brush.py`: docs/rl/2026-12-05-failed-read-loops.md). Stage one forms its
copying in the copy warm-up, on a stretch written twice *side by side* in rows of 256
tokens (`composer_rl.stages.copying`), while an episode asks for a name the instruction
gave hundreds of tokens earlier in a context of up to 2,048 (the long-context phase is 20
steps). This asks whether copying falls with the distance.

Each row is held-out corpus text with one stretch of `--stretch` tokens written twice,
`gap` tokens apart; the second copy ends at the same position in every row (`--end`), so
only the distance changes. Scored on the second copy's tokens after its first (which
nothing predicts), with the standard error over rows; and on the same stretch written
once (gap `none`), what the model guesses of it without copying:

    uv run python packages/composer-rl/benchmarks/copy_distance.py \\
        --models runs/stage1-words2/pretrain/final runs/stage1-words2/sft/final \\
        --tokens runs/stage1-words2/tokens.pt
    uv run python packages/composer-rl/benchmarks/copy_distance.py --quick   # random tiny model
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F

from composer_model.checkpoint import load_pretrained
from composer_rl.agent.quick import random_checkpoint
from composer_rl.eval.stats import mean_se

DEFAULT_GAPS = (0, 64, 256, 512, 1024, 1536)


def copy_row(
    documents: list[list[int]], stretch: int, gap: int | None, end: int, rng: random.Random
) -> tuple[list[int], int]:
    """A row of `end` tokens whose last `stretch` repeat a stretch ending `gap` tokens
    before them, and where the second copy starts. The text around is other documents',
    so nothing but the first copy predicts the second. With `gap` None the stretch is
    there once, at the end: what the model guesses of it without copying."""
    if gap is not None and end < 2 * stretch + gap:
        raise ValueError(f"--end {end} is shorter than two stretches and a gap of {gap}")
    long_docs = [doc for doc in documents if len(doc) >= stretch]
    source = rng.choice(long_docs)
    start = rng.randrange(len(source) - stretch + 1)
    copied = source[start : start + stretch]
    filler: list[int] = []
    while len(filler) < end - 2 * stretch:
        doc = rng.choice(documents)
        if doc is not source:
            filler.extend(doc)
    if gap is None:
        return filler[: end - stretch] + copied, end - stretch
    before = end - 2 * stretch - gap
    row = filler[:before] + copied + filler[before : before + gap] + copied
    return row, end - stretch


def score(model: torch.nn.Module, row: list[int], second: int) -> tuple[float, float]:
    """(CE, greedy accuracy) on the second copy's tokens after its first."""
    with torch.no_grad():
        logits = model(torch.tensor([row])).logits[0]
    targets = torch.tensor(row[second + 1 :])
    predicted = logits[second : len(row) - 1]
    ce = F.cross_entropy(predicted.float(), targets).item()
    accuracy = (predicted.argmax(-1) == targets).float().mean().item()
    return ce, accuracy


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="*", type=Path, default=[])
    parser.add_argument("--tokens", type=Path, help="a stage one's tokens.pt (held-out side)")
    parser.add_argument("--gaps", nargs="*", type=int, default=list(DEFAULT_GAPS))
    parser.add_argument("--stretch", type=int, default=12, help="tokens copied")
    parser.add_argument("--end", type=int, default=1800, help="where the second copy ends")
    parser.add_argument("--rows", type=int, default=40, help="rows a gap")
    parser.add_argument("--quick", action="store_true", help="a random tiny model, 4 rows")
    parser.add_argument("--out", type=Path, help="also write the figures here (JSON)")
    args = parser.parse_args()
    if max(args.gaps) + 2 * args.stretch > args.end:
        print(f"error: --end {args.end} cannot hold the gap {max(args.gaps)} and two "
              f"stretches of {args.stretch}: raise --end or lower --gaps", file=sys.stderr)  # fmt: skip
        return 2
    if args.quick:
        scratch = Path(tempfile.mkdtemp(prefix="copy-distance-"))
        args.models = [random_checkpoint(scratch)]
        args.rows, args.end, args.gaps = 4, 200, [0, 64]
        documents = [[random.Random(i).randrange(300) for _ in range(50)] for i in range(40)]
    else:
        if not args.models or args.tokens is None:
            print("error: give --models and --tokens (or --quick)", file=sys.stderr)
            return 2
        if not args.tokens.is_file():
            print(f"error: --tokens {args.tokens} does not exist: give a stage one's "
                  "tokens.pt", file=sys.stderr)  # fmt: skip
            return 2
        documents = torch.load(args.tokens, weights_only=False)["heldout"]
    torch.set_num_threads(1)
    figures: dict[str, dict[str, dict[str, tuple[float, float]]]] = {}
    for model_dir in args.models:
        model = load_pretrained(model_dir).eval()
        by_gap: dict[str, dict[str, tuple[float, float]]] = {}
        for gap in [*args.gaps, None]:
            rng = random.Random(-1 if gap is None else gap)  # the same rows for every model
            scores = [score(model, *copy_row(documents, args.stretch, gap, args.end, rng))
                      for _ in range(args.rows)]  # fmt: skip
            ce = mean_se([s[0] for s in scores])
            accuracy = mean_se([s[1] for s in scores])
            by_gap[str(gap) if gap is not None else "none"] = {"ce": ce, "accuracy": accuracy}
            shown = "none (once)" if gap is None else f"{gap:11d}"
            print(f"{model_dir}: gap {shown}: CE {ce[0]:.3f} ± {ce[1]:.3f}, "
                  f"greedy accuracy {accuracy[0]:.3f} ± {accuracy[1]:.3f}", flush=True)  # fmt: skip
        figures[str(model_dir)] = by_gap
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
