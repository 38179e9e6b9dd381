"""Expanding a node: run the agent on its concept's train tasks with the
current KB, judge the episodes by the rubrics and reflect on them (scrubbed
of personal data, as in the stages), keep the insights that map to the
concept, and let the integrator write candidate children of the node from
its document and *all* insights of the concept so far (I_k ∪ B_new, as in the
paper's Algorithm): the insights the stages found, those of earlier rounds
and the new ones. A round that finds no new insight still refines the
document from I_k.

Earlier rounds' insights are kept in a journal (one JSON line per round and
concept), so a resumed run integrates from exactly what an uninterrupted one
did."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from brewkb.agents.base import retrieves_per_turn
from brewkb.agents.executors import Executor
from brewkb.aio import gather_all
from brewkb.config import Signatures
from brewkb.envs.base import Environment, Task
from brewkb.errors import LLMError
from brewkb.fsutil import append_line
from brewkb.llm.embed import cosine_matrix
from brewkb.llm.ledger import ITEM
from brewkb.llm.roles import Backend, Insight, Rubric
from brewkb.recipes import Recipe
from brewkb.retrieval.context import RecipeContext
from brewkb.retrieval.ranking import Retriever
from brewkb.search.episodes import (
    EpisodeCache,
    episode_key,
    retrieves_during_episode,
    run_jobs,
)
from brewkb.stages import grading
from brewkb.stages.integrate import integrate
from brewkb.stages.reflect import reflect
from brewkb.stages.rollouts import make_jobs
from brewkb.trajectories.schema import Trajectory
from brewkb.trajectories.scrub import Scrubber

__all__ = ["Expander", "ExpandRequest"]

ExpandRequest = tuple[Recipe, Sequence[int]]  # the node's document, the sample indices wanted

log = logging.getLogger(__name__)


class Expands(Protocol):
    """What the search asks of an expander: this module's ``Expander``, or
    ``search.distill.LogExpander``."""

    async def expand(self, requests: Mapping[str, ExpandRequest],
                     current: Mapping[str, Recipe]) -> dict[str, dict[int, Recipe]]: ...
ROUND_STRIDE = 1000
"""Sample indices of round ``r`` start at ``r * ROUND_STRIDE`` (the engine's ``SAMPLE_STRIDE``)."""


class Expander:
    def __init__(self, *, env: Environment, agent: Any, executor: Executor, cache: EpisodeCache, backend: Backend,
                 tasks: Mapping[str, Task], q_train: Mapping[str, Sequence[str]], mapping: Mapping[str, str],
                 titles: Mapping[str, tuple[str, tuple[str, ...]]], k: int, budget: int, retriever: Retriever,
                 threshold: float, retries: int, max_concepts: int,
                 insights: Mapping[str, Sequence[Insight]] | None = None, journal: Path | None = None,
                 rubrics: Sequence[Rubric] = (), scrubber: Scrubber | None = None,
                 accept_failed: bool = False, tools: Signatures | None = None) -> None:
        self.tools = tools
        self.env, self.agent, self.executor, self.cache, self.backend = env, agent, executor, cache, backend
        self.tasks, self.q_train, self.mapping, self.titles = tasks, q_train, dict(mapping), titles
        self.k, self.budget, self.retriever = k, budget, retriever
        self.threshold, self.retries, self.max_concepts = threshold, retries, max_concepts
        self.rubrics, self.scrubber, self.accept_failed = rubrics, scrubber, accept_failed
        self._reflections: dict[str, list[Insight]] = {}
        self._new: dict[str, asyncio.Future[str | None]] = {}
        self._stage = {c: list(v) for c, v in (insights or {}).items()}
        self.journal = journal
        self._rounds: dict[str, dict[int, list[Insight]]] = {}  # concept → round → its new insights
        if journal is not None and journal.exists():
            for line in journal.read_text(encoding="utf-8").splitlines():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:  # a line cut short by a crash; its round is redone
                    continue
                self._rounds.setdefault(record["concept"], {}).setdefault(record["round"],
                                        [Insight.from_json(i) for i in record["insights"]])

    def known(self, concept: str, round_: int) -> list[Insight]:
        """I_k: the concept's insights from the stages and from rounds before ``round_``."""
        found = list(self._stage.get(concept, ()))
        for r, insights in sorted(self._rounds.get(concept, {}).items()):
            if r < round_:
                found += insights
        return list(dict.fromkeys(found))

    def _record(self, round_: int, concept: str, insights: list[Insight]) -> None:
        if round_ in self._rounds.get(concept, {}):
            return
        self._rounds.setdefault(concept, {})[round_] = insights
        if self.journal is not None:
            append_line(self.journal, json.dumps({"round": round_, "concept": concept,
                                                  "insights": [i.to_json() for i in insights]}, sort_keys=True))

    async def _episodes(self, concepts: Sequence[str], current: Mapping[str, Recipe]) -> dict[str, list[Trajectory]]:
        provider = RecipeContext(self.retriever.index(list(current.values())), None, self.k, self.budget)
        kb = current if retrieves_during_episode(self.agent) else None
        task_ids = sorted({t for c in concepts for t in self.q_train.get(c, ()) if t in self.tasks})
        jobs = []
        for task_id in task_ids:
            [job] = make_jobs([self.tasks[task_id]], provider, retrieves_per_turn(self.agent))
            jobs.append((episode_key(task_id, job.context, kb), job))
        ran = await run_jobs(jobs, self.agent, self.env, self.executor, self.cache)
        done = dict(zip(task_ids, (t for t, _ in ran), strict=True))
        return {c: [done[t] for t in self.q_train.get(c, ()) if t in done] for c in concepts}

    async def _concept_of(self, names: Sequence[str]) -> dict[str, str]:
        """Concept names → concept slugs: names the concepts stage saw map
        directly; a new name maps to its nearest known name at or above the
        clustering threshold. Each new name is compared on its own, once, and
        concepts expanded at the same time wait for the same answer, so the
        answer does not depend on what else was asked (a resumed run agrees)."""
        new = sorted(set(names) - set(self.mapping))
        for name in new:
            if name not in self._new:
                self._new[name] = asyncio.ensure_future(self._nearest(name))
        lookup = dict(self.mapping)
        for name, slug in zip(new, await gather_all(self._new[name] for name in new), strict=True):
            if slug is not None:
                lookup[name] = slug
        return {n: lookup[n] for n in names if n in lookup}

    async def _nearest(self, name: str) -> str | None:
        known = sorted(self.mapping)
        if not known:
            return None
        vectors = np.asarray(await self.backend.embed(known + [name]), dtype=np.float64)
        sims = cosine_matrix(vectors)[-1, :-1]
        best = int(np.argmax(sims))
        return self.mapping[known[best]] if sims[best] >= self.threshold else None

    async def _insights(self, trajectories: Sequence[Trajectory]) -> list[Insight]:
        fresh = {t.id: t for t in trajectories if t.id not in self._reflections}
        results = await gather_all(self._reflect(t) for t in fresh.values())
        for key, (insights, _) in zip(fresh, results, strict=True):
            self._reflections[key] = insights
        return [i for t in trajectories for i in self._reflections[t.id]]

    async def _reflect(self, trajectory: Trajectory) -> tuple[list[Insight], list[str]]:
        """Insights of one expansion episode, judged by the rubrics first, as the stages do."""
        ITEM.set(f"expand:{trajectory.task_id}")  # labels the invalid replies of its calls (a task of its own)
        try:
            judged = await grading.judged(self.backend, trajectory, self.rubrics, self.scrubber)
            return await reflect(self.backend, judged, self.max_concepts, self.scrubber)
        except LLMError as exc:
            if not self.accept_failed:
                raise
            log.warning("an episode of task %s gives no insight (left out: stages.accept_failed): %s",
                        trajectory.task_id, exc)
            return [], []

    async def expand(self, requests: Mapping[str, ExpandRequest],
                     current: Mapping[str, Recipe]) -> dict[str, dict[int, Recipe]]:
        """Candidate documents per concept by sample index (a sample that never
        lints is missing)."""
        episodes = await self._episodes(sorted(requests), current)

        async def one(concept: str) -> dict[int, Recipe]:
            insights = await self._insights(episodes[concept])
            slug_of = await self._concept_of([i.concept for i in insights])
            mine = [i for i in insights if slug_of.get(i.concept) == concept]
            doc, samples = requests[concept]
            round_ = min(samples) // ROUND_STRIDE
            known = self.known(concept, round_)
            every = list(dict.fromkeys(known + mine))  # I_k ∪ B_new
            self._record(round_, concept, [i for i in mine if i not in known])
            title, aliases = self.titles[concept]
            made = {}
            ITEM.set(f"expand:{concept}")
            for sample in samples:
                for recipe in await integrate(self.backend, concept, title, aliases, every, doc, 1, self.retries,
                                              sample, known=self.tools):
                    made[sample] = recipe
            return made

        results = await gather_all(one(c) for c in sorted(requests))
        return dict(zip(sorted(requests), results, strict=True))
