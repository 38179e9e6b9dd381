"""A KB beside its baselines on held-out logged conversations, recurring and
new requests apart, each difference with a paired bootstrap 95 % confidence
interval (``brewkb.retrieval.logeval`` has the measures).

For each part (``PARTS``) and query kind, the difference KB − rival of each
measure is averaged over the part's cases, and its interval comes from
``RESAMPLES`` resamplings of those cases with replacement (the same cases
for both arms: paired), percentiles 2.5 and 97.5, from a fixed seed, so the
same evaluation always prints the same interval. A part of fewer than
``MIN_CASES`` cases gets no interval and no claim: "not enough held-out
conversations to compare (N)".

The KB is *at least as good* as a rival on a measure when the interval of
KB − rival reaches 0 or above, *behind* when it lies below 0, *better* when
it lies above 0. The verdict is about MRR, top-1 and step F1, both query
kinds, every part that can be compared.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from brewkb.retrieval.logeval import MEASURES, PARTS, QUERIES, Arm, Case
from brewkb.retrieval.memory import MEMORIES

__all__ = ["MIN_CASES", "RESAMPLES", "SEED", "JUDGED", "Difference", "paired_bootstrap", "LogEvaluation",
           "too_few"]

MIN_CASES = 5
RESAMPLES = 2000
SEED = 20240515
JUDGED = ("mrr", "top1", "step_f1")
"""The measures a verdict is about."""


def too_few(n: int) -> str:
    return f"not enough held-out conversations to compare ({n})"


@dataclass(frozen=True)
class Difference:
    """KB − rival on one measure: the mean over cases and its 95 % interval."""

    mean: float
    low: float
    high: float

    def to_json(self) -> dict[str, float]:
        return {"mean": self.mean, "low": self.low, "high": self.high}

    def words(self) -> str:
        return f"{self.mean:+.3f} ({self.low:+.3f} to {self.high:+.3f})"


def paired_bootstrap(differences: Sequence[float], resamples: int = RESAMPLES, seed: int = SEED) -> Difference:
    """The mean of per-case differences and its percentile 95 % interval."""
    values = np.asarray(differences, dtype=np.float64)
    picks = np.random.default_rng(seed).integers(0, len(values), size=(resamples, len(values)))
    means = values[picks].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return Difference(round(float(values.mean()), 4), round(float(low), 4), round(float(high), 4))


@dataclass(frozen=True)
class LogEvaluation:
    logs: str
    learned_from: str
    conversations: int
    """Held-out conversations of the logs."""
    cases: Sequence[Case]
    """Those that passed and did an action: the ones scored."""
    arms: list[Arm]
    hint: str = ""
    """What to do next, when the comparison lacks a learned KB."""

    def part(self, name: str) -> list[int]:
        """The indexes of the cases of one part."""
        return [n for n, c in enumerate(self.cases) if c.recurring == (name == "recurring")]

    def differences(self, label: str, rival: str, part: str, query: str) -> dict[str, Difference] | None:
        """KB ``label`` − ``rival`` per measure on one part ( ``None`` below ``MIN_CASES`` cases)."""
        picked = self.part(part)
        if len(picked) < MIN_CASES:
            return None
        mine, theirs = self._arm(label).rows[query], self._arm(rival).rows[query]
        return {m: paired_bootstrap([mine[n][i] - theirs[n][i] for n in picked]) for i, m in enumerate(MEASURES)}

    def _arm(self, label: str) -> Arm:
        return next(a for a in self.arms if a.label == label)

    def rivals(self, label: str) -> list[Arm]:
        """What the arm ``label`` must be at least as good as: the memories and the other KBs."""
        return [a for a in self.arms if a.label != label and (a.kind in MEMORIES or a.kind == "kb")]

    def comparable(self) -> list[str]:
        """The parts with enough cases to compare."""
        return [p for p in PARTS if len(self.part(p)) >= MIN_CASES]

    def shortfalls(self, label: str) -> list[str]:
        """Where the arm ``label`` cannot be shown at least as good, in words
        (empty: it is at least as good as every rival on every part that has
        enough cases, and one part has)."""
        if not self.comparable():
            return [too_few(len(self.cases))]
        out = []
        for part in self.comparable():
            for rival in self.rivals(label):
                behind = self._judged(label, rival.label, part, lambda d: d.high < 0, Difference.words)
                if behind:
                    out.append(f"{rival.label} on {part} requests ({'; '.join(behind)})")
        return out

    def _judged(self, label: str, rival: str, part: str, keep: Callable[[Difference], bool],
                shown: Callable[[Difference], str]) -> list[str]:
        """The judged measures (each query) on which ``keep`` holds for ``label`` − ``rival``, as ``shown``."""
        return [f"{MEASURES[m]} ({query}) {shown(d)}" for query in QUERIES
                for m, d in (self.differences(label, rival, part, query) or {}).items() if m in JUDGED and keep(d)]

    def better(self, label: str, part: str) -> list[str]:
        """The rivals ``label`` is better than on a part, and on which measures."""
        out = []
        for rival in self.rivals(label):
            found = [MEASURES[m] for m in JUDGED if all(
                (d := self.differences(label, rival.label, part, q)) is not None and d[m].low > 0 for q in QUERIES)]
            if found:
                out.append(f"{rival.label} on " + (found[0] if len(found) == 1 else
                                                   f"{', '.join(found[:-1])} and {found[-1]}"))
        return out

    def behind_in_means(self, label: str, part: str) -> list[str]:
        """The rivals ``label`` is behind in means on a part (within noise or not), and on which measures."""
        out = []
        for rival in self.rivals(label):
            behind = self._judged(label, rival.label, part, lambda d: d.mean < 0, lambda d: f"{d.mean:+.3f}")
            if behind:
                out.append(f"{rival.label} ({', '.join(behind)})")
        return out

    def verdict(self, label: str) -> str:
        """Whether the arm ``label`` (the new KB) is at least as good as each
        baseline and every other KB, part by part, plainly."""
        rivals = self.rivals(label)
        if not rivals:
            return "No baseline or other KB was measured beside it: nothing is compared."
        others = "the base KB and every baseline" if any(a.kind == "kb" for a in rivals) else "every baseline"
        kb = "the base KB" if label.startswith("base KB") else "the new KB"  # before distill the base is measured alone
        sentences = []
        for part in PARTS:
            n = len(self.part(part))
            title = f"{part[0].upper()}{part[1:]} requests ({n})"
            if n < MIN_CASES:
                sentences.append(f"{title}: {too_few(n)}; no claim is made.")
                continue
            short = [s for s in self.shortfalls(label) if f" on {part} requests " in s]
            if short:
                sentences.append(f"{title}: {kb} is behind "
                                 f"{'; '.join(s.replace(f' on {part} requests', '') for s in short)}.")
            else:
                sentences.append(f"{title}: {kb} is at least as good as {others} on MRR, top-1 and step F1 "
                                 "with both queries (each 95 % CI of the difference reaches 0 or above).")
                behind = self.behind_in_means(label, part)
                if behind:  # within noise, but a reader should not take "at least as good" for "as good"
                    sentences.append(f"Its means are behind {'; '.join(behind)}: within noise at n = {n}.")
            better = self.better(label, part)
            if better:
                sentences.append(f"It is better than {'; '.join(better)} (CI above 0).")
        if not self.comparable():
            sentences.append(f"{kb[0].upper()}{kb[1:]} cannot be shown at least as good as the baselines.")
        return " ".join(sentences)

    def to_json(self) -> dict[str, Any]:
        comparisons = []
        kbs = [a for a in self.arms if a.kind == "kb"]
        for arm in kbs[-1:]:  # the last KB is the one the others are measured against
            for rival in self.rivals(arm.label):
                for part in PARTS:
                    for query in QUERIES:
                        found = self.differences(arm.label, rival.label, part, query)
                        comparisons.append({"kb": arm.label, "rival": rival.label, "part": part, "query": query,
                                            "cases": len(self.part(part)),
                                            "differences": {m: d.to_json() for m, d in found.items()} if found
                                            else None})
        return {"kind": "logs", "logs": self.logs, "learned_from": self.learned_from,
                "conversations": self.conversations, "cases": len(self.cases),
                "parts": {p: len(self.part(p)) for p in PARTS},
                "arms": [{"label": a.label, "kind": a.kind, "documents": a.documents,
                          "scores": {q: a.scores(q).to_json() for q in QUERIES},
                          "parts": {p: {q: a.scores(q, self.cases, p).to_json() for q in QUERIES} for p in PARTS}}
                         for a in self.arms],
                "comparisons": comparisons, **({"verdict": self.verdict(kbs[-1].label)} if kbs else {}),
                **({"hint": self.hint} if self.hint else {})}
