"""``brewkb distill``."""

from __future__ import annotations

import json

import click

from brewkb.cli.output import echo, echo_plan_calls, plural
from brewkb.cli.progress import close, renderer
from brewkb.cli.options import search_options


@click.command("distill")
@click.argument("run")
@search_options
@click.option("--no-cache", is_flag=True, help="Call the LLM even for requests seen before.")
@click.option("--require-better", is_flag=True,
              help="Exit 1 when the new KB does not beat the base KB and every baseline on the test split "
                   "(the PR branch is written all the same).")
@click.option("--plan", "show_plan", is_flag=True,
              help="Print the most this distill can call (LLM calls per role, cost), calling nothing.")
@click.option("--json", "as_json", is_flag=True, help="Events and the result as JSON lines.")
def distill_cmd(run: str, strategy: str | None, iterations: int | None, width: int | None, depth: int | None,
                no_cache: bool, require_better: bool, show_plan: bool, as_json: bool) -> None:
    """Learn recipes from RUN's logged (imported) trajectories: grades from the logs,
    reflection on scrubbed trajectories, concepts, integration, then a search whose
    reward is retrieval only. Ends with a brew/RUN/pr branch.

    With an endpoint configured, the judge first grades the conversations whose
    outcome is unknown."""
    from brewkb.api.distill import distill

    if show_plan:
        _print_plan(run, strategy, iterations, width, depth, as_json)
        return
    sink = renderer(as_json)
    try:
        result = distill(run, strategy=strategy, iterations=iterations, width=width, depth=depth,
                         no_cache=no_cache, require_better=require_better, events=sink)
    finally:
        close(sink)
    if as_json:
        echo(json.dumps(result.to_json(), sort_keys=True))
        return
    if result.nothing:
        echo(f"Nothing to learn from run {result.run}: {result.nothing}. No PR branch was written.")
        return
    echo(f"Run {result.run}: {plural(len(result.concepts), 'recipe')}, {result.nodes} nodes; reward = retrieval on the eval "
         f"split ({result.held_out} tasks; task success not measured: no environment).")
    for concept, info in result.concepts.items():
        final = info["final"]
        if final.get("left_out"):  # the reason says its final reward
            chosen = f"{'left out' if final['base'] == 'root' else 'kept the base version'} ({final['left_out']})"
        else:
            node = f"kept the {'base' if final['base'] == 'kb' else 'first'} version" if final["kept"] else \
                f"n{final['node']}" + (" (the search's first version)" if final["node"] == 0 else "")
            chosen = f"{node}, final {final['reward']:.3f}"
        start = "base" if final["base"] == "kb" else "new, first version"
        echo(f"  {concept:32} {start} {final['base_reward']:.3f} → {chosen}")
    for concept, notes in result.merged.items():
        for note in notes:
            echo(f"  {concept}: {note}")
    for concept in result.waiting:
        echo(f"  {concept:32} waits for evidence: no held-out request asked for it (see the PR)")
    if result.comparison is None:
        echo("Not compared with the baselines: the logs have too few tasks to hold a test split out.")
    else:
        scores = {a["label"]: a["scores"]["conversation"] for a in result.comparison["arms"]}
        echo(f"Test split ({plural(result.comparison['cases'], 'conversation')}): "
             + ", ".join(f"{label} MRR {s['mrr']:.3f}" for label, s in scores.items()))
        echo(result.verdict)
    finals = [info["final"] for info in result.concepts.values()]
    if all(f["base"] == "kb" and (f["kept"] or f.get("left_out")) for f in finals):
        echo(f"brew/{result.run}/pr changes no recipe: every one kept the version the KB has; nothing to review.")
    else:
        echo(f"Review: git diff HEAD brew/{result.run}/pr   ·   brewkb pr {result.run} --body-only")
    echo(f"Then `brewkb gc {result.run}` deletes its {result.nodes} node branches (an archive ref keeps their "
         "rewards for tree and pr).")


def _print_plan(run: str, strategy: str | None, iterations: int | None, width: int | None, depth: int | None,
                as_json: bool) -> None:
    from brewkb.api.plan import distill_plan
    from brewkb.trajectories.split import HOLD_OUT_EVERY

    p, counts = distill_plan(run, strategy=strategy, iterations=iterations, width=width, depth=depth)
    if as_json:
        echo(json.dumps({**p.to_json(), **counts}, sort_keys=True))
        return
    echo(f"At most, distill {run} ({counts['trajectories']} trajectories, {counts['unlabelled']} unlabelled; "
         f"{p.rounds} search rounds) makes:")
    echo_plan_calls(p)
    if not any(p.calls.values()):
        echo("  cost: none (nothing would be called)")
    elif p.cost is None:
        echo("  cost: no price in llm.prices for these models")
    else:
        echo(f"  cost ≈ ${p.cost:.4f} (outputs at max_tokens)")
    if not counts["held_out"]:
        echo(f"Its logs hold {plural(counts['tasks'], 'task')}: distill holds tasks out only from "
             f"{HOLD_OUT_EVERY} on, and a recipe is never scored on the requests it was learned from, so it would "
             "learn nothing. Import more logs into the run first.")
    echo("Nothing was called. The judge grades unlabelled outcomes only with an endpoint (llm.backend = "
         "\"openai\"); embeddings for hybrid retrieval are not counted.")
