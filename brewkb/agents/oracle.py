"""The ``oracle`` agent: plays a task's gold actions through the episode's
tools, then says the gold answer. A self-check of an environment's harness
and grader (gold play must grade 1.0) — never a baseline."""

from __future__ import annotations

import json
from typing import Any

from brewkb.agents.base import failed
from brewkb.envs.base import Environment, Task
from brewkb.trajectories.schema import Outcome, Trajectory

__all__ = ["OracleAgent"]


class OracleAgent:
    name = "oracle"
    retrieves_per_step = False

    def __init__(self, *, limit: int | None = None) -> None:
        self.limit = limit
        """Play only the first ``limit`` gold actions (a truncated replay must fail)."""

    def run(self, task: Task, context: str, env: Environment) -> Trajectory:
        gold = task.data.get("gold_actions")
        if gold is None:
            return failed(task, f"the oracle needs tasks with gold actions; {env.name}'s tasks have none")
        actions = list(gold)[: self.limit] if self.limit is not None else list(gold)
        if any(a.get("requestor", "assistant") != "assistant" for a in actions):
            return failed(task, "the oracle plays the agent's side only; this task's gold actions include "
                                "the user's")
        session = env.session(task)
        messages: list[dict[str, Any]] = [{"role": "user", "content": task.text}]
        for n, action in enumerate(actions):
            call_id = f"oracle_{n}"
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": call_id, "type": "function", "function": {
                    "name": action["name"], "arguments": json.dumps(action.get("arguments") or {}, sort_keys=True)}}]})
            messages.append({"role": "tool", "tool_call_id": call_id, "name": action["name"],
                             "content": session.call(action["name"], action.get("arguments") or {})})
        messages.append({"role": "assistant", "content": str(task.data.get("gold_answer") or "Done.")})
        return Trajectory(task_id=task.id, task=task.text, split=task.split, messages=tuple(messages),
                          outcome=Outcome(False, 0.0), meta={"agent": "oracle", "gold_actions_played": len(actions)})

