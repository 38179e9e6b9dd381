"""``brewkb init``, ``lint`` and ``show``."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from brewkb import api
from brewkb.cli.output import echo, echo_json, note, plural
from brewkb.recipes import render_recipe


@click.command("init")
@click.argument("directory", type=click.Path(path_type=Path), default=".")
@click.option("--force", is_flag=True, help="Overwrite an existing brewkb.toml.")
@click.option("--no-commit", is_flag=True, help="In a repository without commits, leave the new files uncommitted.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def init_cmd(directory: Path, force: bool, no_commit: bool, as_json: bool) -> None:
    """Make DIRECTORY a knowledge base (git init when needed) and commit its files."""
    result = api.init_kb(directory, force=force, commit=not no_commit)
    if as_json:
        echo_json({"root": str(result.root), "created": result.created,
                   "git_initialised": result.git_initialised, "commit": result.commit, "already": result.already})
        return
    if result.already:
        echo(f"{result.root} is a brewkb knowledge base already; nothing changed (its brewkb.toml is kept; "
             "--force would replace it with the defaults)")
        return
    echo(f"Initialised a brewkb knowledge base in {result.root}")
    for item in result.created:
        echo(f"  created {item}")
    if result.commit:
        echo(f"  committed them as {result.commit[:12]}")
    else:  # runs start from HEAD: brewkb.toml and recipes/ must be in it
        echo("Commit them (git add -A && git commit -m 'Start a brewkb KB') before a run: runs start from HEAD.")
    echo("Next: write recipes in recipes/ (see docs/recipes.md), then `brewkb lint`; or bring logs in with "
         "`brewkb import FILE --run logs`.")


@click.command("lint")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--fix", is_flag=True, help="Remove UTF-8 byte-order marks before checking.")
@click.option("--rev", default=None, help="Check the recipes of this revision instead (a PR branch: brew/RUN/pr).")
@click.option("--json", "as_json", is_flag=True, help="Print problems as a JSON list.")
def lint_cmd(paths: tuple[Path, ...], fix: bool, rev: str | None, as_json: bool) -> None:
    """Check recipe files (default: the KB's recipes folder). Exit 1 on errors."""
    fixed: list[Path] = []
    checked: list[Path] = []
    problems = api.lint(list(paths), fix=fix, rev=rev, fixed=fixed, checked=checked)
    for path in fixed:  # on stderr, so --json stays one document
        note(f"fixed {path}: removed its UTF-8 byte-order mark")
    if as_json:
        echo_json([p.to_json() for p in problems])
    else:
        for problem in problems:
            echo(problem.format())
        errors = sum(p.severity == "error" for p in problems)
        counts = [plural(n, kind) for n, kind in ((errors, "error"), (len(problems) - errors, "warning")) if n]
        note(f"{plural(len(checked), 'recipe file')}: {', '.join(counts) or 'no problems'}")  # stdout: problems only
    if any(p.severity == "error" for p in problems):
        sys.exit(1)


@click.command("show")
@click.argument("name")
@click.option("--rev", default=None, help="Read the recipe at this revision (default: working tree).")
@click.option("--json", "as_json", is_flag=True, help="Print front matter and body as JSON.")
def show_cmd(name: str, rev: str | None, as_json: bool) -> None:
    """Print the recipe NAME."""
    recipe = api.show(name, rev=rev)
    if as_json:
        echo_json({**recipe.front_matter(), "body": recipe.body})
    else:
        click.echo(render_recipe(recipe), nl=False)
