"""Parallelism for composer-model. Today: choosing the expert-dispatch backend (DeepEP when
installed, else ``torch.distributed`` all-to-all). Device meshes, context and expert
parallelism (folded from DP x CP) and global sequence packing are planned, not here yet:
see the package README."""

from composer_parallel.backends import (
    ExpertDispatchBackend,
    deep_ep_available,
    expert_dispatch_backend,
)
from composer_parallel.context import (
    ContextParallel,
    ContextShard,
    apply_context_parallel,
    head_tail_spans,
)
from composer_parallel.data import clip_gradients, grad_norm, sync_gradients
from composer_parallel.expert import (
    AllToAllDispatcher,
    Dispatcher,
    apply_expert_parallel,
    load_all_reduce,
)
from composer_parallel.launch import run_local
from composer_parallel.mesh import Meshes, ParallelDims, build_meshes
from composer_parallel.packing import (
    attention_cost_ratio,
    karmarkar_karp,
    plan_global_batch,
)
from composer_parallel.train import Parallel, parallelize, run_training

__version__ = "0.1.0"

__all__ = [
    "AllToAllDispatcher",
    "ContextParallel",
    "ContextShard",
    "Dispatcher",
    "ExpertDispatchBackend",
    "Meshes",
    "Parallel",
    "ParallelDims",
    "__version__",
    "apply_context_parallel",
    "apply_expert_parallel",
    "attention_cost_ratio",
    "build_meshes",
    "clip_gradients",
    "deep_ep_available",
    "expert_dispatch_backend",
    "grad_norm",
    "head_tail_spans",
    "karmarkar_karp",
    "load_all_reduce",
    "parallelize",
    "plan_global_batch",
    "run_local",
    "run_training",
    "sync_gradients",
]
