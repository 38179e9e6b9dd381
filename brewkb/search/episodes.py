"""Reuse of agent episodes across evaluations.

An episode's result depends only on the task, the agent's configuration (fixed
within a run) and the context the agent got. So when a hybrid KB gives a task
exactly the context an earlier evaluation gave it — the candidate was not
retrieved for it — the earlier episode stands in for a new one. ``limit`` is
how many distinct episodes to keep per (task, context): 0 turns reuse off; 1
suits deterministic agents; more keeps samples of a stochastic agent, reused in
turn once that many exist. Agents that retrieve during the episode — per step,
or per user turn (``retrieval.per_turn``) — key on the whole KB instead of the
context: a later turn may retrieve a recipe the first context did not hold, so
only the same KB is sure to give the same retrievals.

Each stored episode names the search step that ran it (``step``: the
iteration and phase). A resumed run replays the step a kill interrupted; the
episodes that step had already run are taken back as *its own* — run, not
reused — so the rewards' notes count them exactly as an uninterrupted run
does, and a stochastic agent's stored samples are handed out in an order fixed
by the step, not by how many the process happened to hand out before.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from brewkb.agents.base import episode_error, retrieves_per_turn
from brewkb.agents.executors import Executor, Job
from brewkb.envs.base import Environment
from brewkb.errors import AllFailedError
from brewkb.fsutil import append_line
from brewkb.recipes import Recipe, render_recipe
from brewkb.trajectories.schema import Trajectory

__all__ = ["EpisodeCache", "context_key", "episode_key", "retrieves_during_episode", "run_jobs"]


def context_key(task_id: str, context: str) -> str:
    return hashlib.sha256(f"{task_id}\0{context}".encode()).hexdigest()[:32]


def retrieves_during_episode(agent: Any) -> bool:
    """Whether ``agent``'s episodes depend on the whole KB (it retrieves per step or per turn)."""
    return bool(getattr(agent, "retrieves_per_step", False)) or retrieves_per_turn(agent)


def episode_key(task_id: str, context: str, kb: Mapping[str, Recipe] | None) -> str:
    """The reuse key of an episode: its task and context, or its task and the
    whole KB ``kb`` (given for agents that retrieve during the episode)."""
    if kb is None:
        return context_key(task_id, context)
    return context_key(task_id, "|".join(render_recipe(r) for _, r in sorted(kb.items())))


class EpisodeCache:
    def __init__(self, limit: int = 1, path: Path | None = None) -> None:
        self.limit = limit
        self.path = path
        self.episodes: dict[str, list[Trajectory]] = defaultdict(list)
        self.steps: dict[str, list[str]] = defaultdict(list)
        """The search step that ran each stored episode (``""``: unknown)."""
        self.step = ""
        """The search step now running; ``""`` outside a search."""
        self._taken: set[tuple[str, int]] = set()
        self._asked: dict[str, int] = defaultdict(int)
        self.run = 0
        self.reused = 0
        if path is not None and path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    record = json.loads(line)
                    trajectory = Trajectory.from_json(record["trajectory"])
                except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                    continue  # a line cut short by a crash or a full disk: its episode runs again
                self.episodes[record["key"]].append(trajectory)
                self.steps[record["key"]].append(str(record.get("step", "")))

    def begin(self, step: str) -> None:
        """Start the search step ``step`` (an iteration and phase, unique in a run)."""
        self.step = step
        self._asked.clear()

    def lookup(self, key: str) -> tuple[Trajectory, bool] | None:
        """A stored episode for ``key`` and whether the current step ran it
        itself (a resumed step taking back what it ran before a crash), or
        ``None`` when the episode has to run."""
        stored = self.episodes.get(key, [])
        steps = self.steps.get(key, [])
        if self.step:
            for i, step in enumerate(steps):
                if step == self.step and (key, i) not in self._taken:
                    self._taken.add((key, i))
                    self.reused += 1  # this process did not run it
                    return stored[i], True
        earlier = [t for t, step in zip(stored, steps, strict=True) if not self.step or step != self.step]
        if not self.limit or len(earlier) < self.limit:
            return None
        self.reused += 1
        self._asked[key] += 1
        if len(earlier) == 1:
            return earlier[0], False
        # which sample depends on the step and the request, not on what this process handed out before
        turn = int(hashlib.sha256(f"{self.step}\0{key}\0{self._asked[key]}".encode()).hexdigest()[:8], 16)
        return earlier[turn % len(earlier)], False

    def get(self, key: str) -> Trajectory | None:
        """A stored episode when ``limit`` of them exist for ``key``."""
        found = self.lookup(key)
        return found[0] if found else None

    def put(self, key: str, trajectory: Trajectory) -> None:
        """Keep an episode for reuse (not one that failed to run: it is run again)."""
        self.run += 1
        if not self.limit or len(self.episodes[key]) >= self.limit or episode_error(trajectory) is not None:
            return
        self.episodes[key].append(trajectory)
        self.steps[key].append(self.step)
        self._taken.add((key, len(self.episodes[key]) - 1))
        if self.path is not None:
            append_line(self.path, json.dumps({"key": key, "step": self.step, "trajectory": trajectory.to_json()}))


async def run_jobs(jobs: Sequence[tuple[str, Job]], agent: Any, env: Environment, executor: Executor,
                   cache: EpisodeCache) -> list[tuple[Trajectory, bool]]:
    """A trajectory for each keyed job, in order, and whether it was reused
    (from the cache, or from an identical job of the same batch) rather than
    run. Raises ``AllFailedError`` when every episode run failed to run, so
    no reward is computed from an endpoint outage."""
    out: list[tuple[Trajectory, bool] | None] = [None] * len(jobs)
    todo: dict[str, list[int]] = {}
    replayed: dict[str, Trajectory] = {}
    for i, (key, _) in enumerate(jobs):
        if key in todo:
            todo[key].append(i)
        elif key in replayed:  # as an identical job of the same batch reuses the one that runs
            out[i] = (replayed[key], True)
            cache.reused += 1
        elif (hit := cache.lookup(key)) is None:
            todo[key] = [i]
        else:
            out[i] = (hit[0], not hit[1])  # an episode this step ran before a crash counts as run
            if hit[1]:
                replayed[key] = hit[0]
    keys = list(todo)
    errors: list[str] = []

    def on_result(n: int, trajectory: Trajectory) -> None:
        if (error := episode_error(trajectory)) is not None:
            errors.append(error)
        cache.put(keys[n], trajectory)
        first, *rest = todo[keys[n]]
        out[first] = (trajectory, False)
        for i in rest:
            out[i] = (trajectory, True)

    await executor.run(agent, env, [jobs[todo[k][0]][1] for k in keys], on_result)
    if keys and len(errors) == len(keys):
        raise AllFailedError(f"all {len(keys)} episodes of this search step failed to run: {errors[0]}")
    cache.reused += sum(len(v) - 1 for v in todo.values())
    return [item for item in out if item is not None]
