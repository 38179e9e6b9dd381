"""Recipe indexes: BM25 over recipes, with Tantivy's analyzer (the one module
that imports tantivy) and the impact index of ``brewkb.retrieval.postings``.

Fields: ``text`` (the whole recipe: name words, concept, aliases, description,
tags and body, as one BM25 document), ``summary`` (what the recipe says it is
for: name words, concept, aliases and description), and the parts on their
own: ``name_words`` (the name's words, so ``export-as-pdf`` matches "export
pdf"), ``concept``, ``aliases``, ``description``, ``tags``, ``body``; all with
an English analyzer (lowercase, ASCII folding, stopwords, Porter stemming). A
score is the BM25 of the whole text times its boost, plus the summary's and
each part's own BM25 times its (small) boost; a field whose boost is 0 is
neither indexed nor queried. Scoring the whole text as one document keeps one
stray query word in another recipe's short description from outscoring many
words of the right recipe's body.

User text is reduced to its index terms: no input (``AND``, ``(x``,
``foo:bar``, ``""``) can raise or be read as query syntax.

Each request a recipe quotes (its *anchors*, ``brewkb.retrieval.anchors``) is
also a document of its own: the best ``RERANK`` recipes by the fields above
are re-ranked with their best anchor's BM25 score times the ``anchors`` boost
added, and a hit carries the anchor's exemplar when the query closely matches
one (``similarity``; ``None`` offers none).

``RecipeIndex`` holds one KB. ``MultiIndex`` holds a base KB plus many
candidate documents and answers for any *hybrid* KB (the base with one
concept's document replaced by one candidate) without building an index per
hybrid; document frequencies are then shared by all hybrids of the index (see
``bench/retrieval.py`` for how often that changes a ranking). ``rank`` gives a
document's place in a ranking without building ``Hit`` objects.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Protocol

import numpy as np
import tantivy

from brewkb.config import Boosts
from brewkb.errors import IndexError_
from brewkb.recipes import Anchor, Recipe
from brewkb.retrieval.anchors import RERANK, AnchorIndex
from brewkb.retrieval.postings import Plan, Postings

__all__ = ["Hit", "Searchable", "RecipeIndex", "MultiIndex", "HybridView", "analyze", "SCHEMA_VERSION"]

SCHEMA_VERSION = "6"
FILE = "postings.npz"
TEXT_FIELDS = ("text", "summary", "name_words", "concept", "aliases", "description", "tags", "body")
_BOOST_OF = {"text": "text", "summary": "summary", "name_words": "name", "concept": "concept",
             "aliases": "aliases", "description": "description", "tags": "tags", "body": "body"}
BASE = "base"
PLAN_CACHE = 4096

STOPWORDS = """i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she her
hers herself it its itself they them their theirs themselves what which who whom this that these those am is are was
were be been being have has had having do does did doing a an the and but if or because as until while of at by for
with about against between into through during before after above below to from up down in out on off over under
again further then once here there when where why how all any both each few more most other some such no nor not only
own same so than too very s t can will just don should now d ll m o re ve y ain aren couldn didn doesn hadn hasn
haven isn ma mightn mustn needn shan shouldn wasn weren won wouldn""".split()
"""NLTK's English stopwords (the simple tokenizer splits "I'm" into "i" and "m",
"don't" into "don" and "t"): in a small KB, whose documents rarely hold them,
BM25 would otherwise weigh a request's pronouns and auxiliaries above its words."""

_ANALYZER = (
    tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
    .filter(tantivy.Filter.remove_long(40))
    .filter(tantivy.Filter.lowercase())
    .filter(tantivy.Filter.ascii_fold())
    .filter(tantivy.Filter.custom_stopword(STOPWORDS))
    .filter(tantivy.Filter.stemmer("english"))
    .build()
)


PLACEHOLDER = re.compile(r"<[a-z][a-z0-9_]*>")
"""What the scrubber leaves for a personal value (``<first_name>``): no index
term, since a real query holds the value itself, never the placeholder."""


EXEMPLAR = re.compile(r'(?m)^([ \t]*[-*][ \t]+".*")[ \t]+→[ \t]+`.*$')
"""The calls an anchor line gives after its request (its exemplar): what an
agent is shown for a close request, not words of the recipe; left out of the
indexed text, so fifty anchors' calls do not weigh a recipe's tool names."""


def analyze(text: str) -> list[str]:
    """The index terms of ``text`` (what a query and a document are compared on)."""
    if not text.isascii():  # a lone surrogate (from a JSON escape such as \ud800) cannot reach the analyzer
        text = text.encode("utf-8", "replace").decode("utf-8")
    return list(_ANALYZER.analyze(PLACEHOLDER.sub(" ", text) if "<" in text else text))


@dataclass(frozen=True)
class Hit:
    """One retrieved recipe; ``exemplar`` is the anchor the query closely
    matched whose conversation's calls the agent is shown, if any."""

    name: str
    score: float
    concept: str
    recipe: Recipe
    exemplar: Anchor | None = None

    @cached_property
    def snippet(self) -> str:
        """The start of the recipe's description (made when first read)."""
        text = " ".join(self.recipe.description.split())
        return text if len(text) <= 160 else text[:159].rsplit(" ", 1)[0] + "…"


def _fields(recipe: Recipe) -> dict[str, str]:
    name_words = recipe.name.replace("-", " ")
    aliases, tags = "\n".join(recipe.aliases), "\n".join(recipe.tags)
    body = EXEMPLAR.sub(r"\1", recipe.body) if "→" in recipe.body else recipe.body
    return {"text": "\n".join((name_words, recipe.concept, aliases, recipe.description, tags, body)),
            "summary": "\n".join((name_words, recipe.concept, aliases, recipe.description)),
            "name_words": name_words, "concept": recipe.concept, "aliases": aliases,
            "description": recipe.description, "tags": tags, "body": body}


def _postings(recipes: Sequence[Recipe], boosts: dict[str, float]) -> Postings:
    # A field that is never queried is not indexed: half the work for the default boosts.
    return Postings.build({field: analyze(text[field]) for field in boosts}
                          for text in (_fields(recipe) for recipe in recipes))


def _boost_map(boosts: Boosts) -> dict[str, float]:
    return {f: getattr(boosts, _BOOST_OF[f]) for f in TEXT_FIELDS if getattr(boosts, _BOOST_OF[f]) > 0}


def _anchor_index(recipes: Sequence[Recipe], boosts: Boosts) -> AnchorIndex | None:
    return AnchorIndex.build(recipes, analyze) if boosts.anchors > 0 else None


def indexed_fields(boosts: Boosts) -> str:
    """A short name of the fields ``boosts`` indexes (part of an on-disk index's key)."""
    return "-".join([*(_BOOST_OF[f] for f in _boost_map(boosts)), *(["anchors"] if boosts.anchors > 0 else [])])


class Searchable(Protocol):
    """Anything that ranks recipes for a text: ``RecipeIndex``, or a
    ``MultiIndex`` bound to one hybrid KB. ``rank`` is the 1-based place of
    the recipe ``name`` for ``text`` (0 when it is not retrieved), found
    without building ``Hit`` objects."""

    def search(self, text: str, k: int = 3) -> list[Hit]: ...

    def rank(self, name: str, text: str) -> int: ...

    def __len__(self) -> int: ...


class _Searchable:
    _postings: Postings
    _boosts: dict[str, float]
    _plans: dict[str, tuple[Plan, Plan | None, Counter[str]]]
    _anchors: AnchorIndex | None
    _anchor_weight: float
    similarity: float | None

    def _plan(self, text: str) -> tuple[Plan, Plan | None, Counter[str]]:
        """The query's plan, its plan over the anchors, its terms."""
        # The search asks the same task texts of many hybrid KBs: plan each query once.
        plans = self._plans
        if text not in plans:
            if len(plans) >= PLAN_CACHE:
                plans.clear()
            counts = Counter(analyze(text))
            query = {f"{field}:{term}": boost * count for field, boost in self._boosts.items()
                     for term, count in counts.items()}
            anchors = self._anchors.plan(counts) if self._anchors is not None else None
            plans[text] = (self._postings.plan(query), anchors, counts)
        return plans[text]

    def _ranked(self, text: str, k: int, members: np.ndarray | None = None) -> list[tuple[float, int]]:
        """The ``k`` best ``(score, document)``: the text's ranking, its best
        ``RERANK`` re-ranked with each one's best anchor added."""
        plan, anchors, _ = self._plan(text)
        if anchors is None or not anchors.keys or self._anchors is None:
            return self._postings.top(plan, k, members)
        found = self._postings.top(plan, max(k, RERANK), members)
        if not found:
            return []
        docs = np.fromiter((d for _, d in found), np.int64, len(found))
        bonus = self._anchors.best(anchors, docs) * np.float32(self._anchor_weight)
        scores = np.fromiter((s for s, _ in found), np.float32, len(found)) + bonus
        order = np.lexsort((docs, -scores))[:k]
        return [(float(scores[i]), int(docs[i])) for i in order]

    def _place(self, doc: int, text: str, members: np.ndarray | None = None) -> int:
        """1-based place of ``doc`` in ``_ranked``'s order; 0 when it does not match."""
        plan, anchors, _ = self._plan(text)
        if anchors is None or not anchors.keys or self._anchors is None:
            return self._postings.rank(plan, doc, members)
        place = next((n for n, (_, d) in enumerate(self._ranked(text, RERANK, members), 1) if d == doc), 0)
        return place or self._postings.rank(plan, doc, members)

    def _hit(self, doc: int, score: float, recipe: Recipe, counts: Counter[str]) -> Hit:
        exemplar = None
        if self.similarity is not None and self._anchors is not None:
            exemplar = self._anchors.exemplar(doc, recipe, counts, analyze, self.similarity)
        return Hit(recipe.name, score, recipe.concept, recipe, exemplar)


class RecipeIndex(_Searchable):
    """A BM25 index of one KB's recipes, in memory or in a folder."""

    def __init__(self, postings: Postings, recipes: Sequence[Recipe], boosts: Boosts,
                 anchors: AnchorIndex | None = None, similarity: float | None = None) -> None:
        self._postings = postings
        self._boosts = _boost_map(boosts)
        self._anchors, self._anchor_weight, self.similarity = anchors, boosts.anchors, similarity
        self._plans = {}
        self._names = [r.name for r in recipes]
        self._doc_of = {name: i for i, name in enumerate(self._names)}
        self.recipes = {r.name: r for r in recipes}

    @classmethod
    def build(cls, recipes: Sequence[Recipe], boosts: Boosts = Boosts(), path: Path | None = None,
              similarity: float | None = None) -> RecipeIndex:
        """Index ``recipes`` in memory, or in the folder ``path`` (written
        through a temporary folder, so a half-built index is never visible)."""
        postings = _postings(recipes, _boost_map(boosts))
        anchors = _anchor_index(recipes, boosts)
        if path is None:
            return cls(postings, recipes, boosts, anchors, similarity)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
        try:
            postings.save(tmp / FILE)
            if anchors is not None:
                anchors.save(tmp)
            (tmp / "names").write_text("\n".join(r.name for r in recipes))
            os.rename(tmp, path)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            if not path.is_dir():  # another process did not win the race either
                raise
        return cls(postings, recipes, boosts, anchors, similarity)

    @classmethod
    def open(cls, path: Path, recipes: Sequence[Recipe], boosts: Boosts = Boosts(),
             similarity: float | None = None) -> RecipeIndex:
        try:
            postings = Postings.load(path / FILE)
            anchors = AnchorIndex.load(path, len(recipes)) if boosts.anchors > 0 else None
            names = (path / "names").read_text()
        except (OSError, ValueError) as exc:
            raise IndexError_(f"the index at {path} cannot be read ({exc})") from None
        if names != "\n".join(r.name for r in recipes) or postings.n != len(recipes):
            raise IndexError_(f"the index at {path} does not match its recipes")
        return cls(postings, recipes, boosts, anchors, similarity)

    def __len__(self) -> int:
        return len(self.recipes)

    def search(self, text: str, k: int = 3) -> list[Hit]:
        """The ``k`` best recipes for ``text`` (fewer when fewer match)."""
        recipes, names = self.recipes, self._names
        counts = self._plan(text)[2]
        return [self._hit(doc, score, recipes[names[doc]], counts) for score, doc in self._ranked(text, k)]

    def rank(self, name: str, text: str) -> int:
        """1-based place of recipe ``name`` in the ranking for ``text``; 0 when it does not match."""
        doc = self._doc_of.get(name)
        return 0 if doc is None else self._place(doc, text)


class MultiIndex(_Searchable):
    """A base KB and candidate documents in one index.

    ``base`` maps a slot (a concept's recipe name) to its current document;
    ``candidates`` maps a candidate id to ``(slot, recipe)``. ``search(text,
    k, candidate=c)`` ranks the hybrid KB where ``c`` replaces its slot's base
    document; ``candidate=None`` ranks the base KB.
    """

    def __init__(self, base: dict[str, Recipe], candidates: dict[str, tuple[str, Recipe]],
                 boosts: Boosts = Boosts(), similarity: float | None = None) -> None:
        if BASE in candidates:
            raise IndexError_(f"{BASE!r} is reserved and cannot be a candidate id")
        self._boosts = _boost_map(boosts)
        self._anchor_weight, self.similarity = boosts.anchors, similarity
        self._plans = {}
        self.base = dict(base)
        self.candidates = dict(candidates)
        self._slot_named = {r.name: slot for slot, r in self.base.items()}
        self._docs = list(self.base.values()) + [r for _, r in self.candidates.values()]
        self._base_doc = {slot: i for i, slot in enumerate(self.base)}
        self._candidate_doc = {cid: len(self.base) + i for i, cid in enumerate(self.candidates)}
        self._postings = _postings(self._docs, self._boosts)
        self._anchors = _anchor_index(self._docs, boosts)
        self._masks: dict[str | None, np.ndarray] = {}

    def _members(self, candidate: str | None) -> np.ndarray:
        """Which documents make up the hybrid KB of ``candidate``."""
        mask = self._masks.get(candidate)
        if mask is None:
            mask = np.zeros(len(self._docs), bool)
            mask[: len(self.base)] = True
            if candidate is not None:
                mask[self._base_doc[self.candidates[candidate][0]]] = False
                mask[self._candidate_doc[candidate]] = True
            self._masks[candidate] = mask
        return mask

    def _check(self, candidate: str | None) -> None:
        if candidate is not None and candidate not in self.candidates:
            raise IndexError_(f"unknown candidate {candidate!r}")

    def hybrid(self, candidate: str | None) -> HybridView:
        """The hybrid KB of ``candidate`` as a ``Searchable``."""
        self._check(candidate)
        return HybridView(self, candidate)

    def members(self, candidate: str | None) -> dict[str, Recipe]:
        """Slot → document of the hybrid KB of ``candidate``."""
        kb = dict(self.base)
        if candidate is not None:
            slot, recipe = self.candidates[candidate]
            kb[slot] = recipe
        return kb

    def search(self, text: str, k: int = 3, candidate: str | None = None) -> list[Hit]:
        self._check(candidate)
        counts = self._plan(text)[2]
        return [self._hit(doc, score, self._docs[doc], counts)
                for score, doc in self._ranked(text, k, self._members(candidate))]

    def rank(self, name: str, text: str, candidate: str | None = None) -> int:
        """1-based place of the recipe called ``name`` in the hybrid KB of
        ``candidate`` for ``text``; 0 when it is not a member or does not match."""
        self._check(candidate)
        replaced = self.candidates[candidate][0] if candidate is not None else None
        if candidate is not None and self.candidates[candidate][1].name == name:
            doc = self._candidate_doc[candidate]
        elif self._slot_named.get(name, replaced) != replaced:
            doc = self._base_doc[self._slot_named[name]]
        else:
            return 0
        return self._place(doc, text, self._members(candidate))


@dataclass(frozen=True)
class HybridView:
    """One hybrid KB of a ``MultiIndex``."""

    multi: MultiIndex
    candidate: str | None

    def search(self, text: str, k: int = 3) -> list[Hit]:
        return self.multi.search(text, k, candidate=self.candidate)

    def rank(self, name: str, text: str) -> int:
        return self.multi.rank(name, text, candidate=self.candidate)

    def __len__(self) -> int:
        return len(self.multi.base)
