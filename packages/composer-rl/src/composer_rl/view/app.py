"""The viewer's web app: JSON endpoints over run directories, one HTML shell, live events.

Starlette (with uvicorn serving it) rather than Flask, which is in the lock already as a
transitive dependency: the live pages need Server-Sent Events, a response that stays open
and sends a line whenever the run's files grow. Starlette streams that from an async
generator and notices the browser leaving; under Flask's WSGI each open page would hold a
worker thread in a blocking loop. Starlette is small, typed, and maintained by the
encode team (uvicorn's authors); its only dependency, anyio, was in the lock already.

Safety: every page is the same static shell plus scripts from `static/`; data reaches the
page only as JSON and is put in the DOM as text (`textContent`, never `innerHTML`), and the
Content-Security-Policy forbids inline script and anything not from this server, so a
transcript holding `<script>` or `onerror=` is shown, not run. The server binds loopback
by default and (bound there) refuses requests whose Host header names another machine
(DNS rebinding). Errors answer as JSON with a message, never a traceback page.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from composer_rl.view.index import Query
from composer_rl.view.rundir import RunDir
from composer_rl.view.tokens import decoder_for, episode_segments, read_group, token_view
from composer_rl.view.transcript import blocks_json

logger = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
    "frame-ancestors 'none'; form-action 'self'"
)
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-resource-policy", b"same-origin"),
]
LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "::1", "[::1]"]
EVENT_INTERVAL_S = 1.0
KEEPALIVE_S = 15.0


def _clean(value: Any) -> Any:
    """JSON-safe: non-finite floats become null (browsers' JSON.parse rejects NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


class JSON(Response):
    """ASCII-escaped JSON: lone surrogates and odd Unicode from a transcript never fail."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return json.dumps(_clean(content), ensure_ascii=True, allow_nan=False).encode()


class SecurityHeaders:
    """Adds the CSP and friends to every response, static files included."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)


def error(status: int, message: str) -> JSON:
    return JSON({"error": message}, status_code=status)


class Viewer:
    """The run directories served, by a short id each (unique names from their paths)."""

    def __init__(self, paths: list[Path]) -> None:
        self.runs: dict[str, RunDir] = {}
        for path in paths:
            base = path.name or "run"
            if base == "run" and path.parent.name:
                base = f"{path.parent.name}-run"
            name, n = base, 2
            while name in self.runs:
                name, n = f"{base}-{n}", n + 1
            self.runs[name] = RunDir(path, name)

    def run(self, request: Request) -> RunDir | None:
        return self.runs.get(request.path_params["run"])


def create_app(paths: list[Path], *, allowed_hosts: list[str] | None = None) -> Starlette:
    """The app serving `paths`; `allowed_hosts` None accepts any Host (a non-loopback bind)."""
    viewer = Viewer([Path(p) for p in paths])

    def with_run(
        handler: Callable[[Request, RunDir], Response],
    ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            run = viewer.run(request)
            if run is None:
                return error(404, f"no run {request.path_params['run']!r} is served here")
            try:
                return await anyio.to_thread.run_sync(handler, request, run)
            except Exception as exc:  # a damaged file: say what, never a traceback page
                logger.exception("viewer request %s failed", request.url.path)
                return error(500, f"could not read {run.path}: {type(exc).__name__}: {exc}")

        return endpoint

    async def shell(request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers={"cache-control": "no-store"})

    async def runs(request: Request) -> Response:
        def build() -> list[dict[str, Any]]:
            out: list[dict[str, Any]] = []
            for name, run in viewer.runs.items():
                try:
                    run.refresh()
                    out.append(
                        {
                            "id": name,
                            "path": str(run.path),
                            "status": run.status(),
                            "notes": run.notes(),
                        }
                    )
                except Exception as exc:
                    out.append(
                        {"id": name, "path": str(run.path), "status": None, "notes": [str(exc)]}
                    )
            return out

        return JSON(await anyio.to_thread.run_sync(build))

    def run_info(request: Request, run: RunDir) -> Response:
        run.refresh()
        config, text, _ = run.config()
        return JSON(
            {
                "id": run.name,
                "path": str(run.path),
                "status": run.status(),
                "notes": run.notes(),
                "config": config,
                "config_text": text,
                "plugins": _plugin_summary(run.plugin_state()),
            }
        )

    def metrics(request: Request, run: RunDir) -> Response:
        run.refresh()
        return JSON(run.series())

    def episodes(request: Request, run: RunDir) -> Response:
        try:
            query = Query.parse(dict(request.query_params))
        except ValueError as exc:
            return error(400, str(exc))
        run.episodes.refresh()
        page = run.episodes.query(query)
        if request.query_params.get("facets"):
            page["facets"] = run.episodes.facets()
        page["notes"] = run.episodes.notes()
        return JSON(page)

    def episode(request: Request, run: RunDir) -> Response:
        episode_id = request.query_params.get("id", "")
        run.episodes.refresh()
        record = run.episodes.record(episode_id)
        if record is None:
            return error(404, f"no episode {episode_id!r} in {run.path / 'episodes'}")
        transcript = record.get("transcript")
        index = run.episodes.by_id[episode_id]
        row = run.episodes.rows[index]
        return JSON(
            {
                "row": row.as_json(),
                "record": {k: v for k, v in record.items() if k != "transcript"},
                "transcript": transcript if isinstance(transcript, str) else None,
                "blocks": blocks_json(transcript) if isinstance(transcript, str) else [],
            }
        )

    def tokens(request: Request, run: RunDir) -> Response:
        episode_id = request.query_params.get("id", "")
        run.episodes.refresh()
        index = run.episodes.by_id.get(episode_id)
        if index is None:
            return error(404, f"no episode {episode_id!r}")
        group = run.episodes.rows[index].group
        path = run.group_path(group)
        if path is None or not path.exists():
            return JSON(
                {
                    "segments": [],
                    "note": f"no token record yet: groups/{group}.json is written when the "
                    "group's last episode finishes",
                }
            )
        decoder = decoder_for(run.tokenizer_candidates())
        records = episode_segments(read_group(path), episode_id)
        note = "" if decoder else "no tokenizer.json found (config model, final/): ids shown"
        if not records:
            note = f"groups/{group}.json holds no tokens of this episode (none sampled?)"
        return JSON({"segments": token_view(records, decoder), "note": note})

    def group(request: Request, run: RunDir) -> Response:
        group_id = request.query_params.get("id", "")
        run.refresh()
        rows = [r for r in run.episodes.rows if r.group == group_id]
        path = run.group_path(group_id)
        if path is None or (not rows and not path.exists()):
            return error(404, f"no group {group_id!r} in this run")
        advantages: dict[str, float | None] = {}
        notes = []
        if path.exists():
            data = read_group(path)
            for record in data.get("episodes") or []:
                owner = str(record.get("episode_id", ""))
                if owner not in advantages:
                    advantages[owner] = record.get("advantage")
        else:
            notes.append("no group file yet: advantages are computed when the group finishes")
        fate = run.group_fate(group_id, [r.reward for r in rows], [r.solved for r in rows])
        episodes_out = []
        for row in rows:
            record = run.episodes.tail.read_at(row.offset, row.length)
            transcript = record.get("transcript")
            episodes_out.append(
                {
                    "row": row.as_json(),
                    "components": record.get("components") or {},
                    "flags": record.get("flags") or {},
                    "advantage": advantages.get(row.episode),
                    "blocks": blocks_json(transcript) if isinstance(transcript, str) else [],
                }
            )
        return JSON({"group": group_id, "fate": fate, "episodes": episodes_out, "notes": notes})

    async def events(request: Request) -> Response:
        run = viewer.run(request)
        if run is None:
            return error(404, "no such run")

        async def stream() -> AsyncIterator[str]:
            last: dict[str, Any] | None = None
            quiet = 0.0
            yield "retry: 2000\n\n"
            while True:
                try:
                    snap = await anyio.to_thread.run_sync(run.snapshot)
                except Exception as exc:  # a file mid-replace: try again next tick
                    snap = {"error": str(exc)}
                if snap != last:
                    last, quiet = snap, 0.0
                    yield f"data: {json.dumps(_clean(snap))}\n\n"
                elif quiet >= KEEPALIVE_S:
                    quiet = 0.0
                    yield ": keepalive\n\n"
                await anyio.sleep(EVENT_INTERVAL_S)
                quiet += EVENT_INTERVAL_S

        return StreamingResponse(
            stream(),
            media_type="text/event-stream",
            headers={"cache-control": "no-store", "x-accel-buffering": "no"},
        )

    async def not_found(request: Request, exc: Exception) -> Response:
        return error(404, f"nothing at {request.url.path}")

    async def failed(request: Request, exc: Exception) -> Response:
        return error(500, f"{type(exc).__name__}: {exc}")

    routes = [
        Route("/", shell),
        Route("/runs/{run}", shell),
        Route("/runs/{run}/episodes", shell),
        Route("/runs/{run}/episode", shell),
        Route("/runs/{run}/group", shell),
        Route("/api/runs", runs),
        Route("/api/runs/{run}", with_run(run_info)),
        Route("/api/runs/{run}/metrics", with_run(metrics)),
        Route("/api/runs/{run}/episodes", with_run(episodes)),
        Route("/api/runs/{run}/episode", with_run(episode)),
        Route("/api/runs/{run}/tokens", with_run(tokens)),
        Route("/api/runs/{run}/group", with_run(group)),
        Route("/api/runs/{run}/events", events),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    middleware = [Middleware(SecurityHeaders)]
    if allowed_hosts is not None:
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts))
    app = Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers={404: not_found, 500: failed},
    )
    app.state.viewer = viewer
    return app


def _plugin_summary(state: dict[str, Any] | None) -> dict[str, Any] | None:
    if state is None:
        return None
    plugins = state.get("plugins") or []
    return {
        "registered": [p.get("name") for p in plugins if isinstance(p, dict)],
        "runtime_added": state.get("runtime_added") or {},
        "runtime_removed": state.get("runtime_removed") or [],
        "unavailable": state.get("unavailable") or {},
        "disabled": state.get("disabled") or {},
        "step": state.get("step"),
    }


__all__ = ["CSP", "LOOPBACK_HOSTS", "create_app"]
