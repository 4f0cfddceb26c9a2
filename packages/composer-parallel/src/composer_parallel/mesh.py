"""Two views of the same ranks: a dense (dp, cp) mesh and a sparse (expert-dp, ep) mesh.

Expert parallelism is *folded* out of the data x context-parallel ranks (Megatron's "MoE
parallel folding"): attention and every dense layer see the world as `dp` replicas of a
`cp`-way context split, while the routed experts see the same ranks as `ep`-way expert
shards replicated `expert_dp = dp * cp / ep` times. No rank is spent on experts alone.

Rank order (row-major, innermost dimension fastest):

- dense:  rank = dp_index * cp + cp_index
- sparse: rank = edp_index * ep + ep_index

so a context-parallel group and an expert-parallel group are both runs of consecutive
ranks (one machine's GPUs when the degree fits on it). The group arithmetic is plain
Python (`ParallelDims.*_groups`) so layouts can be checked on paper without processes;
`build_meshes` turns it into `torch.distributed` DeviceMeshes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ParallelDims:
    """Degrees of data (`dp`), context (`cp`) and expert (`ep`) parallelism.

    The world size is `dp * cp`; `ep` must divide it. `ep = 1` keeps every expert on
    every rank (the experts are then data-parallel like everything else).
    """

    dp: int = 1
    cp: int = 1
    ep: int = 1

    def __post_init__(self) -> None:
        for name in ("dp", "cp", "ep"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer; got {value!r}")
        if self.world_size % self.ep:
            raise ValueError(
                f"ep={self.ep} must divide dp x cp = {self.dp} x {self.cp} = {self.world_size}: "
                "expert parallelism is folded out of the data- and context-parallel ranks. "
                f"Pick ep from the divisors {_divisors(self.world_size)} or change dp/cp"
            )

    @property
    def world_size(self) -> int:
        return self.dp * self.cp

    @property
    def expert_dp(self) -> int:
        """How many copies of each expert shard exist (the experts' data-parallel degree)."""
        return self.world_size // self.ep

    def check_experts(self, n_routed_experts: int) -> None:
        """Every EP rank must own the same number of experts."""
        if n_routed_experts % self.ep:
            raise ValueError(
                f"n_routed_experts={n_routed_experts} is not divisible by ep={self.ep}; "
                f"choose ep from {_divisors(n_routed_experts)} that also divides {self.world_size}"
            )

    # --- coordinates -------------------------------------------------------------------

    def dense_coords(self, rank: int) -> tuple[int, int]:
        """(dp_index, cp_index) of a global rank."""
        self._check_rank(rank)
        return divmod(rank, self.cp)

    def sparse_coords(self, rank: int) -> tuple[int, int]:
        """(expert_dp_index, ep_index) of a global rank."""
        self._check_rank(rank)
        return divmod(rank, self.ep)

    def _check_rank(self, rank: int) -> None:
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} is outside the world of {self.world_size} ranks")

    # --- groups (lists of global ranks), identical on every rank -------------------------

    def cp_groups(self) -> list[list[int]]:
        """Ranks that split one sequence (one group per data-parallel replica)."""
        return [[d * self.cp + c for c in range(self.cp)] for d in range(self.dp)]

    def dp_groups(self) -> list[list[int]]:
        """Ranks holding the same context chunk of different batches."""
        return [[d * self.cp + c for d in range(self.dp)] for c in range(self.cp)]

    def ep_groups(self) -> list[list[int]]:
        """Ranks that together hold all experts (tokens are exchanged inside a group)."""
        return [[g * self.ep + e for e in range(self.ep)] for g in range(self.expert_dp)]

    def expert_dp_groups(self) -> list[list[int]]:
        """Ranks holding the same expert shard (their expert gradients are summed)."""
        return [[g * self.ep + e for g in range(self.expert_dp)] for e in range(self.ep)]

    def experts_of(self, rank: int, n_routed_experts: int) -> range:
        """The global expert indices a rank owns."""
        self.check_experts(n_routed_experts)
        per = n_routed_experts // self.ep
        _, e = self.sparse_coords(rank)
        return range(e * per, (e + 1) * per)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@dataclass
class Meshes:
    """The DeviceMeshes of one process: dense ("dp", "cp") and sparse ("edp", "ep")."""

    dims: ParallelDims
    dense: torch.distributed.device_mesh.DeviceMesh
    sparse: torch.distributed.device_mesh.DeviceMesh

    @property
    def cp_group(self) -> torch.distributed.ProcessGroup:
        return self.dense.get_group("cp")

    @property
    def ep_group(self) -> torch.distributed.ProcessGroup:
        return self.sparse.get_group("ep")

    @property
    def expert_dp_group(self) -> torch.distributed.ProcessGroup:
        return self.sparse.get_group("edp")

    @property
    def world_group(self) -> torch.distributed.ProcessGroup:
        group = torch.distributed.group.WORLD
        assert group is not None
        return group


def build_meshes(dims: ParallelDims, device_type: str = "cpu") -> Meshes:
    """Both meshes over the initialised default process group (collective: all ranks call it)."""
    from torch.distributed.device_mesh import DeviceMesh

    dist = torch.distributed
    if not dist.is_initialized():
        raise RuntimeError(
            "torch.distributed is not initialised: call init_process_group (or run under "
            "torchrun) before build_meshes"
        )
    world = dist.get_world_size()
    if world != dims.world_size:
        raise ValueError(
            f"the process group has {world} ranks but dp x cp = {dims.dp} x {dims.cp} = "
            f"{dims.world_size}; launch {dims.world_size} processes or change --dp/--cp"
        )
    ranks = torch.arange(world)
    dense = DeviceMesh(device_type, ranks.view(dims.dp, dims.cp), mesh_dim_names=("dp", "cp"))
    sparse = DeviceMesh(
        device_type, ranks.view(dims.expert_dp, dims.ep), mesh_dim_names=("edp", "ep")
    )
    return Meshes(dims=dims, dense=dense, sparse=sparse)


__all__ = ["Meshes", "ParallelDims", "build_meshes"]
