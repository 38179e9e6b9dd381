"""Options that several commands share."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

__all__ = ["search_options"]


def search_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--strategy``, ``--iterations``, ``--width`` and ``--depth``: the search's settings (``refine``, ``distill``)."""
    for option in reversed((
        click.option("--strategy", type=click.Choice(["mcts", "greedy", "iterative"]), default=None,
                     help="Search strategy (default: search.strategy, mcts)."),
        click.option("--iterations", type=click.IntRange(min=1), default=None,
                     help="Search iterations (the paper's M; default: search.iterations)."),
        click.option("--width", type=click.IntRange(min=1), default=None,
                     help="Most children of a node (the paper's e; default: search.width)."),
        click.option("--depth", type=click.IntRange(min=1), default=None,
                     help="Most refinements in a row from the first version (the paper's k; default: search.depth)."),
    )):
        command = option(command)
    return command
