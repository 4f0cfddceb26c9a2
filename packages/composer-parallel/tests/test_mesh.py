"""Mesh arithmetic on paper (no processes) for the report's layouts, and the real meshes."""

from __future__ import annotations

import pytest
import torch.distributed as dist

from composer_parallel.launch import run_local
from composer_parallel.mesh import ParallelDims, build_meshes


def _partition(groups: list[list[int]], world: int) -> None:
    assert sorted(r for g in groups for r in g) == list(range(world))


def test_ep8_cp2_layout() -> None:
    # 16 ranks: dp=8 replicas of a 2-way context split; experts 8-way, 2 copies of each shard.
    dims = ParallelDims(dp=8, cp=2, ep=8)
    assert dims.expert_dp == 2
    assert dims.cp_groups()[:2] == [[0, 1], [2, 3]]
    assert dims.dp_groups() == [[0, 2, 4, 6, 8, 10, 12, 14], [1, 3, 5, 7, 9, 11, 13, 15]]
    assert dims.ep_groups() == [list(range(8)), list(range(8, 16))]
    assert dims.expert_dp_groups()[3] == [3, 11]
    for groups in (dims.cp_groups(), dims.dp_groups(), dims.ep_groups(), dims.expert_dp_groups()):
        _partition(groups, 16)
    # an ep group spans 4 data-parallel replicas x both context halves: folded, not extra ranks
    assert {dims.dense_coords(r) for r in dims.ep_groups()[0]} == {
        (d, c) for d in range(4) for c in range(2)
    }
    assert list(dims.experts_of(11, 384)) == list(range(144, 192))


def test_ep8_cp8_layout() -> None:
    # 2048 ranks (thousands of GPUs): dp=256 x cp=8; every ep group *is* a cp group (8 GPUs).
    dims = ParallelDims(dp=256, cp=8, ep=8)
    assert dims.world_size == 2048 and dims.expert_dp == 256
    assert dims.ep_groups() == dims.cp_groups()
    assert dims.cp_groups()[5] == list(range(40, 48))
    assert dims.expert_dp_groups()[0][:3] == [0, 8, 16]
    for groups in (dims.cp_groups(), dims.dp_groups(), dims.ep_groups(), dims.expert_dp_groups()):
        _partition(groups, 2048)
    assert dims.sparse_coords(2047) == (255, 7)


def test_ep_that_does_not_divide_dp_x_cp_is_a_clear_error() -> None:
    with pytest.raises(
        ValueError, match=r"ep=3 must divide dp x cp = 2 x 2 = 4.*divisors \[1, 2, 4\]"
    ):
        ParallelDims(dp=2, cp=2, ep=3)
    with pytest.raises(ValueError, match="positive integer"):
        ParallelDims(dp=0)
    with pytest.raises(ValueError, match="not divisible by ep=16"):
        ParallelDims(dp=8, cp=2, ep=16).check_experts(8)
    with pytest.raises(ValueError, match="outside the world"):
        ParallelDims(dp=2).dense_coords(2)


def _mesh_rank(rank: int, world: int) -> dict[str, list[int]]:
    meshes = build_meshes(ParallelDims(dp=2, cp=2, ep=4))
    return {
        name: dist.get_process_group_ranks(group)
        for name, group in [
            ("cp", meshes.cp_group),
            ("ep", meshes.ep_group),
            ("edp", meshes.expert_dp_group),
        ]
    }


def test_device_meshes_match_the_paper_groups() -> None:
    dims = ParallelDims(dp=2, cp=2, ep=4)
    for rank, groups in enumerate(run_local(_mesh_rank, 4)):
        assert groups["cp"] == dims.cp_groups()[dims.dense_coords(rank)[0]]
        assert groups["ep"] == dims.ep_groups()[dims.sparse_coords(rank)[0]]
        assert groups["edp"] == dims.expert_dp_groups()[dims.sparse_coords(rank)[1]]
