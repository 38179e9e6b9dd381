"""``brewkb demo``."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

import click

from brewkb.cli.evaluate import table
from brewkb.cli.output import echo, echo_json
from brewkb.cli.progress import close, renderer


@click.command("demo")
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where to create the demo KB (default: ./brewkb-demo).")
@click.option("--backend", type=click.Choice(["offline", "openai"]), default="offline", show_default=True,
              help="offline: rules and the scripted agent; openai: LLM roles and the tool-calling agent.")
@click.option("--small", is_flag=True,
              help="A tenth of the tasks and 2 search iterations; with --backend openai, a first try sized for a "
                   "slow endpoint (a few hundred LLM calls at most; the plan is printed first).")
@click.option("--yes", is_flag=True, help="Create the demo even inside an existing git repository.")
@click.option("--publish", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Also copy the learned recipes and the run's report into this folder's recipes/ and runs/demo/.")
@click.option("--max-llm-calls", type=click.IntRange(min=0), default=None, metavar="N",
              help="Stop before the demo's run has sent more than N LLM calls (exit 75; "
                   "`brewkb -C DIR refine --resume demo --max-llm-calls M` goes on).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object (progress stays on stderr).")
def demo_cmd(directory: Path | None, backend: str, small: bool, yes: bool, publish: Path | None,
             max_llm_calls: int | None, as_json: bool) -> None:
    """Run the whole BREW loop on the shop world (offline unless --backend openai) and compare no KB with
    the learned one."""
    from brewkb.api.demo import RUN, demo

    def confirm(question: str) -> bool:
        return yes or (sys.stdin.isatty() and click.confirm(question, default=False))

    me = invoked_as()
    sink = renderer(False)
    try:
        result = demo(directory=directory, backend=backend, confirm=confirm, publish=publish, small=small,
                      max_llm_calls=max_llm_calls, events=sink, command=me)
    finally:
        close(sink)
    commands = [f"brewkb tree {RUN}", f"git log --notes=brew --first-parent brew/{RUN}/kb",
                'brewkb search "cancel my order" --rev brew/demo/pr', f"git diff HEAD brew/{RUN}/pr"]
    if as_json:
        echo_json({"root": str(result.root), "run": RUN, "backend": backend, "split": "test",
                   "columns": [c.to_json() for c in result.columns], "recipes": result.recipes,
                   "nodes": result.refine.nodes, "next": commands})
        return
    echo()
    echo(f"brewkb demo — shop world (a simulation), {backend} backend, test split:")
    for line in table(result.columns):
        echo("  " + line)
    echo(f"  learned recipes: {result.recipes}; search nodes: {result.refine.nodes}")
    echo()
    echo(f"Report: {result.root / 'runs' / RUN / 'report.html'} (and report.md beside it)")
    echo("Next:")
    echo(f"  cd {shlex.quote(str(result.root))}")
    for command in commands:
        echo(f"  {me + command.removeprefix('brewkb') if command.startswith('brewkb ') else command}")


def invoked_as() -> str:
    """How to run this brewkb from a shell: ``brewkb`` when that is the one on the PATH, else its path (a
    virtual environment that is not activated), else ``python -m brewkb``."""
    script = sys.argv[0] if sys.argv else ""
    if not script or script.endswith(("__main__.py", "-c")) or not Path(script).is_file():
        return f"{shlex.quote(sys.executable)} -m brewkb"
    found = shutil.which("brewkb")
    if found and Path(found).resolve() == Path(script).resolve():
        return "brewkb"
    return shlex.quote(os.path.abspath(script))
