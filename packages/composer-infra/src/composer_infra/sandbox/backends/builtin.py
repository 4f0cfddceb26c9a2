"""Registers the built-in backends through the public hook, like any third-party plugin."""

from __future__ import annotations

from composer_infra.sandbox.backend import SandboxBackend
from composer_infra.sandbox.backends.bwrap import BwrapBackend, BwrapPerCommandBackend
from composer_infra.sandbox.backends.gvisor import GVisorBackend
from composer_infra.sandbox.backends.process import ProcessBackend
from composer_infra.sandbox.hookspecs import hookimpl


@hookimpl
def composer_sandbox_backends() -> list[SandboxBackend]:
    return [BwrapBackend(), BwrapPerCommandBackend(), GVisorBackend(), ProcessBackend()]
