"""The KB as an MCP server on stdio, with two read-only tools.

stdout carries protocol messages only; diagnostics go to stderr. The working
tree is re-read on every call, so hand edits show up without a restart.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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
        "brewkb",
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


def serve(root: Path, rev: str | None = None) -> None:
    with KB.open(root) as kb:  # fail before the protocol starts if this is no KB
        if rev is not None:
            kb.store.resolve(rev)
    logging.getLogger().handlers[:] = [logging.StreamHandler()]  # stderr, never stdout
    make_server(root, rev).run("stdio")
