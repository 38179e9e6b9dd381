"""How well a set of documents points an agent to the right procedure, measured
on logged conversations that passed.

A *case* is one held-out conversation that passed and made at least one write
(a call of a tool that changes state and did not fail, see
``brewkb.trajectories.tools``: a lookup, a message to the user or a hand-off to
a person is not a write); a failed conversation's writes are no target, and a
conversation that wrote nothing is not scored. Each case is asked twice: with
the user's side of the conversation (every user turn) and with the first user
turn alone. A document's *procedure* is its step lines under ``## How to
perform`` (lines that start with a backticked call; calls joined by "or" are
one step), some of them *asked* steps: a step taken "only when the request
also asks to" do what it does (``ALSO_ASKED``). For the ranking of the top
``DEPTH`` documents:

- **MRR**: for each write of the case, 1 / the rank of the first document
  whose procedure names that write's tool (0 when none of the top ``DEPTH``
  does), averaged over the case's writes;
- **top-1**: the share of the case's writes the first document names;
- **top-3 coverage**: the share of the case's writes some of the first three
  documents name;
- **step F1**: between the steps the first document has the agent take for
  the case and the tools the case used (lookups and writes, messages left
  out): a step counts when the conversation used one of the tools it offers,
  a tool counts when some step offers it. An asked step is taken when the
  request asked for it, and a conversation that passed did what its request
  asked: so it is one of the steps when the conversation used its tool, and
  left out otherwise (an agent that follows the recipe does not take it);
- **strict step F1**: the same with every asked step taken, whatever the
  request asked.

Every measure is averaged over cases, so each conversation weighs the same.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from brewkb.recipes import Recipe
from brewkb.retrieval.index import Searchable
from brewkb.retrieval.memory import MEMORIES, memory_documents
from brewkb.retrieval.ranking import Retriever
from brewkb.trajectories.schema import Trajectory, tool_calls
from brewkb.trajectories.tools import ALSO_ASKED, procedure, used_tools, user_turns, writes_of

__all__ = ["QUERIES", "DEPTH", "Case", "Scores", "Procedure", "procedure_of", "cases_of", "procedures_of", "score",
           "case_scores", "Arm", "LogEvaluation", "compare_arms", "BASELINES"]

QUERIES = {"conversation": "the user's side of the conversation", "first turn": "the first user turn"}
DEPTH = 10
BASELINES = ("none", *MEMORIES)


@dataclass(frozen=True)
class Procedure:
    """The steps of a document: those to take, and those to take only when asked."""

    steps: tuple[frozenset[str], ...]
    asked: tuple[frozenset[str], ...] = ()

    def names(self, tool: str) -> bool:
        return any(tool in step for step in (*self.steps, *self.asked))

    def taken(self, tools: frozenset[str] | None = None) -> list[frozenset[str]]:
        """The steps an agent takes for a conversation that used ``tools``
        (every asked step when ``tools`` is ``None``)."""
        return [*self.steps, *(s for s in self.asked if tools is None or s & tools)]


@dataclass(frozen=True)
class Case:
    """A held-out conversation that passed: what it asked and what it did."""

    id: str
    task_id: str
    queries: Mapping[str, str]
    writes: tuple[str, ...]
    tools: frozenset[str]


@dataclass(frozen=True)
class Scores:
    cases: int
    mrr: float
    top1: float
    cover3: float
    step_f1: float
    strict_f1: float

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def at_least(self, other: Scores) -> bool:
        """At least as good as ``other`` on MRR, top-1 and step F1."""
        return self.mrr >= other.mrr and self.top1 >= other.top1 and self.step_f1 >= other.step_f1


def cases_of(trajectories: Sequence[Trajectory], scrub: Callable[[Trajectory], Trajectory]) -> list[Case]:
    """The cases of ``trajectories``: those that passed and did an action,
    queried with their scrubbed user turns."""
    cases = []
    for t in trajectories:
        if t.success is not True:
            continue
        calls = tool_calls(t.messages)
        writes = writes_of(calls)
        if not writes:
            continue
        clean = scrub(t)
        turns = [" ".join(turn.split()) for turn in user_turns(clean)] or [clean.task]
        cases.append(Case(t.id, t.task_id, {"conversation": " ".join(turns), "first turn": turns[0]},
                          tuple(writes), frozenset(used_tools(calls))))
    return cases


def procedure_of(document: Recipe) -> Procedure:
    lines = document.section("How to perform").splitlines()
    return Procedure(tuple(procedure("\n".join(line for line in lines if ALSO_ASKED not in line))),
                     tuple(procedure("\n".join(line for line in lines if ALSO_ASKED in line))))


def procedures_of(documents: Sequence[Recipe]) -> dict[str, Procedure]:
    return {d.name: procedure_of(d) for d in documents}


def _f1(steps: Sequence[frozenset[str]], tools: frozenset[str]) -> float:
    if not steps or not tools:
        return 0.0
    precision = sum(bool(step & tools) for step in steps) / len(steps)
    recall = sum(any(tool in step for step in steps) for tool in tools) / len(tools)
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


def _ranks(ranked: Sequence[Procedure], case: Case) -> list[int | None]:
    """The rank of the first document naming each write of ``case``."""
    return [next((n for n, found in enumerate(ranked, 1) if found.names(action)), None) for action in case.writes]


def case_scores(ranked: Sequence[Procedure], case: Case) -> tuple[float, float, float, float, float]:
    """MRR, top-1, top-3 coverage, step F1 and strict step F1 of one case."""
    ranks = _ranks(ranked, case)
    n = len(ranks)
    return (sum(1 / r for r in ranks if r) / n, sum(r == 1 for r in ranks) / n,
            sum(bool(r and r <= 3) for r in ranks) / n,
            _f1(ranked[0].taken(case.tools), case.tools) if ranked else 0.0,
            _f1(ranked[0].taken(), case.tools) if ranked else 0.0)


def score(index: Searchable | None, procedures: Mapping[str, Procedure], cases: Sequence[Case],
          query: str) -> Scores:
    """The measures of one arm (``index`` ``None``: no memory) for one query kind."""
    rows = []
    for case in cases:
        hits = index.search(case.queries[query], DEPTH) if index is not None and len(index) else []
        rows.append(case_scores([procedures[h.name] for h in hits], case))
    n = len(rows)
    mean = [round(sum(r[i] for r in rows) / n, 4) if n else 0.0 for i in range(5)]
    return Scores(n, *mean)


@dataclass(frozen=True)
class Arm:
    """One column: ``kind`` is ``none``, a memory (``trajectories``, ``notes``) or ``kb``."""

    label: str
    kind: str
    documents: int
    scores: Mapping[str, Scores]

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "kind": self.kind, "documents": self.documents,
                "scores": {q: s.to_json() for q, s in self.scores.items()}}


@dataclass(frozen=True)
class LogEvaluation:
    logs: str
    learned_from: str
    conversations: int
    """Held-out conversations of the logs."""
    cases: int
    """Those that passed and did an action: the ones scored."""
    arms: list[Arm]
    hint: str = ""
    """What to do next, when the comparison lacks a learned KB."""

    def to_json(self) -> dict[str, Any]:
        return {"kind": "logs", "logs": self.logs, "learned_from": self.learned_from,
                "conversations": self.conversations, "cases": self.cases,
                "arms": [a.to_json() for a in self.arms], **({"hint": self.hint} if self.hint else {})}

    def verdict(self, label: str) -> str:
        """Whether the arm ``label`` (the new KB) beats each baseline and every
        other KB (the base KB it would replace), plainly."""
        short = self.shortfalls(label)
        others = "the base KB and every baseline" if any(a.kind == "kb" for a in self._rivals(label)) \
            else "every baseline"
        if not short:
            return f"The new KB is at least as good as {others} on MRR, top-1 and step F1."
        mine = next(a for a in self.arms if a.label == label).scores["conversation"]
        matched = [a.label for a in self._rivals(label) if mine.at_least(a.scores["conversation"])]
        return (f"The new KB does not beat {'; '.join(short)}."
                + (f" It is at least as good as {', '.join(matched)} on MRR, top-1 and step F1." if matched else ""))

    def _rivals(self, label: str) -> list[Arm]:
        """What the arm ``label`` must beat: the memories, and the other KBs."""
        return [a for a in self.arms if a.label != label and (a.kind in MEMORIES or a.kind == "kb")]

    def shortfalls(self, label: str) -> list[str]:
        """How the arm ``label`` falls short of each baseline and other KB, in
        words (empty: it beats them all)."""
        mine = next(a for a in self.arms if a.label == label)
        out = []
        for arm in self._rivals(label):
            ours, theirs = mine.scores["conversation"], arm.scores["conversation"]
            if not ours.at_least(theirs):
                worse = [f"{name} {getattr(ours, key):.3f} < {getattr(theirs, key):.3f}"
                         for key, name in (("mrr", "MRR"), ("top1", "top-1"), ("step_f1", "step F1"))
                         if getattr(ours, key) < getattr(theirs, key)]
                out.append(f"{arm.label} ({', '.join(worse)})")
        return out


def compare_arms(kbs: Mapping[str, Sequence[Recipe]], pool: Sequence[Trajectory], cases: Sequence[Case],
                 retriever: Retriever, scrub: Any, contexts: Sequence[str] = BASELINES) -> list[Arm]:
    """The baselines in ``contexts`` (their memories built from ``pool``), then
    each KB of ``kbs`` (label → recipes), scored on ``cases``."""
    arms = []
    clean = [scrub(t) for t in pool] if any(c in MEMORIES for c in contexts) else []
    for context in contexts:
        if context == "none":
            arms.append(Arm("none", "none", 0, {q: score(None, {}, cases, q) for q in QUERIES}))
            continue
        documents = memory_documents(context, clean)
        arms.append(_arm(context, context, documents, cases, retriever))
    for label, recipes in kbs.items():
        arms.append(_arm(label, "kb", list(recipes), cases, retriever))
    return arms


def _arm(label: str, kind: str, documents: list[Recipe], cases: Sequence[Case], retriever: Retriever) -> Arm:
    index = retriever.index(documents) if documents else None
    procedures = procedures_of(documents)
    return Arm(label, kind, len(documents), {q: score(index, procedures, cases, q) for q in QUERIES})
