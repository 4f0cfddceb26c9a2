"""The ``--ray-address`` option, shared by every command that runs services on Ray."""

from __future__ import annotations

import argparse
import os

RAY_ADDRESS_ENV = "COMPOSER_RAY_ADDRESS"
"""Environment variable that supplies ``--ray-address`` when the flag is not given."""


def add_ray_address_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--ray-address ADDR`` (default: $COMPOSER_RAY_ADDRESS, else a local Ray instance).

    The value becomes `RuntimeConfig.address`: unset starts a private local Ray instance
    (an existing cluster or ``RAY_ADDRESS`` is deliberately not joined by accident); an
    address joins that cluster, which a command then never shuts down. Ray's own
    ``RAY_ADDRESS`` is not read, so a stray one in a shell cannot redirect a run.
    """
    default = os.environ.get(RAY_ADDRESS_ENV, "").strip() or None
    parser.add_argument(
        "--ray-address",
        metavar="ADDR",
        default=default,
        help=(
            "join this Ray cluster (host:port of its head, 'auto', or ray://host:port) "
            f"instead of starting a local Ray instance; default: ${RAY_ADDRESS_ENV}"
            + (f" (now {default})" if default else " (unset: local)")
        ),
    )
