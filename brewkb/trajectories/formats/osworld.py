"""``osworld``: an OSWorld results folder, ``<domain>/<example_id>/traj.jsonl``
and ``result.txt``; ``--tasks DIR`` finds each example's instruction in its
task JSON."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from brewkb.errors import TrajectoryError
from brewkb.trajectories.formats.base import Item, Skipped, build, guarded, json_lines, parse_json

__all__ = ["read", "looks_like"]


def _instruction(path: Path) -> str:
    try:
        value = parse_json(path.read_text(encoding="utf-8-sig", errors="replace"))
    except (OSError, TrajectoryError):
        return ""
    return str(value.get("instruction") or "") if isinstance(value, dict) else ""


def _task(tasks: Path | None, domain: str, example: str) -> str:
    if tasks is None:
        return ""
    for candidate in (tasks / domain / f"{example}.json", tasks / "examples" / domain / f"{example}.json"):
        if candidate.is_file():
            return _instruction(candidate)
    found = next(tasks.rglob(f"{example}.json"), None)
    return _instruction(found) if found else ""


def read(path: Path, split: str, tasks: Path | None = None) -> Iterator[Item]:
    if not path.is_dir():
        raise TrajectoryError(f"{path}: an OSWorld results folder is a directory")
    for traj_file in sorted(path.rglob("traj.jsonl")):
        folder = traj_file.parent
        domain, example = folder.parent.name, folder.name
        where = str(folder)
        try:
            score = float((folder / "result.txt").read_text().strip())
        except (OSError, ValueError):
            yield Skipped(where, "no readable result.txt (the episode did not finish)")
            continue
        if score != score:
            yield Skipped(where, "result.txt is not a number")
            continue
        task = _task(tasks, domain, example) or f"OSWorld task {domain}/{example}"
        item = guarded(where, lambda: _convert(where, traj_file, domain, example, task, score, split))
        if item is not None:
            yield item


def _convert(where: str, traj_file: Path, domain: str, example: str, task: str, score: float, split: str) -> Item:
    messages: list[dict[str, Any]] = [{"role": "user", "content": task}]
    for number, step in json_lines(traj_file):
        if isinstance(step, TrajectoryError) or not isinstance(step, dict):
            return Skipped(f"{traj_file}:{number}", str(step) if isinstance(step, TrajectoryError)
                           else "a step must be a JSON object")
        call_id = f"step-{step.get('step_num', number)}"
        messages.append({"role": "assistant", "content": str(step.get("response") or ""), "tool_calls": [
            {"id": call_id, "type": "function",
             "function": {"name": "computer", "arguments": json.dumps({"action": step.get("action")})}}]})
        observation = {"reward": step.get("reward"), "done": step.get("done"), "info": step.get("info")}
        messages.append({"role": "tool", "tool_call_id": call_id, "content": json.dumps(observation)})
    return build(where, task_id=f"{domain}/{example}", task=task, split=split, messages=messages,
                 outcome={"success": score >= 1.0, "score": score}, meta={"source": "osworld", "domain": domain})


def looks_like(path: Path) -> bool:
    return path.is_dir() and next(path.rglob("traj.jsonl"), None) is not None
