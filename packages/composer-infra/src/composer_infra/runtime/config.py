"""Typed configuration of the Ray service runtime."""

from __future__ import annotations

from pydantic import BaseModel, Field, field_validator


class RuntimeConfig(BaseModel):
    """Where the services run and how hard Ray tries to keep them alive.

    With ``address=None`` a private local Ray instance is started (the default on one
    machine; an existing cluster or ``RAY_ADDRESS`` is deliberately ignored); with an address (``"10.0.0.5:6379"``, ``"ray://..."``, or ``"auto"``) the
    runtime joins that cluster. The composer-rl CLI maps ``--ray-address`` to this field.
    """

    address: str | None = Field(
        default=None, description="cluster to join; None starts a local one"
    )
    num_cpus: int = Field(
        default=2, ge=1, description="CPUs of the local instance (ignored when joining)"
    )
    object_store_memory: int = Field(
        default=128 * 1024 * 1024, ge=80 * 1024 * 1024, description="bytes, local instance only"
    )
    namespace: str = "composer"
    max_restarts: int = Field(default=3, ge=-1, description="per actor; -1 restarts forever")
    propagate_uv_env: bool = Field(
        default=False,
        description="let Ray start workers through `uv run` when the driver runs under it",
    )
    log_to_driver: bool = Field(default=False, description="stream every actor's stdout to ours")

    @field_validator("address")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError(
                "address must be a host:port, 'auto' or a ray:// URL; use None for a local instance"
            )
        return value
