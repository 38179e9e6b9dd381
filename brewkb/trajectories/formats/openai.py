"""``openai``: JSONL, one conversation per line:
``{messages, success | reward?, task?, task_id?, id | conversation_id?, tools?}``.
A line with neither ``success`` nor ``reward`` is an unlabelled conversation;
``tools``, as a chat request gives them, are the tools offered to the model.
A line without ``task_id`` is a task of its own, ``line-N-<digest of its messages>``:
lines of two files imported into one run are two tasks, copies of a line one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from brewkb.errors import TrajectoryError
from brewkb.trajectories.formats.base import (
    Item,
    Skipped,
    build,
    first_line,
    first_user,
    guarded,
    json_lines,
    outcome_json,
    outcome_of,
)
from brewkb.trajectories.schema import UNNAMED_TASK, content_id
from brewkb.trajectories.tools import DECLARED, declared_in

__all__ = ["read", "looks_like"]


def read(path: Path, split: str, tasks: Path | None = None) -> Iterator[Item]:
    for number, record in json_lines(path):
        where = f"{path}:{number}"
        if isinstance(record, TrajectoryError):
            yield Skipped(where, str(record))
            continue
        item = guarded(where, lambda: _convert(where, number, record, split))
        if item is not None:
            yield item


def _convert(where: str, number: int, record: Any, split: str) -> Item:
    if not isinstance(record, dict):
        raise TrajectoryError("a line must be a JSON object")
    outcome = outcome_of(record.get("reward"), record.get("success"))
    messages = record.get("messages")
    task = record.get("task") or first_user(messages)
    conversation = record.get("conversation_id", record.get("id"))
    meta: dict[str, Any] = {"source": "openai", "line": number}
    if isinstance(conversation, str | int) and not isinstance(conversation, bool):
        meta["conversation_id"] = str(conversation)
    if record.get("tools") is not None:  # a request-shaped record: the tools it offered the model
        meta[DECLARED] = declared_in(record["tools"])
    task_id = record.get("task_id")
    if not task_id:
        meta[UNNAMED_TASK] = True
        task_id = f"line-{number}-{content_id(messages, 8)}"
    return build(where, task_id=str(task_id), task=task, split=split,
                 messages=messages, outcome=outcome_json(outcome), meta=meta)


def looks_like(head: str) -> bool:
    """The first line is a JSON object with ``messages``."""
    line = first_line(head)
    return isinstance(line, dict) and "messages" in line
