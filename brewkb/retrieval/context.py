"""What an agent is given besides its task: recipes from a KB, or the
baselines a KB is compared with (nothing; similar successful past
conversations as in-context examples; notes of them)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from brewkb.retrieval.memory import memory_documents
from brewkb.retrieval.ranking import Retriever, Searchable, render_context, retrieve
from brewkb.trajectories.schema import KBUse, Trajectory

__all__ = ["ContextProvider", "NoContext", "RecipeContext", "MemoryContext", "CONTEXTS"]

CONTEXTS = ("none", "kb", "trajectories", "notes")
MEMORY_BLOCKS = {"trajectories": ("# Successful past conversations of similar requests", "Example"),
                 "notes": ("# Notes of successful past conversations of similar requests", "Note"),
                 "all-trajectories": ("# Past conversations of similar requests", "Example")}


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


class MemoryContext:
    """A baseline memory (``brewkb.retrieval.memory``): the ``k`` past
    conversations that passed (``trajectories``, shown as in-context
    examples) or notes of them (``notes``) that BM25 ranks first for the
    task, each with its tool steps in the recipe step convention."""

    def __init__(self, kind: str, trajectories: Sequence[Trajectory], retriever: Retriever, k: int = 3,
                 budget_tokens: int = 1500) -> None:
        documents = memory_documents(kind, trajectories)
        self.kind, self.k, self.budget = kind, k, budget_tokens
        self.index = retriever.index(documents) if documents else None

    def context(self, task: str) -> tuple[str, KBUse]:
        if self.index is None:
            return "", KBUse()
        hits = retrieve(self.index, task, self.k)
        heading, label = MEMORY_BLOCKS[self.kind]
        return render_context(hits, self.budget, heading=heading, label=label), KBUse(None, tuple(h.name for h in hits))
