"""The Ray service runtime: plain service classes as restartable actors, fed by a reconciler."""

from composer_infra.runtime.cluster import RayRuntime
from composer_infra.runtime.config import RuntimeConfig
from composer_infra.runtime.reconciler import ReconcilerStats, RolloutFailed, SlotReconciler

__all__ = ["RayRuntime", "ReconcilerStats", "RolloutFailed", "RuntimeConfig", "SlotReconciler"]
