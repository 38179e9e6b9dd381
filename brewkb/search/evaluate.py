"""Evaluating candidates: each inside its hybrid KB (the candidate plus the
current best document of every other concept), on its concept's eval tasks.

``R = λ_corr · R_corr + λ_ret · R_ret``: ``R_corr`` is the agent's success
rate on the tasks with the hybrid KB's top-k recipes as context; ``R_ret`` is
the MRR of the candidate among the hybrid KB for the same tasks' texts. A
concept with no eval tasks is evaluated on its train tasks (the note says so).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from brewkb.agents.base import retrieves_per_turn
from brewkb.agents.executors import Executor, Job
from brewkb.envs.base import Environment, Task
from brewkb.recipes import Recipe
from brewkb.retrieval.context import RecipeContext
from brewkb.retrieval.ranking import Retriever, mrr
from brewkb.search.episodes import (
    EpisodeCache,
    episode_key,
    retrieves_during_episode,
    run_jobs,
)
from brewkb.search.tree import reward
from brewkb.stages.rollouts import make_jobs
from brewkb.trajectories.schema import Trajectory

__all__ = ["Evaluation", "Evaluator"]


@dataclass(frozen=True)
class Evaluation:
    reward: float
    r_corr: float
    r_ret: float
    split: str
    tasks: tuple[dict[str, Any], ...]
    episodes_run: int
    episodes_reused: int

    def note(self, lambda_corr: float, lambda_ret: float, **extra: Any) -> dict[str, Any]:
        return {"reward": self.reward, "r_corr": self.r_corr, "r_ret": self.r_ret,
                "lambda_corr": lambda_corr, "lambda_ret": lambda_ret, "eval_split": self.split,
                "tasks": list(self.tasks), "usage": {"episodes_run": self.episodes_run,
                                                     "episodes_reused": self.episodes_reused}, **extra}


class Evaluates(Protocol):
    """What the search asks of an evaluator: this module's ``Evaluator``, or
    ``search.distill.RetrievalEvaluator`` for logs that cannot be re-run."""

    cache: EpisodeCache

    async def evaluate(self, candidates: Mapping[str, tuple[str, Recipe]], current: Mapping[str, Recipe],
                       only: Sequence[str] | None = None) -> dict[str, Evaluation]: ...

    async def leave_one_out(self, concepts: Sequence[str],
                            kb: Mapping[str, Recipe]) -> dict[str, list[tuple[float, float]]]:
        """For each concept, the eval tasks whose context from ``kb`` holds the
        concept's recipe, as (value with ``kb``, value with ``kb`` without that
        recipe): success on an environment, the retrieval measure on logs."""
        ...


class Evaluator:
    def __init__(self, *, env: Environment, agent: Any, executor: Executor, cache: EpisodeCache,
                 tasks: Mapping[str, Task], q_eval: Mapping[str, Sequence[str]], q_train: Mapping[str, Sequence[str]],
                 k: int, budget: int, retriever: Retriever, lambda_corr: float, lambda_ret: float) -> None:
        self.env, self.agent, self.executor, self.cache = env, agent, executor, cache
        self.tasks, self.q_eval, self.q_train = tasks, q_eval, q_train
        self.k, self.budget, self.retriever = k, budget, retriever
        self.lambdas = (lambda_corr, lambda_ret)
        self.per_step = retrieves_during_episode(agent)
        self.per_turn = retrieves_per_turn(agent)

    def tasks_of(self, concept: str) -> tuple[str, list[Task]]:
        ids = [t for t in self.q_eval.get(concept, ()) if t in self.tasks]
        if ids:
            return "eval", [self.tasks[t] for t in ids]
        return "train", [self.tasks[t] for t in self.q_train.get(concept, ()) if t in self.tasks]

    async def evaluate(self, candidates: Mapping[str, tuple[str, Recipe]], current: Mapping[str, Recipe],
                 only: Sequence[str] | None = None) -> dict[str, Evaluation]:
        """Evaluations of ``only`` (default: every candidate). All candidates
        share one index, so each is scored against the same statistics
        whichever subset is evaluated."""
        multi = self.retriever.multi(current, candidates)
        wanted = list(only) if only is not None else list(candidates)
        jobs: list[tuple[str, Job]] = []
        plan: dict[str, tuple[str, list[Task], list[int]]] = {}
        for key in wanted:
            concept, recipe = candidates[key]
            split, tasks = self.tasks_of(concept)
            hybrid = self.retriever.hybrid(multi, key)
            provider = RecipeContext(hybrid, None, self.k, self.budget)
            members = multi.members(key) if self.per_step else None
            slots = []
            for task in tasks:
                [job] = make_jobs([task], provider, self.per_turn)
                slots.append(len(jobs))
                jobs.append((episode_key(task.id, job.context, members), job))
            plan[key] = (split, tasks, slots)
        results = await run_jobs(jobs, self.agent, self.env, self.executor, self.cache)
        out = {}
        for key in wanted:
            split, tasks, slots = plan[key]
            runs = [results[i] for i in slots]
            r_corr = sum(t.success is True for t, _ in runs) / len(runs) if runs else 0.0
            r_ret = mrr(candidates[key][1].name, [t.text for t in tasks], self.retriever.hybrid(multi, key))
            detail = _detail(tasks, runs)
            n_reused = sum(reused for _, reused in runs)
            # rounded as the note stores them, so a run rebuilt from git backs up the same values
            r_corr, r_ret = round(r_corr, 6), round(r_ret, 6)
            out[key] = Evaluation(round(reward(r_corr, r_ret, *self.lambdas), 6), r_corr, r_ret, split, detail,
                                  len(runs) - n_reused, n_reused)
        return out

    async def leave_one_out(self, concepts: Sequence[str],
                            kb: Mapping[str, Recipe]) -> dict[str, list[tuple[float, float]]]:
        """Episodes of the eval tasks that retrieve each concept's recipe from
        ``kb``, with it and without it; episodes whose context does not change
        are reused."""
        tasks = {t: self.tasks[t] for ids in self.q_eval.values() for t in ids if t in self.tasks}
        full = self._jobs(tasks.values(), kb)
        jobs: list[tuple[str, Job]] = list(full.values())
        plan: dict[str, list[tuple[int, int]]] = {}
        for concept in concepts:
            name = kb[concept].name
            without = {slot: r for slot, r in kb.items() if slot != concept}
            hit = [t for t, (_, job) in full.items() if name in job.kb.recipes]
            slots = []
            for task_id, pair in self._jobs([tasks[t] for t in hit], without).items():
                slots.append((list(full).index(task_id), len(jobs)))
                jobs.append(pair)
            plan[concept] = slots
        results = await run_jobs(jobs, self.agent, self.env, self.executor, self.cache)
        return {c: [(float(results[a][0].success is True), float(results[b][0].success is True)) for a, b in slots]
                for c, slots in plan.items()}

    def _jobs(self, tasks: Iterable[Task], kb: Mapping[str, Recipe]) -> dict[str, tuple[str, Job]]:
        provider = RecipeContext(self.retriever.index(list(kb.values())), None, self.k, self.budget)
        out = {}
        for task in tasks:
            [job] = make_jobs([task], provider, self.per_turn)
            out[task.id] = (episode_key(task.id, job.context, dict(kb) if self.per_step else None), job)
        return out


def _detail(tasks: Sequence[Task], runs: Sequence[tuple[Trajectory, bool]]) -> tuple[dict[str, Any], ...]:
    return tuple({"task_id": task.id, "success": t.success, "score": t.outcome.score, "trajectory": t.id,
                  "reused": reused} for task, (t, reused) in zip(tasks, runs, strict=True))
