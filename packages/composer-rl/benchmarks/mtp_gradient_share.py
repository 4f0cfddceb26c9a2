"""How much of an RL step's gradient the MTP self-distillation term makes, on the trunk.

Loads a policy checkpoint and finished groups a run wrote (`run_dir/groups/*.json`, with
their advantages), and for each group computes the gradient of the RL loss's two terms
on the weights the policy's tokens come from (everything but the `mtp.` modules): the
policy-gradient term alone, and the MTP self-distillation term (weight `--mtp-weight`),
read through the trunk (`attached`, as RL trained before) and through detached copies
(`detached`, what the RL step does now). Under Adam the larger term sets the direction of
the update, so the ratio says whose update the trunk took.

    uv run python packages/composer-rl/benchmarks/mtp_gradient_share.py \
        --model runs/stage1b/sft/final --groups runs/learning/seed1/groups
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch

from composer_infra.checkpoint import Trajectory
from composer_infra.checkpoint.groups import FinishedGroup
from composer_model import ComposerModel, load_pretrained, preset
from composer_rl.rl.batch import pack
from composer_rl.rl.loss import RLLossConfig
from composer_rl.rl.trainer import rl_forward_loss


def trunk_grad(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat(
        [
            (p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
            for n, p in model.named_parameters()
            if not n.startswith("mtp.")
        ]
    )


def random_group(index: int, size: int = 4, prompt: int = 8, sampled: int = 12) -> list[Trajectory]:
    """A group of random token sequences with zero-mean advantages (the smoke run's data)."""
    out = []
    for sample in range(size):
        n = prompt + sampled
        out.append(
            Trajectory(
                tokens=torch.randint(0, 256, (n,)).tolist(),
                sampled=[False] * prompt + [True] * sampled,
                logprobs=[0.0] * prompt + [-1.0] * sampled,
                versions=[-1] * prompt + [0] * sampled,
                advantage=(sample - (size - 1) / 2) / size,
                reward=float(sample),
                group_id=f"quick-{index}",
                episode_id=f"quick-{index}.{sample}",
            )
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", type=Path, help="the policy checkpoint")
    parser.add_argument("--groups", type=Path, help="a run's groups/ folder")
    parser.add_argument("--count", type=int, default=8, help="groups measured")
    parser.add_argument("--mtp-weight", type=float, default=0.1)
    parser.add_argument(
        "--quick", action="store_true", help="a random tiny model and random groups (a smoke run)"
    )
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    if args.quick:
        model = ComposerModel(preset("tiny", vocab_size=256, num_hidden_layers=2))
        groups = [random_group(i) for i in range(2)]
    else:
        if args.model is None or args.groups is None:
            parser.error("--model and --groups are required (or --quick)")
        model = load_pretrained(args.model)
        files = sorted(args.groups.glob("*.json"))[: args.count]
        if not files:
            raise SystemExit(f"no group files in {args.groups}")
        groups = [FinishedGroup.model_validate_json(f.read_text()).episodes for f in files]
    forward = model.forward
    ratios: dict[str, list[float]] = {"attached": [], "detached": []}
    pg_norms = []
    for trajectories in groups:
        batch = pack(trajectories)
        model.zero_grad(set_to_none=True)
        rl_forward_loss(model, batch, RLLossConfig(mtp_weight=0.0)).loss.backward()
        pg = trunk_grad(model).clone()
        pg_norms.append(float(pg.norm()))
        for mode in ratios:
            detach = mode == "detached"
            model.forward = lambda *a, _d=detach, **k: forward(*a, **{**k, "mtp_detach_trunk": _d})  # type: ignore[method-assign]
            model.zero_grad(set_to_none=True)
            rl_forward_loss(model, batch, RLLossConfig(mtp_weight=args.mtp_weight)).loss.backward()
            model.forward = forward  # type: ignore[method-assign]
            mtp = trunk_grad(model) - pg
            ratios[mode].append(float(mtp.norm()) / max(float(pg.norm()), 1e-30))
    source = "random groups (--quick)" if args.quick else str(args.groups)
    print(f"{len(groups)} groups from {source}, MTP weight {args.mtp_weight}")
    print(f"policy-gradient term, trunk gradient norm: median {statistics.median(pg_norms):.2e}")
    for mode, values in ratios.items():
        print(
            f"MTP term / policy-gradient term (trunk gradient norms), {mode}: "
            f"median {statistics.median(values):.3g} (min {min(values):.3g}, max {max(values):.3g})"
        )


if __name__ == "__main__":
    main()
