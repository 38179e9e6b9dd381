"""``brewkb eval``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from brewkb.cli.output import echo, echo_json, note

if TYPE_CHECKING:  # the API module imports numpy; `brewkb --help` must not
    from brewkb.api.evaluate import Column
    from brewkb.retrieval.compare import LogEvaluation


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


def logs_table(evaluation: LogEvaluation) -> list[str]:
    """The comparison on logs as aligned text lines: recurring and new
    requests apart, one block per query, then KB − each memory with its 95 % CI."""
    from brewkb.retrieval.logeval import MEASURES, PARTS, QUERIES

    data = evaluation.to_json()
    width = max([18, *(len(a.label) + 1 for a in evaluation.arms)])
    rows = [f"Held-out conversations of {evaluation.logs}: {evaluation.conversations}; scored: {len(evaluation.cases)} "
            f"(passed, with a write); the baselines remember what the KB learned from (run "
            f"{evaluation.learned_from}'s learning split)"]
    if data.get("verdict"):
        rows += ["", data["verdict"]]
    for part, words in PARTS.items():
        rows += ["", f"{words[0].upper()}{words[1:]}: {data['parts'][part] or 'none'}"]
        if not data["parts"][part]:
            continue
        for query, said in QUERIES.items():
            rows += [f"  Query: {said}", f"  {'':{width}}" + "".join(f"{w:>13}" for w in MEASURES.values())
                     + f"{'documents':>11}"]
            for arm in evaluation.arms:
                s = arm.scores(query, evaluation.cases, part).to_json()
                rows.append(f"  {arm.label:{width}}" + "".join(f"{s[m]:>13.3f}" for m in MEASURES)
                            + f"{arm.documents:>11}")
        found = [c for c in data["comparisons"] if c["part"] == part]
        if found and found[0]["differences"] is None:
            rows.append(f"  Not enough held-out conversations to compare ({data['parts'][part]}).")
        elif found:
            rows.append("  KB − memory, mean (95 % CI):")
            for c in found:
                d = c["differences"]
                rows.append(f"  {c['kb'] + ' − ' + c['rival']:{width + 16}} {c['query']:<13}" + "  ".join(
                    f"{MEASURES[m]} {d[m]['mean']:+.3f} ({d[m]['low']:+.3f} to {d[m]['high']:+.3f})"
                    for m in ("mrr", "top1", "step_f1")))
    return rows + (["", evaluation.hint] if evaluation.hint else [])


@click.command("eval")
@click.option("--rev", "revs", multiple=True, help="A KB revision to evaluate (repeatable; '.' is the working tree).")
@click.option("--context", "contexts", multiple=True,
              type=click.Choice(["none", "trajectories", "notes", "all-trajectories"]),
              help="A baseline: no context, similar past trajectories that passed, one note per past trajectory, "
                   "or every past trajectory (repeatable).")
@click.option("--logs", default=None, metavar="RUN",
              help="Measure retrieval on RUN's held-out logged conversations instead of running the agent.")
@click.option("--split", default="test", show_default=True, type=click.Choice(["train", "eval", "test"]),
              help="The environment's tasks to run: test is held out from every run's learning.")
@click.option("--repeats", type=click.IntRange(min=1), default=1, show_default=True,
              help="Episodes per task, for stochastic agents.")
@click.option("--from-run", default=None, help="Run whose trajectories the baselines remember (with --logs: the "
                                               "run the KB was distilled from).")
@click.option("--run", "save_to", default=None, help="Save the table into this run (for its report).")
@click.option("--env", "env_name", default=None, help="Environment to evaluate on (default: env.name).")
@click.option("--agent", "agent_name", default=None, help="Agent to run (default: agent.name).")
@click.option("--data", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="Dataset folder for environments that load one (default: env.data).")
@click.option("--json", "as_json", is_flag=True, help="Print the columns as JSON.")
def eval_cmd(revs: tuple[str, ...], contexts: tuple[str, ...], logs: str | None, split: str, repeats: int,
             from_run: str | None, save_to: str | None, env_name: str | None, agent_name: str | None,
             data: Path | None, as_json: bool) -> None:
    """Compare KB revisions and baselines on a split (default: none vs the working tree).

    With --logs RUN, score them instead on the held-out conversations of an imported run."""
    if logs is not None:
        ctx = click.get_current_context()
        given = [f"--{name.replace('_', '-')}" for name in ("split", "repeats", "env_name", "agent_name", "data")
                 if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT]
        if given:
            raise click.UsageError(f"{', '.join(given).replace('--env-name', '--env').replace('--agent-name', '--agent')}"
                                   ": only for an eval that runs the agent; --logs scores retrieval on logged "
                                   "conversations, leave it out")
        from brewkb.api.logeval import evaluate_logs

        result = evaluate_logs(logs, revs=revs, contexts=contexts, from_run=from_run, save_to=save_to)
        if as_json:
            echo_json(result.to_json())
            return
        for line in logs_table(result):
            echo(line)
        return
    from brewkb.retrieval.memory import MEMORIES

    if from_run is not None and not set(contexts) & set(MEMORIES):
        raise click.UsageError("--from-run: it names the run whose conversations the trajectories and notes "
                               "baselines remember; add --context trajectories or --context notes, or --logs RUN "
                               "to score retrieval on held-out logged conversations")
    from brewkb.api.evaluate import evaluate

    columns = evaluate(revs=revs, contexts=contexts, split=split, repeats=repeats, from_run=from_run,
                       save_to=save_to, env_name=env_name, agent_name=agent_name, data=data)
    if save_to:
        note(f"saved into run {save_to}'s eval.json: `brewkb report {save_to}` and `brewkb pr {save_to}` show it")
    if as_json:
        echo_json([c.to_json() for c in columns])
    else:
        for line in table(columns):
            echo(line)
    for c in columns:  # on stderr, with --json too
        if c.failed_to_run:
            click.echo(f"{c.label}: {c.failed_to_run} of {c.episodes} episodes failed to run (agent or endpoint "
                       f"errors), counted as failures; the first: {c.first_error}", err=True)
        if c.degenerate:
            click.echo(f"{c.label}: {c.degenerate} of {c.episodes} conversations are degenerate (a user who never "
                       "stated a request, or turns that repeat); `brewkb doctor` checks the user role", err=True)
    if columns and columns[0].ledger:
        click.echo(f"LLM calls of every role are recorded in {columns[0].ledger}", err=True)
