"""The KB as an MCP server on stdio, with two read-only tools.

stdout carries protocol messages only; diagnostics go to stderr. The working
tree is re-read on every call, so hand edits show up without a restart.

The stdio transport is the SDK's, fed through ``_Lines``: a line that is not
JSON gets JSON-RPC's parse error (-32700) instead of silence, and when stdin
closes every request already read is answered before the server stops (a
client that writes its last call and closes its end still gets the reply).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from brewkb import __version__
from brewkb.errors import BrewError
from brewkb.kb import KB
from brewkb.recipes import render_recipe
from brewkb.retrieval.ranking import open_index, retrieve

__all__ = ["make_server", "serve"]


def _import_server() -> tuple[Any, type[Exception]]:
    try:
        from mcp.server.mcpserver import MCPServer
        from mcp.server.mcpserver.exceptions import ToolError
    except ImportError:
        raise BrewError("the MCP server needs the `mcp` package: pip install 'brewkb[mcp]'") from None
    return MCPServer, ToolError


def make_server(root: Path, rev: str | None = None) -> Any:
    server_class, tool_error = _import_server()

    @contextmanager
    def told() -> Iterator[None]:
        # brewkb's own errors reach the client with their text (what to do);
        # anything else is a crash, which the SDK reports without details.
        try:
            yield
        except BrewError as exc:
            raise tool_error(str(exc)) from None

    server = server_class(
        "brewkb", version=__version__,
        instructions="Recipes learned from an agent's past work. Search them before a task; "
                     "read one with get_recipe.",
    )

    @server.tool()
    def search_recipes(query: str, k: int = 3) -> list[dict[str, Any]]:
        """Find the recipes most relevant to a task or question, best first
        (``k`` of them, at least 1 and at most 50)."""
        with told(), KB.open(root) as kb:
            hits = retrieve(open_index(kb, rev), query, max(1, min(k, 50)))
        return [{"name": h.name, "score": round(h.score, 4), "concept": h.concept,
                 "description": h.recipe.description} for h in hits]

    @server.tool()
    def get_recipe(name: str) -> str:
        """The full markdown of the recipe called ``name``."""
        with told(), KB.open(root) as kb:
            return render_recipe(kb.recipe(name, rev))

    return server


class _Out:
    """The wire to the client: whole lines, one writer at a time; notes the
    id of every response written."""

    def __init__(self, stream: Any) -> None:
        import anyio

        self.stream, self.lock = stream, anyio.Lock()
        self.answered: set[Any] = set()
        self.changed = anyio.Event()

    async def write(self, text: str) -> None:
        async with self.lock:
            await self.stream.write(text if text.endswith("\n") else text + "\n")
            await self.stream.flush()
        try:
            message = json.loads(text)
        except ValueError:
            return
        if isinstance(message, dict) and ("result" in message or "error" in message):
            self.answered.add(message.get("id"))
            self.changed.set()

    async def flush(self) -> None:  # every write is flushed already
        return None


class _Lines:
    """The client's lines as the SDK's transport reads them (``async for``):
    not-JSON lines are answered here with -32700 and not passed on; at end
    of input, iteration ends only once every request passed on has its reply."""

    def __init__(self, stream: Any, out: _Out) -> None:
        self.stream, self.out = stream, out
        self.pending: set[Any] = set()

    def __aiter__(self) -> AsyncIterator[str]:
        return self._lines()

    async def _lines(self) -> AsyncIterator[str]:
        import anyio

        async for line in self.stream:
            if not line.strip():
                continue
            try:
                message = json.loads(line)
            except ValueError as exc:
                await self.out.write(json.dumps({"jsonrpc": "2.0", "id": None, "error": {
                    "code": -32700, "message": f"Parse error: {exc}"}}))
                continue
            if isinstance(message, dict) and "method" in message and "id" in message:
                self.pending.add(message["id"])
            elif isinstance(message, dict) and message.get("method") == "notifications/cancelled":
                self.pending.discard((message.get("params") or {}).get("requestId"))  # a cancelled call gets no reply
            yield line
        while self.pending - self.out.answered:
            self.out.changed = anyio.Event()
            await self.out.changed.wait()


@contextmanager
def _claimed_stdout() -> Iterator[int]:
    """A private copy of fd 1 for the protocol, with fd 1 itself pointed at
    stderr, so nothing a tool or a child process prints can reach the wire."""
    sys.stdout.flush()
    wire = os.dup(1)
    os.dup2(2, 1)
    try:
        yield wire
    finally:
        os.dup2(wire, 1)
        os.close(wire)


async def _serve_stdio(server: Any) -> None:
    import io

    import anyio
    from mcp.server.stdio import stdio_server

    with _claimed_stdout() as wire:
        text_out = io.TextIOWrapper(os.fdopen(wire, "wb", closefd=False), encoding="utf-8")
        text_in = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace")
        out = _Out(anyio.wrap_file(text_out))
        try:
            async with stdio_server(stdin=_Lines(anyio.wrap_file(text_in), out),  # type: ignore[arg-type]
                                    stdout=out) as (read, write):  # type: ignore[arg-type]
                # MCPServer.run_stdio_async, with these streams in place of the process's own
                low = server._lowlevel_server
                await low.run(read, write, low.create_initialization_options())
        finally:
            text_out.flush()
            text_out.detach()  # the wire's descriptor is closed by _claimed_stdout, not by a collected wrapper
            text_in.detach()


def serve(root: Path, rev: str | None = None) -> None:
    import anyio

    with KB.open(root, require_kb=True) as kb:  # fail before the protocol starts if this is no KB
        if rev is not None:
            kb.store.resolve(rev)
    logging.getLogger().handlers[:] = [logging.StreamHandler()]  # stderr, never stdout
    server = make_server(root, rev)
    anyio.run(_serve_stdio, server)
