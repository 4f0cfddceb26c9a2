"""The Ray service runtime: plain service classes as restartable actors, fed by a reconciler.

`LocalCluster` starts a real multi-node cluster on this machine (a head and workers as
separate ``ray start`` processes) for tests and demonstrations of the cluster path.
"""

from composer_infra.runtime.cluster import ClusterAuthError, RayRuntime, refresh_ray_auth_config
from composer_infra.runtime.config import RuntimeConfig
from composer_infra.runtime.local_cluster import LocalCluster
from composer_infra.runtime.reconciler import ReconcilerStats, RolloutFailed, SlotReconciler

__all__ = [
    "ClusterAuthError",
    "LocalCluster",
    "RayRuntime",
    "ReconcilerStats",
    "RolloutFailed",
    "RuntimeConfig",
    "SlotReconciler",
    "refresh_ray_auth_config",
]
