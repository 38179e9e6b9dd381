"""Renders pipeline events: progress bars with ``rich`` when it is installed
and stderr is a terminal, plain lines otherwise, JSON lines with ``--json``."""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

import click

from brewkb.events import Event, EventSink


def repeats_a_skip(seen: set[str], event: Event) -> bool:
    """True for a ``stage_skipped`` of a stage this command already finished or
    skipped: a later stage re-reads an earlier one's output, which is no news."""
    if event.kind not in ("stage_finished", "stage_skipped"):
        return False
    again = event.kind == "stage_skipped" and event.stage in seen
    seen.add(event.stage)
    return again


class PlainRenderer:
    def __init__(self) -> None:
        self.seen: set[str] = set()

    def __call__(self, event: Event) -> None:
        if repeats_a_skip(self.seen, event):
            return
        if event.kind == "stage_started":
            resumed = f" ({event.done} already done)" if event.done else ""
            click.echo(f"{event.stage}: {event.total} items{resumed}", err=True)
        elif event.kind == "stage_finished":
            click.echo(f"{event.stage}: done {event.message}", err=True)
        elif event.kind == "stage_skipped":
            click.echo(f"{event.stage}: already done, skipped", err=True)
        elif event.kind in ("item_failed", "note"):
            click.echo(f"{event.stage}: {event.message}", err=True)


class RichRenderer:
    def __init__(self) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[wins]}"), TimeElapsedColumn(), transient=False)
        self.tasks: dict[str, Any] = {}
        self.seen: set[str] = set()

    def __call__(self, event: Event) -> None:
        if repeats_a_skip(self.seen, event):
            return
        if event.kind == "stage_started":
            if not self.tasks:
                self.progress.start()
            self.tasks[event.stage] = self.progress.add_task(event.stage, total=event.total, completed=event.done,
                                                             wins="")
        elif event.kind == "item_done" and event.stage in self.tasks:
            wins = f"{event.successes} passed" if event.successes else ""
            self.progress.update(self.tasks[event.stage], completed=event.done, wins=wins)
        elif event.kind in ("stage_finished", "stage_skipped"):
            if event.stage in self.tasks:
                self.progress.update(self.tasks[event.stage], completed=self.progress.tasks[
                    self.tasks[event.stage]].total)
            else:
                self.progress.console.print(f"{event.stage}: {event.message or event.kind}")
        elif event.kind in ("item_failed", "note"):
            self.progress.console.print(f"[yellow]{event.stage}: {event.message}[/]")

    def close(self) -> None:
        if self.tasks:
            self.progress.stop()


def json_renderer(event: Event) -> None:
    click.echo(json.dumps(event.to_json(), sort_keys=True))


KILL_AFTER = "BREWKB_KILL_AFTER_EVENT"
"""Set to N, a command sends itself SIGKILL right after its N-th progress event
is written: the way to check the crash guarantee (docs/pipeline.md) at any point."""


class KillAfter:
    """Renders events with ``inner``, then kills this process after the ``limit``-th."""

    def __init__(self, inner: EventSink, limit: int) -> None:
        self.inner, self.limit, self.seen = inner, limit, 0

    def __call__(self, event: Event) -> None:
        self.inner(event)
        self.seen += 1
        if self.seen == self.limit:
            sys.stdout.flush()
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGKILL)


def renderer(as_json: bool) -> EventSink:
    sink = _renderer(as_json)
    limit = os.environ.get(KILL_AFTER, "")
    if limit.isdigit() and int(limit) > 0:
        return KillAfter(sink, int(limit))
    return sink


def _renderer(as_json: bool) -> EventSink:
    if as_json:
        return json_renderer
    if sys.stderr.isatty():
        try:
            return RichRenderer()
        except ImportError:
            pass
    return PlainRenderer()


def close(sink: EventSink) -> None:
    if isinstance(sink, KillAfter):
        sink = sink.inner
    if isinstance(sink, RichRenderer):
        sink.close()
