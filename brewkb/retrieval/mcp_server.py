"""The KB as an MCP server on stdio, with two read-only tools.

stdout carries protocol messages only; diagnostics go to stderr. The working
tree is re-read on every call, so hand edits show up without a restart.

The stdio transport is the SDK's, fed through ``_Lines``: every line that is
not a message the SDK can take gets a JSON-RPC error (-32700 not JSON or
nested too deeply, -32600 not a valid request, -32602 params that are not an
object) instead of silence or a crash, and no input ends the server. When
stdin closes, every request already read is answered before the server stops
(a client that writes its last call and closes its end still gets the reply),
within ``DRAIN_SECONDS``; SIGTERM stops it at once.
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
from brewkb.recipes import render_recipe, served
from brewkb.retrieval.ranking import open_index, over_limit, retrieve

__all__ = ["make_server", "serve"]


def _import_server() -> tuple[Any, type[Exception]]:
    try:
        from mcp.server.mcpserver import MCPServer
        from mcp.server.mcpserver.exceptions import ToolError
    except ImportError:
        raise BrewError("the MCP server needs the `mcp` package: pip install 'mcp>=2' (in brewkb's checkout: "
                        "pip install '.[mcp]')") from None
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
                 "description": served(h.recipe).description} for h in hits]

    @server.tool()
    def get_recipe(name: str) -> str:
        """The markdown of the recipe called ``name``, as an agent is given it
        (without the words of the requests it was learned from: those are the logs')."""
        with told(), KB.open(root) as kb:
            recipe = kb.recipe(name, rev)  # the error for a name that is not a recipe
            if over_limit(kb, len(render_recipe(recipe).encode())):  # its file's text: the one recipe, not them all
                raise BrewError(f"recipe {name} is over kb.max_recipe_kb ({kb.config.kb.max_recipe_kb} KB), so it "
                                "is not served; `brewkb lint` reports it")
            return render_recipe(served(recipe))

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


MAX_LINE = 4 * 1024 * 1024
"""Bytes of one message line; a longer line is answered with an error and skipped, never held whole."""
DRAIN_SECONDS = 10.0
"""After the client closes its end, how long calls already read may take to be answered before the server stops."""
_CHUNK = 65536


def _error(code: int, message: str, id_: Any = None) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": id_, "error": {"code": code, "message": message}})


def _valid_id(value: Any) -> bool:
    """JSON-RPC ids as MCP allows them: a string or an integer (not a boolean, not a fraction)."""
    return isinstance(value, str) or isinstance(value, int) and not isinstance(value, bool)


def check_message(line: bytes) -> tuple[Any, str | None]:
    """``(message, None)`` for a line the SDK can take as it is, else ``(None,
    error reply)``: the JSON-RPC error for whatever is wrong with it (not JSON,
    nested too deeply, a batch, not an object, an id that is not a string or an
    integer, no method, params that are not an object)."""
    try:
        message = json.loads(line)
    except RecursionError:
        return None, _error(-32700, "Parse error: nested too deeply")
    except ValueError as exc:
        return None, _error(-32700, f"Parse error: {exc}")
    if isinstance(message, list):
        return None, _error(-32600, "Invalid Request: an empty batch" if not message else
                            "Invalid Request: batches are not supported; send one message per line")
    if not isinstance(message, dict):
        return None, _error(-32600, "Invalid Request: a message is a JSON object")
    if "id" in message and not _valid_id(message["id"]):
        return None, _error(-32600, "Invalid Request: `id` must be a string or an integer")
    id_ = message.get("id")
    if message.get("jsonrpc") != "2.0":
        return None, _error(-32600, 'Invalid Request: `jsonrpc` must be "2.0"', id_)
    if "method" not in message:
        if "id" in message and ("result" in message or "error" in message):
            return message, None  # the client's reply to a request of the server
        return None, _error(-32600, "Invalid Request: no `method`", id_)
    if not isinstance(message["method"], str):
        return None, _error(-32600, "Invalid Request: `method` must be a string", id_)
    if message.get("params") is not None and not isinstance(message["params"], dict):
        return None, _error(-32602, "Invalid params: `params` must be an object", id_)
    import mcp_types

    try:  # what the SDK's transport would otherwise drop without a reply
        mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except Exception as exc:  # noqa: BLE001 - pydantic's errors and jiter's (depth) alike
        return None, _error(-32600, f"Invalid Request: {str(exc).splitlines()[0]}", id_)
    return message, None


class _Lines:
    """The client's lines as the SDK's transport reads them (``async for``).
    Read from the descriptor without a thread, so a signal or the end of input
    stops the server at once; a line longer than ``MAX_LINE`` is skipped
    unread; a line that is not a valid message is answered here
    (``check_message``) and not passed on; at end of input, iteration ends once
    every request passed on has its reply, or after ``DRAIN_SECONDS``."""

    def __init__(self, fd: int, out: _Out) -> None:
        self.fd, self.out = fd, out
        self.pending: set[Any] = set()
        self.pollable = True

    def __aiter__(self) -> AsyncIterator[str]:
        return self._lines()

    async def _read(self) -> bytes:
        import anyio

        if self.pollable:
            try:
                await anyio.wait_readable(self.fd)
            except (OSError, ValueError):  # a regular file or /dev/null: reading it never blocks
                self.pollable = False
        return os.read(self.fd, _CHUNK)

    async def _raw_lines(self) -> AsyncIterator[bytes | None]:
        """Each line without its newline; ``None`` for a line over ``MAX_LINE``."""
        buffer, oversized = bytearray(), False
        while chunk := await self._read():
            scanned = len(buffer)  # the bytes before hold no newline: search only what came
            buffer += chunk
            while (end := buffer.find(b"\n", scanned)) != -1:
                line = bytes(buffer[:end])
                del buffer[:end + 1]
                scanned = 0
                yield None if oversized or len(line) > MAX_LINE else line
                oversized = False
            if len(buffer) > MAX_LINE:
                buffer.clear()
                oversized = True
        if oversized or buffer:
            yield None if oversized or len(buffer) > MAX_LINE else bytes(buffer)

    async def _lines(self) -> AsyncIterator[str]:
        import anyio

        async for line in self._raw_lines():
            if line is None:
                await self.out.write(_error(-32600, f"Invalid Request: a line over {MAX_LINE} bytes; send "
                                                    "smaller messages"))
                continue
            if not line.strip():
                continue
            message, error = check_message(line)
            if error is not None:
                await self.out.write(error)
                continue
            if "method" in message and "id" in message:
                self.pending.add(message["id"])
            elif message.get("method") == "notifications/cancelled":
                params = message.get("params") or {}
                self.pending.discard(params.get("requestId") if _valid_id(params.get("requestId")) else None)
            yield line.decode("utf-8", errors="replace")
        with anyio.move_on_after(DRAIN_SECONDS):
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
        out = _Out(anyio.wrap_file(text_out))
        try:
            async with stdio_server(stdin=_Lines(sys.stdin.fileno(), out),  # type: ignore[arg-type]
                                    stdout=out) as (read, write):  # type: ignore[arg-type]
                # MCPServer.run_stdio_async, with these streams in place of the process's own
                low = server._lowlevel_server
                await low.run(read, write, low.create_initialization_options())
        finally:
            text_out.flush()
            text_out.detach()  # the wire's descriptor is closed by _claimed_stdout, not by a collected wrapper


def serve(root: Path, rev: str | None = None) -> None:
    import anyio

    with KB.open(root, require_kb=True) as kb:  # fail before the protocol starts if this is no KB
        if rev is not None:
            kb.store.resolve(rev)
    logging.getLogger().handlers[:] = [logging.StreamHandler()]  # stderr, never stdout
    server = make_server(root, rev)
    anyio.run(_serve_stdio, server)
