"""The Ray service runtime: start or join Ray, and run plain service classes as restartable actors.

`LocalCluster` starts a real multi-node cluster on this machine (a head and workers as
separate ``ray start`` processes) for tests and demonstrations of the cluster path.
"""

from composer_infra.runtime.cluster import ClusterAuthError, RayRuntime, refresh_ray_auth_config
from composer_infra.runtime.config import RuntimeConfig
from composer_infra.runtime.local_cluster import LocalCluster

__all__ = [
    "ClusterAuthError",
    "LocalCluster",
    "RayRuntime",
    "RuntimeConfig",
    "refresh_ray_auth_config",
]
