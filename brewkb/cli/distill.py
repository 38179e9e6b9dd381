"""``brewkb distill``."""

from __future__ import annotations

import json

import click

from brewkb.cli.output import echo
from brewkb.cli.progress import close, renderer


@click.command("distill")
@click.argument("run")
@click.option("--strategy", type=click.Choice(["mcts", "greedy", "iterative"]), default=None,
              help="Search strategy (default: search.strategy, mcts).")
@click.option("--iterations", type=click.IntRange(min=1), default=None, help="MCTS iterations M.")
@click.option("--width", type=click.IntRange(min=1), default=None, help="Children per node e.")
@click.option("--depth", type=click.IntRange(min=1), default=None, help="Maximum depth k.")
@click.option("--no-cache", is_flag=True, help="Call the LLM even for requests seen before.")
@click.option("--json", "as_json", is_flag=True, help="Events and the result as JSON lines.")
def distill_cmd(run: str, strategy: str | None, iterations: int | None, width: int | None, depth: int | None,
                no_cache: bool, as_json: bool) -> None:
    """Learn recipes from RUN's logged (imported) trajectories: grades from the logs,
    reflection on scrubbed trajectories, concepts, integration, then a search whose
    reward is retrieval only. Ends with a brew/RUN/pr branch."""
    from brewkb.api.distill import distill

    sink = renderer(as_json)
    try:
        result = distill(run, strategy=strategy, iterations=iterations, width=width, depth=depth,
                         no_cache=no_cache, events=sink)
    finally:
        close(sink)
    if as_json:
        echo(json.dumps(result.to_json(), sort_keys=True))
        return
    echo(f"Run {result.run}: {len(result.concepts)} recipes, {result.nodes} nodes; reward = held-out retrieval MRR "
         f"({result.held_out} held-out tasks; task success not measured: no environment).")
    for concept, info in result.concepts.items():
        final = info["final"]
        chosen = f"kept the {final['base']} version" if final["kept"] else f"n{final['node']}"
        echo(f"  {concept:32} base MRR {final['base_reward']:.3f} → {chosen}, final MRR {final['reward']:.3f}")
    for concept, notes in result.merged.items():
        for note in notes:
            echo(f"  {concept}: {note}")
    echo(f"Review: git diff HEAD brew/{result.run}/pr   ·   brewkb pr {result.run} --body-only")
