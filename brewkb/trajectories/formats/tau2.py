"""``tau2``: tau2-bench results in every published shape, read one simulation
at a time.

- an object ``{timestamp?, info?, tasks?, simulations[]}`` (what ``tau2 run`` saves);
- a bare JSON array of simulations;
- simulations whose ``reward_info`` is null or has no reward: unlabelled;
- a task list that is missing or names other task ids: tasks are context
  (the instruction a simulation's task gave), never required. ``--tasks FILE``
  gives them from a tau2 domain's ``tasks.json`` instead;
- ``info.environment_info.tool_defs`` (saved when τ² ran with its tools'
  info): the agent's tools, recorded as each conversation's declared tools
  (``meta.tools``), so a call of any other counts for nothing.

A simulation is ``{id, task_id, trial, messages[{role, content, tool_calls[{id,
name, arguments, requestor}]}], reward_info{reward}}``. Tool calls the
simulated user made are kept in ``meta.user_tool_calls``, not in the
conversation. The markers the simulated user ends a conversation with
(``MARKERS``) are taken out of its turns.
"""

from __future__ import annotations

import json
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
from brewkb.trajectories.tools import DECLARED, declared_in

__all__ = ["read", "looks_like", "task_text", "MARKERS"]

MARKERS = ("###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###")
"""What τ²'s user simulator writes to end a conversation (``without_markers``)."""


def read(path: Path, split: str, tasks: Path | None = None) -> Iterator[Item]:
    bare = _starts_with(path, b"[")
    texts = _task_texts(tasks, "item") if tasks is not None else {} if bare else _task_texts(path, "tasks.item")
    declared = None if bare else _tool_defs(path)
    stream = json_items(path, "item" if bare else "simulations.item")
    where_of = (lambda i: f"{path}[{i}]") if bare else (lambda i: f"{path}:simulations[{i}]")
    seen = False
    for i, sim in stream:
        seen = True
        where = where_of(i)
        if isinstance(sim, TrajectoryError):
            yield Skipped(where, str(sim))
            continue
        if _never_ran(sim):
            yield Skipped(where, "a simulation that never ran (termination_reason "
                                 f"{str(obj(sim).get('termination_reason'))[:40]!r}, {_count_messages(sim)})",
                          never_ran=True)
            continue
        item = guarded(where, lambda: _convert(where, i, sim, split, texts, declared))
        if item is not None:
            yield item
    if not seen and not bare and not _has_simulations(path):
        raise TrajectoryError(f"{path}: a tau2 results file is an object with a `simulations` list or a list of "
                              "simulations; this one has neither")


def _never_ran(sim: Any) -> bool:
    """τ² records a simulation its harness could not run (``infrastructure_error``), and one with no message at
    all, with a reward like any other; neither is a conversation."""
    if not isinstance(sim, dict):
        return False
    return sim.get("termination_reason") == "infrastructure_error" or sim.get("messages") == []


def _count_messages(sim: dict[str, Any]) -> str:
    messages = sim.get("messages")
    n = len(messages) if isinstance(messages, list) else 0
    return f"{n} message{'' if n == 1 else 's'}"


def _convert(where: str, i: int, sim: Any, split: str, texts: dict[str, str],
             declared: list[str] | None) -> Item:
    if not isinstance(sim, dict) or not isinstance(sim.get("messages"), list):
        raise TrajectoryError("no `messages` list")
    info = sim.get("reward_info")
    reward = info.get("reward") if isinstance(info, dict) else None
    outcome = outcome_of(reward)
    messages, user_calls = _messages(without_markers(sim["messages"], MARKERS))
    task_id = str(sim.get("task_id", i))
    meta = {"source": "tau2", "trial": sim.get("trial"), "simulation_id": sim.get("id"),
            "user_tool_calls": user_calls}
    if isinstance(sim.get("id"), str):
        meta["conversation_id"] = sim["id"]
    if declared is not None:
        meta[DECLARED] = declared
    return build(where, task_id=task_id, task=texts.get(task_id) or first_user(messages), split=split,
                 messages=messages, outcome=outcome_json(outcome), meta=meta)


def _messages(messages: list[Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """tau2 messages → OpenAI messages; tool calls the *user* made go to meta."""
    out: list[dict[str, Any]] = []
    user_calls: list[dict[str, Any]] = []
    for m in messages:
        if not isinstance(m, dict):
            raise TrajectoryError("a message must be an object")
        role = m.get("role")
        if role == "tool":
            if m.get("requestor", "assistant") == "user":
                user_calls.append({"result": m.get("content"), "id": m.get("id")})
                continue
            out.append({"role": "tool", "tool_call_id": m.get("id", ""), "content": m.get("content") or ""})
            continue
        message: dict[str, Any] = {"role": role, "content": m.get("content")}
        calls = []
        for c in m.get("tool_calls") or []:
            if not isinstance(c, dict):
                raise TrajectoryError("a tool call must be an object")
            if role == "user" or c.get("requestor") == "user":
                user_calls.append({"name": c.get("name"), "arguments": c.get("arguments")})
                continue
            args = c.get("arguments")
            calls.append({"id": c.get("id", ""), "type": "function",
                          "function": {"name": c.get("name", ""),
                                       "arguments": args if isinstance(args, str) else json.dumps(args)}})
        if calls:
            message["tool_calls"] = calls
        if message["content"] is not None or calls:
            out.append(message)
    return out, user_calls


def task_text(task: dict[str, Any]) -> str:
    """The instruction a tau2 task gives its simulated user (or its purpose)."""
    instructions = obj(task.get("user_scenario")).get("instructions")
    if isinstance(instructions, str):
        return instructions
    if isinstance(instructions, dict):
        parts = [instructions.get(k) for k in ("reason_for_call", "known_info", "task_instructions")]
        return "\n".join(str(p) for p in parts if p)
    description = task.get("description") or {}
    return str(description.get("purpose") or "") if isinstance(description, dict) else str(description)


def _task_texts(path: Path, prefix: str) -> dict[str, str]:
    """Task id → instruction, from the tasks under ``prefix``; tasks it cannot
    read are left out (they are context only)."""
    texts: dict[str, str] = {}
    for _, task in json_items(path, prefix):
        if isinstance(task, dict) and isinstance(task.get("id"), str | int):
            try:
                texts[str(task["id"])] = task_text(task)
            except (TypeError, ValueError, AttributeError):
                continue
    return texts


def _tool_defs(path: Path) -> list[str] | None:
    """The names of the agent's tools the results file saved (``info.environment_info.tool_defs``: name →
    signature); ``None`` when it saved none. Tools it cannot read refuse the file (``declared_in``)."""
    for _, defs in json_items(path, "info.environment_info.tool_defs"):
        if defs is None:
            return None
        if not isinstance(defs, dict):
            raise TrajectoryError(f"{path}: info.environment_info.tool_defs must map each tool's name to its "
                                  f"signature, not be a {type(defs).__name__}")
        try:
            return declared_in([{"name": name} for name in defs])
        except TrajectoryError as exc:
            raise TrajectoryError(f"{path}: info.environment_info.tool_defs: {exc}") from None
    return None


def _starts_with(path: Path, char: bytes) -> bool:
    try:
        with path.open("rb") as handle:
            return handle.read(4096).removeprefix(b"\xef\xbb\xbf").lstrip().startswith(char)
    except OSError as exc:
        raise TrajectoryError(f"{path}: cannot read ({exc.strerror})") from None


def _has_simulations(path: Path) -> bool:
    """Whether the object has a ``simulations`` key at all (an empty list is fine)."""
    for _, value in json_items(path, "simulations"):
        return isinstance(value, list)
    return False


def looks_like(head: str) -> bool:
    text = head.lstrip()
    if text.startswith("{"):
        return '"simulations"' in text
    return text.startswith("[") and '"messages"' in text[:50_000] and (
        '"reward_info"' in text or '"termination_reason"' in text or '"task_id"' in text[:50_000])
