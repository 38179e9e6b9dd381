"""How well a set of documents points an agent to the right procedure, measured
on logged conversations that passed.

A *case* is one held-out conversation that passed and made at least one write
(a call of a tool that changes state and did not fail, see
``brewkb.trajectories.tools``: a lookup, a message to the user or a hand-off to
a person is not a write); a failed conversation's writes are no target, and a
conversation that wrote nothing is not scored. Each case is asked twice: with
the user's side of the conversation (every user turn) and with the first user
turn alone. What a document tells the agent to do is read from what the agent
is shown of it (``brewkb.retrieval.ranking.shown_body``: the recipe's
procedure, or the exemplar that replaces it for a request close to a past
one): its step lines under ``## How to perform`` (lines that start with a
backticked call; calls joined by "or" are one step), those taken "only when
the request also asks to" included. For the ranking of the top ``DEPTH``
documents:

- **MRR**: for each write of the case, 1 / the rank of the first document
  whose steps name that write's tool (0 when none of the top ``DEPTH``
  does), averaged over the case's writes;
- **top-1**: the share of the case's writes the first document names;
- **top-3 coverage**: the share of the case's writes some of the first three
  documents name;
- **step F1**: between the steps the first document tells the agent to take
  (every one of them) and the distinct tools the case called (lookups,
  writes and hand-offs; messages left out): a step counts when the
  conversation used one of the tools it offers, a tool counts when some step
  offers it. Nothing of the held-out conversation decides which steps count.

Every measure is averaged over cases, so each conversation weighs the same.
A case is *recurring* when the memory the KB learned from holds a
conversation of its task (``same_task``), else *new*; ``brewkb.retrieval.compare``
puts the two parts side by side.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from brewkb.llm.requests import request_text
from brewkb.recipes import Recipe, split_sections
from brewkb.retrieval.index import Hit, Searchable, analyze
from brewkb.retrieval.memory import MEMORIES, memory_documents
from brewkb.retrieval.ranking import HOW, Retriever, shown_body
from brewkb.trajectories.instructions import name_reason
from brewkb.trajectories.schema import UNNAMED_TASK, Trajectory
from brewkb.trajectories.tools import agent_calls, procedure, used_tools, user_turns, writes_of

__all__ = ["QUERIES", "DEPTH", "MEASURES", "PARTS", "RECURS_SIMILARITY", "Case", "Scores", "Procedure",
           "procedure_of", "shown_procedure", "cases_of", "score", "case_scores", "Arm", "compare_arms", "BASELINES",
           "same_task"]

QUERIES = {"conversation": "the user's side of the conversation", "first turn": "the first user turn"}
DEPTH = 10
BASELINES = ("none", *MEMORIES)
MEASURES = {"mrr": "MRR", "top1": "top-1", "cover3": "top-3 cover", "step_f1": "step F1"}
PARTS = {"recurring": "recurring requests (the task is in what the KB learned from)",
         "new": "new requests"}
RECURS_SIMILARITY = 0.5
"""For logs that name no task: a request recurs when a remembered one's cosine
with it (idf-weighted index terms) reaches this."""


@dataclass(frozen=True)
class Procedure:
    """The step lines a document tells the agent to take, each the set of tools it offers."""

    steps: tuple[frozenset[str], ...]

    def names(self, tool: str) -> bool:
        return any(tool in step for step in self.steps)


@dataclass(frozen=True)
class Case:
    """A held-out conversation that passed: what it asked and what it did."""

    id: str
    task_id: str
    queries: Mapping[str, str]
    writes: tuple[str, ...]
    tools: frozenset[str]
    recurring: bool = False


@dataclass(frozen=True)
class Scores:
    cases: int
    mrr: float
    top1: float
    cover3: float
    step_f1: float

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _stated(t: Trajectory) -> str | None:
    """The task a log states for a conversation, when it states one: its
    statement, unless that is only the first user turn (the importer's stand-in)."""
    statement = " ".join(t.task.split())
    turns = user_turns(t)
    return statement if statement and (not turns or " ".join(turns[0].split()) != statement) else None


def _names_task(t: Trajectory) -> bool:
    """Whether the log gave the conversation a task id, rather than an id of
    its own (a chat line's number, a trace's conversation id)."""
    meta = t.meta or {}
    return meta.get(UNNAMED_TASK) is not True and t.task_id not in {str(meta.get("conversation_id")),
                                                                     f"line-{meta.get('line')}"}


def same_task(a: Trajectory, b: Trajectory) -> bool | None:
    """Whether two conversations are of one task, by what the logs say: the
    same task id (and the same statement, when both logs state one); ``None``
    when either log names no task."""
    if not (_names_task(a) and _names_task(b)):
        return None
    first, second = _stated(a), _stated(b)
    return a.task_id == b.task_id and (first is None or second is None or first == second)


def _cosine(a: Counter[str], b: Counter[str], idf: Callable[[str], float]) -> float:
    dot = sum(c * b[t] * idf(t) ** 2 for t, c in a.items() if t in b)
    norm = math.sqrt(sum((c * idf(t)) ** 2 for t, c in a.items()) * sum((c * idf(t)) ** 2 for t, c in b.items()))
    return dot / norm if norm else 0.0


class _Recurrence:
    """Which held-out conversations recur in a memory: the same task where
    the logs name tasks (``same_task``), else a remembered request close to
    theirs (``RECURS_SIMILARITY``)."""

    def __init__(self, memory: Sequence[Trajectory]) -> None:
        self.memory = list(memory)  # as logged: a statement scrubbed by one run's values would differ from another's
        self.tasks = {(t.task_id, _stated(t)) for t in self.memory if _names_task(t)}
        self.ids = {task for task, _ in self.tasks}
        self._requests: list[Counter[str]] | None = None

    def __call__(self, held: Trajectory) -> bool:
        if _names_task(held) and held.task_id in self.ids:
            return any(same_task(held, m) for m in self.memory if m.task_id == held.task_id)
        if _names_task(held) and all(_names_task(m) for m in self.memory):
            return False
        if self._requests is None:
            self._requests = [Counter(analyze(request_text(m.messages))) for m in self.memory]
        mine = Counter(analyze(request_text(held.messages)))
        df = Counter(term for r in self._requests for term in r)
        n = len(self._requests) + 1

        def idf(term: str) -> float:
            return math.log1p((n - df[term] - 1 + 0.5) / (df[term] + 1 + 0.5))

        return any(_cosine(mine, r, idf) >= RECURS_SIMILARITY for r in self._requests if r)


def cases_of(trajectories: Sequence[Trajectory], scrub: Callable[[Trajectory], Trajectory],
             memory: Sequence[Trajectory] = (), known: Collection[str] = ()) -> list[Case]:
    """The cases of ``trajectories``: those that passed and did an action,
    queried with their scrubbed user turns; recurring when ``memory`` (what
    the KB learned from, as logged) holds their task. A call of a tool the
    conversation did not declare, that the agent's ``known`` tools leave
    out, or whose name reads as instructions, is none of its actions: such a
    call is nothing a recipe may name, so a log cannot lower a KB's score with
    calls of it."""
    recurs = _Recurrence(memory)
    cases = []
    for t in trajectories:
        if t.success is not True:
            continue
        calls = [c for c in agent_calls(t, known) if name_reason(c.name) is None]
        writes = writes_of(calls)
        if not writes:
            continue
        clean = scrub(t)
        turns = [" ".join(turn.split()) for turn in user_turns(clean)] or [clean.task]
        cases.append(Case(t.id, t.task_id, {"conversation": " ".join(turns), "first turn": turns[0]},
                          tuple(writes), frozenset(used_tools(calls)), bool(memory) and recurs(t)))
    return cases


def procedure_of(document: Recipe) -> Procedure:
    """The steps of a document's procedure as written (every step line)."""
    return Procedure(tuple(procedure(document.section(HOW))))


def shown_procedure(hit: Hit) -> Procedure:
    """The steps of what the agent is shown of a hit (``shown_body``)."""
    how = next((text for title, text in split_sections(shown_body(hit)) if title.lower() == HOW.lower()), "")
    return Procedure(tuple(procedure(how)))


def _f1(steps: Sequence[frozenset[str]], tools: frozenset[str]) -> float:
    if not steps or not tools:
        return 0.0
    precision = sum(bool(step & tools) for step in steps) / len(steps)
    recall = sum(any(tool in step for step in steps) for tool in tools) / len(tools)
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


def case_scores(ranked: Sequence[Procedure], case: Case) -> tuple[float, float, float, float]:
    """MRR, top-1, top-3 coverage and step F1 of one case."""
    ranks = [next((n for n, found in enumerate(ranked, 1) if found.names(action)), None) for action in case.writes]
    n = len(ranks)
    return (sum(1 / r for r in ranks if r) / n, sum(r == 1 for r in ranks) / n,
            sum(bool(r and r <= 3) for r in ranks) / n, _f1(ranked[0].steps, case.tools) if ranked else 0.0)


def score(index: Searchable | None, cases: Sequence[Case], query: str) -> list[tuple[float, ...]]:
    """Each case's measures for one arm (``index`` ``None``: no memory) and one query kind."""
    known: dict[tuple[str, Any], Procedure] = {}

    def shown(hit: Hit) -> Procedure:
        key = (hit.name, hit.exemplar)
        if key not in known:
            known[key] = shown_procedure(hit)
        return known[key]

    rows: list[tuple[float, ...]] = []
    for case in cases:
        hits = index.search(case.queries[query], DEPTH) if index is not None and len(index) else []
        rows.append(case_scores([shown(h) for h in hits], case))
    return rows


def mean_scores(rows: Sequence[tuple[float, ...]]) -> Scores:
    n = len(rows)
    return Scores(n, *(round(sum(r[i] for r in rows) / n, 4) if n else 0.0 for i in range(len(MEASURES))))


@dataclass(frozen=True)
class Arm:
    """One column: ``kind`` is ``none``, a memory (``trajectories``, ``notes``,
    ``all-trajectories``) or ``kb``; ``rows`` hold each case's measures per query."""

    label: str
    kind: str
    documents: int
    rows: Mapping[str, Sequence[tuple[float, ...]]]

    def scores(self, query: str, cases: Sequence[Case] | None = None, part: str | None = None) -> Scores:
        """Mean measures over every case, or over one part's."""
        rows = self.rows[query]
        if part is not None and cases is not None:
            rows = [r for r, c in zip(rows, cases, strict=True) if c.recurring == (part == "recurring")]
        return mean_scores(rows)


def compare_arms(kbs: Mapping[str, Sequence[Recipe]], pool: Sequence[Trajectory], cases: Sequence[Case],
                 retriever: Retriever, scrub: Any, contexts: Sequence[str] = BASELINES,
                 everything: Sequence[Trajectory] = ()) -> list[Arm]:
    """The baselines in ``contexts`` (their memories built from ``pool``;
    ``all-trajectories`` from ``everything``), then each KB of ``kbs`` (label →
    recipes), scored on ``cases``."""
    arms = []
    for context in contexts:
        if context == "none":
            arms.append(Arm("none", "none", 0, {q: [(0.0,) * len(MEASURES)] * len(cases) for q in QUERIES}))
            continue
        source = everything if context == "all-trajectories" else pool
        documents = memory_documents(context, [scrub(t) for t in source])
        arms.append(_arm(context, context, documents, cases, retriever))
    for label, recipes in kbs.items():
        arms.append(_arm(label, "kb", list(recipes), cases, retriever))
    return arms


def _arm(label: str, kind: str, documents: list[Recipe], cases: Sequence[Case], retriever: Retriever) -> Arm:
    index = retriever.index(documents) if documents else None
    return Arm(label, kind, len(documents), {q: score(index, cases, q) for q in QUERIES})
