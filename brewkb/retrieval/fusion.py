"""Hybrid retrieval (``retrieval.mode = "hybrid"``): the BM25 ranking of an
index fused with a dense-vector ranking by reciprocal rank fusion.

A recipe's fused score is ``Σ 1 / (RRF_K + place)`` over the two rankings,
each cut at ``DEPTH`` places (RRF, Cormack et al. 2009, k = 60). Vectors come
from the ``embeddings`` role: an OpenAI-compatible embeddings endpoint with
``llm.backend = "openai"``, the offline embedder (hashed character n-grams)
otherwise. Each text is embedded once per process (``Vectors``), so the
search, which asks the same task texts of many hybrid KBs, pays for a text
and a document once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from functools import cached_property

import numpy as np

from brewkb.llm.embed import hashed_ngram_embeddings
from brewkb.recipes import Recipe
from brewkb.retrieval.index import Hit, Searchable

__all__ = ["Vectors", "FusedIndex", "offline_embed", "RRF_K", "DEPTH"]

RRF_K = 60
DEPTH = 100

Embed = Callable[[Sequence[str]], np.ndarray]


def offline_embed(texts: Sequence[str]) -> np.ndarray:
    """The offline embedder, one text at a time so a text's vector does not
    depend on the batch it came in (no batch IDF)."""
    return np.vstack([hashed_ngram_embeddings([t]) for t in texts]) if texts else hashed_ngram_embeddings([])


def dense_text(recipe: Recipe) -> str:
    """What a recipe's vector is made of: its name words, concept, description and body."""
    return "\n".join((recipe.name.replace("-", " "), recipe.concept, recipe.description, recipe.body))


class Vectors:
    """Unit vectors of texts, each embedded once; safe to share between threads."""

    def __init__(self, embed: Embed) -> None:
        self._embed = embed
        self._known: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()

    def of(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            missing = list(dict.fromkeys(t for t in texts if t not in self._known))
            if missing:
                rows = np.asarray(self._embed(missing), dtype=np.float32)
                norms = np.linalg.norm(rows, axis=1, keepdims=True)
                rows = np.divide(rows, norms, out=np.zeros_like(rows), where=norms > 0)
                self._known.update(zip(missing, rows, strict=True))
            return np.vstack([self._known[t] for t in texts])


class FusedIndex:
    """A ``Searchable`` over ``members`` (the recipes ``lexical`` ranks)
    whose ranking fuses ``lexical``'s with the dense one."""

    def __init__(self, lexical: Searchable, members: Sequence[Recipe], vectors: Vectors) -> None:
        self.lexical, self.vectors = lexical, vectors
        self.recipes = {r.name: r for r in members}
        self._names = list(self.recipes)
        self._texts = [dense_text(r) for r in self.recipes.values()]

    def __len__(self) -> int:
        return len(self.recipes)

    @cached_property
    def _matrix(self) -> np.ndarray:
        return self.vectors.of(self._texts)

    def _fused(self, text: str) -> list[tuple[float, str]]:
        if not self._names or not text.strip():
            return []
        scores: dict[str, float] = {}
        for place, hit in enumerate(self.lexical.search(text, DEPTH), start=1):
            scores[hit.name] = 1.0 / (RRF_K + place)
        similarity = self._matrix @ self.vectors.of([text])[0]
        order = np.argsort(-similarity, kind="stable")[:DEPTH]
        for place, i in enumerate(order, start=1):
            if similarity[i] > 0:
                name = self._names[i]
                scores[name] = scores.get(name, 0.0) + 1.0 / (RRF_K + place)
        return sorted(((s, n) for n, s in scores.items()), key=lambda sn: (-sn[0], sn[1]))

    def search(self, text: str, k: int = 3) -> list[Hit]:
        fused = self._fused(text)[: max(0, k)]
        # the exemplar a lexical hit carries, for the recipes both rankings found
        exemplars = {h.name: h.exemplar for h in self.lexical.search(text, DEPTH)} if fused else {}
        return [Hit(name, score, self.recipes[name].concept, self.recipes[name], exemplars.get(name))
                for score, name in fused]

    def rank(self, name: str, text: str) -> int:
        for place, (_, found) in enumerate(self._fused(text), start=1):
            if found == name:
                return place
        return 0
