"""The environment contract: tasks by split, a grader, and optionally tools.

An environment never raises for what an agent did: a malformed trajectory is
graded as a failure with the reason in ``Outcome.detail``. Inputs (tasks,
trajectories) are values and are not mutated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from brewkb.trajectories.schema import Outcome, Trajectory

__all__ = ["Task", "Environment", "ToolSession", "SPLITS"]

SPLITS = ("train", "eval", "test")


@dataclass(frozen=True)
class Task:
    """A task: ``text`` is what the agent is asked; ``data`` is the
    environment's own (gold actions, expected answers...), never shown to the agent."""

    id: str
    text: str
    split: str
    data: Mapping[str, Any] = field(default_factory=dict)


class ToolSession(Protocol):
    """One episode's live tools. ``call`` returns the tool's result text; a
    refused call returns text starting with ``Error:`` and changes nothing."""

    def call(self, name: str, arguments: Mapping[str, Any]) -> str: ...


@runtime_checkable
class Environment(Protocol):
    """Tasks by split and a grader.

    ``tools()`` gives OpenAI tool schemas and ``session(task)`` a fresh tool
    session for agents that act inside the environment; environments whose
    agents bring their own tools return ``[]`` and raise ``NotImplementedError``.
    ``relabel_task`` turns the actions a run made into a task the grader
    understands, or returns ``None`` when the environment cannot grade
    free-form tasks (hindsight relabelling is then skipped, and said so).
    """

    name: str

    def tasks(self, split: str) -> list[Task]: ...

    def grade(self, task: Task, trajectory: Trajectory) -> Outcome: ...

    def tools(self) -> list[dict[str, Any]]: ...

    def session(self, task: Task) -> ToolSession: ...

    def relabel_task(self, task: Task, actions: Sequence[tuple[str, Mapping[str, Any]]], text: str) -> Task | None: ...
