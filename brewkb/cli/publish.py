"""``brewkb pr``, ``brewkb export skills`` and ``brewkb report``."""

from __future__ import annotations

from pathlib import Path

import click

from brewkb.cli.output import echo, echo_json, note


@click.command("pr")
@click.argument("run")
@click.option("--push", "remote", default=None, help="Push the run's branches (pr, kb, nodes, archive) and the notes to REMOTE.")
@click.option("--body-only", is_flag=True, help="Print only the pull-request body (for gh pr create --body-file).")
@click.option("--json", "as_json", is_flag=True,
              help='Print {"run", "branch", "head", "base", "title", "body", "pushed", "changes"}.')
def pr_cmd(run: str, remote: str | None, body_only: bool, as_json: bool) -> None:
    """Print (or push) RUN's pull request: its branch and a body with changes, rewards and eval."""
    from dataclasses import asdict

    from brewkb.api.publish import load_run, pr_body, push_run
    from brewkb.kb import KB

    with KB.open() as kb:
        view = load_run(kb, run)
        body = pr_body(view)
        if remote is not None:
            push_run(kb, run, remote)
    if as_json:
        echo_json({"run": run, "branch": f"brew/{run}/pr", "head": view.pr, "base": view.base,
                   "title": f"brewkb: refined recipes ({run})", "body": body, "pushed": remote,
                   "changes": [asdict(c) for c in view.changes]})
        return
    if body_only:
        click.echo(body, nl=False)
        return
    if remote is not None:
        echo(f"Pushed brew/{run}/* and refs/notes/brew to {remote}; fetch them in a clone with "
             f"git fetch {remote} 'refs/heads/brew/*:refs/heads/brew/*' 'refs/notes/brew:refs/notes/brew'")
    echo(f"Branch: brew/{run}/pr ({view.pr[:12]}) on base {view.base[:12]}")
    echo()
    click.echo(body, nl=False)


@click.group("export")
def export_cmd() -> None:
    """Export the KB to other formats."""


@export_cmd.command("skills")
@click.argument("out_dir", type=click.Path(file_okay=False))
@click.option("--rev", default=None, help="Export the recipes at this revision (default: the working tree).")
@click.option("--json", "as_json", is_flag=True, help='Print {"out", "rev", "skills": [paths], "skipped": [recipe files]}.')
def export_skills_cmd(out_dir: str, rev: str | None, as_json: bool) -> None:
    """Write each recipe as OUT_DIR/<name>/SKILL.md (Agent Skills format)."""
    from brewkb.api.publish import export_skills
    from brewkb.kb import KB

    if not out_dir.strip():  # Path("") is the current folder: an empty variable must not fill it with skills
        raise click.BadParameter("is empty; name the folder to write the skills into (e.g. skills/)",
                                 param_hint="OUT_DIR")
    with KB.open() as kb:
        done = export_skills(kb, Path(out_dir), rev)
    if as_json:
        echo_json({"out": str(out_dir), "rev": rev, "skills": [str(p) for p in done.skills],
                   "skipped": done.skipped})
        return
    echo(f"Wrote {len(done.skills)} skill{'' if len(done.skills) == 1 else 's'} to {out_dir}")
    if done.skipped:
        echo(f"Skipped {len(done.skipped)} recipe file{'' if len(done.skipped) == 1 else 's'} that "
             f"`brewkb lint` rejects: {', '.join(done.skipped)}")


@click.command("report")
@click.argument("run")
@click.option("--json", "as_json", is_flag=True, help='Print {"run", "files": [paths]}.')
def report_cmd(run: str, as_json: bool) -> None:
    """Write RUN's report: runs/RUN/report.md, report.html and plots."""
    from brewkb.run.report import NO_PLOTS, write_report

    written = write_report(run)
    if not any(path.suffix == ".svg" for path in written):
        note(NO_PLOTS.format(run=run))
    if as_json:
        echo_json({"run": run, "files": [str(p) for p in written]})
        return
    for path in written:
        echo(f"wrote {path}")
