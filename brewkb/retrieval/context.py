"""What an agent is given besides its task: recipes from a KB, or the
baselines the paper compares against (nothing; similar successful
trajectories as in-context examples)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from brewkb.llm.embed import hashed_ngram_embeddings
from brewkb.retrieval.ranking import Searchable, render_context, retrieve
from brewkb.trajectories.schema import KBUse, Trajectory, render_compact

__all__ = ["ContextProvider", "NoContext", "RecipeContext", "TrajectoryContext", "CONTEXTS"]

CONTEXTS = ("none", "kb", "trajectories")


class ContextProvider(Protocol):
    """``context(task)`` gives the text for the agent and the KB it came from."""

    def context(self, task: str) -> tuple[str, KBUse]: ...


class NoContext:
    """Memoryless: the agent gets nothing."""

    def context(self, task: str) -> tuple[str, KBUse]:
        return "", KBUse()


class RecipeContext:
    """The top-k recipes of a KB, rendered within a token budget."""

    def __init__(self, index: Searchable, revision: str | None, k: int = 3, budget_tokens: int = 1500) -> None:
        self.index, self.revision, self.k, self.budget = index, revision, k, budget_tokens

    def context(self, task: str) -> tuple[str, KBUse]:
        hits = retrieve(self.index, task, self.k)
        return render_context(hits, self.budget), KBUse(self.revision, tuple(h.name for h in hits))


class TrajectoryContext:
    """In-context learning: the k successful trajectories whose tasks are most
    similar to this one (character n-gram cosine), rendered compactly."""

    def __init__(self, trajectories: Sequence[Trajectory], k: int = 3, budget_tokens: int = 1500) -> None:
        self.pool = [t for t in trajectories if t.success is True]
        self.k, self.budget = k, budget_tokens

    def context(self, task: str) -> tuple[str, KBUse]:
        if not self.pool:
            return "", KBUse()
        vectors = hashed_ngram_embeddings([task] + [t.task for t in self.pool])
        order = np.argsort(-(vectors[1:] @ vectors[0]), kind="stable")[: self.k]
        per = max(200, self.budget * 4 // max(1, len(order)))
        blocks = [f"## Example {n}\n{render_compact(self.pool[i], per)}" for n, i in enumerate(order, 1)]
        text = "# Successful past episodes of similar tasks\n\n" + "\n\n".join(blocks) + "\n"
        return text, KBUse(None, tuple(f"trajectory:{self.pool[i].id}" for i in order))
