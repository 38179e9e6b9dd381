"""``brewkb rollout``, ``reflect``, ``concepts``, ``integrate`` and ``runs``."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click

from brewkb.cli.output import echo, echo_json
from brewkb.cli.progress import close, renderer
from brewkb.run.folder import STAGES

FORCE = click.option("--force", "force", type=click.Choice(STAGES), default=None,
                     help="Redo this stage (and the stages after it).")
NO_CACHE = click.option("--no-cache", is_flag=True, help="Call the LLM even for requests seen before.")
AS_JSON = click.option("--json", "as_json", is_flag=True, help="Events and the result as JSON lines.")


def _with_events(as_json: bool, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    sink = renderer(as_json)
    try:
        return call(*args, events=sink, **kwargs)
    finally:
        close(sink)


@click.command("rollout")
@click.option("--run", default=None, help="Run id (default: a new run-<date>-<time>).")
@click.option("--split", "splits", multiple=True, type=click.Choice(["train", "eval"]),
              help="Splits to run (default: train and eval).")
@click.option("--context", type=click.Choice(["kb", "none"]), default="kb", show_default=True,
              help="Give the agent the KB's recipes, or nothing.")
@click.option("--rev", default=None, help="KB revision for the context (default: the working tree).")
@NO_CACHE
@FORCE
@AS_JSON
def rollout_cmd(run: str | None, splits: tuple[str, ...], context: str, rev: str | None, no_cache: bool,
                force: str | None, as_json: bool) -> None:
    """Run the agent on the environment's tasks and record the trajectories."""
    from brewkb.api.stages import rollout

    run_id, summary = _with_events(as_json, rollout, run=run, splits=splits or ("train", "eval"), context=context,
                                   rev=rev, no_cache=no_cache, force=force)
    if as_json:
        echo(json.dumps({"run": run_id, "stages": summary}, sort_keys=True))
        return
    for stage, info in summary.items():
        broken = f" ({info['failed_to_run']} failed to run)" if info.get("failed_to_run") else ""
        broken += f" ({info['degenerate']} degenerate)" if info.get("degenerate") else ""
        echo(f"{stage}: {info['episodes']} episodes{broken}, success rate {info['success_rate']:.1%}")
    echo(f"Run {run_id}. Next: brewkb reflect {run_id}")


@click.command("reflect")
@click.argument("run")
@NO_CACHE
@FORCE
@AS_JSON
def reflect_cmd(run: str, no_cache: bool, force: str | None, as_json: bool) -> None:
    """Grade RUN's trajectories, relabel failing ones, and reflect on all of them."""
    from brewkb.api.stages import reflect

    summary = _with_events(as_json, reflect, run, no_cache=no_cache, force=force)
    if as_json:
        echo(json.dumps({"run": run, "stages": summary}, sort_keys=True))
        return
    r = summary.get("reflections", {})
    relabel = summary.get("relabel", {})
    if relabel.get("relabelled"):
        echo(f"relabelled {relabel['relabelled']} failing runs; {relabel['passed']} of them pass")
    elif relabel.get("skipped_reason"):
        echo(f"relabelling skipped: {relabel['skipped_reason']}")
    echo(f"{r.get('insights', 0)} insights from {r.get('trajectories', 0)} trajectories "
         f"({r.get('concepts_per_trajectory', 0)} concepts per trajectory); {r.get('failed', 0)} failed")
    _next(run, "concepts", f"brewkb concepts {run}")


@click.command("concepts")
@click.argument("run")
@NO_CACHE
@FORCE
@click.option("--json", "as_json", is_flag=True, help="Print the concepts as JSON.")
def concepts_cmd(run: str, no_cache: bool, force: str | None, as_json: bool) -> None:
    """Cluster RUN's concept names into meta-concepts."""
    from brewkb.api.stages import concepts

    # --json prints one document on stdout: progress stays on stderr
    found = _with_events(False, concepts, run, no_cache=no_cache, force=force)
    if as_json:
        echo(json.dumps([c.to_json() for c in found], sort_keys=True))
        return
    for c in found:
        aka = f"  (also: {', '.join(c.aliases)})" if c.aliases else ""
        echo(f"{c.slug:32} {c.insights:4} insights  {len(c.q_train):3} train / {len(c.q_eval):3} eval tasks{aka}")
    for c in found:
        for note in c.merged:
            echo(f"merged into {c.slug}: {note}")
    _next(run, "integrate", f"brewkb integrate {run}")


def _next(run: str, stage: str, command: str) -> None:
    """Say which command comes next, unless the run has done that stage already."""
    from brewkb.api.stages import list_runs

    summary = next((r for r in list_runs() if r.id == run), None)
    if summary is None or stage not in summary.stages:
        echo(f"Next: {command}")


@click.command("integrate")
@click.argument("run")
@click.option("--write", is_flag=True, help="Also write the recipes into the KB's recipes folder.")
@NO_CACHE
@FORCE
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def integrate_cmd(run: str, write: bool, no_cache: bool, force: str | None, as_json: bool) -> None:
    """Write one recipe per concept of RUN (into runs/RUN/recipes/)."""
    from brewkb.api.stages import integrate

    # --json prints one document on stdout: progress stays on stderr
    recipes, changed = _with_events(False, integrate, run, write=write, no_cache=no_cache, force=force)
    if as_json:
        echo(json.dumps({"recipes": [r.name for r in recipes], "written": changed}))
        return
    echo(f"{len(recipes)} recipes in runs/{run}/recipes/")
    for path in changed:
        echo(f"  wrote {path}")


@click.command("runs")
@click.option("--json", "as_json", is_flag=True, help="Print the runs as JSON.")
def runs_cmd(as_json: bool) -> None:
    """List runs and how far each got."""
    from brewkb.api.stages import list_runs

    runs = list_runs()
    if as_json:
        echo_json([{"run": r.id, "stages": r.stages, "wanted": list(r.wanted), "next": r.next_stage,
                    "status": r.status, "failures": r.failures, "retry": r.retry} for r in runs])
        return
    if not runs:
        echo("No runs yet.")
    for r in runs:
        if r.damaged:
            echo(f"{r.id:28} damaged: {r.damaged}")
            continue
        done = sum(s in r.stages for s in r.wanted)
        retry = f"; retry them: {r.retry}" if r.retry else ""
        left_out = f" ({r.left_out} left out: stages.accept_failed)" if r.left_out else ""
        echo(f"{r.id:28} {done}/{len(r.wanted)} stages ({r.status}), {r.failures} failed items{left_out}{retry}")
