"""``brewkb serve``."""

from __future__ import annotations

import json
from typing import Any

import click

from brewkb.cli.output import echo, note, plural
from brewkb.errors import BrewError


@click.command("serve")
@click.option("--rev", default=None,
              help="Serve this branch, tag or commit (default: the checked-out branch; a branch is followed).")
@click.option("--upstream", default=None, metavar="URL",
              help="Base URL of the OpenAI-compatible endpoint to forward to (default: serve.upstream).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8700, show_default=True,
              help="Port to listen on (0: any free port, printed when the server is ready).")
@click.option("--run", default=None,
              help="Record into this run (default: serve-<revision>, which follows the revision).")
@click.option("--json", "as_json", is_flag=True,
              help="Print the start (or why it could not start) and the end as one JSON line each.")
def serve_cmd(rev: str | None, upstream: str | None, host: str, port: int, run: str | None, as_json: bool) -> None:
    """Serve the KB to any OpenAI-compatible agent: a proxy that adds recipes to each chat request and records
    the conversations as a serve run for `brewkb distill`."""
    from brewkb.serve import serve

    def ready(info: dict[str, Any]) -> None:
        if as_json:
            echo(json.dumps({"event": "ready", **info}))
            return
        echo(f"Serving {info['ref'] or 'revision'} at {info['revision'][:12]} on {info['url']}, in front of "
             f"{info['upstream']}.")
        echo(f"Recording into run {info['run']} ({info['journal']}). Point agents at it: "
             f"OPENAI_BASE_URL={info['url']}")

    try:
        status = serve(rev=rev, run=run, upstream=upstream, host=host, port=port, ready=ready, notify=note)
    except BrewError as exc:
        if as_json:  # a script waiting for the first line gets one
            echo(json.dumps({"event": "error", "error": str(exc)}))
        raise
    if as_json:
        echo(json.dumps({"event": "stopped", **status}))
        return
    recorder = status["recorder"]
    names = [f"{run} ({n})" for run, n in recorder["runs"].items()]
    into = f"run {status['run']}" if len(names) < 2 else f"runs {', '.join(names[:-1])} and {names[-1]}"
    echo(f"Stopped after {plural(status['requests'], 'request')} ({status['chat']} chat); "
         f"{plural(recorder['written'], 'conversation')} written into {into}"
         + (f", {recorder['refused']} refused" if recorder["refused"] else "") + ".")
