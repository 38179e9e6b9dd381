"""Reflection: one trajectory and its grades → (concept, insight) records.

The reflector never sees personal data: the trajectory is scrubbed first
(default rules unless a configured ``Scrubber`` is given), so insights, and
the recipes integrated from them, carry placeholders such as ``<email>``."""

from __future__ import annotations

import re
from dataclasses import replace

from brewkb.llm.content import normal_name
from brewkb.llm.roles import Backend, Insight
from brewkb.trajectories.schema import Trajectory
from brewkb.trajectories.scrub import Scrubber

__all__ = ["reflect", "clean_concept", "MAX_CONCEPT"]

MAX_CONCEPT = 120


def clean_concept(name: str) -> str | None:
    """A concept name in one form whatever its case or separators
    (``change_flight``, ``Change-Flight`` and ``change flight`` are
    ``change flight``, so the merge rules read its verb), or ``None`` when it
    is empty or longer than ``MAX_CONCEPT`` characters (a reply gone wrong)."""
    text = normal_name(re.sub(r"\s+", " ", name).strip().strip(".:;"))
    return text if 0 < len(text) <= MAX_CONCEPT else None


_DEFAULT = Scrubber.build()


async def reflect(backend: Backend, trajectory: Trajectory, max_concepts: int = 2,
                  scrubber: Scrubber | None = None) -> tuple[list[Insight], list[str]]:
    """Insights of one trajectory (scrubbed by ``scrubber``, default rules when
    ``None``), and the concept names rejected as unusable."""
    kept, rejected = [], []
    clean = (scrubber or _DEFAULT).trajectory(trajectory)
    for insight in await backend.reflect(clean, max_concepts):
        name = clean_concept(insight.concept)
        if name is None:
            rejected.append(insight.concept[:80] + ("…" if len(insight.concept) > 80 else ""))
        else:
            kept.append(replace(insight, concept=name))
    return kept, rejected
