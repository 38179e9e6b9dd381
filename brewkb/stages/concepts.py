"""Concept deduplication: cluster concept names by embedding, one
representative (meta-concept) per cluster, and the tasks of each.

Clustering is agglomerative with average linkage on cosine similarity: the two
closest clusters merge while their mean pairwise similarity is at least the
threshold. Deterministic: ties break by name order. Rules on top, for concepts
named by actions (``cancel reservation``):

- names led by different action verbs never share a cluster (the verb is the
  intent: ``book reservation`` and ``cancel reservation`` stay apart however
  alike the rest of the words are); synonyms (change/modify/move/reschedule →
  update) count as one verb;
- two *tool* concepts — some insight of each quotes a call of a tool of that
  name and some passing run gave its procedure — never share a cluster:
  different tools are different procedures;
- a *request* concept — no insight of it quotes a call of a tool of that name,
  so it names what a user asked for rather than a tool the agent used (a
  refused or handed-off request) — and a tool concept no run did (only failed
  attempts) merge into the nearest concept with the same verb, with a note; a
  request nothing was done for (every insight ``undone``: an aside, or a
  request rightly answered without a change) with no such neighbour is
  dropped, with a note in ``dropped``;
- a cluster is named by a tool name before a request, then by the name
  with most passing-run procedures (the action that worked), then by count;
- a request concept with fewer insights than ``min_insights`` merges into the
  nearest concept with the same verb, with a note; without one it stays a
  concept of its own;
- *support*: a concept is kept only when conversations that passed (or whose
  outcome is unknown) did something for it — a procedure of it that calls a
  write or a hand-off the conversation made without an error (its requests
  handed to a person count) — in at least ``min_tasks`` distinct tasks, one
  of them with the concept's own tool when it is named for one. A request no
  action followed, an action only failed conversations did, or one a single
  task did (however many of its conversations the logs hold) is dropped. The
  rule reads what the conversations called, so it holds whatever backend
  reflected;
- a concept whose name reads as instructions to an agent (a tool a log named
  ``skip_identity_verification_and_refund``; ``brewkb.trajectories.instructions``)
  is dropped: no recipe may be named so; so is a concept named for a tool
  that is not one of the agent's, when a team lists them (``known``: a log
  can name tools the agent does not have), and only their calls count as
  actions for support; a name of either kind is no alias of a concept kept;
- at most ``max_concepts`` concepts (``concept_bound``: a share of the distinct
  learning tasks) are kept, those supported by the most tasks first.
Nothing is dropped silently: ``Concept.merged`` and the ``dropped`` list hold
the notes.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from brewkb.git.refs import RESERVED_CONCEPTS
from brewkb.llm.embed import cosine_matrix
from brewkb.llm.requests import verb_of
from brewkb.llm.roles import DIAGNOSTIC, PRESCRIPTIVE, REQUEST, SEEN, Insight
from brewkb.recipes import slugify
from brewkb.trajectories.instructions import name_reason
from brewkb.trajectories.schema import COPY_KEY, Trajectory, tool_calls
from brewkb.trajectories.split import split_tasks
from brewkb.trajectories.tools import (
    NOT_THE_AGENTS,
    agent_calls,
    concept_of_tool,
    is_handoff,
    is_write,
    not_the_agents,
)

__all__ = ["Concept", "agglomerate", "build_concepts", "concept_slugs", "actions_of", "held_out", "concept_bound",
           "supporting_tasks", "tasks_of", "evidence", "known_notes"]


@dataclass(frozen=True)
class Concept:
    """A meta-concept: ``slug`` names its recipe; ``q_train`` / ``q_eval`` are
    the task ids whose trajectories gave insights mapped to it; ``merged``
    notes the smaller concepts merged into it and why."""

    slug: str
    title: str
    aliases: tuple[str, ...]
    insights: int
    q_train: tuple[str, ...]
    q_eval: tuple[str, ...]
    merged: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Concept:
        return cls(data["slug"], data["title"], tuple(data["aliases"]), int(data["insights"]),
                   tuple(data["q_train"]), tuple(data["q_eval"]), tuple(data.get("merged", ())))


def is_tool_concept(name: str, insights: Sequence[Insight]) -> bool:
    """Whether some insight of ``name`` quotes a call of the tool it is named
    for (``cancel reservation`` ← `` `cancel_reservation(...)` ``)."""
    call = re.compile(r"\b" + r"[_\W]?".join(map(re.escape, name.split())) + r"\(", re.IGNORECASE)
    return any(call.search(i.insight) or any(call.search(s) for s in i.steps) for i in insights)


def agglomerate(vectors: np.ndarray, threshold: float, groups: Sequence[str] | None = None) -> list[int]:
    """Cluster label per row (labels numbered by first member); rows of
    different ``groups`` (e.g. action verbs) never share a cluster."""
    n = len(vectors)
    if n == 0:
        return []
    sims = cosine_matrix(vectors.astype(np.float64))
    if groups is not None:
        apart = np.array([[a != b for b in groups] for a in groups])
        sims = np.where(apart, -1.0, sims)
    clusters: list[list[int]] = [[i] for i in range(n)]
    link = sims.copy()
    np.fill_diagonal(link, -np.inf)
    sizes = np.ones(n)
    alive = np.ones(n, dtype=bool)
    while alive.sum() > 1:
        masked = np.where(alive[:, None] & alive[None, :], link, -np.inf)
        a, b = np.unravel_index(int(np.argmax(masked)), masked.shape)
        if masked[a, b] < threshold:
            break
        a, b = min(a, b), max(a, b)
        # average linkage: size-weighted mean of the two rows
        link[a, :] = (link[a, :] * sizes[a] + link[b, :] * sizes[b]) / (sizes[a] + sizes[b])
        link[:, a] = link[a, :]
        link[a, a] = -np.inf
        sizes[a] += sizes[b]
        alive[b] = False
        clusters[a].extend(clusters[b])
        clusters[b] = []
    labels = [0] * n
    for label, members in enumerate(sorted((sorted(c) for c in clusters if c), key=lambda c: c[0])):
        for i in members:
            labels[i] = label
    return labels


def concept_slugs(titles: Sequence[str]) -> list[str]:
    """Distinct recipe names for titles; reserved ref names get a suffix."""
    taken: set[str] = set()
    slugs = []
    for title in titles:
        base = slugify(title)
        if base in RESERVED_CONCEPTS:
            base = f"{base}-concept"
        slug, n = base, 2
        while slug in taken:
            slug, n = f"{base}-{n}", n + 1
        taken.add(slug)
        slugs.append(slug)
    return slugs


def actions_of(trajectories: Sequence[Trajectory], known: Collection[str] = ()) -> dict[str, frozenset[str]]:
    """Trajectory id → the tools it called without an error that act: writes and hand-offs (of the
    agent's tools, when ``known`` lists them, and of those its requests declared, when it says)."""
    return {t.id: frozenset(c.name for c in agent_calls(t, known)
                            if not c.error and (is_write(c.name) or is_handoff(c.name))) for t in trajectories}


def held_out(trajectories: Sequence[Trajectory], min_tasks: int,
             known: Collection[str] = ()) -> tuple[set[str], set[str]]:
    """The eval and the test tasks of logged conversations (``split_tasks``):
    the eval split asks for every action more than ``min_tasks`` learning
    tasks performed (what the support rule counts: conversations that did not
    fail, copies of one conversation as one task)."""
    counted = tasks_of(trajectories)
    done = actions_of([t for t in trajectories if t.success is not False and counted[t.id] == t.task_id], known)
    actions: dict[str, set[str]] = defaultdict(set)
    for t in trajectories:
        actions[t.task_id] |= done.get(t.id, frozenset())
    return split_tasks([t.task_id for t in trajectories], actions, min_tasks)


def known_notes(trajectories: Sequence[Trajectory], known: Collection[str], shown: int = 10) -> list[str]:
    """What a team that listed its agent's tools (``known``) should hear of
    ``trajectories``: the tools they call that the list leaves out (nothing is
    learned from those calls), and the listed tools none of them calls (a name
    spelled otherwise than the agent calls it learns nothing)."""
    called = Counter(name for t in trajectories for name in {c.name for c in tool_calls(t.messages)})
    others = sorted(name for name in called if not_the_agents(name, known))
    never = [name for name in known if name not in called]
    notes = []
    if others:
        notes.append(f"{len(others)} tool(s) the learning conversations call are {NOT_THE_AGENTS}, so nothing is "
                     "learned from their calls: " + ", ".join(f"{n} ({called[n]})" for n in others[:shown])
                     + (f" and {len(others) - shown} more" if len(others) > shown else ""))
    if never:
        notes.append(f"tools.known lists {len(never)} tool(s) no learning conversation calls (check the spelling "
                     "against the agent's): " + ", ".join(never[:shown])
                     + (f" and {len(never) - shown} more" if len(never) > shown else ""))
    return notes


def concept_bound(tasks: int, per_task: float) -> int:
    """The most concepts a run keeps: ``per_task`` per distinct learning task, rounded up, at least one."""
    return max(1, math.ceil(per_task * tasks - 1e-9))


def tasks_of(trajectories: Sequence[Trajectory]) -> dict[str, str]:
    """Trajectory id → the task it counts as for support: its own, but the
    conversations whose messages were the same as the log held them
    (``meta.copy_key``, written at import) count as the first of their task
    ids, so copies of one conversation are one task whatever ids a log gives
    them. Without that key a conversation is its own task: scrubbed messages
    would make different customers' conversations alike."""
    first: dict[str, str] = {}
    out = {}
    for t in sorted(trajectories, key=lambda t: (t.task_id, t.id)):
        copy = t.meta.get(COPY_KEY)
        out[t.id] = first.setdefault(copy, t.task_id) if isinstance(copy, str) else t.task_id
    return out


def supporting_tasks(insights: Sequence[Insight], actions: Mapping[str, frozenset[str]],
                     tool: str | None = None, tasks: Mapping[str, str] | None = None) -> set[str]:
    """The distinct tasks whose conversations passed (or whose outcome is
    unknown) and did something for a procedure among ``insights``: one of its
    steps calls a tool the conversation (``actions`` by trajectory id) made
    without an error, a write or a hand-off. For a concept named for a
    ``tool`` (``cancel reservation``), none unless one of them made that call."""
    def acts(i: Insight) -> set[str]:
        done = actions.get(i.source, frozenset())
        return {name for name in (s.split("(", 1)[0].strip("` ") for s in i.steps) if name in done}

    found = [((tasks or {}).get(i.source, i.task_id), acts(i)) for i in insights
             if i.kind == "steps" and i.polarity != DIAGNOSTIC]
    if tool is not None and not any(concept_of_tool(name) == tool for _, names in found for name in names):
        return set()
    return {task for task, names in found if names}


def evidence(insights: Sequence[Insight], mapping: Mapping[str, str], searched: set[str],
             run: Sequence[Insight] = ()) -> list[Insight]:
    """The insights a recipe learned from logs is written from: a write made
    together with the concept's (kind ``together``, a step taken "only when
    the request also asks to") only when that write is itself a concept the
    run searches (``searched`` slugs), and an anchor's exemplar (kind
    ``request``) without the writes of other concepts the run does not
    search: an action that has no support of its own, or waits for evidence,
    is named in no other recipe either. With ``run`` (the insights of every
    concept) it adds one ``SEEN`` insight: the steps that are no write and
    that more than one passing conversation of the run took before a write
    (``seen_steps``)."""
    def searched_write(step: str) -> bool:
        tool = step.split("(", 1)[0]
        return not is_write(tool) or mapping.get(concept_of_tool(tool)) in searched

    kept = []
    for i in insights:
        if i.kind == "together" and i.steps and not searched_write(i.steps[0]):
            continue
        if i.kind == REQUEST and not all(map(searched_write, i.steps)):
            i = replace(i, steps=tuple(s for s in i.steps if searched_write(s)))
        kept.append(i)
    seen = seen_steps(run)
    if kept and seen:
        kept.append(Insight(kept[0].concept, "Steps that more than one passing conversation of these logs took "
                            "before a write", PRESCRIPTIVE, "", "", steps=seen, kind=SEEN))
    return kept


def seen_steps(insights: Sequence[Insight], support: int = 2) -> tuple[str, ...]:
    """The steps (lookups, messages, hand-offs: no write) of the passing
    procedures among ``insights`` that ``support`` conversations or more took."""
    took: dict[str, set[str]] = defaultdict(set)
    for i in insights:
        if i.kind == "steps" and i.polarity != DIAGNOSTIC:
            for step in i.steps:
                if not is_write(step.split("(", 1)[0]):
                    took[step].add(i.source)
    return tuple(sorted(step for step, sources in took.items() if len(sources) >= support))


def _misnamed(name: str, tool: set[str], known: Collection[str]) -> str | None:
    """Why no recipe, and no alias, may bear ``name``, a name a log gave: it
    reads as instructions to an agent (a tool named "skip identity
    verification"), or it names a tool the agent's ``known`` tools leave out."""
    if (reason := name_reason(name)) is not None:
        return f"its name reads as instructions to an agent ({reason}); no recipe is named so"
    if known and name in tool and name not in {concept_of_tool(k) for k in known}:
        return f"the tool it is named for is {NOT_THE_AGENTS}"
    return None


def _supported(members: dict[int, list[str]], reps: Mapping[int, str], by_name: Mapping[str, list[Insight]],
               notes: dict[int, list[str]], min_tasks: int, max_concepts: int | None,
               actions: Mapping[str, frozenset[str]], tool: set[str], tasks: Mapping[str, str],
               known: Collection[str]) -> list[str]:
    """Drop the clusters ``_misnamed``, those without support, then those
    beyond ``max_concepts`` (the least supported); returns the notes of what was dropped."""
    support = {lb: supporting_tasks([i for n in group for i in by_name[n]], actions,
                                    reps[lb] if reps[lb] in tool else None, tasks) for lb, group in members.items()}
    dropped: list[str] = []
    for label in sorted(members, key=lambda lb: reps[lb]):
        if why := _misnamed(reps[label], tool, known):
            dropped.append(f"{reps[label]!r} dropped: {why}")
            dropped.extend(notes.pop(label, []))
            del members[label]
            continue
        found = len(support[label])
        if found >= min_tasks:
            continue
        dropped.append(f"{reps[label]!r} dropped: " + (
            f"conversations of {found} task(s) did it, fewer than stages.min_concept_tasks ({min_tasks})" if found
            else "no conversation that passed did its action (a write or a hand-off): a request no action "
                 "followed, or attempts that failed"
                 + ("; only calls of the tools tools.known lists count" if known else "")))
        dropped.extend(notes.pop(label, []))
        del members[label]
    if max_concepts is not None and len(members) > max_concepts:
        size = {lb: sum(len(by_name[n]) for n in group) for lb, group in members.items()}
        # a task counts for a concept as 1/n, n the actions of its conversation that did the concept's action
        # (the fewest, when several did): conversations that make many actions up at once cannot outweigh the
        # actions other conversations made, even under the same task ids
        weight = {lb: sum(_shares([i for n in group for i in by_name[n]], actions, tasks).values())
                  for lb, group in members.items()}
        ranked = sorted(members, key=lambda lb: (-weight[lb], -len(support[lb]), -size[lb], reps[lb]))
        for label in ranked[max_concepts:]:
            dropped.append(f"{reps[label]!r} dropped: conversations of {len(support[label])} task(s) did it, and "
                           f"the run keeps at most {max_concepts} concepts (stages.concepts_per_task × its "
                           "learning tasks), those of the most tasks (a conversation that made n actions counts "
                           "1/n for each)")
            dropped.extend(notes.pop(label, []))
            del members[label]
    return dropped


def _shares(insights: Sequence[Insight], actions: Mapping[str, frozenset[str]],
            tasks: Mapping[str, str]) -> dict[str, float]:
    """Task → what it counts for a concept of ``insights``: 1/n, n the actions of the conversation of the task
    that did something for it with the fewest actions (see ``supporting_tasks``)."""
    out: dict[str, float] = {}
    for i in insights:
        done = actions.get(i.source, frozenset())
        if i.kind == "steps" and i.polarity != DIAGNOSTIC and any(s.split("(", 1)[0].strip("` ") in done
                                                                 for s in i.steps):
            task = tasks.get(i.source, i.task_id)
            out[task] = max(out.get(task, 0.0), 1 / len(done))
    return out


def _merge_small(members: dict[int, list[str]], counts: Counter[str], tool: set[str], vectors: np.ndarray,
                 index: Mapping[str, int], min_insights: int,
                 undone: set[str]) -> tuple[dict[int, list[str]], list[str]]:
    """Clusters with no tool a run did folded into their nearest cluster of
    the same verb, or dropped when nothing was done for them (see the module
    docstring); returns label → notes, and the notes of what was dropped."""
    notes: dict[int, list[str]] = defaultdict(list)
    dropped: list[str] = []

    def rep(label: int) -> str:
        return max(members[label], key=lambda n: (counts[n], n in tool, -len(n), [-ord(c) for c in n]))

    def size(label: int) -> int:
        return sum(counts[n] for n in members[label])

    for label in sorted(members, key=lambda lb: (size(lb), rep(lb))):
        name = rep(label)
        request = not any(n in tool for n in members[label])
        if not request:
            continue
        others = [lb for lb in members if lb != label and members[lb] and verb_of(rep(lb)) == verb_of(name)
                  and (any(n in tool for n in members[lb]) or size(lb) > size(label))]
        if not others:
            if all(n in undone for n in members[label]):
                dropped.append(f"{name!r} dropped: no passing run did anything for it (an aside, or a request "
                               "rightly refused) and no concept shares its action")
                dropped.extend(notes.pop(label, []))
                members[label] = []
            continue
        mine = vectors[[index[n] for n in members[label]]].mean(axis=0)
        sims = {lb: float(cosine_matrix(np.vstack([mine, vectors[[index[n] for n in members[lb]]].mean(axis=0)])
                                        .astype(np.float64))[0, 1]) for lb in others}
        into = max(others, key=lambda lb: (sims[lb], size(lb), rep(lb)))
        why = "a request with the same action" if request else f"{size(label)} insight(s), the same action"
        notes[into].append(f"{name!r} merged in: {why}")
        notes[into].extend(notes.pop(label, []))
        members[into].extend(members[label])
        members[label] = []
    for label in [lb for lb, group in members.items() if not group]:
        del members[label]
    return notes, dropped


def build_concepts(train: Sequence[Insight], evaluation: Sequence[Insight], names: Sequence[str],
                   vectors: np.ndarray, threshold: float, min_insights: int = 2, *, min_tasks: int = 0,
                   max_concepts: int | None = None, actions: Mapping[str, frozenset[str]] | None = None,
                   tasks: Mapping[str, str] | None = None,
                   known: Collection[str] = ()) -> tuple[list[Concept], dict[str, str], list[str]]:
    """Meta-concepts from the train insights, the name → slug map, and the
    notes of the names dropped.
    ``names``/``vectors`` cover every concept name of both insight lists;
    an eval name joins the train cluster it is most similar to if that
    similarity reaches the threshold. ``min_tasks``, ``max_concepts`` and
    ``actions`` (``actions_of`` the train trajectories) are the support rule
    and the bound (0 and ``None``: neither); ``known``, the agent's tools when
    a team lists them: a concept named for any other tool is dropped."""
    train = [i for i in train if i.kind != REQUEST]  # a request quoted as an anchor is no lesson
    evaluation = [i for i in evaluation if i.kind != REQUEST]
    counts = Counter(i.concept for i in train)
    train_names = sorted(counts)
    index = {n: k for k, n in enumerate(names)}
    by_name: dict[str, list[Insight]] = defaultdict(list)
    for insight in train:
        by_name[insight.concept].append(insight)
    tool = {n for n in train_names if is_tool_concept(n, by_name[n])}
    procedures = {n for n in train_names if any(i.kind == "steps" for i in by_name[n])}
    undone = {n for n in train_names if all(i.kind == "undone" for i in by_name[n])}
    # the verb is the intent; a tool some run did is a procedure of its own
    groups = [f"tool:{n}" if n in tool and n in procedures else verb_of(n) for n in train_names]
    labels = agglomerate(vectors[[index[n] for n in train_names]], threshold, groups) if train_names else []
    members: dict[int, list[str]] = defaultdict(list)
    for name, label in zip(train_names, labels, strict=True):
        members[label].append(name)
    notes, dropped = _merge_small(members, counts, tool & procedures, vectors, index, min_insights, undone)
    worked = Counter(i.concept for i in train if i.kind == "steps")  # the action that worked names the concept
    reps = {label: max(group, key=lambda n: (n in tool, worked[n], counts[n], -len(n), [-ord(c) for c in n]))
            for label, group in members.items()}
    if min_tasks or max_concepts is not None or known:
        dropped += _supported(members, reps, by_name, notes, min_tasks, max_concepts, actions or {}, tool, tasks or {},
                              known)
    kept = [n for n in train_names if any(n in group for group in members.values())]
    labels = [next(lb for lb, group in members.items() if n in group) for n in kept]
    order = sorted(members, key=lambda lb: (-sum(counts[n] for n in members[lb]), reps[lb]))
    slugs = dict(zip(order, concept_slugs([reps[lb] for lb in order]), strict=True))
    mapping = {name: slugs[label] for name, label in zip(kept, labels, strict=True)}
    # eval names: nearest train concept name above the threshold
    if kept:
        train_vecs = vectors[[index[n] for n in kept]]
        for name in sorted({i.concept for i in evaluation} - set(mapping) - set(train_names)):
            sims = cosine_matrix(np.vstack([vectors[index[name]], train_vecs]).astype(np.float64))[0, 1:]
            best = int(np.argmax(sims))
            if sims[best] >= threshold:
                mapping[name] = mapping[kept[best]]
    done = {i.concept for i in evaluation if i.kind == "steps" and i.polarity != DIAGNOSTIC}
    dropped += [f"{name!r} dropped: " + (_misnamed(name, done, known) or "only conversations held out to choose recipe "
                                         "versions (the eval split) did it; none the run learns from")
                for name in sorted(done - set(mapping) - set(train_names))]
    q_train: dict[str, set[str]] = defaultdict(set)
    q_eval: dict[str, set[str]] = defaultdict(set)
    for insight in train:
        if insight.concept in mapping:
            q_train[mapping[insight.concept]].add(insight.task_id)
    for insight in evaluation:
        if insight.concept in mapping:
            q_eval[mapping[insight.concept]].add(insight.task_id)
    concepts = [
        Concept(slug=slugs[lb], title=reps[lb],
                aliases=tuple(sorted(n for n in members[lb] if n != reps[lb] and not _misnamed(n, tool, known))),
                insights=sum(counts[n] for n in members[lb]), q_train=tuple(sorted(q_train[slugs[lb]])),
                q_eval=tuple(sorted(q_eval[slugs[lb]])), merged=tuple(notes.get(lb, ())))
        for lb in order
    ]
    return concepts, mapping, dropped
