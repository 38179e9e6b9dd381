"""Agents that brewkb does not implement: a subprocess (``command``) or a
Python function (``python``), both speaking the JSON protocol of
``docs/agent-protocol.md``.

Input (one JSON object): ``task``, ``context`` (the rendered recipes),
``task_id``, ``split``, and for environments with tools ``tools`` and
``tool_channel`` (``brewkb.agents.channel``). Output (one JSON object): ``messages`` (OpenAI chat
format) and optionally ``success``, ``score``, ``usage``, ``meta``. The
environment's grader has the last word on success.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from brewkb.agents.base import failed
from brewkb.agents.channel import serve_tools
from brewkb.envs.base import Environment, Task
from brewkb.errors import AgentError, TrajectoryError
from brewkb.isolation.subproc import run_capped
from brewkb.trajectories.schema import Trajectory

__all__ = ["CommandAgent", "PythonAgent", "payload", "from_reply"]


def payload(task: Task, context: str) -> dict[str, Any]:
    return {"task": task.text, "context": context, "task_id": task.id, "split": task.split}


def from_reply(task: Task, reply: Any, meta: Mapping[str, Any]) -> Trajectory:
    """A trajectory from an agent's reply object, or a failed one saying what is wrong."""
    if not isinstance(reply, dict):
        return failed(task, f"the agent's reply is a {type(reply).__name__}, not a JSON object", meta=meta)
    data = {"task_id": task.id, "task": task.text, "split": task.split, "messages": reply.get("messages"),
            "outcome": {"success": bool(reply.get("success", False)), "score": reply.get("score", 0.0)},
            "usage": reply.get("usage") or {}, "meta": {**(reply.get("meta") or {}), **meta}}
    try:
        return Trajectory.from_json(data)
    except TrajectoryError as exc:
        return failed(task, f"the agent's reply is not a valid trajectory: {exc}", meta=meta)


def _last_json_object(text: str) -> Any:
    """The last line of ``text`` that is a JSON object (agents may log to stdout too)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    return None


class CommandAgent:
    """The user's agent as a subprocess: argv, never a shell; JSON on stdin and
    stdout; stderr kept in the trajectory's ``meta``; a per-episode timeout
    that kills the process group; stdout over ``max_output`` bytes fails it."""

    name = "command"

    def __init__(self, argv: Sequence[str], *, timeout: float = 300.0, max_output: int = 16_000_000,
                 cwd: Path | None = None, retrieves_per_step: bool = False) -> None:
        if not argv:
            raise AgentError("agent.command is empty; set it to the argv of your agent, e.g. "
                             '["python", "my_agent.py"]')
        self.argv = list(argv)
        self.timeout = timeout
        self.max_output = max_output
        self.cwd = cwd
        self.retrieves_per_step = retrieves_per_step

    def run(self, task: Task, context: str, env: Environment) -> Trajectory:
        return serve_tools(env, task, payload(task, context), self._run)

    def _run(self, task: Task, data: dict[str, Any]) -> Trajectory:
        done = run_capped(self.argv, json.dumps(data).encode(), timeout=self.timeout,
                          max_output=self.max_output, cwd=self.cwd)
        meta = {"stderr": done.stderr.decode("utf-8", "replace"), "returncode": done.returncode,
                "seconds": round(done.seconds, 3)}
        if done.problem is not None:
            return failed(task, done.problem, meta=meta)
        if done.returncode != 0:
            said = [line for line in done.stderr.decode("utf-8", "replace").splitlines() if line.strip()]
            return failed(task, f"the agent exited with status {done.returncode}"
                                + (f"; its stderr ends: {said[-1].strip()[:300]}" if said else ""), meta=meta)
        reply = _last_json_object(done.stdout.decode("utf-8", "replace"))
        if reply is None:
            return failed(task, "stdout held no JSON object; print the trajectory as one JSON line "
                                "and logs to stderr", meta=meta)
        return from_reply(task, reply, meta)


class PythonAgent:
    """A ``module:function`` taking the input object and returning the output
    object. It runs in-process, so its timeout cannot interrupt it: an episode
    that overruns is marked failed when it returns."""

    name = "python"

    def __init__(self, entry: str, *, timeout: float = 300.0, retrieves_per_step: bool = False,
                 root: Path | None = None) -> None:
        self.function = _load_entry(entry, root)
        self.entry = entry
        self.timeout = timeout
        self.retrieves_per_step = retrieves_per_step

    def run(self, task: Task, context: str, env: Environment) -> Trajectory:
        return serve_tools(env, task, payload(task, context), self._run)

    def _run(self, task: Task, data: dict[str, Any]) -> Trajectory:
        start = time.monotonic()
        reply = self.function(data)
        seconds = time.monotonic() - start
        if seconds > self.timeout:
            return failed(task, f"took {seconds:.1f} s, over the {self.timeout:g} s timeout")
        return from_reply(task, reply, {"entry": self.entry})


def _load_entry(entry: str, root: Path | None = None) -> Callable[[dict[str, Any]], Any]:
    """Import ``module:function``; modules in the KB folder ``root`` come first,
    as they would for ``python -m`` started there."""
    module_name, _, attr = entry.partition(":")
    if not module_name or not attr:
        raise AgentError(f"agent.entry {entry!r} must look like 'package.module:function'")
    if root is not None and str(root.resolve()) not in sys.path:
        sys.path.insert(0, str(root.resolve()))
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        where = f"the KB folder {root} or " if root is not None else ""
        raise AgentError(f"agent.entry: cannot import {module_name!r} ({exc}); put it in {where}an installed "
                         "package") from None
    function = getattr(module, attr, None)
    if not callable(function):
        raise AgentError(f"agent.entry: {module_name!r} has no function {attr!r}")
    return function  # type: ignore[no-any-return]


