"""``brewkb eval``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from brewkb.cli.output import echo, echo_json

if TYPE_CHECKING:  # the API module imports numpy; `brewkb --help` must not
    from brewkb.api.evaluate import Column


def table(columns: Sequence[Column]) -> list[str]:
    """The comparison as aligned text lines."""
    width = max([22, *(len(c.label) + 1 for c in columns)])
    rows = [f"{'':{width}}{'success (95% CI)':>24}{'mean steps ✓':>14}{'LLM calls':>11}{'tokens':>10}{'recipes':>9}"]
    for c in columns:
        steps = "–" if c.mean_steps_success is None else f"{c.mean_steps_success:.1f}"
        recipes = "–" if c.recipes is None else str(c.recipes)
        success = f"{c.success_rate:.1%} ({c.ci_low:.0%}–{c.ci_high:.0%})"
        rows.append(f"{c.label:{width}}{success:>24}{steps:>14}{c.llm_calls:>11}{c.tokens:>10}{recipes:>9}")
        if c.scores:
            rows.append(f"{'':{width}}" + "  ".join(f"{k.replace('_', '-')} {v:.1%}" for k, v in c.scores.items()))
    return rows


@click.command("eval")
@click.option("--rev", "revs", multiple=True, help="A KB revision to evaluate (repeatable; '.' is the working tree).")
@click.option("--context", "contexts", multiple=True, type=click.Choice(["none", "trajectories"]),
              help="A baseline: no context, or similar successful trajectories (repeatable).")
@click.option("--split", default="test", show_default=True, type=click.Choice(["train", "eval", "test"]))
@click.option("--repeats", type=click.IntRange(min=1), default=1, show_default=True,
              help="Episodes per task, for stochastic agents.")
@click.option("--from-run", default=None, help="Run whose trajectories the 'trajectories' baseline uses.")
@click.option("--run", "save_to", default=None, help="Save the table into this run (for its report).")
@click.option("--env", "env_name", default=None, help="Environment to evaluate on (default: env.name).")
@click.option("--agent", "agent_name", default=None, help="Agent to run (default: agent.name).")
@click.option("--data", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="Dataset folder for environments that load one (default: env.data).")
@click.option("--json", "as_json", is_flag=True, help="Print the columns as JSON.")
def eval_cmd(revs: tuple[str, ...], contexts: tuple[str, ...], split: str, repeats: int, from_run: str | None,
             save_to: str | None, env_name: str | None, agent_name: str | None, data: Path | None,
             as_json: bool) -> None:
    """Compare KB revisions and baselines on a split (default: none vs the working tree)."""
    from brewkb.api.evaluate import evaluate

    columns = evaluate(revs=revs, contexts=contexts, split=split, repeats=repeats, from_run=from_run,
                       save_to=save_to, env_name=env_name, agent_name=agent_name, data=data)
    if as_json:
        echo_json([c.to_json() for c in columns])
        return
    for line in table(columns):
        echo(line)
    for c in columns:
        if c.failed_to_run:
            click.echo(f"{c.label}: {c.failed_to_run} of {c.episodes} episodes failed to run (agent or endpoint "
                       f"errors), counted as failures; the first: {c.first_error}", err=True)
