"""Search steps for logged trajectories, where no environment can re-run a task.

``LogExpander`` writes candidate children of a node from the node's document
and every insight of its concept (I_k; there are no new episodes to reflect
on). ``RetrievalEvaluator`` scores a candidate by retrieval alone: the MRR of
the candidate among its hybrid KB for the held-out logged requests of its
concept (``R = λ_ret · MRR``, λ_corr = 0: nothing can be re-run, so success is
not measured). A concept with no held-out request is scored on its own
train requests, and the note says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from brewkb.llm.roles import Backend, Insight
from brewkb.recipes import Recipe
from brewkb.retrieval.ranking import Retriever, mrr
from brewkb.search.episodes import EpisodeCache
from brewkb.search.evaluate import Evaluation
from brewkb.search.expand import ExpandRequest
from brewkb.stages.integrate import integrate

__all__ = ["LogExpander", "RetrievalEvaluator"]


class LogExpander:
    def __init__(self, *, backend: Backend, insights: Mapping[str, Sequence[Insight]],
                 titles: Mapping[str, tuple[str, tuple[str, ...]]], retries: int) -> None:
        self.backend, self.insights, self.titles, self.retries = backend, insights, titles, retries

    async def expand(self, requests: Mapping[str, ExpandRequest],
                     current: Mapping[str, Recipe]) -> dict[str, dict[int, Recipe]]:
        """Candidate documents per concept by sample index (a sample that never lints is missing)."""
        out: dict[str, dict[int, Recipe]] = {}
        for concept, (doc, samples) in sorted(requests.items()):
            title, aliases = self.titles[concept]
            made: dict[int, Recipe] = {}
            for sample in samples:
                for recipe in await integrate(self.backend, concept, title, aliases, self.insights.get(concept, ()),
                                              doc, 1, self.retries, sample):
                    made[sample] = recipe
            out[concept] = made
        return out


class RetrievalEvaluator:
    """Evaluations by retrieval only; ``queries`` are task id → request text
    (scrubbed), ``q_eval``/``q_train`` the task ids of each concept."""

    def __init__(self, *, queries: Mapping[str, str], q_eval: Mapping[str, Sequence[str]],
                 q_train: Mapping[str, Sequence[str]], retriever: Retriever, cache: EpisodeCache) -> None:
        self.queries, self.q_eval, self.q_train, self.retriever = queries, q_eval, q_train, retriever
        self.cache = cache  # no episodes are run; the search reports its (zero) counts

    def tasks_of(self, concept: str) -> tuple[str, list[str]]:
        ids = [t for t in self.q_eval.get(concept, ()) if t in self.queries]
        if ids:
            return "eval", ids
        return "train", [t for t in self.q_train.get(concept, ()) if t in self.queries]

    async def evaluate(self, candidates: Mapping[str, tuple[str, Recipe]], current: Mapping[str, Recipe],
                 only: Sequence[str] | None = None) -> dict[str, Evaluation]:
        multi = self.retriever.multi(current, candidates)
        out = {}
        for key in (list(only) if only is not None else list(candidates)):
            concept, recipe = candidates[key]
            split, ids = self.tasks_of(concept)
            r_ret = round(mrr(recipe.name, [self.queries[t] for t in ids], self.retriever.hybrid(multi, key)), 6)
            detail: tuple[dict[str, Any], ...] = tuple({"task_id": t, "measured": "retrieval"} for t in ids)
            out[key] = Evaluation(r_ret, 0.0, r_ret, split, detail, 0, 0)
        return out
