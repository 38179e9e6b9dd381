"""The most a ``refine`` can spend, worked out before anything is called,
and what it is expected to spend.

Bounds come from counts only: train and eval tasks, the concepts found so far
(or the most the reflections could give), the strategy's rounds and
candidates per expansion, integrator retries, the agent's step limit, and the
stages a resumed run has already finished, the final evaluation of each
concept's candidates, and the held-out evaluation on the test split. Every JSON role's item may take a
repair call, so it counts twice; with ``structured_output = "auto"`` each JSON
role may also see up to two rejected calls per call in flight while the
endpoint's mode is found. Episodes that are reused instead of run and cache
hits only make the real numbers smaller.

Search episodes are bounded by the tasks each candidate is evaluated on:
a concept's eval tasks, or its train tasks when it has none. Each trajectory
names at most ``concepts_per_trajectory`` concepts, so over all concepts
those tasks number at most that many times the eval and train tasks; the
relabel stage takes at most half the train tasks (as many failing runs as
passing ones). Until reflection has found the concepts, the *expected*
figure takes the middle of 1 and ``concepts_per_trajectory`` concepts per
eval trajectory, none evaluated on train tasks, and a quarter of the train
tasks relabelled; with the concepts known it is the bound. Neither counts
reuse, which only lowers what a run spends.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from brewkb.config import Price

__all__ = ["PlanInputs", "Part", "RunPlan", "plan_refine", "DistillInputs", "plan_distill", "with_cost",
           "PROMPT_TOKENS_GUESS", "JSON_ROLES"]

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
class Part:
    """Episodes of one part of a run: at most, expected, and the settings that set them."""

    at_most: int
    expected: int
    settings: str


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
    expected_episodes: int = 0
    """What the run is expected to spend (an estimate, not a bound; see the module)."""
    parts: dict[str, Part] = field(default_factory=dict)
    """Episodes by part of the run, each with the settings that drive it."""
    concepts_rule: str = ""
    """What bounds ``concepts`` before they are found, in words (empty: the reflections' count)."""
    seconds_per_call: float = 0.0
    """What one LLM call is taken to last for the time estimate (the run's
    average so far, else what the caller states)."""
    in_flight: int = 1
    """LLM calls sent at once (``llm.concurrency``)."""
    measured: bool = False
    """``seconds_per_call`` is the run's own average, not a stated figure."""

    @property
    def llm_calls(self) -> int:
        return sum(self.calls.values())

    @property
    def minutes(self) -> float:
        """The longest the LLM calls take at ``seconds_per_call``, ``in_flight`` at a time."""
        return self.llm_calls * self.seconds_per_call / max(1, self.in_flight) / 60

    def to_json(self) -> dict[str, Any]:
        return {"episodes": self.episodes, "expected_episodes": self.expected_episodes,
                "parts": {k: dataclasses.asdict(v) for k, v in self.parts.items()},
                "llm_calls": self.llm_calls, "calls": dict(self.calls),
                "concepts": self.concepts, "concepts_known": self.concepts_known,
                "concepts_rule": self.concepts_rule, "rounds": self.rounds,
                "cost": self.cost, "cost_basis": dict(self.cost_basis), "seconds_per_call": self.seconds_per_call,
                "in_flight": self.in_flight, "minutes_at_most": round(self.minutes, 1)}


def _relabelled(p: PlanInputs) -> int:
    """The most trajectories the relabel stage takes: as many failing ones as
    passing ones (at least one), so at most half the train tasks."""
    if not p.relabel:
        return 0
    return p.relabel_selected if p.relabel_selected is not None else max(1, p.train_tasks // 2) \
        if p.train_tasks else 0


def _episode_parts(p: PlanInputs, relabelled: int, expected_relabelled: int, n: int, evaluated: int,
                   expected_evaluated: int, expansion_tasks: int, known: bool) -> dict[str, Part]:
    """Episodes by part: ``evaluated`` is the tasks every candidate of one round
    is evaluated on, summed over the concepts (at most, and expected)."""
    todo = lambda stage: stage not in p.done  # noqa: E731
    parts: dict[str, Part] = {}
    if todo("rollouts") or todo("rollouts-eval"):
        both = p.train_tasks * todo("rollouts") + p.eval_tasks * todo("rollouts-eval")
        parts["rollouts"] = Part(both, both, f"{p.train_tasks} train and {p.eval_tasks} eval tasks (the environment)")
    if relabelled and todo("relabel"):
        parts["relabel"] = Part(relabelled, expected_relabelled, "stages.relabel: at most half the train tasks")
    if not n:
        return parts
    rounds = range(max(1, p.gathers), p.rounds + 1)
    per_concept = ("their eval tasks, at most " if not known else "their eval tasks: ") + \
        (f"{evaluated} over all concepts" if known else
         f"{evaluated} = stages.concepts_per_trajectory {p.concepts_per_trajectory} × "
         f"({p.eval_tasks} eval + {p.train_tasks} train tasks)")
    if p.gathers == 0:  # round 0 evaluates the roots
        parts["search round 0"] = Part(evaluated, expected_evaluated, f"each concept's root on {per_concept}")
    if rounds:
        parts["search rounds"] = Part(
            len(rounds) * (expansion_tasks + p.per_expansion * evaluated),
            len(rounds) * (expansion_tasks + p.per_expansion * expected_evaluated),
            f"{len(rounds)} rounds (the strategy's rounds, e.g. search.iterations) × ({expansion_tasks} train tasks "
            f"expanded + {p.per_expansion} candidates per concept (search.samples, or width for greedy) on "
            f"{per_concept})")
    if todo("search"):
        parts["final evaluation"] = Part((p.final_candidates + 1) * evaluated,
                                         (p.final_candidates + 1) * expected_evaluated,
                                         f"search.final_candidates {p.final_candidates} and the base version of "
                                         "each concept, on the same tasks")
        if p.test_tasks:  # new KB, base KB and no KB, then a task's retrieved recipes left out one at a time
            held = (3 + min(n, p.k)) * p.test_tasks
            parts["held-out test"] = Part(held, held, f"{p.test_tasks} test tasks × (3 KBs + retrieval.k {p.k} "
                                                      "recipes left out one at a time); --no-eval skips it")
    return parts


def plan_refine(p: PlanInputs) -> RunPlan:
    calls = {r: 0 for r in ("agent", "user", *JSON_ROLES, "embeddings")}
    todo = lambda stage: stage not in p.done  # noqa: E731
    if todo("grades"):
        calls["judge"] += 2 * p.train_tasks
    relabelled = _relabelled(p)
    if todo("relabel"):
        calls["relabeller"] += 2 * relabelled
    if todo("reflections"):  # relabelled trajectories are judged there
        calls["reflector"] += 2 * (p.train_tasks + relabelled + p.eval_tasks)
        calls["judge"] += 2 * relabelled
    if todo("concepts"):
        calls["embeddings"] += 1
    if p.concepts is not None:
        n = len(p.concepts)
        evaluated = expected_evaluated = sum(e if e else t for t, e in p.concepts)
        expansion_tasks = p.expansion_tasks if p.expansion_tasks is not None else p.train_tasks
        expected_relabelled = relabelled
    else:
        n = (p.train_tasks + relabelled) * p.concepts_per_trajectory // max(1, p.min_concept_insights)
        evaluated = min(n * max(p.eval_tasks, p.train_tasks),
                        p.concepts_per_trajectory * (p.eval_tasks + p.train_tasks))
        expected_evaluated = min(evaluated, round(p.eval_tasks * (1 + p.concepts_per_trajectory) / 2))
        expansion_tasks = p.train_tasks
        expected_relabelled = (relabelled + 1) // 2 if p.relabel_selected is None else relabelled
    per_integration = 2 * (1 + p.integrate_retries)
    if todo("integrate"):
        calls["integrator"] += n * per_integration
    if n:
        for _ in range(max(1, p.gathers), p.rounds + 1):
            calls["reflector"] += 2 * expansion_tasks
            calls["judge"] += 2 * expansion_tasks
            calls["embeddings"] += expansion_tasks * p.concepts_per_trajectory
            calls["integrator"] += n * p.per_expansion * per_integration
    parts = _episode_parts(p, relabelled, expected_relabelled, n, evaluated, expected_evaluated, expansion_tasks,
                           p.concepts is not None)
    episodes = sum(part.at_most for part in parts.values())
    calls["agent"] = episodes * p.agent_steps
    calls["user"] = episodes * p.user_steps
    for role in JSON_ROLES:
        if calls[role]:
            calls[role] += p.fallback_calls
    return RunPlan(episodes, calls, n, p.concepts is not None, p.rounds,
                   expected_episodes=sum(part.expected for part in parts.values()), parts=parts)


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
    return dataclasses.replace(plan, cost=round(total, 4) if priced else None, cost_basis=basis)


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
    max_concepts: int | None = None
    """The most concepts the concepts stage keeps (``stages.concepts_per_task`` × learning tasks)."""
    concepts_rule: str = ""
    """``max_concepts`` in words."""


def plan_distill(p: DistillInputs) -> RunPlan:
    """The most a ``distill`` can call: the judge on unknown outcomes and on
    every trajectory's rubrics, the reflector on every trajectory, one
    embeddings call to cluster concepts, and the integrator for each concept's
    root and each search round's candidates. No agent episode is run.
    Embeddings that hybrid retrieval asks for while scoring are not counted.
    Before the concepts are found, they number at most ``max_concepts`` (the
    bound the concepts stage keeps), else as many as the reflections can name."""
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
    n = p.concepts if p.concepts is not None else p.max_concepts if p.max_concepts is not None else \
        p.trajectories * p.concepts_per_trajectory // max(1, p.min_concept_insights)
    per_integration = 2 * (1 + p.integrate_retries)
    if todo("integrate"):
        calls["integrator"] += n * per_integration
    if todo("search"):
        calls["integrator"] += p.rounds * n * p.per_expansion * per_integration
    for role in JSON_ROLES:
        if calls[role]:
            calls[role] += p.fallback_calls
    return RunPlan(0, calls, n, p.concepts is not None, p.rounds,
                   concepts_rule="" if p.concepts is not None else p.concepts_rule)
