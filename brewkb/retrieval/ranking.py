"""Retrieval over a KB state: cached indexes, ``retrieve``, the agent's context
block, and the mean reciprocal rank of a document.

An on-disk index belongs to a KB state: a revision's recipes folder (keyed by
its git tree id) or the working tree (keyed by a hash of the recipe files), so
a stale index is never served and an unchanged one is never rebuilt.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from brewkb.config import Boosts
from brewkb.errors import IndexError_
from brewkb.kb import KB
from brewkb.recipes import Recipe, build_body, render_recipe, served, split_sections
from brewkb.retrieval.fusion import FusedIndex, Vectors, offline_embed
from brewkb.retrieval.index import (
    SCHEMA_VERSION,
    Hit,
    MultiIndex,
    RecipeIndex,
    Searchable,
    indexed_fields,
)

__all__ = ["Searchable", "Retriever", "retriever_of", "open_index", "servable", "over_limit", "retrieve", "render_context",
           "shown_body", "mrr", "approx_tokens", "HOW", "EXEMPLAR_LEAD"]

KEEP_INDEXES = 8
HOW = "How to perform"
EXEMPLAR_LEAD = "A past conversation whose request was close to this one passed with these calls, in order:"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Retriever:
    """How recipes are ranked: BM25 with ``boosts``, fused with dense vectors
    when ``vectors`` is set (``retrieval.mode = "hybrid"``); a hit carries an
    exemplar when the query's cosine with one reaches ``similarity``
    (``None``: never)."""

    boosts: Boosts = Boosts()
    vectors: Vectors | None = None
    similarity: float | None = None

    def over(self, lexical: Searchable, members: Iterable[Recipe]) -> Searchable:
        """``lexical`` as this retriever ranks: itself, or fused."""
        return lexical if self.vectors is None else FusedIndex(lexical, list(members), self.vectors)

    def index(self, recipes: Sequence[Recipe]) -> Searchable:
        return self.over(RecipeIndex.build(list(recipes), self.boosts, similarity=self.similarity), recipes)

    def multi(self, base: Mapping[str, Recipe], candidates: Mapping[str, tuple[str, Recipe]]) -> MultiIndex:
        return MultiIndex(dict(base), dict(candidates), self.boosts, self.similarity)

    def hybrid(self, multi: MultiIndex, candidate: str | None) -> Searchable:
        """The hybrid KB of ``candidate`` in ``multi``, ranked as this retriever ranks."""
        return self.over(multi.hybrid(candidate), multi.members(candidate).values())


def retriever_of(kb: KB, client: Any = None) -> Retriever:
    """The configured retriever. Hybrid vectors come from the ``embeddings``
    role: ``client`` (or a new one) with ``llm.backend = "openai"``, else the
    offline embedder."""
    config = kb.config
    similarity = config.retrieval.exemplar_similarity if config.retrieval.exemplars else None
    if config.retrieval.mode == "bm25":
        return Retriever(config.retrieval.boosts, similarity=similarity)
    if config.llm.backend == "offline":
        return Retriever(config.retrieval.boosts, Vectors(offline_embed), similarity)
    if client is None:
        from brewkb.llm import open_backend

        _, client = open_backend(config.llm, cache_dir=kb.cache_dir)
    return Retriever(config.retrieval.boosts, Vectors(lambda texts: np.asarray(client.embed_blocking(texts))),
                     similarity)


def _state_key(kb: KB, rev: str | None) -> tuple[str, list[Recipe]]:
    if rev is None:
        recipes = _within_limit(kb, kb.recipes(), {p.stem: p.stat().st_size for p in kb.recipe_files()}, None)
        digest = hashlib.sha256()
        for recipe in recipes:
            digest.update(render_recipe(recipe).encode() + b"\0")
        return "wt-" + digest.hexdigest()[:40], recipes
    commit = kb.store.resolve(rev)
    entry = kb.store.lookup(kb.store.commit_tree(commit), kb.recipes_prefix())
    sizes = {Path(name).stem: len(data) for name, data in kb.store.read_folder(commit, kb.recipes_prefix()).items()}
    key = f"tree-{entry.sha if entry else 'empty'}-max{kb.config.kb.max_recipe_kb}"
    return key, _within_limit(kb, kb.recipes(commit), sizes, rev)


def servable(kb: KB, rev: str | None = None) -> list[Recipe]:
    """The recipes an agent may be given, of the working tree or a revision: those the index holds (each file
    within ``kb.max_recipe_kb``)."""
    return _state_key(kb, rev)[1]


def over_limit(kb: KB, size: int) -> bool:
    """Whether a recipe file of ``size`` bytes is over ``kb.max_recipe_kb``: the index leaves it out, and no
    agent is given it."""
    return size > kb.config.kb.max_recipe_kb * 1024


def _within_limit(kb: KB, recipes: list[Recipe], sizes: Mapping[str, int], rev: str | None) -> list[Recipe]:
    """The recipes whose file is within ``kb.max_recipe_kb``; the others are left out with a warning."""
    kept = []
    for recipe in recipes:
        size = sizes.get(recipe.name, 0)
        if over_limit(kb, size):
            where = f" at {rev}" if rev else ""
            log.warning("leaving %s/%s.md%s out of the index: it is %d KB, over kb.max_recipe_kb (%d KB); split "
                        "it, or raise the limit in brewkb.toml", kb.config.kb.recipes_dir, recipe.name, where,
                        size // 1024, kb.config.kb.max_recipe_kb)
        else:
            kept.append(recipe)
    return kept


def open_index(kb: KB, rev: str | None = None, retriever: Retriever | None = None) -> Searchable:
    """The index of the working tree (``rev=None``) or of a revision, built
    once per KB state under the cache folder, ranked as ``retriever`` (by
    default the configured one) ranks."""
    retriever = retriever or retriever_of(kb)
    index = _lexical_index(kb, rev, retriever.similarity)
    return retriever.over(index, index.recipes.values())


def _lexical_index(kb: KB, rev: str | None = None, similarity: float | None = None) -> RecipeIndex:
    """The BM25 index of the working tree or a revision."""
    key, recipes = _state_key(kb, rev)
    boosts = kb.config.retrieval.boosts
    folder = kb.cache_dir / "index" / f"v{SCHEMA_VERSION}"
    path = folder / f"{key}-{indexed_fields(boosts)}"  # a part with boost 0 is not indexed
    if path.is_dir():
        path.touch()
        try:
            return RecipeIndex.open(path, recipes, boosts, similarity)
        except IndexError_ as exc:  # a cache: damaged by hand or by the disk, so made again
            log.warning("%s; building it again", exc)
            shutil.rmtree(path, ignore_errors=True)
    index = RecipeIndex.build(recipes, boosts, path=path, similarity=similarity)
    _prune(folder, keep=KEEP_INDEXES)
    return index


def _prune(folder: Path, keep: int) -> None:
    states = sorted((p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")),
                    key=lambda p: p.stat().st_mtime, reverse=True)
    for old in states[keep:]:
        shutil.rmtree(old, ignore_errors=True)


def retrieve(index: Searchable, query: str, k: int = 3) -> list[Hit]:
    """The ``k`` best recipes for ``query``, best first; never raises on odd text."""
    return index.search(query, k)


def approx_tokens(text: str) -> int:
    """A model-free token estimate (about 4 characters per token for English)."""
    return (len(text) + 3) // 4


def shown_body(hit: Hit, shown: Recipe | None = None) -> str:
    """What an agent is shown of a hit's body: as ``served`` (``shown``, when
    the caller has it already), with the exemplar's calls in place of the
    general procedure when the hit carries one (the query closely matched a
    request a passing conversation made)."""
    body = (shown or served(hit.recipe)).body
    if hit.exemplar is None or not hit.exemplar.steps:
        return body
    steps = "\n".join(f"{n}. `{step}`" for n, step in enumerate(hit.exemplar.steps, 1))
    sections = split_sections(body)
    if not any(title.lower() == HOW.lower() for title, _ in sections):
        sections.append((HOW, ""))
    return build_body([(title, f"{EXEMPLAR_LEAD}\n\n{steps}" if title.lower() == HOW.lower() else text)
                       for title, text in sections])


def render_context(hits: Sequence[Hit], budget_tokens: int = 1500,
                   heading: str = "# Recipes from the knowledge base", label: str = "Recipe") -> str:
    """The block an agent receives: each document's name, description and
    body (``shown_body``), best first, cut at a line boundary to fit
    ``budget_tokens``."""
    if not hits:
        return ""
    blocks = [f"{heading} (most relevant first)"]
    used = approx_tokens(blocks[0])
    for hit in hits:
        shown = served(hit.recipe)
        block = f"## {label}: {shown.name}\n{shown.description.strip()}\n\n{shown_body(hit, shown).strip()}"
        cost = approx_tokens(block) + 1
        if used + cost <= budget_tokens:
            blocks.append(block)
            used += cost
            continue
        room = (budget_tokens - used) * 4
        kept = _cut_lines(block, room - len("\n[…trimmed]"))
        if kept:
            blocks.append(kept + "\n[…trimmed]")
        break
    return "\n\n".join(blocks) + "\n"


def _cut_lines(text: str, limit: int) -> str:
    out, size = [], 0
    for line in text.splitlines():
        if size + len(line) + 1 > limit:
            break
        out.append(line)
        size += len(line) + 1
    return "\n".join(out)


def mrr(doc_name: str, queries: Iterable[str], index: Searchable) -> float:
    """Mean over ``queries`` of 1/rank of ``doc_name`` (0 when not retrieved)."""
    queries = list(queries)
    if not queries:
        return 0.0
    total = 0.0
    for query in queries:
        rank = index.rank(doc_name, query)
        if rank:
            total += 1.0 / rank
    return total / len(queries)
