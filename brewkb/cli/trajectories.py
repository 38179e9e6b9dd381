"""``brewkb import``."""

from __future__ import annotations

from pathlib import Path

import click

from brewkb.cli.output import echo, echo_json, note, plural
from brewkb.cli.progress import PlainRenderer
from brewkb.errors import TrajectoryError
from brewkb.trajectories.formats import FORMATS


@click.command("import")
@click.argument("source", type=click.Path(exists=True, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(list(FORMATS)), default=None,
              help="Format of SOURCE (default: the one it looks like, when that is clear).")
@click.option("--run", default=None, help="Run to add them to (default: import-<file name>).")
@click.option("--split", default="train", show_default=True, type=click.Choice(["train", "eval"]),
              help="Split the trajectories belong to in the run (the test split stays out of runs).")
@click.option("--tasks", type=click.Path(exists=True, path_type=Path), default=None,
              help="Task context: OSWorld's tasks folder, or a tau2 domain's tasks.json.")
@click.option("--outcomes", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="CSV or JSONL of conversation id and success or score: labels kept elsewhere.")
@click.option("--skip-bad", is_flag=True, help="Skip records that cannot be converted (and count them).")
@click.option("--json", "as_json", is_flag=True,
              help="Print {run, imported, skipped, already, total, success_rate, unlabelled, labels_attached, "
                   "relabelled, unmatched_labels, never_ran, repeated, tools, not_known, undeclared}: tools maps "
                   "each tool called to the conversations that called it, undeclared each tool called where its "
                   "requests did not offer it.")
def import_cmd(source: Path, fmt: str | None, run: str | None, split: str, tasks: Path | None, outcomes: Path | None,
               skip_bad: bool, as_json: bool) -> None:
    """Import trajectories from SOURCE into a run.

    Records are read one at a time; progress goes to stderr."""
    from brewkb.api.trajectories import import_trajectories
    from brewkb.trajectories.formats import sniff

    if fmt is None:
        fmt = sniff(source)
        if fmt is None and source.is_file() and not source.read_bytes()[:65536].strip():
            raise TrajectoryError(f"{source} is empty: nothing to import")  # as with --format
        if fmt is None:
            raise click.UsageError(f"cannot tell what format {source} is in; pass --format "
                                   f"({', '.join(FORMATS)}; docs/trajectories.md shows each)")
        note(f"{source} looks like `{fmt}`: reading it as that (--format chooses)")
    result = import_trajectories(source, fmt, run=run, split=split, tasks=tasks, skip_bad=skip_bad,
                                 outcomes=outcomes, events=PlainRenderer())
    if result.unmatched_labels:  # on stderr, with --json too: a label that labelled nothing is a mistake to see
        shown = ", ".join(result.unmatched_labels[:5]) + (" ..." if len(result.unmatched_labels) > 5 else "")
        count = len(result.unmatched_labels)
        note(f"warning: {count} {'id' if count == 1 else 'ids'} of {outcomes} match no imported conversation: "
             f"{shown}")
    if result.never_ran:
        note(f"left out {plural(result.never_ran, 'record')} of conversations that never ran (no messages, or "
             "the harness failed before they began)")
    if result.not_known:
        shown = ", ".join(f"`{name}` (in {plural(result.tools[name], 'conversation')})"
                          for name in result.not_known[:10])
        more = f" and {len(result.not_known) - 10} more" if len(result.not_known) > 10 else ""
        note(f"warning: conversations call {plural(len(result.not_known), 'tool')} that tools.known in brewkb.toml "
             f"does not list: {shown}{more}. No concept or step is learned from those calls; add a tool to "
             "tools.known if your agent has it")
    if result.undeclared:
        shown = ", ".join(f"`{name}` (in {plural(n, 'conversation')})"
                          for name, n in list(result.undeclared.items())[:10])
        more = f" and {len(result.undeclared) - 10} more" if len(result.undeclared) > 10 else ""
        note(f"warning: conversations call {plural(len(result.undeclared), 'tool')} that their requests did not "
             f"offer the model: {shown}{more}. The model made those calls up, or someone wrote them into the log: "
             "they are taken out of the run, with their results")
    if as_json:
        echo_json(result.to_json())
        return
    rate = "no outcome known" if result.success_rate is None else f"success rate {result.success_rate:.1%}"
    unknown = f", {result.unlabelled} unlabelled" if result.unlabelled else ""
    if result.imported == 0 and result.already:
        echo(f"Imported no new trajectories into run {result.run}: all {result.already} were already there; "
             f"skipped {result.skipped}.")
    else:
        imported = plural(result.imported, "trajectory", "trajectories")
        echo(f"Imported {imported} into run {result.run} ({rate}{unknown}); "
             f"skipped {result.skipped}" + (f"; {plural(result.repeated, 'record')} repeated an earlier one of the "
                                           "file and kept once" if result.repeated else "") + ".")
        if result.total > result.imported:
            echo(f"The run now holds {result.total} trajectories, {result.total - result.imported} of them from "
                 "earlier imports; distill learns from them all.")
    if outcomes is not None:
        echo(f"Labels from {outcomes.name}: attached to {plural(result.labels_attached, 'conversation')}"
             + (f" ({result.relabelled} already in the run relabelled)" if result.relabelled else "") + ".")
    if result.unlabelled:
        have = "conversation has" if result.unlabelled == 1 else "conversations have"
        note(f"{result.unlabelled} {have} no known outcome: `brewkb distill` has the judge grade them when an "
             "endpoint is configured, or attach labels with --outcomes FILE")
    for error in result.errors[:10]:
        note(f"  skipped {error}")


