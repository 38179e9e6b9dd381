"""Entry point: the command group, global options and the one error handler.

Exit codes: 0 success, 1 a known error (one line, no traceback), 2 a usage
error, 130 interrupted, 3 a bug (traceback written to a log file).
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

import click

from brewkb import __version__
from brewkb.errors import BrewError

EXIT_ERROR, EXIT_BUG, EXIT_INTERRUPTED = 1, 3, 130


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


COMMANDS = {
    "init": "brewkb.cli.kb:init_cmd",
    "lint": "brewkb.cli.kb:lint_cmd",
    "show": "brewkb.cli.kb:show_cmd",
    "index": "brewkb.cli.retrieval:index_cmd",
    "search": "brewkb.cli.retrieval:search_cmd",
    "mcp": "brewkb.cli.retrieval:mcp_cmd",
    "cache": "brewkb.cli.llm:cache_cmd",
    "ledger": "brewkb.cli.llm:ledger_cmd",
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


@click.group(cls=LazyGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="brewkb")
@click.option("-C", "directory", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Run as if brewkb was started in this folder.")
@click.option("-v", "--verbose", count=True, help="More diagnostics on stderr (-vv for debug).")
@click.pass_context
def cli(ctx: click.Context, directory: Path | None, verbose: int) -> None:
    """brewkb: learn a git-native knowledge base of agent recipes from graded trajectories."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="brewkb: %(levelname)s: %(message)s")
    if directory is not None:
        if not directory.is_dir():
            raise BrewError(f"-C {directory}: no such folder")
        os.chdir(directory)


def _crash_log() -> Path:
    folder = Path(os.environ.get("BREWKB_LOG_DIR") or tempfile.gettempdir())
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"brewkb-crash-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    path.write_text(f"brewkb {__version__}\nargv: {sys.argv}\n\n{traceback.format_exc()}")
    return path


def main(argv: list[str] | None = None) -> None:
    """Run the CLI and map every outcome to an exit code."""
    try:
        cli.main(args=argv, prog_name="brewkb", standalone_mode=False)
    except BrewError as exc:
        click.echo(f"brewkb: error: {exc}", err=True)
        sys.exit(EXIT_ERROR)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except (KeyboardInterrupt, click.Abort):
        click.echo("brewkb: interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except BrokenPipeError:
        sys.stderr.close()
        sys.exit(EXIT_ERROR)
    except Exception:
        path = _crash_log()
        click.echo(f"brewkb: this is a bug; the traceback is in {path} — please report it", err=True)
        sys.exit(EXIT_BUG)
    sys.exit(0)
