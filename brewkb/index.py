"""The one module that imports tantivy: a BM25 index over recipes.

Fields: ``name`` (raw, stored), ``text`` (the whole recipe: name words,
concept, aliases, description, tags and body, as one BM25 document),
``summary`` (what the recipe says it is for: name words, concept, aliases and
description), and the parts on their own: ``name_words`` (the name's words, so ``export-as-pdf``
matches "export pdf"), ``concept``, ``aliases``, ``description``, ``tags``,
``body``; all with an English analyzer (lowercase, ASCII folding, stopwords,
Porter stemming). A score is the BM25 of the whole text times its boost, plus
the summary's and each part's own BM25 times its (small) boost; a field whose
boost is 0 is neither indexed nor queried. Scoring the whole text as one document keeps one
stray query word in another recipe's short description from outscoring many
words of the right recipe's body.

User text is reduced to its index terms, which become term queries: no input
(``AND``, ``(x``, ``foo:bar``, ``""``) can raise or be read as query syntax.

``RecipeIndex`` holds one KB. ``MultiIndex`` holds a base KB plus many
candidate documents and answers for any *hybrid* KB (the base with one
concept's document replaced by one candidate) without building an index per
hybrid; document frequencies are then shared by all hybrids of the index (see
``bench/retrieval.py`` for how often that changes a ranking). ``rank`` gives a
document's place in a ranking without building ``Hit`` objects.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import tantivy

from brewkb.config import Boosts
from brewkb.errors import IndexError_
from brewkb.recipes import Recipe

__all__ = ["Hit", "RecipeIndex", "MultiIndex", "HybridView", "analyze", "SCHEMA_VERSION"]

SCHEMA_VERSION = "2"
TOKENIZER = "brew_en"
TEXT_FIELDS = ("text", "summary", "name_words", "concept", "aliases", "description", "tags", "body")
_BOOST_OF = {"text": "text", "summary": "summary", "name_words": "name", "concept": "concept",
             "aliases": "aliases", "description": "description", "tags": "tags", "body": "body"}
BASE = "base"
FIRST_LOOK = 16  # ``rank`` looks this deep before ranking every match

_ANALYZER = (
    tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
    .filter(tantivy.Filter.remove_long(40))
    .filter(tantivy.Filter.lowercase())
    .filter(tantivy.Filter.ascii_fold())
    .filter(tantivy.Filter.stopword("english"))
    .filter(tantivy.Filter.stemmer("english"))
    .build()
)


def analyze(text: str) -> list[str]:
    """The index terms of ``text`` (what a query and a document are compared on)."""
    return list(_ANALYZER.analyze(text))


def _schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("name", stored=True, tokenizer_name="raw")
    builder.add_text_field("slot", stored=True, tokenizer_name="raw")
    builder.add_text_field("variant", stored=True, tokenizer_name="raw")
    for field in TEXT_FIELDS:
        builder.add_text_field(field, stored=False, tokenizer_name=TOKENIZER)
    return builder.build()


_SCHEMA = _schema()


@dataclass(frozen=True)
class Hit:
    """One retrieved recipe."""

    name: str
    score: float
    concept: str
    recipe: Recipe

    @cached_property
    def snippet(self) -> str:
        """The start of the recipe's description (made when first read)."""
        text = " ".join(self.recipe.description.split())
        return text if len(text) <= 160 else text[:159].rsplit(" ", 1)[0] + "…"


def _fields(recipe: Recipe) -> dict[str, str]:
    name_words = recipe.name.replace("-", " ")
    aliases, tags = "\n".join(recipe.aliases), "\n".join(recipe.tags)
    return {"text": "\n".join((name_words, recipe.concept, aliases, recipe.description, tags, recipe.body)),
            "summary": "\n".join((name_words, recipe.concept, aliases, recipe.description)),
            "name_words": name_words, "concept": recipe.concept, "aliases": aliases,
            "description": recipe.description, "tags": tags, "body": recipe.body}


def _document(recipe: Recipe, slot: str, variant: str, fields: Sequence[str]) -> tantivy.Document:
    # A field that is never queried is not indexed: half the writing for the default boosts.
    text = _fields(recipe)
    return tantivy.Document(name=recipe.name, slot=slot, variant=variant, **{f: text[f] for f in fields})


def _new_index(path: Path | None) -> tantivy.Index:
    try:
        index = tantivy.Index(_SCHEMA, path=str(path) if path else None, reuse=path is not None)
    except (ValueError, OSError) as exc:
        raise IndexError_(f"cannot open the index at {path}: {exc}; delete that folder to rebuild it") from None
    index.register_tokenizer(TOKENIZER, _ANALYZER)
    return index


def _write(index: tantivy.Index, docs: Iterable[tantivy.Document]) -> None:
    # One segment, written in insertion order, lets a hit's address name its document
    # (see `_remember_order`); the arena grows only as far as the documents need.
    writer = index.writer(heap_size=1_000_000_000, num_threads=1)
    for doc in docs:
        writer.add_document(doc)
    writer.commit()
    writer.wait_merging_threads()
    # Tantivy reloads readers asynchronously; make the commit visible now.
    index.reload()


def _boost_map(boosts: Boosts) -> dict[str, float]:
    return {f: getattr(boosts, _BOOST_OF[f]) for f in TEXT_FIELDS if getattr(boosts, _BOOST_OF[f]) > 0}


def indexed_fields(boosts: Boosts) -> str:
    """A short name of the fields ``boosts`` indexes (part of an on-disk index's key)."""
    return "-".join(_BOOST_OF[f] for f in _boost_map(boosts))


class _Searchable:
    _index: tantivy.Index
    _boosts: dict[str, float]
    _searcher: tantivy.Searcher | None = None
    _order: list[tuple[str, str]] | None = None
    _doc_of: dict[tuple[str, str], int]
    _parsed: dict[str, tantivy.Query | None]
    _looked: dict[int, tuple[tantivy.Query, int, list[tuple[float, tantivy.DocAddress]]]]
    _look_ahead = 0

    def _text_query(self, text: str) -> tantivy.Query | None:
        # The search asks the same task texts of many hybrid KBs: build each query once.
        cache = self._parsed
        if text not in cache:
            if len(cache) >= 4096:
                cache.clear()
            cache[text] = self._terms_query(analyze(text))
        return cache[text]

    def _terms_query(self, terms: list[str]) -> tantivy.Query | None:
        # Index terms go straight into term queries: no user text is ever parsed
        # as query syntax, and building is cheaper than Tantivy's query parser. A
        # repeated term is one clause with its count as a factor: the same score
        # for one walk of its postings.
        counts = Counter(terms)
        clauses = []
        term_query, boost_query, should = tantivy.Query.term_query, tantivy.Query.boost_query, tantivy.Occur.Should
        for field, boost in self._boosts.items():
            for term, count in counts.items():
                query, weight = term_query(_SCHEMA, field, term), boost * count
                clauses.append((should, query if weight == 1.0 else boost_query(query, weight)))
        if not clauses:
            return None
        return clauses[0][1] if len(clauses) == 1 else tantivy.Query.boolean_query(clauses)

    def _searcher_now(self) -> tantivy.Searcher:
        if self._searcher is None:
            self._searcher = self._index.searcher()
        return self._searcher

    def _hits(self, query: tantivy.Query, limit: int) -> list[tuple[float, tantivy.DocAddress]]:
        # The search ranks a candidate (``rank``) right after taking its top k for
        # the same text: in a MultiIndex one look at the first FIRST_LOOK serves both.
        seen = self._looked.get(id(query))
        if seen is not None and seen[0] is query and (seen[1] >= limit or len(seen[2]) < seen[1]):
            return seen[2][:limit]
        want = max(limit, self._look_ahead)
        hits = self._searcher_now().search(query, want, count=False).hits
        if len(self._looked) >= 4096:
            self._looked.clear()
        self._looked[id(query)] = (query, want, hits)
        return hits[:limit]

    def _search(self, query: tantivy.Query, limit: int) -> list[tuple[float, str, str]]:
        hits = self._hits(query, limit)
        if self._order is not None:
            order = self._order
            return [(score, *order[address.doc]) for score, address in hits]
        searcher = self._searcher_now()
        found = []
        for score, address in hits:
            doc = searcher.doc(address)
            found.append((float(score), str(doc.get_first("slot")), str(doc.get_first("variant"))))
        return found

    def _rank(self, query: tantivy.Query | None, key: tuple[str, str], total: int) -> int:
        """1-based place of the document ``key`` among ``total`` for ``query`` (0: not matched)."""
        if query is None:
            return 0
        limit = FIRST_LOOK
        while True:
            hits = self._hits(query, min(limit, total))
            if self._order is not None:
                target = self._doc_of[key]
                for place, (_, address) in enumerate(hits, start=1):
                    if address.doc == target:
                        return place
            else:
                searcher = self._searcher_now()
                for place, (_, address) in enumerate(hits, start=1):
                    doc = searcher.doc(address)
                    if (doc.get_first("slot"), doc.get_first("variant")) == key:
                        return place
            if len(hits) < limit or limit >= total:
                return 0
            limit = total

    def _remember_order(self, keys: list[tuple[str, str]]) -> None:
        """With one segment, Tantivy numbers documents in insertion order, so a
        hit's address names its document without fetching it (checked here)."""
        searcher = self._index.searcher()
        self._searcher = searcher
        if searcher.num_segments != 1 or not keys:
            return
        for i in {0, len(keys) // 2, len(keys) - 1}:
            doc = searcher.doc(tantivy.DocAddress(0, i))
            if (doc.get_first("slot"), doc.get_first("variant")) != keys[i]:
                return
        self._order = keys
        self._doc_of = {key: i for i, key in enumerate(keys)}


class RecipeIndex(_Searchable):
    """A BM25 index of one KB's recipes, in memory or in a folder."""

    def __init__(self, index: tantivy.Index, recipes: Sequence[Recipe], boosts: Boosts) -> None:
        self._index = index
        self._boosts = _boost_map(boosts)
        self._parsed, self._looked = {}, {}
        self.recipes = {r.name: r for r in recipes}
        self._remember_order([(r.name, BASE) for r in recipes])

    @classmethod
    def build(cls, recipes: Sequence[Recipe], boosts: Boosts = Boosts(), path: Path | None = None) -> RecipeIndex:
        """Index ``recipes`` in memory, or in the folder ``path`` (written
        through a temporary folder, so a half-built index is never visible)."""
        fields = list(_boost_map(boosts))
        if path is None:
            index = _new_index(None)
            _write(index, (_document(r, r.name, BASE, fields) for r in recipes))
            return cls(index, recipes, boosts)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
        try:
            _write(_new_index(tmp), (_document(r, r.name, BASE, fields) for r in recipes))
            os.rename(tmp, path)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            if not path.is_dir():  # another process did not win the race either
                raise
        return cls.open(path, recipes, boosts)

    @classmethod
    def open(cls, path: Path, recipes: Sequence[Recipe], boosts: Boosts = Boosts()) -> RecipeIndex:
        index = _new_index(path)
        index.reload()
        if index.searcher().num_docs != len(recipes):
            raise IndexError_(f"the index at {path} does not match its recipes; delete it to rebuild")
        return cls(index, recipes, boosts)

    def __len__(self) -> int:
        return len(self.recipes)

    def search(self, text: str, k: int = 3) -> list[Hit]:
        """The ``k`` best recipes for ``text`` (fewer when fewer match)."""
        query = self._text_query(text)
        if query is None or k <= 0 or not self.recipes:
            return []
        recipes = self.recipes
        return [Hit(name, score, recipes[name].concept, recipes[name]) for score, name, _ in self._search(query, k)]

    def rank(self, name: str, text: str) -> int:
        """1-based place of recipe ``name`` in the ranking for ``text``; 0 when it does not match."""
        if name not in self.recipes:
            return 0
        return self._rank(self._text_query(text), (name, BASE), len(self.recipes))


class MultiIndex(_Searchable):
    """A base KB and candidate documents in one index.

    ``base`` maps a slot (a concept's recipe name) to its current document;
    ``candidates`` maps a candidate id to ``(slot, recipe)``. ``search(text,
    k, candidate=c)`` ranks the hybrid KB where ``c`` replaces its slot's base
    document; ``candidate=None`` ranks the base KB.
    """

    _look_ahead = FIRST_LOOK

    def __init__(self, base: dict[str, Recipe], candidates: dict[str, tuple[str, Recipe]],
                 boosts: Boosts = Boosts()) -> None:
        if BASE in candidates:
            raise IndexError_(f"{BASE!r} is reserved and cannot be a candidate id")
        self._boosts = _boost_map(boosts)
        self._parsed, self._looked = {}, {}
        self._scoped: dict[tuple[str, str | None], tantivy.Query] = {}
        self.base = dict(base)
        self.candidates = dict(candidates)
        self._slot_named = {r.name: slot for slot, r in self.base.items()}
        self._index = _new_index(None)
        fields = list(self._boosts)
        keys = [(slot, BASE) for slot in self.base] + [(slot, cid) for cid, (slot, _) in self.candidates.items()]
        docs = [_document(r, slot, BASE, fields) for slot, r in self.base.items()]
        docs += [_document(r, slot, cid, fields) for cid, (slot, r) in self.candidates.items()]
        _write(self._index, docs)
        self._remember_order(keys)

    def _members_filter(self, candidate: str | None) -> tantivy.Query:
        base_docs = tantivy.Query.term_query(_SCHEMA, "variant", BASE)
        if candidate is None:
            return base_docs
        slot, _ = self.candidates[candidate]
        others = tantivy.Query.boolean_query([
            (tantivy.Occur.Must, base_docs),
            (tantivy.Occur.MustNot, tantivy.Query.term_query(_SCHEMA, "slot", slot)),
        ])
        return tantivy.Query.boolean_query([
            (tantivy.Occur.Should, others),
            (tantivy.Occur.Should, tantivy.Query.term_query(_SCHEMA, "variant", candidate)),
        ])

    def _scoped_query(self, text: str, candidate: str | None) -> tantivy.Query | None:
        key = (text, candidate)
        if key not in self._scoped:
            query = self._text_query(text)
            if query is None:
                return None
            if len(self._scoped) >= 4096:
                self._scoped.clear()
            # The filter must not add to the score: a candidate's own `variant` term is rare.
            members = tantivy.Query.const_score_query(self._members_filter(candidate), 0.0)
            self._scoped[key] = tantivy.Query.boolean_query([(tantivy.Occur.Must, query),
                                                             (tantivy.Occur.Must, members)])
        return self._scoped[key]

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
        query = self._scoped_query(text, candidate)
        if query is None or k <= 0:
            return []
        hits = []
        for score, slot, variant in self._search(query, k):
            recipe = self.base[slot] if variant == BASE else self.candidates[variant][1]
            hits.append(Hit(recipe.name, score, recipe.concept, recipe))
        return hits

    def rank(self, name: str, text: str, candidate: str | None = None) -> int:
        """1-based place of the recipe called ``name`` in the hybrid KB of
        ``candidate`` for ``text``; 0 when it is not a member or does not match."""
        self._check(candidate)
        replaced = self.candidates[candidate][0] if candidate is not None else None
        if candidate is not None and replaced is not None and self.candidates[candidate][1].name == name:
            key = (replaced, candidate)
        elif self._slot_named.get(name, replaced) != replaced:
            key = (self._slot_named[name], BASE)
        else:
            return 0
        return self._rank(self._scoped_query(text, candidate), key, len(self.base) + 1)


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
