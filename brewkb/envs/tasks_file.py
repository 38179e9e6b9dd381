"""An environment made of a JSONL file of tasks and an external grader command.

For teams whose agent acts in its own world and whose grading lives outside
brewkb. Each task line is ``{"id", "task", "split"?, ...}`` (other keys are
the task's data, passed to the grader, never to the agent). The grader is an
argv that reads ``{"task_id", "task", "split", "data", "trajectory"}`` on stdin
and prints ``{"success": bool, "score": float?, "detail": {...}?}``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from brewkb.envs.base import SPLITS, Task
from brewkb.errors import ConfigError
from brewkb.isolation.subproc import run_capped
from brewkb.trajectories.schema import Outcome, Trajectory

__all__ = ["TasksFileEnvironment"]


class TasksFileEnvironment:
    name = "tasks-file"

    def __init__(self, path: Path, grader: Sequence[str], *, timeout: float = 120.0) -> None:
        if not grader:
            raise ConfigError('env.options.grader: set the grader command, e.g. grader = ["python", "grade.py"]')
        self.grader = list(grader)
        self.timeout = timeout
        self._tasks = self._load(path)

    @staticmethod
    def _load(path: Path) -> list[Task]:
        if not path.is_file():
            raise ConfigError(f"env.data: tasks file {path} does not exist")
        tasks = []
        for number, line in enumerate(path.read_text(encoding="utf-8-sig").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                text = record["task"]
            except (json.JSONDecodeError, KeyError, TypeError):
                raise ConfigError(f"{path}:{number}: expected a JSON object with a `task` string") from None
            split = record.get("split", "train")
            if split not in SPLITS:
                raise ConfigError(f"{path}:{number}: split {split!r} is not one of {', '.join(SPLITS)}")
            data = {k: v for k, v in record.items() if k not in ("id", "task", "split")}
            tasks.append(Task(str(record.get("id", f"line-{number}")), str(text), split, data))
        return tasks

    def tasks(self, split: str) -> list[Task]:
        return [t for t in self._tasks if t.split == split]

    def grade(self, task: Task, trajectory: Trajectory) -> Outcome:
        request = {"task_id": task.id, "task": task.text, "split": task.split, "data": dict(task.data),
                   "trajectory": trajectory.to_json()}
        done = run_capped(self.grader, json.dumps(request).encode(), timeout=self.timeout, max_output=1_000_000)
        if done.problem or done.returncode != 0:
            why = done.problem or f"exited with status {done.returncode}: {done.stderr.decode(errors='replace')[-300:]}"
            return Outcome(False, 0.0, {"error": f"grader {why}"})
        try:
            reply = json.loads(done.stdout)
            success = reply["success"]
            if not isinstance(success, bool):
                raise TypeError
        except (json.JSONDecodeError, KeyError, TypeError):
            return Outcome(False, 0.0, {"error": "grader did not print {\"success\": true|false, ...}"})
        return Outcome(success, float(reply.get("score", float(success))), dict(reply.get("detail") or {}))

    def tools(self) -> list[dict[str, Any]]:
        return []

    def session(self, task: Task) -> Any:
        raise NotImplementedError("tasks-file agents act in their own environment")

    def relabel_task(self, task: Task, actions: Sequence[tuple[str, Mapping[str, Any]]], text: str) -> Task | None:
        return None
