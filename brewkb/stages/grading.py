"""Grading beyond the environment's verdict: behaviour rubrics scored by the judge.

The judge never reads secrets or personal data: every trajectory it is shown
is scrubbed first (by the run's scrubber, default rules when none is given),
environment episodes included; the grade is kept with the trajectory as it was."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from importlib import resources
from typing import Any

from brewkb.errors import LLMError
from brewkb.llm.roles import Backend, Rubric, RubricScores
from brewkb.trajectories.schema import Outcome, Trajectory
from brewkb.trajectories.scrub import Scrubber

__all__ = ["parse_rubrics", "default_rubrics_text", "judge", "judged", "judge_outcome", "with_outcome"]

log = logging.getLogger(__name__)

_RUBRIC = re.compile(r"^\s*[-*]\s+`([a-z0-9][a-z0-9-]*)`\s*:\s*(.+?)\s*$")


def parse_rubrics(text: str) -> list[Rubric]:
    """Rubrics from markdown: one list item per rubric, ``- `id`: what good looks like``."""
    return [Rubric(m.group(1), m.group(2)) for line in text.splitlines() if (m := _RUBRIC.match(line))]


def default_rubrics_text() -> str:
    return resources.files("brewkb").joinpath("data", "rubrics.md").read_text(encoding="utf-8")


_DEFAULT = Scrubber.build()


def _seen(trajectory: Trajectory, scrubber: Scrubber | None) -> Trajectory:
    """What the judge is shown of ``trajectory``: scrubbed."""
    return (scrubber or _DEFAULT).trajectory(trajectory)


async def judged(backend: Backend, trajectory: Trajectory, rubrics: Sequence[Rubric],
                 scrubber: Scrubber | None = None) -> Trajectory:
    """``trajectory`` with the judge's rubric scores, for the Reflector; a
    trajectory that has them already, or that the judge fails on, as it is."""
    if trajectory.rubric or not rubrics:
        return trajectory
    try:
        scores = await judge(backend, trajectory, rubrics, scrubber)
    except LLMError as exc:
        log.warning("judge: %s; reflecting on %s without rubric scores", exc, trajectory.id)
        return trajectory
    return trajectory.with_(rubric=scores.to_json())


async def judge(backend: Backend, trajectory: Trajectory, rubrics: Sequence[Rubric],
                scrubber: Scrubber | None = None) -> RubricScores:
    """The judge's scores of the scrubbed trajectory; a reply with scores outside [0, 1] is a failed item."""
    scores = await backend.judge(_seen(trajectory, scrubber), rubrics)
    bad = {k: v for k, v in scores.scores.items() if v is not None and not 0.0 <= v <= 1.0}
    if bad:
        raise LLMError(f"judge: scores outside [0, 1]: {bad}")
    return scores


async def judge_outcome(backend: Backend, trajectory: Trajectory, scrubber: Scrubber | None = None) -> dict[str, Any]:
    """The judge's verdict on a logged conversation whose outcome is unknown (scrubbed), as JSON."""
    verdict = await backend.judge_outcome(_seen(trajectory, scrubber))
    if verdict.success is None or verdict.score is None or not 0.0 <= verdict.score <= 1.0:
        raise LLMError(f"judge: an outcome needs success and a score in [0, 1], got {verdict}")
    return {"success": verdict.success, "score": verdict.score, "detail": dict(verdict.detail)}


def with_outcome(trajectory: Trajectory, value: Any) -> Trajectory:
    """``trajectory`` with the judged outcome ``value`` (from ``judge_outcome``),
    keeping its id: a grade does not make a different episode. A failed or
    missing verdict leaves it unknown."""
    if not isinstance(value, dict) or "success" not in value:
        return trajectory
    return trajectory.with_(outcome=Outcome(value["success"], value["score"], value.get("detail") or {}))
