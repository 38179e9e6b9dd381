"""``brewkb index``, ``brewkb search`` and ``brewkb mcp``."""

from __future__ import annotations

from pathlib import Path

import click

from brewkb.cli.output import echo, echo_json

REV_HELP = "Use the recipes at this revision (default: the working tree)."


@click.command("index")
@click.option("--rev", default=None, help=REV_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def index_cmd(rev: str | None, as_json: bool) -> None:
    """Build the retrieval index (it is also built on first search)."""
    from brewkb.api.retrieval import build_index

    info = build_index(rev=rev)
    if as_json:
        echo_json({"recipes": info.recipes, "rev": info.rev})
    else:
        echo(f"Indexed {info.recipes} recipes of {rev or 'the working tree'}.")


@click.command("search")
@click.argument("query")
@click.option("-k", "k", type=click.IntRange(min=1), default=3, show_default=True, help="Number of recipes.")
@click.option("--rev", default=None, help=REV_HELP)
@click.option("--json", "as_json", is_flag=True, help='Print [{"name", "score", "concept", "path"}].')
def search_cmd(query: str, k: int, rev: str | None, as_json: bool) -> None:
    """Find the recipes that best match QUERY."""
    from brewkb.api.retrieval import search

    results = search(query, k=k, rev=rev)
    if as_json:
        echo_json([r.to_json() for r in results])
        return
    if not results:
        echo("No recipe matches.")
    for rank, result in enumerate(results, start=1):
        echo(f"{rank}. {result.name}  ({result.score:.2f})  {result.path or '(no file)'}")
        if result.snippet:
            echo(f"   {result.snippet}")


@click.command("mcp")
@click.option("--rev", default=None, help="Serve the recipes of this revision (default: the working tree).")
def mcp_cmd(rev: str | None) -> None:
    """Serve the KB over the Model Context Protocol on stdio (needs the mcp package)."""
    from brewkb.retrieval.mcp_server import serve

    serve(Path("."), rev=rev)
