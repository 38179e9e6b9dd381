"""The agent contract and the wrapper that makes every episode a trajectory.

An agent runs one task with a rendered KB context and returns a trajectory.
Whatever goes wrong inside — an exception, a timeout, garbage output — the
wrapper turns it into a *failed* trajectory carrying the error, so a run never
stops because of one episode. Agents must not mutate the task or context.

An agent that retrieves per turn (``retrieves_per_turn``, the tool agent with
``retrieval.per_turn``) also gets the episode's context provider as
``retriever``; it records each turn's retrieval in ``meta["retrievals"]``, and
the trajectory's KB use becomes the recipes of every turn.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from brewkb.envs.base import Environment, Task
from brewkb.errors import BrewError, BudgetExhausted, EndpointDown
from brewkb.llm.ledger import ITEM
from brewkb.trajectories.schema import KBUse, Outcome, Trajectory

if TYPE_CHECKING:
    from brewkb.retrieval.context import ContextProvider

__all__ = ["Agent", "AsyncAgent", "failed", "finish", "run_episode", "arun_episode", "episode_error",
           "retrieves_per_turn", "seen_kb"]

log = logging.getLogger(__name__)


class Agent(Protocol):
    """``run`` returns the episode's trajectory; its outcome is provisional and
    is replaced by the environment's grade. ``retrieves_per_step`` is true for
    agents that query the KB during the episode (then an episode depends on the
    whole KB, not only on the recipes retrieved for the task). An agent with
    ``retrieves_per_turn`` true also accepts ``retriever=`` (see above)."""

    name: str
    retrieves_per_step: bool

    def run(self, task: Task, context: str, env: Environment) -> Trajectory: ...


class AsyncAgent(Protocol):
    name: str
    retrieves_per_step: bool

    async def arun(self, task: Task, context: str, env: Environment) -> Trajectory: ...


def retrieves_per_turn(agent: Any) -> bool:
    """Whether ``agent`` retrieves again during a conversation (its jobs then carry a retriever)."""
    return bool(getattr(agent, "retrieves_per_turn", False))


def seen_kb(kb: KBUse, trajectory: Trajectory) -> KBUse:
    """The KB use of an episode that retrieved per turn: every recipe that any
    turn's retrieval put in the agent's prompt (``kb`` when no turn retrieved)."""
    turns = trajectory.meta.get("retrievals")
    if not isinstance(turns, list) or not turns:
        return kb
    return KBUse(kb.revision, tuple(dict.fromkeys(str(n) for t in turns for n in t.get("recipes", ()))))


def failed(task: Task, error: str, *, messages: Sequence[Mapping[str, Any]] = (),
           meta: Mapping[str, Any] | None = None) -> Trajectory:
    """A failed trajectory for an episode that broke; the error is kept in ``meta``."""
    msgs = list(messages) or [{"role": "user", "content": task.text}]
    return Trajectory(task_id=task.id, task=task.text, split=task.split, messages=tuple(msgs),
                      outcome=Outcome(False, 0.0, {"error": error}), meta={**(meta or {}), "error": error})


def episode_error(trajectory: Trajectory) -> str | None:
    """Why an episode could not run (the agent or its endpoint broke, see
    ``failed``), or ``None`` for an episode that ran, whether it passed or not."""
    error = trajectory.meta.get("error")
    return str(error) if error else None


def finish(task: Task, trajectory: Trajectory, env: Environment, kb: KBUse, seconds: float) -> Trajectory:
    """Grade an episode and stamp the task, split and KB it ran with."""
    graded = trajectory.with_(task_id=task.id, task=task.text, split=task.split, kb=kb)
    try:
        outcome = env.grade(task, graded)
    except Exception as exc:  # a grader bug must not end the run either
        log.warning("grader failed on %s: %s", task.id, exc)
        outcome = Outcome(False, 0.0, {"error": f"grader failed: {exc}"})
    # The id is derived from the graded episode (outcome and KB included).
    return graded.derived(outcome=outcome, meta={**graded.meta, "seconds": round(seconds, 3)})


def cut_by_budget(task: Task, exc: BudgetExhausted) -> Trajectory:
    """An episode the run's budget stopped midway: not a failure of the agent,
    and never saved (``BudgetedExecutor`` drops it; a resumed run runs it again)."""
    return failed(task, str(exc), meta={"budget_exhausted": exc.option})


def run_episode(agent: Agent, task: Task, context: str, env: Environment, kb: KBUse,
                retriever: ContextProvider | None = None) -> Trajectory:
    start = time.monotonic()
    try:
        trajectory = (agent.run(task, context, env, retriever=retriever)  # type: ignore[call-arg]
                      if retriever is not None else agent.run(task, context, env))
    except BudgetExhausted as exc:
        return cut_by_budget(task, exc)
    except EndpointDown:  # the command stops; no episode is saved as failed for it
        raise
    except Exception as exc:
        log.debug("agent %s crashed on %s", agent.name, task.id, exc_info=True)
        trajectory = failed(task, f"agent crashed: {type(exc).__name__}: {exc}",
                            meta={"traceback": traceback.format_exc(limit=5)})
    if not isinstance(trajectory, Trajectory):
        trajectory = failed(task, f"agent returned {type(trajectory).__name__}, not a Trajectory")
    return finish(task, trajectory, env, seen_kb(kb, trajectory) if retriever else kb, time.monotonic() - start)


async def arun_episode(agent: AsyncAgent, task: Task, context: str, env: Environment, kb: KBUse,
                       retriever: ContextProvider | None = None) -> Trajectory:
    start = time.monotonic()
    label = ITEM.set(f"episode:{task.id}")  # labels the invalid replies of the episode's calls
    try:
        trajectory = await (agent.arun(task, context, env, retriever=retriever)  # type: ignore[call-arg]
                            if retriever is not None else agent.arun(task, context, env))
    except BudgetExhausted as exc:
        return cut_by_budget(task, exc)
    except EndpointDown:  # the command stops; no episode is saved as failed for it
        raise
    except BrewError as exc:  # e.g. the agent's endpoint failed: its message says what to do
        trajectory = failed(task, str(exc))
    except Exception as exc:
        trajectory = failed(task, f"agent crashed: {type(exc).__name__}: {exc}",
                            meta={"traceback": traceback.format_exc(limit=5)})
    finally:
        ITEM.reset(label)
    return finish(task, trajectory, env, seen_kb(kb, trajectory) if retriever else kb, time.monotonic() - start)
