"""Entry point: the command group, global options and the one error handler.

Exit codes: 0 success, 1 a known error (one line, no traceback), 2 a usage
error, 130 interrupted (Ctrl-C or SIGTERM), 3 a bug (traceback written to a log file), 75 a run
stopped by its budget (``EX_TEMPFAIL``: continue it with ``--resume``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from brewkb import __version__
from brewkb.errors import BrewError, BudgetExhausted, DiskFullError

EXIT_ERROR, EXIT_BUG, EXIT_INTERRUPTED, EXIT_BUDGET = 1, 3, 130, 75


class LazyGroup(click.Group):
    """Imports a command's module only when that command runs, so ``brewkb
    --help`` and light commands never pay for heavy imports."""

    def __init__(self, *args: object, lazy: dict[str, str], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._lazy})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self._lazy:
            module_name, attr = self._lazy[name].split(":")
            module = __import__(module_name, fromlist=[attr])
            return getattr(module, attr)  # type: ignore[no-any-return]
        return super().get_command(ctx, name)

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None,
                                                                             list[str]]:
        """An unknown command name gets the closest one (``distil`` → ``distill``)."""
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError:
            import difflib

            close = difflib.get_close_matches(args[0], self.list_commands(ctx), n=1, cutoff=0.6) if args else []
            if not close:
                raise
            raise click.UsageError(f"No such command {args[0]!r}; did you mean {close[0]!r}?", ctx) from None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list from ``SUMMARIES``, importing only commands missing
        there (a test keeps them equal to the commands' own help)."""
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = []
        for name in names:
            if name in SUMMARIES:
                text = click.Command(name, help=SUMMARIES[name]).get_short_help_str(limit)
            else:
                command = self.get_command(ctx, name)
                if command is None or command.hidden:
                    continue
                text = command.get_short_help_str(limit)
            rows.append((name, text))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


COMMANDS = {
    "init": "brewkb.cli.kb:init_cmd",
    "lint": "brewkb.cli.kb:lint_cmd",
    "show": "brewkb.cli.kb:show_cmd",
    "index": "brewkb.cli.retrieval:index_cmd",
    "search": "brewkb.cli.retrieval:search_cmd",
    "mcp": "brewkb.cli.retrieval:mcp_cmd",
    "serve": "brewkb.cli.serve:serve_cmd",
    "cache": "brewkb.cli.llm:cache_cmd",
    "ledger": "brewkb.cli.llm:ledger_cmd",
    "doctor": "brewkb.cli.doctor:doctor_cmd",
    "import": "brewkb.cli.trajectories:import_cmd",
    "rollout": "brewkb.cli.stages:rollout_cmd",
    "reflect": "brewkb.cli.stages:reflect_cmd",
    "concepts": "brewkb.cli.stages:concepts_cmd",
    "integrate": "brewkb.cli.stages:integrate_cmd",
    "runs": "brewkb.cli.stages:runs_cmd",
    "refine": "brewkb.cli.refine:refine_cmd",
    "distill": "brewkb.cli.distill:distill_cmd",
    "tree": "brewkb.cli.refine:tree_cmd",
    "gc": "brewkb.cli.refine:gc_cmd",
    "eval": "brewkb.cli.evaluate:eval_cmd",
    "demo": "brewkb.cli.demo:demo_cmd",
    "pr": "brewkb.cli.publish:pr_cmd",
    "export": "brewkb.cli.publish:export_cmd",
    "report": "brewkb.cli.publish:report_cmd",
}


# The first line of each command's help, for `brewkb --help` without importing them.
SUMMARIES = {
    "cache": "Inspect or clear the LLM response cache (.brewkb/llm-cache.sqlite).",
    "concepts": "Cluster RUN's concept names into meta-concepts.",
    "demo": "Run the whole BREW loop on the shop world (offline unless --backend openai) and compare no KB with "
            "the learned one.",
    "distill": "Learn recipes from RUN's logged (imported) trajectories: grades from the logs, reflection on "
               "scrubbed trajectories, concepts, integration, then a search whose reward is retrieval only. Ends "
               "with a brew/RUN/pr branch.",
    "doctor": "Check each LLM role's endpoint: reachable, model listed, key present, structured outputs, tool "
              "calling, long prompts. Exit 1 when a role cannot work.",
    "eval": "Compare KB revisions and baselines on a split (default: none vs the working tree).",
    "export": "Export the KB to other formats.",
    "gc": "Delete RUN's node branches; kb, pr, the notes and an archive ref that keeps the nodes' rewards stay.",
    "import": "Import trajectories from SOURCE into a run.",
    "index": "Build the retrieval index (it is also built on first search).",
    "init": "Make DIRECTORY a knowledge base (git init when needed) and commit its files.",
    "integrate": "Write one recipe per concept of RUN (into runs/RUN/recipes/).",
    "ledger": "Calls, tokens and estimated cost per role of RUN.",
    "lint": "Check recipe files (default: the KB's recipes folder). Exit 1 on errors.",
    "mcp": "Serve the KB over the Model Context Protocol on stdio (needs the mcp package).",
    "pr": "Print (or push) RUN's pull request: its branch and a body with changes, rewards and eval.",
    "refine": "Learn and refine the KB: the BREW stages, then the search; ends with a PR branch.",
    "reflect": "Grade RUN's trajectories, relabel failing ones, and reflect on all of them.",
    "report": "Write RUN's report: runs/RUN/report.md, report.html and plots.",
    "rollout": "Run the agent on the environment's tasks and record the trajectories.",
    "runs": "List runs and how far each got.",
    "search": "Find the recipes that best match QUERY.",
    "serve": "Serve the KB to any OpenAI-compatible agent: a proxy that adds recipes to each chat request and "
             "records the conversations as a serve run for `brewkb distill`.",
    "show": "Print the recipe NAME.",
    "tree": "Draw RUN's search trees (rebuilt from git) with rewards and visits; ★ marks the chosen version's path.",
}


START = """\b
Where to start:
  brewkb demo                 the whole loop on a simulated shop, in a new KB
  brewkb init                 make a folder (or your repository) a KB
  brewkb import FILE --run R  your agent's logs; then brewkb distill R
  brewkb refine --plan        what learning with your agent would cost
  brewkb serve --upstream URL any OpenAI-compatible agent gets the recipes
  brewkb search / mcp         the recipes for a query, or to an MCP client
Options of a command: brewkb COMMAND --help"""


@click.group(cls=LazyGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]}, epilog=START)
@click.version_option(__version__, prog_name="brewkb")
@click.option("-C", "directory", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Run as if brewkb was started in this folder.")
@click.option("-v", "--verbose", count=True, help="More diagnostics on stderr (-vv for debug).")
@click.pass_context
def cli(ctx: click.Context, directory: Path | None, verbose: int) -> None:
    """brewkb: learn a git-native knowledge base of agent recipes from graded trajectories."""
    import logging

    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="brewkb: %(levelname)s: %(message)s")
    if directory is not None:
        if not directory.is_dir():
            raise BrewError(f"-C {directory}: no such folder")
        os.chdir(directory)


def _log_folder() -> Path:
    """``BREWKB_LOG_DIR``, else the KB's cache folder (``.brewkb/logs``) when
    brewkb runs inside a KB, else the system's temporary folder."""
    if os.environ.get("BREWKB_LOG_DIR"):
        return Path(os.environ["BREWKB_LOG_DIR"])
    import tempfile

    try:
        from brewkb.kb import KB

        with KB.open() as kb:
            if kb.store.work_tree is not None:
                return kb.cache_dir / "logs"
    except Exception:  # the crash may come from the KB itself; the temporary folder always works
        pass
    return Path(tempfile.gettempdir())


def _crash_log() -> Path:
    """Write the traceback to the log folder, else to the temporary folder;
    raises ``OSError`` when neither can be written (a full disk)."""
    import tempfile
    import time
    import traceback

    text = f"brewkb {__version__}\nargv: {sys.argv}\n\n{traceback.format_exc()}"
    name = f"brewkb-crash-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    error: OSError | None = None
    for folder in dict.fromkeys([_log_folder(), Path(tempfile.gettempdir())]):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(text)
            return folder / name
        except OSError as exc:
            error = exc
    assert error is not None
    raise error


def _bug() -> None:
    """Report the exception being handled as a bug, its traceback in a log file."""
    problem = sys.exc_info()[1]
    try:
        path = _crash_log()
    except OSError as exc:
        click.echo(f"brewkb: this is a bug ({type(problem).__name__}: {problem}); its traceback could not be "
                   f"written either ({exc.strerror}) — please report it", err=True)
    else:
        click.echo(f"brewkb: this is a bug; the traceback is in {path} — please report it", err=True)
    sys.exit(EXIT_BUG)


_signalled: list[int] = []
"""The signals received (SIGINT, SIGTERM): once one came, the command ends as interrupted, whatever error follows."""


def _interrupt(signum: int, frame: object) -> None:
    _signalled.append(signum)
    raise KeyboardInterrupt


def _interrupted() -> None:
    click.echo("brewkb: interrupted; what finished is kept (`brewkb runs` says how a run continues)", err=True)
    sys.exit(EXIT_INTERRUPTED)


def main(argv: list[str] | None = None) -> None:
    """Run the CLI and map every outcome to an exit code. A signal wins over
    the error it causes: Ctrl-C in a terminal reaches the whole process group,
    so git's children may die first and the command see a broken pipe or a
    failed git call before its own KeyboardInterrupt."""
    import signal

    before = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    signal.signal(signal.SIGTERM, _interrupt)  # `kill`, `timeout` or a CI job's end stops a command as Ctrl-C does
    if before[signal.SIGINT] is signal.default_int_handler:  # not where a parent chose to ignore it
        signal.signal(signal.SIGINT, _interrupt)
    late = False
    try:
        try:
            _main(argv)
        except SystemExit as exc:
            code = exc.code
        else:
            code = 0
    except KeyboardInterrupt:  # a signal between the command's end and here
        code, late = None, True
    for signum, handler in before.items():
        if signal.getsignal(signum) is _interrupt:
            signal.signal(signum, handler)
    if (_signalled or late) and code != EXIT_INTERRUPTED:
        _interrupted()
    sys.exit(code)


def _main(argv: list[str] | None) -> None:
    try:
        cli.main(args=argv, prog_name="brewkb", standalone_mode=False)
    except BudgetExhausted as exc:
        click.echo(f"brewkb: {exc}", err=True)
        sys.exit(EXIT_BUDGET)
    except BrewError as exc:
        if _signalled:
            _interrupted()
        click.echo(f"brewkb: error: {exc}", err=True)
        sys.exit(EXIT_ERROR)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except (KeyboardInterrupt, click.Abort):
        _interrupted()
    except BrokenPipeError:
        if _signalled:
            _interrupted()
        sys.stderr.close()
        sys.exit(EXIT_ERROR)
    except OSError as exc:
        from brewkb.fsutil import is_disk_full

        if _signalled:
            _interrupted()
        if not is_disk_full(exc):
            _bug()
        click.echo(f"brewkb: error: {DiskFullError.of(exc)}", err=True)
        sys.exit(EXIT_ERROR)
    except Exception:
        if _signalled:
            _interrupted()
        _bug()
