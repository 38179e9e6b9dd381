"""Start the proxy, follow the KB while it runs, stop it gracefully.

SIGTERM (or Ctrl-C) stops listening at once, lets the requests in flight
finish (up to ``serve.grace_seconds``), then writes every conversation held
and returns. The server owns its event loop, as an API command does.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from brewkb.api.loop import run_command
from brewkb.api.serve import Serving
from brewkb.errors import ServeError
from brewkb.serve.proxy import Proxy

__all__ = ["serve"]

log = logging.getLogger(__name__)


def serve(start: Path = Path("."), *, rev: str | None = None, run: str | None = None, upstream: str | None = None,
          host: str = "127.0.0.1", port: int = 8700, ready: Callable[[dict[str, Any]], None] = lambda info: None,
          notify: Callable[[str], None] = lambda text: None) -> dict[str, Any]:
    """Serve until SIGTERM or SIGINT; ``ready`` hears the address and what is
    served once the server listens, ``notify`` each change of revision or run.
    Returns the final status (every conversation held is written by then)."""
    if upstream is not None and not upstream.strip():
        raise ServeError("--upstream is empty (an unset variable, such as $OPENAI_BASE_URL?); give the model "
                         "endpoint's base URL, such as https://api.openai.com/v1, or leave --upstream out to use "
                         "serve.upstream")
    serving = Serving.open(start, rev=rev, run=run)
    upstream = upstream or serving.config.serve.upstream
    parts = urlsplit(upstream)
    try:
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ServeError(f"the upstream must be an http:// or https:// URL such as https://api.openai.com/v1, "
                             f"got {upstream!r}; check --upstream or serve.upstream")
        run_command(_serve(serving, upstream, host, port, ready, notify))
    finally:
        serving.close()
    return serving.status()


def _bad_requests_in_one_line(record: logging.LogRecord) -> bool:
    """aiohttp logs a request it could not parse (a header over its limit, say) with
    a traceback: anyone can send one, so it is one warning line; a failure of
    the server's own stays an error with its traceback."""
    error = record.exc_info[1] if record.exc_info else None
    if isinstance(error, web.RequestPayloadError):
        return False  # a body that does not decompress: answered 400 and said once; aiohttp meets it again after
    if isinstance(error, HttpProcessingError):
        record.msg, record.args = "%s: %s", (record.getMessage(), error.message or type(error).__name__)
        record.exc_info, record.exc_text = None, None
        record.levelno, record.levelname = logging.WARNING, "WARNING"
    return True


async def _serve(serving: Serving, upstream: str, host: str, port: int,
                 ready: Callable[[dict[str, Any]], None], notify: Callable[[str], None]) -> None:
    proxy = Proxy(serving, upstream)
    aiohttp_server = logging.getLogger("aiohttp.server")
    aiohttp_server.addFilter(_bad_requests_in_one_line)
    runner = web.AppRunner(proxy.app(), handle_signals=False, access_log=None, handler_cancellation=True,
                           shutdown_timeout=serving.config.serve.grace_seconds)
    await runner.setup()
    gc.collect()
    gc.freeze()  # what serving starts with (modules, the index) is never scanned again: shorter pauses
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    for sig in before:
        loop.add_signal_handler(sig, stop.set)
    try:
        site = web.TCPSite(runner, host, port, backlog=1024)
        try:
            await site.start()
        except OSError as exc:
            raise ServeError(f"cannot listen on {host}:{port} ({exc.strerror or exc}); choose another --port "
                             "(0 takes any free one) or --host") from None
        bound = runner.addresses[0][1] if runner.addresses else port
        ready({"url": f"http://{host}:{bound}/v1", "host": host, "port": bound, "upstream": proxy.shown,
               **{k: v for k, v in serving.status().items() if k in ("revision", "ref", "run", "journal")}})
        follower = asyncio.create_task(_follow(serving, notify))
        await stop.wait()
        follower.cancel()
    finally:
        await runner.cleanup()  # stops listening, then waits for the requests in flight
        aiohttp_server.removeFilter(_bad_requests_in_one_line)
        for sig, handler in before.items():
            loop.remove_signal_handler(sig)
            signal.signal(sig, handler)  # a second signal while the conversations are written acts as before


async def _follow(serving: Serving, notify: Callable[[str], None]) -> None:
    """Check the served branch and the run every ``serve.refresh_seconds``."""
    while True:
        await asyncio.sleep(serving.config.serve.refresh_seconds)
        try:
            said = await asyncio.to_thread(serving.refresh)
        except Exception as exc:  # a revision that cannot be served: keep serving the one that can
            log.error("still serving %s: %s", serving.revision.commit[:12], exc)
            continue
        if said:
            notify(said)
