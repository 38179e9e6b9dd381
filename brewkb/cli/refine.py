"""``brewkb refine``, ``brewkb tree`` and ``brewkb gc``."""

from __future__ import annotations

import json

import click

from brewkb.cli.output import echo, echo_json, echo_plan_calls
from brewkb.cli.progress import close, renderer
from brewkb.cli.options import search_options


@click.command("refine")
@search_options
@click.option("--relabel/--no-relabel", default=None, help="Hindsight relabelling (default: stages.relabel).")
@click.option("--run", default=None, help="Name of the new run (default: refine-<date>-<time>).")
@click.option("--resume", default=None, metavar="RUN", help="Continue RUN where it stopped.")
@click.option("--base", default=None, help="Revision the run starts from (default: HEAD).")
@click.option("--no-cache", is_flag=True, help="Call the LLM even for requests seen before.")
@click.option("--no-eval", is_flag=True, help="Skip the held-out evaluation on the test split that ends the run.")
@click.option("--plan", "show_plan", is_flag=True,
              help="Print the most this run can spend (episodes, LLM calls per role, cost) and call nothing.")
@click.option("--seconds-per-call", type=click.FloatRange(min=0), default=None, metavar="S",
              help="With --plan: how long one LLM call takes on your endpoint, for the time estimate "
                   "(default: the run's own average, else 10).")
@click.option("--max-episodes", type=click.IntRange(min=0), default=None, metavar="N",
              help="Stop before the run has run more than N agent episodes in all.")
@click.option("--max-llm-calls", type=click.IntRange(min=0), default=None, metavar="N",
              help="Stop before the run has sent more than N LLM calls in all (cache hits are free).")
@click.option("--max-cost", type=click.FloatRange(min=0), default=None, metavar="USD",
              help="Stop calling once the run's cost (llm.prices) reaches USD.")
@click.option("--json", "as_json", is_flag=True, help="Events and the result as JSON lines.")
def refine_cmd(strategy: str | None, iterations: int | None, width: int | None, depth: int | None,
               relabel: bool | None, run: str | None, resume: str | None, base: str | None, no_cache: bool,
               no_eval: bool, show_plan: bool, seconds_per_call: float | None, max_episodes: int | None,
               max_llm_calls: int | None, max_cost: float | None, as_json: bool) -> None:
    """Learn and refine the KB: the BREW stages, then the search; ends with a PR branch.

    A run stopped by --max-episodes, --max-llm-calls or --max-cost exits 75
    and keeps what finished; --resume RUN with a higher limit continues it."""
    from brewkb.api.refine import refine
    from brewkb.run.budget import Limits

    if run and resume:
        raise click.UsageError("give --run for a new run or --resume for an existing one, not both")
    if show_plan:
        _print_plan(run, resume, base, strategy, iterations, width, depth, relabel, no_eval, as_json,
                    seconds_per_call)
        return
    limits = Limits(episodes=max_episodes, llm_calls=max_llm_calls, cost=max_cost)
    sink = renderer(as_json)
    try:
        result = refine(run=run, resume=resume, base=base, strategy=strategy, iterations=iterations, width=width,
                        depth=depth, relabel=relabel, no_cache=no_cache, no_eval=no_eval, limits=limits,
                        events=sink)
    finally:
        close(sink)
    if as_json:
        echo(json.dumps(result.to_json(), sort_keys=True))
        return
    echo(f"Run {result.run}: {result.nodes} nodes; search episodes run by this command {result.episodes_run}, "
         f"reused {result.episodes_reused} (the PR counts the whole run's).")
    for concept, info in result.concepts.items():
        final = info["final"]
        new = final["base"] == "root"  # a recipe the base KB does not have: its first version stands for the base
        chosen = (f"left out ({final['left_out']})" if final.get("left_out") and new else
                  f"kept the {'first' if new else 'base'} version" if final["kept"] else f"n{final['node']}")
        echo(f"  {concept:32} {'new, first version' if new else 'base'} {final['base_reward']:.3f} → {chosen}, "
             f"final reward {final['reward']:.3f}")
    echo(f"Review: git diff HEAD brew/{result.run}/pr   ·   brewkb tree {result.run}")
    echo(f"Then `brewkb gc {result.run}` deletes its {result.nodes} node branches (an archive ref keeps their "
         "rewards for tree and pr).")


def _print_plan(run: str | None, resume: str | None, base: str | None, strategy: str | None,
                iterations: int | None, width: int | None, depth: int | None, relabel: bool | None, no_eval: bool,
                as_json: bool, seconds_per_call: float | None = None) -> None:
    from brewkb.api.plan import SECONDS_PER_CALL, refine_plan

    p = refine_plan(run=run, resume=resume, strategy=strategy, iterations=iterations, width=width, depth=depth,
                    relabel=relabel, no_eval=no_eval, base=base,
                    seconds_per_call=SECONDS_PER_CALL if seconds_per_call is None else seconds_per_call)
    if as_json:
        echo_json(p.to_json())
        return
    echo(f"{'The rest of run ' + resume if resume else 'This run'} ({p.rounds} search rounds) makes at most "
         f"(expected):")
    echo(f"  {'agent episodes':16}{p.episodes:>9}  ({p.expected_episodes})")
    for part, counts in p.parts.items():
        echo(f"    {part:20}{counts.at_most:>9}  ({counts.expected}): {counts.settings}")
    echo_plan_calls(p)
    if p.cost is None:
        echo("  cost: no price in llm.prices for these models")
    else:
        basis = ", ".join(f"{r} {t}" for r, t in p.cost_basis.items())
        echo(f"  cost ≈ ${p.cost:.4f} (outputs at max_tokens; prompt tokens per call assumed: {basis})")
    if p.llm_calls:
        echo(f"  time: at most {_duration(p.minutes)} for the LLM calls at {p.seconds_per_call:g} s per call "
             f"({'the run so far' if p.measured else 'stated; --seconds-per-call S for your endpoint'}), "
             f"{p.in_flight} in flight (llm.concurrency)")
    echo("Nothing was called. Cache hits and reused episodes make the real numbers smaller; "
         + ("the concepts are known, so the expected figure is the bound." if p.concepts_known else
            "once reflection has found the concepts, `brewkb refine --resume RUN --plan` bounds the rest closely."))


def _duration(minutes: float) -> str:
    return f"{minutes:.0f} min" if minutes < 120 else f"{minutes / 60:.1f} h"


@click.command("tree")
@click.argument("run")
@click.option("--concept", default=None, help="Only this concept's tree.")
@click.option("--json", "as_json", is_flag=True, help="Print the trees as JSON.")
def tree_cmd(run: str, concept: str | None, as_json: bool) -> None:
    """Draw RUN's search trees (rebuilt from git) with rewards and visits; ★ marks the chosen version's path.

    The chosen version is the one the PR holds: the final evaluation picks it, measuring the best candidates
    again under the final KB, so its R (the search's own measure) can be below a sibling's."""
    from brewkb.api.refine import load_trees
    from brewkb.search.render import tree_json, tree_lines

    trees, best = load_trees(run)
    if concept is not None:
        from brewkb.recipes import slugify

        # the title a report or a recipe shows ("Cancel order") names the same tree as its slug
        slug = concept if concept in trees else slugify(concept)
        if slug not in trees:
            raise click.BadParameter(f"no concept {concept!r} in run {run}; concepts: {', '.join(sorted(trees))}",
                                     param_hint="--concept")
        trees = {slug: trees[slug]}
    if as_json:
        echo_json({c: tree_json(t, best[c]) for c, t in sorted(trees.items())})
        return
    for name, tree in sorted(trees.items()):
        for line in tree_lines(tree, best[name]):
            echo(line)
        echo()


@click.command("gc")
@click.argument("run")
@click.option("--json", "as_json", is_flag=True, help='Print {"run", "deleted"}.')
def gc_cmd(run: str, as_json: bool) -> None:
    """Delete RUN's node branches; kb, pr, the notes and an archive ref that keeps the nodes' rewards stay."""
    from brewkb.api.refine import gc

    deleted = gc(run)
    if as_json:
        echo_json({"run": run, "deleted": deleted})
        return
    echo(f"Deleted {deleted} node branch{'' if deleted == 1 else 'es'} of run {run}.")
