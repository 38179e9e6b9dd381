"""``brewkb cache`` and ``brewkb ledger``."""

from __future__ import annotations

import sys
from dataclasses import asdict

import click

from brewkb.cli.output import echo, echo_json


@click.group("cache")
def cache_cmd() -> None:
    """Inspect or clear the LLM response cache (.brewkb/llm-cache.sqlite)."""


@cache_cmd.command("stats")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def cache_stats_cmd(as_json: bool) -> None:
    """Entries and size of the cache."""
    from brewkb.api.llm import cache_stats

    stats = cache_stats()
    if as_json:
        echo_json(asdict(stats))
        return
    echo(f"{stats.entries} entries, {stats.bytes / 1024:.1f} KiB in {stats.path}")
    for kind, count in sorted(stats.by_kind.items()):
        echo(f"  {kind}: {count}")
    for role, count in sorted(stats.by_role.items()):
        echo(f"  role {role}: {count}")


@cache_cmd.command("clear")
@click.option("--run", default=None, metavar="RUN", help="Only the replies RUN used (read or stored).")
@click.option("--role", default=None, metavar="ROLE",
              help="Only the replies of one role: agent, reflector, integrator, relabeller, judge, user (τ²'s user "
                   "simulator), embeddings.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def cache_clear_cmd(run: str | None, role: str | None, yes: bool) -> None:
    """Delete cached replies (the next run pays for those calls again): every
    one, or those of --run and/or --role."""
    from brewkb.api.llm import cache_clear

    if not yes:
        if not sys.stdin.isatty():
            raise click.UsageError("there is no terminal to confirm on; pass --yes to delete the cached replies")
        which = " ".join(filter(None, [f"the {role}'s" if role else "", f"run {run}'s" if run else ""])) or "all"
        click.confirm(f"Delete {which} cached LLM replies?", abort=True)
    echo(f"Deleted {cache_clear(run=run, role=role)} entries.")


@click.command("ledger")
@click.argument("run")
@click.option("--json", "as_json", is_flag=True, help="Print totals per role as JSON.")
def ledger_cmd(run: str, as_json: bool) -> None:
    """Calls, tokens and estimated cost per role of RUN."""
    from brewkb.api.llm import ledger_totals

    totals = ledger_totals(run)
    if as_json:
        echo_json({role: asdict(t) for role, t in totals.items()})
        return
    if not totals:
        echo(f"Run {run} made no LLM calls.")
        return
    echo(f"{'role':12}{'calls':>7}{'cached':>8}{'errors':>8}{'tokens in':>11}{'tokens out':>12}{'cost $':>10}"
         "  structured output")
    for role, t in totals.items():
        modes = ", ".join(f"{m} {n}" for m, n in sorted(t.modes.items(), key=lambda kv: -kv[1]))
        echo(f"{role:12}{t.calls:>7}{t.cached:>8}{t.errors:>8}{t.tokens_in:>11}{t.tokens_out:>12}{t.cost:>10.4f}"
             f"  {modes}".rstrip())
    echo("Costs use llm.prices in brewkb.toml; models without a price count as 0.")
