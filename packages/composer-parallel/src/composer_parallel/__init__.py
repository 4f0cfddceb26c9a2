"""Parallelism for composer-model: device meshes, context parallelism, expert parallelism
folded from DP x CP, global sequence packing, and `parallelize`, whose handle the project's
one training step (`composer_model.train_step(..., parallel=...)`) takes. See the README."""

from composer_parallel.backends import (
    ExpertDispatchBackend,
    deep_ep_available,
    expert_dispatch_backend,
)
from composer_parallel.context import (
    ContextLayout,
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
from composer_parallel.train import (
    Parallel,
    full_state_dict,
    init_distributed,
    parallelize,
    run_training,
)

__version__ = "0.1.0"

__all__ = [
    "AllToAllDispatcher",
    "ContextLayout",
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
    "full_state_dict",
    "grad_norm",
    "head_tail_spans",
    "init_distributed",
    "karmarkar_karp",
    "load_all_reduce",
    "parallelize",
    "plan_global_batch",
    "run_local",
    "run_training",
    "sync_gradients",
]
