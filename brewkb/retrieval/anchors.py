"""Anchors as retrieval units: every request a recipe quotes (``brewkb.recipes.anchors``)
is a BM25 document of its own, and a recipe's anchor score for a query is the
score of its best-matching anchor, so a recipe is found by the one request it
served that is nearest to the query rather than by all of them run together.
The index re-ranks with it: the ``RERANK`` recipes its text scores best get
their best anchor's score added (``best``), read from the anchors' own terms
(a forward index), not from a pass over every anchor of the KB; a KB of at
most ``RERANK`` recipes is ranked exactly. Every word of an anchor is in the
recipe's text too, so a recipe its anchors match is among those its text finds.

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

__all__ = ["AnchorIndex", "FIELD", "RERANK"]

FIELD = "anchor"
RERANK = 10
FILE, OWNER = "anchors.npz", "anchor-owner.npy"


class AnchorIndex:
    """The anchors of ``n`` documents: BM25 impacts per anchor, and which
    document each anchor belongs to (ascending: a document's anchors are
    contiguous)."""

    def __init__(self, postings: Postings, owner: np.ndarray, n: int) -> None:
        self.postings, self.owner, self.n = postings, owner, n
        # each document's anchors are contiguous: [first, first + count)
        self._first = np.searchsorted(owner, np.arange(n)).astype(np.int64)
        self._count = np.searchsorted(owner, np.arange(n), side="right") - self._first
        self._terms: dict[int, list[tuple[Anchor, Counter[str]]]] = {}
        self._forward: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

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

    def best(self, plan: Plan, docs: np.ndarray) -> np.ndarray:
        """The best anchor score of each of ``docs`` for the query (0 for a
        document without anchors or none that matches)."""
        out = np.zeros(len(docs), np.float32)
        counts = self._count[docs]
        mine = np.flatnonzero(counts)
        if not plan.keys or not len(mine):
            return out
        if self._forward is None:
            self._forward = self.postings.by_document()
        indptr, keys, impacts = self._forward
        weights = np.zeros(self.postings.keys, np.float32)
        for _, key, weight in plan.keys:
            weights[key] = weight
        counts = counts[mine]
        ends = np.cumsum(counts)
        # the documents' anchors (one run each), then those anchors' terms (one run per anchor)
        anchors = np.repeat(self._first[docs[mine]] - (ends - counts), counts) + np.arange(ends[-1])
        sizes = indptr[anchors + 1] - indptr[anchors]
        tail = np.cumsum(sizes)
        terms = np.repeat(indptr[anchors] - (tail - sizes), sizes) + np.arange(tail[-1] if len(tail) else 0)
        sums = np.bincount(np.repeat(np.arange(len(anchors)), sizes), weights=weights[keys[terms]] * impacts[terms],
                           minlength=len(anchors))
        out[mine] = np.maximum.reduceat(sums, ends - counts)
        return out

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
