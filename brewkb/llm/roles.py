"""What every backend's roles exchange, and the registry of backends.

A backend implements the BREW roles (reflector, integrator, relabeller, judge,
embedder) either with an LLM or by the offline rules. Stages receive a backend
and never know which one it is.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from brewkb.errors import ConfigError
from brewkb.recipes import Recipe
from brewkb.trajectories.schema import Outcome, Trajectory

__all__ = ["REQUEST", "SEEN", "Insight", "Rubric", "RubricScores", "RelabelledTask", "Backend", "BACKENDS", "load_backend"]

PRESCRIPTIVE = "prescriptive"
DIAGNOSTIC = "diagnostic"
OBSERVED = "observed"


REQUEST = "request"
"""The kind of insight that quotes a conversation's request in the user's words
(``task``) and, for a run that passed, its tool calls in order (``steps``): the
anchors a recipe is found by, and their exemplars. No lesson: the concepts
stage does not count them."""
SEEN = "seen"
"""The kind of insight that names the steps (``steps``) that passing
conversations of the whole run, more than one each, took before their
writes: what a step of one concept's procedure may be supported by when that
concept's own conversations are few. One per concept, from no one trajectory
(``source`` is empty)."""


def polarity_of(success: bool | None) -> str:
    """Prescriptive for a pass, diagnostic for a failure, observed when the outcome is unknown."""
    return OBSERVED if success is None else PRESCRIPTIVE if success else DIAGNOSTIC


@dataclass(frozen=True)
class Insight:
    """One lesson from one trajectory.

    ``polarity`` is ``prescriptive`` (from a passing run: what to do),
    ``diagnostic`` (from a failing run or an error: what went wrong) or
    ``observed`` (what a run whose outcome is unknown did: neither).
    ``steps`` optionally holds an ordered procedure in the recipe step
    convention (``find_customer(email)``...); ``source`` is the trajectory id.
    """

    concept: str
    insight: str
    polarity: str
    source: str
    task_id: str
    task: str = ""
    steps: tuple[str, ...] = ()
    kind: str = "note"  # "steps" | "tried" | "together" | "pitfall" | "condition" | "undone" | "note" | REQUEST | SEEN

    def to_json(self) -> dict[str, Any]:
        return {"concept": self.concept, "insight": self.insight, "polarity": self.polarity,
                "source": self.source, "task_id": self.task_id, "task": self.task,
                "steps": list(self.steps), "kind": self.kind}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Insight:
        return cls(**{**data, "steps": tuple(data.get("steps") or ())})


@dataclass(frozen=True)
class Rubric:
    """A behaviour rubric the judge scores from 0 to 1; ``id`` is a slug."""

    id: str
    text: str


@dataclass(frozen=True)
class RubricScores:
    """Scores per rubric id (``None``: this judge cannot score it) and a note each."""

    scores: dict[str, float | None] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"scores": dict(self.scores), "notes": dict(self.notes)}


@dataclass(frozen=True)
class RelabelledTask:
    """A task that the observed behaviour would solve, and a summary of it."""

    task: str
    summary: str
    actions: tuple[tuple[str, dict[str, Any]], ...] = ()


class Backend(Protocol):
    """The BREW roles. Implementations must not mutate their inputs. A role
    that cannot produce a result for one item raises ``brewkb.errors.LLMError``
    (or returns an empty result); the calling stage records it and goes on."""

    name: str

    async def reflect(self, trajectory: Trajectory, max_concepts: int = 2) -> list[Insight]: ...

    async def integrate(self, concept: str, aliases: Sequence[str], insights: Sequence[Insight],
                        current: Recipe | None, sample: int) -> Recipe: ...

    async def relabel(self, trajectory: Trajectory) -> RelabelledTask | None: ...

    async def judge(self, trajectory: Trajectory, rubrics: Sequence[Rubric]) -> RubricScores: ...

    async def judge_outcome(self, trajectory: Trajectory) -> Outcome:
        """Whether a logged conversation whose outcome is unknown succeeded
        (the judge role); a backend that cannot tell raises ``LLMError``."""
        ...

    async def embed(self, texts: Sequence[str]) -> np.ndarray: ...


BACKENDS: dict[str, str] = {
    "offline": "brewkb.llm.offline:OfflineBackend",
    "openai": "brewkb.llm.llm_roles:LLMBackend",
}


def load_backend(name: str) -> type:
    """The backend class registered as ``name`` (imported on demand)."""
    if name not in BACKENDS:
        raise ConfigError(f"llm.backend: unknown backend {name!r}; choose one of {sorted(BACKENDS)}")
    module, attr = BACKENDS[name].split(":")
    return getattr(importlib.import_module(module), attr)  # type: ignore[no-any-return]
