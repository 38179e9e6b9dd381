"""Outcomes files: labels for logged conversations that live elsewhere (user
feedback, a later review), attached at import.

A CSV file with a header, or JSONL of objects, one conversation per row:

    conversation_id,success,score
    4bf92f3577b34da6a3ce929d0e0e4736,true,
    sim-0042,,0.5

The id column is the first of ``conversation_id``, ``id``, ``trace_id`` or
``task_id`` that the file has; ``success`` is true/false (also 1/0, yes/no,
pass/fail), ``score`` a number; a row needs one of them. A score alone counts
as a success at 1 or more, as a reward does. A row labels each conversation
whose ``meta.conversation_id``, ``meta.trace_id``, ``meta.simulation_id`` or
``task_id`` is its id, tried in that order.

The whole file is read before anything is imported: a bad row is an error
naming ``file:line``, and nothing changes.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from brewkb.errors import TrajectoryError
from brewkb.trajectories.schema import Outcome, Trajectory

__all__ = ["Labels", "read_outcomes", "ID_COLUMNS"]

ID_COLUMNS = ("conversation_id", "id", "trace_id", "task_id")
_TRUE = {"true", "1", "yes", "pass", "passed", "success"}
_FALSE = {"false", "0", "no", "fail", "failed", "failure"}
_MATCH_KEYS = ("conversation_id", "trace_id", "simulation_id")


@dataclass
class Labels:
    """Outcomes by conversation id, and which ids labelled something."""

    path: Path
    outcomes: dict[str, Outcome]
    used: set[str] = field(default_factory=set)

    def label(self, trajectory: Trajectory) -> Trajectory:
        """``trajectory`` with the file's outcome for it (a new id: the outcome is
        part of its content), or as it is when the file does not name it."""
        for key in (*(trajectory.meta.get(k) for k in _MATCH_KEYS), trajectory.task_id):
            if isinstance(key, str | int) and str(key) in self.outcomes:
                self.used.add(str(key))
                outcome = self.outcomes[str(key)]
                detail = {**dict(trajectory.outcome.detail), "label": f"outcomes file {self.path.name}"}
                return trajectory.derived(outcome=Outcome(outcome.success, outcome.score, detail))
        return trajectory

    def unused(self) -> list[str]:
        return sorted(set(self.outcomes) - self.used)


def _success(value: Any, where: str) -> bool | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise TrajectoryError(f"{where}: `success` must be true or false, got {value!r}")


def _score(value: Any, where: str) -> float | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    try:
        score = float(value) if not isinstance(value, bool) else float("nan")
    except (TypeError, ValueError, OverflowError):  # overflow: an integer too large for a float
        score = float("nan")
    if score != score or score in (float("inf"), float("-inf")):
        raise TrajectoryError(f"{where}: `score` must be a number, got {value!r}")
    return score


def _rows(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise TrajectoryError(f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    if path.suffix.lower() in (".jsonl", ".json", ".ndjson") or text.lstrip().startswith("{"):
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except (json.JSONDecodeError, RecursionError):
                raise TrajectoryError(f"{path}:{number}: not a JSON object") from None
            if not isinstance(row, dict):
                raise TrajectoryError(f"{path}:{number}: not a JSON object")
            yield f"{path}:{number}", row
        return
    reader = csv.DictReader(text.splitlines())
    if reader.fieldnames is not None and not {f.strip() for f in reader.fieldnames} & set(ID_COLUMNS):
        raise TrajectoryError(f"{path}:1: no id column in the header; name one {', '.join(ID_COLUMNS)}")
    for row in reader:
        yield f"{path}:{reader.line_num}", {k.strip(): v for k, v in row.items() if isinstance(k, str)}


def read_outcomes(path: Path) -> Labels:
    """Every label of ``path``; any bad row refuses the file."""
    outcomes: dict[str, Outcome] = {}
    column: str | None = None
    for where, row in _rows(path):
        column = column or next((c for c in ID_COLUMNS if c in row), None)
        if column is None:
            raise TrajectoryError(f"{where}: no id column; name one {', '.join(ID_COLUMNS)}")
        key = row.get(column)
        if not isinstance(key, str | int) or isinstance(key, bool) or not str(key).strip():
            raise TrajectoryError(f"{where}: `{column}` is empty")
        success, score = _success(row.get("success"), where), _score(row.get("score"), where)
        if success is None and score is None:
            raise TrajectoryError(f"{where}: needs `success` (true/false) or a numeric `score`")
        outcome = Outcome(score >= 1.0 if success is None and score is not None else success,
                          score if score is not None else float(bool(success)))
        key = str(key).strip()
        if key in outcomes and outcomes[key] != outcome:
            raise TrajectoryError(f"{where}: `{key}` is labelled twice, differently")
        outcomes[key] = outcome
    if not outcomes:
        raise TrajectoryError(f"{path}: no labels (a CSV with a header row such as `conversation_id,success`, "
                              "or JSONL of {\"conversation_id\": ..., \"success\": ...})")
    return Labels(path, outcomes)
