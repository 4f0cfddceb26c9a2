"""Serving the viewer with uvicorn: on the command line, or in a thread (tests, screenshots).

The socket is bound here, before uvicorn starts, so that `--port 0` (any free port) still
prints the URL with the port the system chose, and a port in use fails with one line.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from pathlib import Path

import uvicorn

from composer_rl.view.app import LOOPBACK_HOSTS, create_app


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host.strip("[]"), port))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket, host: str) -> str:
    port = sock.getsockname()[1]
    shown = f"[{host.strip('[]')}]" if ":" in host else host
    return f"http://{shown}:{port}/"


class ViewerServer:
    """The viewer on `host:port` in a background thread; `stop()` ends it."""

    def __init__(self, paths: list[Path], host: str = "127.0.0.1", port: int = 0) -> None:
        allowed = LOOPBACK_HOSTS if is_loopback(host) else None
        self.app = create_app(paths, allowed_hosts=allowed)
        self.sock = bind(host, port)
        self.url = url_of(self.sock, host)
        config = uvicorn.Config(
            self.app, log_level="warning", timeout_graceful_shutdown=1, lifespan="off"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    def start(self) -> ViewerServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the viewer did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()

    def __enter__(self) -> ViewerServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(paths: list[Path], host: str, port: int) -> None:
    """Serve until interrupted (Ctrl-C), printing the URL first."""
    allowed = LOOPBACK_HOSTS if is_loopback(host) else None
    sock = bind(host, port)
    print(f"composer-rl view: serving {len(paths)} run(s) at {url_of(sock, host)}", flush=True)
    if not is_loopback(host):
        print(
            f"composer-rl view: bound to {host}, not loopback: anyone who can reach it sees "
            "the transcripts",
            flush=True,
        )
    app = create_app(paths, allowed_hosts=allowed)
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1, lifespan="off")
    uvicorn.Server(config).run(sockets=[sock])


__all__ = ["ViewerServer", "bind", "is_loopback", "serve"]
