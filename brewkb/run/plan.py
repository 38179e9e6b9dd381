"""The most a ``refine`` can spend, worked out before anything is called.

Bounds come from counts only: train and eval tasks, the concepts found so far
(or the most the reflections could give), the strategy's rounds and
candidates per expansion, integrator retries, the agent's step limit, and the
stages a resumed run has already finished, the final evaluation of each
concept's candidates, and the held-out evaluation on the test split. Every JSON role's item may take a
repair call, so it counts twice; with ``structured_output = "auto"`` each JSON
role may also see up to two rejected calls per call in flight while the
endpoint's mode is found. Episodes that are reused instead of run and cache
hits only make the real numbers smaller.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from brewkb.config import Price

__all__ = ["PlanInputs", "RunPlan", "plan_refine", "DistillInputs", "plan_distill", "with_cost", "PROMPT_TOKENS_GUESS", "JSON_ROLES"]

PROMPT_TOKENS_GUESS = 2000
"""Prompt tokens assumed per call for a cost estimate when the run has no ledger yet."""

JSON_ROLES = ("judge", "relabeller", "reflector", "integrator")


@dataclass(frozen=True)
class PlanInputs:
    train_tasks: int
    eval_tasks: int
    rounds: int
    per_expansion: int
    relabel: bool
    done: frozenset[str] = frozenset()
    """Stages the run finished (all of them cost nothing more)."""
    relabel_selected: int | None = None
    """Trajectories the relabel stage will take, when the train rollouts exist."""
    concepts: Sequence[tuple[int, int]] | None = None
    """Per concept found so far: (train tasks, eval tasks)."""
    expansion_tasks: int | None = None
    """Distinct train tasks over all concepts, when the concepts are known."""
    gathers: int = 0
    """Search rounds already gathered (round 0 included)."""
    concepts_per_trajectory: int = 2
    min_concept_insights: int = 2
    integrate_retries: int = 2
    agent_steps: int = 0
    """LLM calls per agent episode at most (``agent.max_steps`` for the tool agent, else 0)."""
    user_steps: int = 0
    """``user`` role calls per episode at most (the tool agent in a conversational
    environment: one per agent turn and the opening one, else 0)."""
    fallback_calls: int = 0
    """Rejected calls each JSON role may see while the structured-output mode is found."""
    final_candidates: int = 0
    """Candidates per concept the final evaluation measures again, besides the base version."""
    test_tasks: int = 0
    """Test tasks of the held-out evaluation that ends the run (0: ``--no-eval``)."""
    k: int = 0
    """Recipes retrieved per task (bounds the leave-one-recipe-out reruns)."""


@dataclass(frozen=True)
class RunPlan:
    episodes: int
    calls: dict[str, int]
    concepts: int
    concepts_known: bool
    rounds: int
    cost: float | None = None
    """Estimated US dollars (``None`` when no role's model has a price)."""
    cost_basis: dict[str, int] = field(default_factory=dict)
    """Prompt tokens per call assumed for each role's cost."""

    @property
    def llm_calls(self) -> int:
        return sum(self.calls.values())

    def to_json(self) -> dict[str, Any]:
        return {"episodes": self.episodes, "llm_calls": self.llm_calls, "calls": dict(self.calls),
                "concepts": self.concepts, "concepts_known": self.concepts_known, "rounds": self.rounds,
                "cost": self.cost, "cost_basis": dict(self.cost_basis)}


def plan_refine(p: PlanInputs) -> RunPlan:
    calls = {r: 0 for r in ("agent", "user", *JSON_ROLES, "embeddings")}
    episodes = 0
    todo = lambda stage: stage not in p.done  # noqa: E731
    if todo("rollouts"):
        episodes += p.train_tasks
    if todo("rollouts-eval"):
        episodes += p.eval_tasks
    if todo("grades"):
        calls["judge"] += 2 * p.train_tasks
    relabelled = (p.train_tasks if p.relabel_selected is None else p.relabel_selected) if p.relabel else 0
    if todo("relabel"):
        calls["relabeller"] += 2 * relabelled
        episodes += relabelled
    if todo("reflections"):  # relabelled trajectories are judged there
        calls["reflector"] += 2 * (p.train_tasks + relabelled + p.eval_tasks)
        calls["judge"] += 2 * relabelled
    if todo("concepts"):
        calls["embeddings"] += 1
    if p.concepts is not None:
        sizes = [(t, e if e else t) for t, e in p.concepts]
        expansion_tasks = p.expansion_tasks if p.expansion_tasks is not None else p.train_tasks
    else:
        most = (p.train_tasks + relabelled) * p.concepts_per_trajectory // max(1, p.min_concept_insights)
        sizes = [(p.train_tasks, max(p.eval_tasks, p.train_tasks))] * most
        expansion_tasks = p.train_tasks
    n = len(sizes)
    per_integration = 2 * (1 + p.integrate_retries)
    if todo("integrate"):
        calls["integrator"] += n * per_integration
    if n:
        if p.gathers == 0:  # round 0 evaluates the roots
            episodes += sum(e for _, e in sizes)
        for _ in range(max(1, p.gathers), p.rounds + 1):
            episodes += expansion_tasks + p.per_expansion * sum(e for _, e in sizes)
            calls["reflector"] += 2 * expansion_tasks
            calls["judge"] += 2 * expansion_tasks
            calls["embeddings"] += expansion_tasks * p.concepts_per_trajectory
            calls["integrator"] += n * p.per_expansion * per_integration
    if n and todo("search"):  # the final evaluation: each concept's candidates and its base version
        episodes += (p.final_candidates + 1) * sum(e for _, e in sizes)
    if p.test_tasks and todo("search"):  # new KB, base KB and no KB, then a task's retrieved recipes left out one at a time
        episodes += (3 + min(n, p.k)) * p.test_tasks
    calls["agent"] = episodes * p.agent_steps
    calls["user"] = episodes * p.user_steps
    for role in JSON_ROLES:
        if calls[role]:
            calls[role] += p.fallback_calls
    return RunPlan(episodes, calls, n, p.concepts is not None, p.rounds)


def with_cost(plan: RunPlan, models: Mapping[str, str], max_tokens: Mapping[str, int],
              prices: Mapping[str, Price], prompt_tokens: Mapping[str, int]) -> RunPlan:
    """The plan with an estimated cost: each call's output at the role's
    ``max_tokens`` (a bound) and its prompt at ``prompt_tokens`` (the run's
    average so far, else ``PROMPT_TOKENS_GUESS``: an estimate, not a bound)."""
    total, priced, basis = 0.0, False, {}
    for role, n in plan.calls.items():
        price = prices.get(models.get(role, ""))
        if price is None or not n:
            continue
        priced = True
        basis[role] = prompt_tokens.get(role, PROMPT_TOKENS_GUESS)
        total += n * (basis[role] * price.input + max_tokens.get(role, 0) * price.output) / 1e6
    return RunPlan(plan.episodes, plan.calls, plan.concepts, plan.concepts_known, plan.rounds,
                   round(total, 4) if priced else None, basis)


@dataclass(frozen=True)
class DistillInputs:
    trajectories: int
    unlabelled: int
    """Trajectories whose outcome is unknown; the judge grades each (with an endpoint)."""
    rounds: int
    per_expansion: int
    done: frozenset[str] = frozenset()
    concepts: int | None = None
    """Concepts found so far (``None``: before the concepts stage)."""
    concepts_per_trajectory: int = 2
    min_concept_insights: int = 2
    integrate_retries: int = 2
    fallback_calls: int = 0


def plan_distill(p: DistillInputs) -> RunPlan:
    """The most a ``distill`` can call: the judge on unknown outcomes and on
    every trajectory's rubrics, the reflector on every trajectory, one
    embeddings call to cluster concepts, and the integrator for each concept's
    root and each search round's candidates. No agent episode is run.
    Embeddings that hybrid retrieval asks for while scoring are not counted."""
    calls = {r: 0 for r in (*JSON_ROLES, "embeddings")}
    todo = lambda stage: stage not in p.done  # noqa: E731
    if todo("outcomes"):
        calls["judge"] += 2 * p.unlabelled
    if todo("grades"):
        calls["judge"] += 2 * p.trajectories
    if todo("reflections"):
        calls["reflector"] += 2 * p.trajectories
    if todo("concepts"):
        calls["embeddings"] += 1
    n = p.concepts if p.concepts is not None else \
        p.trajectories * p.concepts_per_trajectory // max(1, p.min_concept_insights)
    per_integration = 2 * (1 + p.integrate_retries)
    if todo("integrate"):
        calls["integrator"] += n * per_integration
    if todo("search"):
        calls["integrator"] += p.rounds * n * p.per_expansion * per_integration
    for role in JSON_ROLES:
        if calls[role]:
            calls[role] += p.fallback_calls
    return RunPlan(0, calls, n, p.concepts is not None, p.rounds)
