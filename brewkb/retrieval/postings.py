"""BM25 over precomputed impacts: the scoring engine behind ``brewkb.retrieval.index``.

Every (key, document) pair, where a key is a field and a term (``"text:refund"``),
holds its BM25 score, computed once when the index is built (k1 = 1.2,
b = 0.75, idf = ln(1 + (N - df + 0.5) / (df + 0.5)), as Tantivy and Lucene
score). A query is a set of weighted keys; a document's score is the weighted
sum of its impacts.

Queries are answered exactly, without scoring every posting (MaxScore): keys
are taken in decreasing order of their best impact; once the k-th best
score seen is above what the keys still to come could add, a document none of
the keys so far matched can no longer enter the top k, and the remaining keys
only complete the scores of the documents that still can. The postings of a
key that most documents hold are also kept as a dense row, added in one vector
operation. Ties are broken by document number, so a ranking is deterministic.
"""

from __future__ import annotations

import zipfile
from array import array
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

__all__ = ["Postings", "Plan", "K1", "B"]

K1, B = 1.2, 0.75
DENSE_SHARE = 8  # a key held by at least 1/8 of the documents gets a dense row ...
DENSE_CELLS = 8_000_000  # ... while all dense rows together stay under 32 MB
LOOKUP_RATIO = 16  # complete candidates by binary search when postings outnumber them this much
PLAIN_POSTINGS = 16_384  # a query with fewer postings than this is scored in full: pruning would cost more
FORMAT = 1


def _slack(bound: float) -> float:
    # Bounds are summed in float64 and scores in float32: pad a bound so that
    # rounding can only keep a document, never drop one.
    return bound * (1 + 1e-5) + 1e-6


def _kth_largest(values: np.ndarray, k: int) -> float:
    """The k-th largest of ``values``, which it reorders: pass a copy."""
    values.partition(len(values) - k)
    return float(values[len(values) - k])


class Plan(NamedTuple):
    """A query against one ``Postings``: ``(best impact × weight, key id,
    weight)`` of its known keys, best first, and how many postings they hold."""

    keys: list[tuple[float, int, float]]
    postings: int


class Postings:
    """Impacts of ``n`` documents, grouped by key, documents ascending within a key."""

    def __init__(self, n: int, keys: Sequence[str], indptr: np.ndarray, docs: np.ndarray,
                 scores: np.ndarray) -> None:
        self.n = n
        self._ids = {key: i for i, key in enumerate(keys)}
        self._indptr = indptr
        self._bounds = indptr.tolist()
        self._docs = docs
        self._scores = scores
        best = np.maximum.reduceat(scores, indptr[:-1]) if len(scores) else np.zeros(0, np.float32)
        self._best = best.astype(np.float64).tolist()
        self._rows: dict[int, np.ndarray] = {}
        if n:
            df = np.diff(indptr)
            for key in np.argsort(-df, kind="stable")[: DENSE_CELLS // n].tolist():
                if df[key] * DENSE_SHARE < n:
                    break
                row = np.zeros(n, np.float32)
                start, end = self._bounds[key], self._bounds[key + 1]
                row[docs[start:end]] = scores[start:end]
                self._rows[key] = row

    @classmethod
    def build(cls, documents: Iterable[Mapping[str, Sequence[str]]]) -> Postings:
        """Index ``documents``, each a mapping of field name to its terms. Each
        field is scored on its own (its own lengths and document frequencies)."""
        keys: dict[str, int] = {}
        key_ids, doc_ids, freqs = array("q"), array("i"), array("i")  # 16 bytes a posting while building
        lengths: dict[str, tuple[array, array]] = {}
        n = 0
        for d, fields in enumerate(documents):
            n = d + 1
            for field, terms in fields.items():
                docs_of, lens = lengths.setdefault(field, (array("i"), array("i")))
                docs_of.append(d)
                lens.append(len(terms))
                for term, count in Counter(terms).items():
                    key_ids.append(keys.setdefault(f"{field}:{term}", len(keys)))
                    doc_ids.append(d)
                    freqs.append(count)
        key = np.frombuffer(key_ids, np.int64)
        doc = np.frombuffer(doc_ids, np.int32)
        tf = np.frombuffer(freqs, np.int32).astype(np.float64)
        order = np.lexsort((doc, key))
        key, doc, tf = key[order], doc[order], tf[order]
        df = np.bincount(key, minlength=len(keys))
        indptr = np.concatenate(([0], np.cumsum(df))).astype(np.int64)
        idf = np.log1p((n - df + 0.5) / (df + 0.5))
        numbers = {field: i for i, field in enumerate(lengths)}
        field_of = np.fromiter((numbers[k.split(":", 1)[0]] for k in keys), np.int32, len(keys))[key]
        norm = np.empty(len(key))
        for field, (docs_of, lens) in lengths.items():
            length = np.zeros(n)
            length[np.frombuffer(docs_of, np.int32)] = np.frombuffer(lens, np.int32)
            mine = field_of == numbers[field]
            norm[mine] = K1 * (1 - B + B * length[doc[mine]] / (length.mean() or 1.0))
        scores = (idf[key] * tf * (K1 + 1) / (tf + norm)).astype(np.float32)
        return cls(n, list(keys), indptr, doc, scores)

    def save(self, path: Path) -> None:
        with path.open("wb") as out:
            np.savez(out, format=np.int64(FORMAT), n=np.int64(self.n), keys=np.asarray(list(self._ids), dtype=str),
                     indptr=self._indptr, docs=self._docs, scores=self._scores)

    @classmethod
    def load(cls, path: Path) -> Postings:
        """The postings saved at ``path``; ValueError when the file is not whole."""
        try:
            with np.load(path, allow_pickle=False) as data:
                if int(data["format"]) != FORMAT:
                    raise ValueError(f"format {int(data['format'])}, expected {FORMAT}")
                n, keys = int(data["n"]), data["keys"].tolist()
                indptr, docs, scores = data["indptr"], data["docs"], data["scores"]
        except (EOFError, KeyError, zipfile.BadZipFile) as exc:
            raise ValueError(str(exc) or type(exc).__name__) from None
        if (len(indptr) != len(keys) + 1 or indptr[0] != 0 or indptr[-1] != len(docs) or len(docs) != len(scores)
                or np.any(np.diff(indptr) <= 0) or (len(docs) and not 0 <= docs.min() <= docs.max() < n)):
            raise ValueError("its arrays do not agree")
        return cls(n, keys, indptr, docs, scores)

    def plan(self, query: Mapping[str, float]) -> Plan:
        """The plan of a query given as weighted keys."""
        ids, best, bounds = self._ids, self._best, self._bounds
        entries, postings = [], 0
        for key, weight in query.items():
            found = ids.get(key)
            if found is not None and weight > 0:
                entries.append((weight * best[found], found, weight))
                postings += bounds[found + 1] - bounds[found]
        entries.sort(key=lambda p: (-p[0], p[1]))
        return Plan(entries, postings)

    @property
    def keys(self) -> int:
        """How many keys it holds (key ids run from 0)."""
        return len(self._bounds) - 1

    def df(self, key: str) -> int:
        """How many documents hold ``key``."""
        found = self._ids.get(key)
        return 0 if found is None else self._bounds[found + 1] - self._bounds[found]

    def by_document(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The impacts grouped by document instead of by key: ``indptr``
        (document d's are ``[indptr[d], indptr[d + 1])``), their key ids and
        their impacts."""
        order = np.argsort(self._docs, kind="stable")
        keys = np.repeat(np.arange(len(self._indptr) - 1, dtype=np.int32), np.diff(self._indptr))[order]
        indptr = np.concatenate(([0], np.cumsum(np.bincount(self._docs, minlength=self.n)))).astype(np.int64)
        return indptr, keys, self._scores[order]

    def top(self, plan: Plan, k: int,
            members: np.ndarray | None = None) -> list[tuple[float, int]]:
        """The ``k`` best ``(score, document)`` among ``members`` (all when None), best first."""
        if not plan.keys or k <= 0:
            return []
        acc, cand = self._scan(plan, 0.0, k, members)
        scores = acc[cand]  # every candidate matched a key: impacts and weights are positive
        if len(cand) > k:
            keep = scores >= _kth_largest(scores.copy(), k)
            cand, scores = cand[keep], scores[keep]
        order = np.lexsort((cand, -scores))[:k]
        return [(float(scores[i]), int(cand[i])) for i in order]

    def rank(self, plan: Plan, doc: int, members: np.ndarray | None = None) -> int:
        """1-based place of ``doc`` in the ranking of ``members``; 0 when it matches no key."""
        target = self._score_of(plan, doc)
        if target <= 0:
            return 0
        acc, cand = self._scan(plan, target * (1 - 1e-5), 0, members)
        mine = acc[doc]
        scores = acc[cand]
        return 1 + int(np.count_nonzero((scores > mine) | ((scores == mine) & (cand < doc))))

    def _score_of(self, plan: Plan, doc: int) -> float:
        total = np.float32(0)
        for _, key, weight in plan.keys:
            start, end = self._bounds[key], self._bounds[key + 1]
            place = int(np.searchsorted(self._docs[start:end], doc))
            if place < end - start and self._docs[start + place] == doc:
                total += np.float32(weight) * self._scores[start + place]
        return float(total)

    def _add(self, acc: np.ndarray, key: int, weight: float) -> np.ndarray | None:
        """Add the key's impacts to ``acc``; its documents, unless it has a dense row."""
        row = self._rows.get(key)
        if row is not None:
            acc += row if weight == 1.0 else np.float32(weight) * row
            return None
        start, end = self._bounds[key], self._bounds[key + 1]
        docs = self._docs[start:end]
        impacts = self._scores[start:end]
        acc[docs] += impacts if weight == 1.0 else np.float32(weight) * impacts
        return docs

    def _complete(self, acc: np.ndarray, cand: np.ndarray, key: int, weight: float) -> None:
        """Add the key's impacts for the documents ``cand`` (at least)."""
        row = self._rows.get(key)
        start, end = self._bounds[key], self._bounds[key + 1]
        if row is not None:
            acc[cand] += row[cand] if weight == 1.0 else np.float32(weight) * row[cand]
        elif len(cand) * LOOKUP_RATIO < end - start:
            docs = self._docs[start:end]
            place = np.searchsorted(docs, cand)
            place[place == end - start] = end - start - 1
            hit = docs[place] == cand
            impacts = self._scores[start:end][place[hit]]
            acc[cand[hit]] += impacts if weight == 1.0 else np.float32(weight) * impacts
        else:
            self._add(acc, key, weight)

    def _scan(self, plan: Plan, floor: float, k: int,
              members: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Scores, and the member documents whose score can reach the final
        threshold: ``floor``, raised to the k-th best score when ``k`` > 0."""
        acc = np.zeros(self.n, np.float32)
        keys = plan.keys
        m = len(keys)
        prune = plan.postings > PLAIN_POSTINGS
        rest = [0.0] * (m + 1)
        for i in range(m - 1, -1, -1) if prune else ():
            rest[i] = _slack(rest[i + 1] + keys[i][0])
        theta, done, cand, i = floor, 0.0, None, 0
        while i < m:
            bound, key, weight = keys[i]
            docs = self._add(acc, key, weight)
            done += bound
            i += 1
            if not prune or i == m or docs is None:
                continue
            if k and done > rest[i]:  # only then can the k-th best partial score pass rest[i]
                seen = docs if members is None else docs[members[docs]]
                if len(seen) >= k:
                    theta = max(theta, _kth_largest(acc[seen], k))
            if theta > rest[i]:
                cand = np.flatnonzero(acc >= theta - rest[i])
                break
        if cand is None:
            cand = np.flatnonzero(acc >= theta) if theta > 0 else np.flatnonzero(acc)
            return acc, cand if members is None else cand[members[cand]]
        if members is not None:
            cand = cand[members[cand]]
        for j in range(i, m):
            _, key, weight = keys[j]
            self._complete(acc, cand, key, weight)
            scores = acc[cand]
            if k and len(scores) > k:
                theta = max(theta, _kth_largest(scores.copy(), k))
            cand = cand[scores >= theta - rest[j + 1]]
        return acc, cand
