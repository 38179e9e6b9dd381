"""``tau-bench``: historical trajectories, a JSON array of
``{task_id, trial, reward, traj, info{task{instruction, user_id}}}``, read one
run at a time. The simulated user's ``###STOP###`` is taken out of its turns."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from brewkb.errors import TrajectoryError
from brewkb.trajectories.formats.base import (
    Item,
    Skipped,
    build,
    first_user,
    guarded,
    json_items,
    obj,
    outcome_json,
    outcome_of,
    without_markers,
)

__all__ = ["read", "looks_like", "MARKERS"]

MARKERS = ("###STOP###",)
"""What tau-bench's user simulator writes to end a conversation (``without_markers``)."""


def read(path: Path, split: str, tasks: Path | None = None) -> Iterator[Item]:
    for i, run in json_items(path, "item"):
        where = f"{path}[{i}]"
        if isinstance(run, TrajectoryError):
            yield Skipped(where, str(run))
            continue
        item = guarded(where, lambda: _convert(where, i, run, split))
        if item is not None:
            yield item


def _convert(where: str, i: int, run: Any, split: str) -> Item:
    if not isinstance(run, dict) or "traj" not in run:
        raise TrajectoryError("not a tau-bench run (no `traj`)")
    outcome = outcome_of(run.get("reward"))
    task = obj(obj(run.get("info")).get("task"))
    traj = without_markers(run["traj"], MARKERS)
    return build(where, task_id=str(run.get("task_id", i)), task=task.get("instruction") or first_user(traj),
                 split=split, messages=traj, outcome=outcome_json(outcome),
                 meta={"source": "tau-bench", "trial": run.get("trial"), "user_id": task.get("user_id")})


def looks_like(head: str) -> bool:
    text = head.lstrip()
    return text.startswith("[") and '"traj"' in text[:50_000]
