"""Anchors as retrieval units: every request a recipe quotes (``brewkb.recipes.anchors``)
is a BM25 document of its own, and a recipe's anchor score for a query is the
score of its best-matching anchor, so a recipe is found by the one request it
served that is nearest to the query rather than by all of them run together.

An anchor whose line gives the calls of a conversation that passed (its
*exemplar*) is offered with a hit when the query closely matches it: the
cosine of their idf-weighted term counts (idf over the anchors) reaches the
configured similarity. What the agent is then shown is that conversation's
calls in place of the recipe's general procedure
(``brewkb.retrieval.ranking.render_context``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from brewkb.recipes import Anchor, Recipe, anchors
from brewkb.retrieval.postings import Plan, Postings

__all__ = ["AnchorIndex", "FIELD"]

FIELD = "anchor"
FILE, OWNER = "anchors.npz", "anchor-owner.npy"


class AnchorIndex:
    """The anchors of ``n`` documents: BM25 impacts per anchor, and which
    document each anchor belongs to (ascending: a document's anchors are
    contiguous)."""

    def __init__(self, postings: Postings, owner: np.ndarray, n: int) -> None:
        self.postings, self.owner, self.n = postings, owner, n
        self._terms: dict[int, list[tuple[Anchor, Counter[str]]]] = {}

    @classmethod
    def build(cls, recipes: Sequence[Recipe], analyze: Callable[[str], list[str]]) -> AnchorIndex | None:
        """The anchor index of ``recipes``; ``None`` when none has an anchor."""
        owner: list[int] = []
        documents = []
        for doc, recipe in enumerate(recipes):
            for anchor in anchors(recipe):
                documents.append({FIELD: analyze(anchor.request)})
                owner.append(doc)
        if not documents:
            return None
        return cls(Postings.build(documents), np.asarray(owner, np.int32), len(recipes))

    def save(self, folder: Path) -> None:
        self.postings.save(folder / FILE)
        with (folder / OWNER).open("wb") as out:
            np.save(out, self.owner, allow_pickle=False)

    @classmethod
    def load(cls, folder: Path, n: int) -> AnchorIndex | None:
        """The anchor index saved in ``folder`` (``None`` when it holds none);
        ValueError when its files do not agree."""
        if not (folder / FILE).is_file():
            return None
        postings = Postings.load(folder / FILE)
        owner = np.load(folder / OWNER, allow_pickle=False)
        if len(owner) != postings.n or (len(owner) and (owner.min() < 0 or owner.max() >= n
                                                        or np.any(np.diff(owner) < 0))):
            raise ValueError("its anchors do not agree with its documents")
        return cls(postings, owner.astype(np.int32), n)

    def plan(self, counts: Mapping[str, int]) -> Plan:
        return self.postings.plan({f"{FIELD}:{term}": count for term, count in counts.items()})

    def best(self, plan: Plan, weight: float) -> np.ndarray | None:
        """Each document's best anchor score for the query, times ``weight``
        (``None`` when no anchor matches)."""
        if not plan.keys:
            return None
        acc = self.postings.sums(plan)
        hit = np.flatnonzero(acc)
        if not len(hit):
            return None
        owners = self.owner[hit]
        starts = np.flatnonzero(np.r_[True, owners[1:] != owners[:-1]])
        best = np.zeros(self.n, np.float32)
        best[owners[starts]] = np.maximum.reduceat(acc[hit], starts) * np.float32(weight)
        return best

    def exemplar(self, doc: int, recipe: Recipe, counts: Counter[str], analyze: Callable[[str], list[str]],
                 similarity: float) -> Anchor | None:
        """The anchor of ``doc`` with an exemplar that the query matches most
        closely, when their cosine reaches ``similarity``; else ``None``."""
        if doc not in self._terms:
            self._terms[doc] = [(a, Counter(analyze(a.request))) for a in anchors(recipe) if a.steps]
        best, found = similarity, None
        for anchor, terms in self._terms[doc]:
            value = self._cosine(counts, terms)
            if value >= best and (found is None or value > best):
                best, found = value, anchor
        return found

    def _idf(self, term: str) -> float:
        df = self.postings.df(f"{FIELD}:{term}")
        n = self.postings.n
        return math.log1p((n - df + 0.5) / (df + 0.5))

    def _cosine(self, query: Counter[str], anchor: Counter[str]) -> float:
        weights = {t: self._idf(t) for t in query.keys() | anchor.keys()}
        dot = sum(c * anchor[t] * weights[t] ** 2 for t, c in query.items() if t in anchor)
        norm = math.sqrt(sum((c * weights[t]) ** 2 for t, c in query.items())) * \
            math.sqrt(sum((c * weights[t]) ** 2 for t, c in anchor.items()))
        return dot / norm if norm else 0.0
