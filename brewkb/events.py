"""Progress as typed events. Stages and the search emit them; the CLI renders
them (progress bars, or JSON lines with ``--json``); runs keep them in
``events.jsonl``."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from brewkb.fsutil import append_line

__all__ = ["Event", "EventSink", "Events", "null_sink"]


@dataclass(frozen=True)
class Event:
    """``kind``: ``stage_started``, ``item_done``, ``item_failed``,
    ``stage_skipped``, ``stage_finished``, ``note``, or ``step`` (a step of
    an item that git or the run folder now holds, such as a search
    iteration's candidates committed or their rewards noted)."""

    kind: str
    stage: str
    done: int = 0
    total: int = 0
    successes: int = 0
    message: str = ""
    data: dict[str, Any] = field(default_factory=dict)
    time: float = field(default_factory=time.time)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


EventSink = Callable[[Event], None]


def null_sink(event: Event) -> None:
    pass


class Events:
    """Fans events out to a log file and to listeners (the CLI's renderer)."""

    def __init__(self, log: Path | None = None, *listeners: EventSink) -> None:
        self.log = log
        self.listeners = list(listeners)

    def __call__(self, event: Event) -> None:
        if self.log is not None:
            append_line(self.log, json.dumps(event.to_json(), sort_keys=True))
        for listener in self.listeners:
            listener(event)
