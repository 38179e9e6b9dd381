"""Search steps for logged trajectories, where no environment can re-run a task.

``LogExpander`` writes candidate children of a node from the node's document
and every insight of its concept (I_k; there are no new episodes to reflect
on). ``RetrievalEvaluator`` scores a candidate by retrieval alone
(``R = λ_ret · MRR``, λ_corr = 0: nothing can be re-run, so success is not
measured): for each held-out request of its concept, 1 / the candidate's rank
among its hybrid KB, times the share of the writes the logged conversation
did that the candidate's procedure names (a conversation that failed or did
no action counts the rank alone). A candidate that ranks first but points to
the wrong tool earns nothing. A concept with no held-out request is never scored
on its own learning requests (whoever wrote those conversations would grade
their own recipe): it scores nothing, and ``distill`` does not search it at
all — it waits for evidence, and the PR says so.

A recipe's leave-one-out effect, for the final gate, compares the KB's own
measure (the MRR of the first document naming each write, see
``brewkb.retrieval.logeval``) with and without the recipe on the eval tasks
whose top ``k`` hold it. A task none of whose conversations passed with a
write (a request rightly refused, or one that failed) is measured as the
reward ranks it: 1 / the rank of its concept's recipe for its request, so a
recipe's own requests weigh in its effect as much as the others' do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from brewkb.config import Signatures
from brewkb.llm.roles import Backend, Insight
from brewkb.recipes import Recipe
from brewkb.retrieval.index import Searchable
from brewkb.retrieval.logeval import (
    DEPTH,
    Case,
    Procedure,
    case_scores,
    procedure_of,
    shown_procedure,
)
from brewkb.retrieval.ranking import Retriever
from brewkb.search.episodes import EpisodeCache
from brewkb.search.evaluate import Evaluation
from brewkb.search.expand import ExpandRequest
from brewkb.stages.integrate import integrate

__all__ = ["LogExpander", "RetrievalEvaluator"]


class LogExpander:
    def __init__(self, *, backend: Backend, insights: Mapping[str, Sequence[Insight]],
                 titles: Mapping[str, tuple[str, tuple[str, ...]]], retries: int, known: Signatures | None = None,
                 supported: Mapping[str, frozenset[str]] | None = None,
                 logs: Mapping[str, Sequence[str]] | None = None) -> None:
        self.backend, self.insights, self.titles, self.retries = backend, insights, titles, retries
        self.known, self.supported, self.logs = known, supported, logs

    async def expand(self, requests: Mapping[str, ExpandRequest],
                     current: Mapping[str, Recipe]) -> dict[str, dict[int, Recipe]]:
        """Candidate documents per concept by sample index (a sample that never lints is missing)."""
        out: dict[str, dict[int, Recipe]] = {}
        for concept, (doc, samples) in sorted(requests.items()):
            title, aliases = self.titles[concept]
            made: dict[int, Recipe] = {}
            for sample in samples:
                for recipe in await integrate(self.backend, concept, title, aliases, self.insights.get(concept, ()),
                                              doc, 1, self.retries, sample, known=self.known,
                                              supported=self.supported, logs=self.logs):
                    made[sample] = recipe
            out[concept] = made
        return out


class RetrievalEvaluator:
    """Evaluations by retrieval only; ``queries`` are task id → request text
    (scrubbed), ``cases`` task id → its conversations that passed with an
    action, ``q_eval``/``q_train`` the task ids of each concept (the train
    ones are never scored)."""

    def __init__(self, *, queries: Mapping[str, str], cases: Mapping[str, Sequence[Case]],
                 q_eval: Mapping[str, Sequence[str]], q_train: Mapping[str, Sequence[str]], retriever: Retriever,
                 cache: EpisodeCache, k: int = 3) -> None:
        self.queries, self.cases, self.q_eval, self.q_train, self.k = queries, cases, q_eval, q_train, k
        self.retriever = retriever
        self.cache = cache  # no episodes are run; the search reports its (zero) counts
        self._procedures: dict[tuple[str, str], Procedure] = {}
        self._concepts_of: dict[str, list[str]] = {}  # eval task → the concepts of its request
        for concept, ids in sorted(q_eval.items()):
            for task in ids:
                if task in queries:
                    self._concepts_of.setdefault(task, []).append(concept)

    def tasks_of(self, concept: str) -> tuple[str, list[str]]:
        """The eval tasks a candidate of ``concept`` is scored on (none: it scores nothing)."""
        return "eval", [t for t in self.q_eval.get(concept, ()) if t in self.queries]

    def _procedure(self, recipe: Recipe) -> Procedure:
        key = (recipe.name, recipe.body)
        if key not in self._procedures:
            self._procedures[key] = procedure_of(recipe)
        return self._procedures[key]

    def _value(self, index: Searchable, task: str, kb: Mapping[str, Recipe]) -> float:
        """The KB's own measure for the task's conversations; for a task none
        of whose conversations passed with a write, 1 / the rank of its
        concepts' recipes for its request (the target the reward ranks)."""
        cases = self.cases.get(task, ())
        if cases:
            values = [case_scores([shown_procedure(h) for h in index.search(c.queries["conversation"], DEPTH)], c)[0]
                      for c in cases]
            return round(sum(values) / len(values), 6)
        ranks = [index.rank(kb[concept].name, self.queries[task]) if concept in kb else 0
                 for concept in self._concepts_of[task]]
        return round(sum(1 / r for r in ranks if 0 < r <= DEPTH) / len(ranks), 6)

    def _queries_of(self, task: str) -> list[str]:
        cases = self.cases.get(task, ())
        return [c.queries["conversation"] for c in cases] if cases else [self.queries[task]]

    def _own(self, index: Searchable, recipe: Recipe, task: str) -> float:
        """1 / the candidate's rank for the task's request, times the share of
        its conversations' writes the candidate names."""
        rank = index.rank(recipe.name, self.queries[task])
        if not rank:
            return 0.0
        cases = self.cases.get(task, ())
        if not cases:
            return 1.0 / rank
        found = self._procedure(recipe)
        return sum(sum(found.names(a) for a in c.writes) / len(c.writes) for c in cases) / len(cases) / rank

    async def evaluate(self, candidates: Mapping[str, tuple[str, Recipe]], current: Mapping[str, Recipe],
                       only: Sequence[str] | None = None) -> dict[str, Evaluation]:
        multi = self.retriever.multi(current, candidates)
        out = {}
        for key in (list(only) if only is not None else list(candidates)):
            concept, recipe = candidates[key]
            split, ids = self.tasks_of(concept)
            hybrid = self.retriever.hybrid(multi, key)
            r_ret = round(sum(self._own(hybrid, recipe, t) for t in ids) / len(ids), 6) if ids else 0.0
            detail: tuple[dict[str, Any], ...] = tuple({"task_id": t, "measured": "retrieval"} for t in ids)
            out[key] = Evaluation(r_ret, 0.0, r_ret, split, detail, 0, 0)
        return out

    async def leave_one_out(self, concepts: Sequence[str],
                            kb: Mapping[str, Recipe]) -> dict[str, list[tuple[float, float]]]:
        """The eval tasks whose top ``k`` from ``kb`` hold each concept's
        recipe, measured with it and without it."""
        index = self.retriever.index(list(kb.values()))
        tasks = sorted(self._concepts_of)
        out = {}
        for concept in concepts:
            name = kb[concept].name
            hit = [t for t in tasks
                   if any(h.name == name for q in self._queries_of(t) for h in index.search(q, self.k))]
            rest = {slot: r for slot, r in kb.items() if slot != concept}
            without = self.retriever.index(list(rest.values())) if hit else index
            out[concept] = [(self._value(index, t, kb), self._value(without, t, rest)) for t in hit]
        return out
