"""`composer-rl view`: a rollout viewer in the browser, live during a run.

One module a job:

| module | what it holds |
| --- | --- |
| `jsonl.py` | reading a JSONL file another process appends to, by byte offset, half-written tail and bad lines noted |
| `index.py` | the episode table: one compact row per episode line, server-side filters, sort, pages |
| `rundir.py` | a run directory: files present and missing, status (running / finished / stopped), curves, group fates |
| `transcript.py` | an episode's transcript split at the agent format's markers into blocks |
| `tokens.py` | an episode's tokens from its group file, each with the version that sampled it and its logprob |
| `app.py` | the Starlette app: JSON endpoints, the HTML shell, Server-Sent Events, the CSP |
| `server.py` | uvicorn on a socket bound here (loopback by default), in the foreground or a thread |
| `static/` | the page: vanilla JS (DOM text only, no innerHTML), SVG charts, CSS |
"""

from composer_rl.view.app import create_app
from composer_rl.view.server import ViewerServer, serve

__all__ = ["ViewerServer", "create_app", "serve"]
