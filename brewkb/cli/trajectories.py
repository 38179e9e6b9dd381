"""``brewkb import``."""

from __future__ import annotations

from pathlib import Path

import click

from brewkb.cli.output import echo, echo_json, note
from brewkb.trajectories.importers import IMPORTERS


@click.command("import")
@click.argument("source", type=click.Path(exists=True, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(sorted(IMPORTERS)), required=True, help="Format of SOURCE.")
@click.option("--run", default=None, help="Run to add them to (default: import-<file name>).")
@click.option("--split", default="train", show_default=True, type=click.Choice(["train", "eval", "test"]),
              help="Split the trajectories belong to.")
@click.option("--tasks", type=click.Path(exists=True, path_type=Path), default=None,
              help="OSWorld: the tasks folder holding each example's instruction.")
@click.option("--skip-bad", is_flag=True, help="Skip records that cannot be converted (and count them).")
@click.option("--json", "as_json", is_flag=True, help="Print {run, imported, skipped, success_rate}.")
def import_cmd(source: Path, fmt: str, run: str | None, split: str, tasks: Path | None, skip_bad: bool,
               as_json: bool) -> None:
    """Import trajectories from SOURCE into a run."""
    from brewkb.api.trajectories import import_trajectories

    result = import_trajectories(source, fmt, run=run, split=split, tasks=tasks, skip_bad=skip_bad)
    if as_json:
        echo_json(result.to_json())
        return
    if result.imported:
        already = f"; {result.already} were already there" if result.already else ""
        echo(f"Imported {result.imported} trajectories into run {result.run} "
             f"(success rate {result.success_rate:.1%}){already}; skipped {result.skipped}.")
    else:
        echo(f"Imported no new trajectories into run {result.run}: all {result.already} were already there; "
             f"skipped {result.skipped}.")
    for error in result.errors[:10]:
        note(f"  skipped {error}")
