"""The offline backend: every BREW role by deterministic rules, no model.

It is what the offline demo and CI run, and a baseline to compare LLM roles
against. It works on any OpenAI-format tool-calling trajectory: it reads tool
names (``brewkb.trajectories.tools``: lookups, messages, hand-offs, writes),
tool errors and the user's turns (``brewkb.llm.requests``), never a domain's
words.

Reflector (``offline_reflect``)
  Each write a run made is a concept; a passing run gives its procedure, an
  error that ended an attempt a condition to check, other errors pitfalls; a
  run that changed nothing is named for its request.

Integrator (``offline_integrate``)
  A recipe whose "When to use" quotes the requests that asked for it, whose
  procedure merges the passing runs' steps (alternatives on one line, order of
  use kept, a hand-off as a branch), with conditions and pitfalls.

Relabeller
  Writes a task that describes what the agent actually did: its successful
  writes with their arguments (a hand-off is not something a user asks for).

Judge
  Scores the rubrics it knows by id: ``no-tool-errors`` (share of calls that
  did not fail), ``no-repeated-calls`` (share of calls that are not an exact
  repeat), ``concise`` (1 at most 10 assistant turns, falling to 0 at 40).
  Other rubrics get no score and a note saying so.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from brewkb.errors import LLMError
from brewkb.llm import offline_integrate, offline_reflect
from brewkb.llm.embed import hashed_ngram_embeddings
from brewkb.llm.roles import Insight, RelabelledTask, Rubric, RubricScores
from brewkb.recipes import Recipe
from brewkb.trajectories.schema import Outcome, Trajectory, tool_calls
from brewkb.trajectories.tools import concept_of_tool, is_write

__all__ = ["OfflineBackend"]


class OfflineBackend:
    """Deterministic rules for every role (see the module docstring)."""

    name = "offline"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    async def reflect(self, trajectory: Trajectory, max_concepts: int = 2) -> list[Insight]:
        """Insights of every write the run made: ``max_concepts`` bounds what an
        LLM reflector is asked for; the rules have no reason to leave a write out."""
        return await offline_reflect.reflect(trajectory)

    async def integrate(self, concept: str, aliases: Sequence[str], insights: Sequence[Insight],
                        current: Recipe | None, sample: int) -> Recipe:
        return await offline_integrate.integrate(concept, aliases, insights, current, sample, self.seed)

    # ------------------------------------------------------------ relabeller
    async def relabel(self, trajectory: Trajectory) -> RelabelledTask | None:
        done = [c for c in tool_calls(trajectory.messages) if not c.error and is_write(c.name)]
        if not done:
            return None
        actions = tuple((c.name, c.args() or {}) for c in done)
        parts = [f"{concept_of_tool(n)} with " + ", ".join(f"{k}={v!r}" for k, v in a.items()) for n, a in actions]
        summary = f"The agent made {len(done)} change(s): " + "; ".join(parts)
        return RelabelledTask(task="Please " + "; then ".join(parts) + ".", summary=summary, actions=actions)

    # ----------------------------------------------------------------- judge
    async def judge(self, trajectory: Trajectory, rubrics: Sequence[Rubric]) -> RubricScores:
        calls = tool_calls(trajectory.messages)
        scores: dict[str, float | None] = {}
        notes: dict[str, str] = {}
        for rubric in rubrics:
            if rubric.id == "no-tool-errors":
                errors = sum(c.error for c in calls)
                scores[rubric.id] = 1.0 - errors / len(calls) if calls else 1.0
                notes[rubric.id] = f"{errors} of {len(calls)} tool calls failed"
            elif rubric.id == "no-repeated-calls":
                seen = Counter((c.name, c.arguments) for c in calls)
                repeats = sum(n - 1 for n in seen.values())
                scores[rubric.id] = 1.0 - repeats / len(calls) if calls else 1.0
                notes[rubric.id] = f"{repeats} exact repeats"
            elif rubric.id == "concise":
                scores[rubric.id] = float(np.clip((40 - trajectory.steps) / 30, 0.0, 1.0))
                notes[rubric.id] = f"{trajectory.steps} assistant turns"
            else:
                scores[rubric.id] = None
                notes[rubric.id] = "the offline judge cannot score this rubric"
        return RubricScores(scores, notes)

    async def judge_outcome(self, trajectory: Trajectory) -> Outcome:
        # rules cannot tell from a transcript whether a request was done right
        raise LLMError("the offline backend cannot judge whether a conversation succeeded")

    # -------------------------------------------------------------- embedder
    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        return hashed_ngram_embeddings(texts)
