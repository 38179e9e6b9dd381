"""Rollouts: prepare one job per task (its rendered context and the KB it came
from) and summarise what came back. Running the jobs is the executor's."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from brewkb.agents.executors import Job
from brewkb.envs.base import Task
from brewkb.retrieval.context import ContextProvider, NoContext
from brewkb.trajectories.schema import Trajectory

__all__ = ["make_jobs", "summarise", "degenerate_note"]


def make_jobs(tasks: Sequence[Task], provider: ContextProvider, per_turn: bool = False) -> list[Job]:
    """A job per task; with ``per_turn`` (an agent that retrieves after each
    user turn) each job also carries ``provider`` as its retriever (not when
    the agent gets no context: there is nothing to retrieve again)."""
    retriever = provider if per_turn and not isinstance(provider, NoContext) else None
    jobs = []
    for task in tasks:
        text, kb = provider.context(task.text)
        jobs.append(Job(task, text, kb, retriever))
    return jobs


def summarise(trajectories: Sequence[Trajectory]) -> dict[str, Any]:
    n = sum(t.success is not None for t in trajectories)  # an unknown outcome is in no rate
    wins = [t for t in trajectories if t.success is True]
    return {"episodes": len(trajectories), "successes": len(wins), "success_rate": round(len(wins) / n, 4) if n else 0.0,
            "mean_steps_success": round(sum(t.steps for t in wins) / len(wins), 2) if wins else None,
            "failed_to_run": sum(1 for t in trajectories if "error" in t.meta),
            "degenerate": sum(1 for t in trajectories if t.meta.get("degenerate"))}


def degenerate_note(trajectories: Sequence[Trajectory]) -> str | None:
    """A line naming the degenerate conversations among ``trajectories`` (see
    ``brewkb.llm.turns``), or ``None`` when there is none."""
    found = [str(t.meta["degenerate"]) for t in trajectories if t.meta.get("degenerate")]
    if not found:
        return None
    return (f"{len(found)} of {len(trajectories)} conversations are degenerate (the first: {found[0]}); "
            "`brewkb doctor` checks whether the user role can play a user")
