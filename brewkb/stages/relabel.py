"""Hindsight relabelling: for failing trajectories, a task that what the agent
did would have solved. Re-running and grading that task is the pipeline's."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from brewkb.envs.base import Environment, Task
from brewkb.llm.roles import Backend
from brewkb.trajectories.schema import Trajectory, tool_calls
from brewkb.trajectories.scrub import Scrubber

__all__ = ["select", "actions_of", "relabelled_task"]


def select(trajectories: Sequence[Trajectory], seed: int = 0) -> list[Trajectory]:
    """Failing trajectories to relabel, as many as there are passing ones (so
    the material is balanced 50/50), chosen by a seeded shuffle."""
    failing = sorted((t for t in trajectories if t.success is False and not t.relabelled_from), key=lambda t: t.id)
    passing = sum(1 for t in trajectories if t.success is True)
    random.Random(seed).shuffle(failing)
    return failing[: max(passing, 1) if failing else 0]


def actions_of(trajectory: Trajectory) -> list[tuple[str, dict[str, Any]]]:
    """The tool calls of a trajectory that succeeded, with their arguments."""
    return [(c.name, args) for c in tool_calls(trajectory.messages) if not c.error and (args := c.args()) is not None]


async def relabelled_task(backend: Backend, env: Environment, task: Task, trajectory: Trajectory) -> Task | None:
    """A gradeable task for what ``trajectory`` did, or ``None`` when the run
    achieved nothing the environment can grade."""
    # the task it writes is re-run in the team's own environment and needs that environment's ids, so the
    # relabeller reads personal data; never a secret
    relabel = await backend.relabel(Scrubber.secrets_only().trajectory(trajectory))
    if relabel is None:
        return None
    actions: Sequence[tuple[str, Mapping[str, Any]]] = actions_of(trajectory)
    return env.relabel_task(task, actions, relabel.task)
