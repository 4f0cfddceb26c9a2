"""Parallelism for composer-model. Today: choosing the expert-dispatch backend (DeepEP when
installed, else ``torch.distributed`` all-to-all). Device meshes, context and expert
parallelism (folded from DP x CP) and global sequence packing are planned, not here yet:
see the package README."""

from composer_parallel.backends import (
    ExpertDispatchBackend,
    deep_ep_available,
    expert_dispatch_backend,
)

__version__ = "0.1.0"

__all__ = ["ExpertDispatchBackend", "__version__", "deep_ep_available", "expert_dispatch_backend"]
