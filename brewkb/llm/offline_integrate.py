"""The offline Integrator: one recipe from a concept's insights and its
current document, by rules.

A seeded sample picks which insights to use (each with probability
``SAMPLE``, never leaving out every procedure) and which requests to quote,
so different samples differ in quality, as LLM samples do.

Every text it quotes from a log (requests, and the error texts insights
carry) goes through ``brewkb.trajectories.quote``: one safe line, or held
back when it reads as instructions to an agent.

- **When to use** quotes a few requests as users made them (scrubbed): those
  that asked for the concept's action, from passing runs first; the
  description is the concept's title and two of them. The section
  "Requests it was learned from" holds the recipe's *anchors* (at most
  ``MAX_LEARNED``): each conversation's request in its user's words (kind
  ``request`` insights), those of passing runs first, each followed by that
  run's calls (its exemplar), so the recipe is found by the requests it
  served. Without such insights it quotes the other requests.
- **How to perform** merges the procedures of the concept's passing runs
  (all of them, not the sample: the sample never decides a step): every step
  of every run, each placed after the step that preceded it where it was
  first seen, so steps keep their order of use; two calls of tools led by
  the same verb that fill the same place and never occur in the same run are
  *alternatives* and share a line (``a(x)`` or ``b(y)``). Every line needs
  *support*: at least ``SUPPORT`` runs (conversations) took it, else it is
  not written at all, so one conversation adds no step. A supported line is
  a step when its share of the concept's passing runs is at least ``SHARE``
  (each task weighs the same, however many runs of it the logs hold: the
  share of a task's runs that took the line, averaged over the tasks), else
  it is named as optional after the steps ("Some runs also used: ..."); so
  runs that skip a step drop it only when they are more than ``1 - SHARE``
  of the concept's tasks, and copies of one task weigh as one. The concept's
  own tool is always a step. A concept that no passing run did, but failing
  ones did without an error, gets their procedure, followed by "No passing
  run did this: ...". The other writes that ``SUPPORT`` passing runs or more
  made for the same request follow, most often first, each as a step taken
  "only when the request also asks to" do that (a conversation that changed
  a booking and added a bag teaches both recipes of the other). A procedure
  of this concept's requests that did not use its tool and handed the
  request to a person, in ``SUPPORT`` runs, becomes a branch: "If it cannot
  be done: hand off". Where the concept has fewer runs than ``SUPPORT`` (a
  run of the agent on the configured tasks, where the concepts stage asks
  for no support), their steps need the support of all of them.
  Without a procedure, the current document's is kept, else the recipe says
  none is known (``distill`` never gets there: the concepts stage keeps no
  concept that passing runs of several tasks did not do).
- **Conditions** turn the errors that ended an attempt into checks ("Before
  `w`, check with `lookup`: it failed with ..."), and say when such requests
  were answered without a change.
- **Pitfalls** quote the other errors and failures, each once.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Collection, Sequence
from itertools import combinations

from brewkb.llm.requests import (
    action_verb,
    asks_for,
    first_line,
    names_object,
    verbs_in,
)
from brewkb.llm.roles import REQUEST, SEEN, Insight
from brewkb.recipes import (
    EXAMPLES,
    FOR_EXAMPLE,
    FOR_REQUEST,
    LEARNED_FROM,
    Anchor,
    Recipe,
    anchor_line,
    build_body,
    slugify,
)
from brewkb.trajectories.quote import quote
from brewkb.trajectories.schema import content_id
from brewkb.trajectories.tools import (
    ALSO_ASKED,
    concept_of_tool,
    is_handoff,
    name_words,
)

__all__ = ["integrate", "merge_steps", "step_lines", "common", "SAMPLE", "MAX_REQUESTS", "SUPPORT", "SHARE"]

SAMPLE = 0.7
MAX_STEPS = 10
MAX_REQUESTS = 3
MAX_LEARNED = 50
"""Requests a recipe quotes in all, as many as the trajectory ids ``sources`` keeps."""
MAX_LINES = 6
MAX_ANCHOR = 500
"""Characters of a request an anchor keeps."""
NO_PROCEDURE = "No procedure is known yet; record what works."
SUPPORT = 2
"""Conversations that must have taken a line before a recipe names it: one adds nothing."""
LONE_ERROR = "(an error text only one task returned, not quoted)"
"""What Conditions and Pitfalls say of an error text conversations of fewer than ``SUPPORT`` tasks returned."""
SHARE = 0.5
"""Share of the concept's passing runs (each task weighing the same) at which a supported line is a step."""


def _tool(step: str) -> str:
    return step.split("(", 1)[0]


def _verb(step: str) -> str:
    return next(iter(name_words(_tool(step))), "")


def merge_steps(sequences: Sequence[Sequence[str]]) -> list[str]:
    """One order of every step of every sequence that keeps each step after
    the steps that came right before it in a sequence (``[a, c] + [b, c]`` →
    ``[a, b, c]``); of the steps free to come next, the one that comes
    earliest in its sequences on average (then the one seen first). Where the
    sequences disagree (``[a, b] + [b, a]``), that average alone decides."""
    first: dict[str, int] = {}
    places: dict[str, list[float]] = {}
    before: dict[str, set[str]] = {}
    for sequence in sequences:
        for n, step in enumerate(sequence):
            first.setdefault(step, len(first))
            places.setdefault(step, []).append(n / max(len(sequence) - 1, 1))
            before.setdefault(step, set()).update(sequence[n - 1:n] if n else ())

    def key(step: str) -> tuple[float, int]:
        return sum(places[step]) / len(places[step]), first[step]

    merged: list[str] = []
    left = set(first)
    while left:
        free = [s for s in left if not (before[s] - {s}) & left]
        step = min(free or left, key=key)
        merged.append(step)
        left.discard(step)
    return merged


def step_lines(sequences: Sequence[Sequence[str]], concept: str) -> list[list[str]]:
    """The merged steps as lines, alternatives sharing a line: two calls of
    tools led by the same verb that no run used together and that runs
    followed with a same step (they fill the same place, such as two ways to
    find a customer). The concept's own tool is never an alternative."""
    together = {frozenset(pair) for seq in sequences for pair in combinations(set(seq), 2)}
    after: dict[str, set[str]] = {}
    for seq in sequences:
        for n, step in enumerate(seq):
            after.setdefault(step, set()).update(seq[n + 1:])
    lines: list[list[str]] = []
    for step in merge_steps(sequences):
        place = next((line for line in lines if not _own(step, concept) and not any(_own(s, concept) for s in line)
                      and all(frozenset((step, s)) not in together and after[step] & after[s]
                              and _verb(step) == _verb(s) for s in line)), None)
        if place is None:
            lines.append([step])
        else:
            place.append(step)
    return lines


def common(lines: Sequence[Sequence[str]], sequences: Sequence[Sequence[str]], concept: str,
           tasks: Sequence[str] | None = None, support: int = SUPPORT,
           seen: Collection[str] = ()) -> tuple[list[list[str]], list[list[str]]]:
    """The lines with support (``support`` of the runs, one procedure of one
    conversation each, used one of its steps) that at least ``SHARE`` of the
    runs used, each task weighing the same (``tasks`` names each run's task;
    by default each is a task of its own), with the concept's own tool always;
    and the other supported lines, which a recipe names as optional. A line
    whose steps are all ``seen`` (more than one conversation of the run took
    them, for any concept) has support too. A line without support is in
    neither: one run adds nothing no other run took."""
    of_task = list(tasks) if tasks is not None else [str(n) for n in range(len(sequences))]
    runs: dict[str, list[Sequence[str]]] = defaultdict(list)
    for task, sequence in zip(of_task, sequences, strict=True):
        runs[task].append(sequence)
    kept: list[list[str]] = []
    optional: list[list[str]] = []
    for line in lines:
        used = {t: sum(any(step in s for step in line) for s in seqs) for t, seqs in runs.items()}
        if any(_own(step, concept) for step in line):
            kept.append(list(line))
        elif sum(used.values()) >= support or all(step in seen for step in line):
            share = sum(n / len(runs[t]) for t, n in used.items()) / len(runs)
            (kept if share >= SHARE else optional).append(list(line))
    return kept, optional


def _procedures(insights: Sequence[Insight], concept: str, kind: str = "steps") -> tuple[list[Insight], list[Insight]]:
    """The procedures among ``insights``, and those that used the concept's own tool."""
    found = [i for i in insights if i.kind == kind and i.steps]
    return found, [i for i in found if any(_own(s, concept) for s in i.steps)]


def _own(step: str, concept: str) -> bool:
    return concept_of_tool(_tool(step)) == concept


def _distinct(lines: Sequence[str]) -> list[str]:
    """``lines`` in order without repeats: a line that another one holds (the
    same error, once with what the run did next) is kept once, as the longer."""
    kept: list[str] = []
    for line in lines:
        if any(line in k for k in kept):
            continue
        shorter = [n for n, k in enumerate(kept) if k in line]
        if shorter:
            kept[shorter[0]] = line
            kept = [k for n, k in enumerate(kept) if n not in shorter[1:]]
        else:
            kept.append(line)
    return kept


def _requests(insights: Sequence[Insight], concept: str) -> list[str]:
    """The distinct requests that asked for the concept, those of passing runs
    and those naming its object first."""
    texts = list(dict.fromkeys(first_line(i.task, 240) for i in insights if i.task.strip()))
    naming = asks_for(texts, concept) or texts
    worked = {first_line(i.task, 240) for i in insights if i.kind == "steps"}
    return sorted(naming, key=lambda t: (t not in worked, not names_object(t, concept)))


def _anchors(insights: Sequence[Insight], concept: str) -> list[Anchor]:
    """The distinct requests of the concept's conversations (``REQUEST``
    insights), quoted as a recipe may quote them (one that reads as
    instructions is held back), each with the calls of a passing run that
    made it and did the concept's action (its exemplar; a run that rightly
    did nothing shows no way to do it): those with calls first, at most
    ``MAX_LEARNED``. An exemplar shows only calls of tools that the concept's
    passing runs of ``SUPPORT`` tasks or more made (as every step needs
    support): one conversation cannot show an agent a call no other made."""
    requests = [i for i in insights if i.kind == REQUEST and i.task.strip()]
    tasks: dict[str, set[str]] = defaultdict(set)
    for i in requests:
        if any(_own(s, concept) for s in i.steps):
            for step in i.steps:
                tasks[_tool(step)].add(i.task_id)
    support = min(SUPPORT, len(set().union(*tasks.values())))
    steps: dict[str, tuple[str, ...]] = {}
    for i in requests:
        text = quote(i.task, MAX_ANCHOR).text
        if text and not steps.get(text):
            did = any(_own(s, concept) for s in i.steps)
            steps[text] = tuple(s for s in i.steps if len(tasks[_tool(s)]) >= support) if did else ()
    asked = _asking(list(steps), concept)
    ordered = sorted(asked, key=lambda text: not steps[text])
    return [Anchor(text, steps[text]) for text in ordered[:MAX_LEARNED]]


def _asking(texts: Sequence[str], concept: str) -> list[str]:
    """The requests that asked for the concept's action (``asks_for``); for a
    concept of no action verb (a lookup), those that ask for no action at all
    (a request to cancel that read the order first asked for the cancel, not
    the read). All of them when none does."""
    words = concept.split()
    if words and action_verb(words[0]) is not None:
        return asks_for(texts, concept) or list(texts)
    return [t for t in texts if not verbs_in(t)] or list(texts)


def _how(concept: str, insights: Sequence[Insight], current: Recipe | None, seen: Collection[str] = ()) -> str:
    every, mine = _procedures(insights, concept)  # every passing run tells, not the sample
    failed = [] if mine else _procedures(insights, concept, "tried")[1]
    runs = failed or mine or every  # no passing run did it: how runs that failed did, said as such
    support = min(SUPPORT, len({i.source for i in [*every, *failed]}))
    sequences = [i.steps for i in runs]
    lines, optional = common(step_lines(sequences, concept), sequences, concept, [i.task_id for i in runs], support,
                             seen)
    how = [f"{n}. " + " or ".join(f"`{s}`" for s in line) for n, line in enumerate(lines[:MAX_STEPS], 1)]
    if optional:
        how.append("- Some runs also used: " + ", ".join(f"`{s}`" for line in optional[:MAX_STEPS] for s in line))
    if failed:
        how.append("- No passing run did this: these are the steps of runs that failed; check every detail "
                   "against the request and the conditions below")
    how += _asked_with(insights, concept, support)
    if mine or failed:  # this concept's requests that passing runs (``support`` of them) handed to a person instead
        handoffs: dict[str, set[str]] = defaultdict(set)
        for i in every:
            if not any(_own(s, concept) for s in i.steps) and is_handoff(_tool(i.steps[-1])):
                handoffs[i.steps[-1]].add(i.source)
        how += [f"- If it cannot be done: hand off with `{h}`" for h, by in handoffs.items() if len(by) >= support]
    if how:
        return "\n".join(how)
    return (current.section("How to perform") if current else "") or NO_PROCEDURE


def _asked_with(insights: Sequence[Insight], concept: str, support: int = SUPPORT) -> list[str]:
    """The other writes that ``support`` passing runs or more made for this
    concept's requests, most often first: each a step taken only when the
    request asks for it too."""
    calls: dict[str, Counter[str]] = {}  # tool → its calls as written
    done_by: dict[str, set[str]] = defaultdict(set)
    for i in insights:
        if i.kind == "together" and i.steps and not _own(i.steps[0], concept):
            calls.setdefault(_tool(i.steps[0]), Counter())[i.steps[0]] += 1
            done_by[_tool(i.steps[0])].add(i.source)
    lines = []
    for tool, seen in sorted(calls.items(), key=lambda item: -item[1].total()):
        if len(done_by[tool]) < support:
            continue
        runs = seen.total()
        lines.append(f"- `{seen.most_common(1)[0][0]}` {ALSO_ASKED} {concept_of_tool(tool)} "
                     f"({runs} passing run{'s' if runs > 1 else ''} did both)")
    return lines


def _error_of(text: str) -> str | None:
    """The error text an insight quotes (``… failed with: "TEXT"…``), else ``None``."""
    _, found, rest = text.partition('failed with: "')
    end = rest.rfind('"')
    return rest[:end] if found and end >= 0 else None


def _lone_errors(insights: Sequence[Insight], support: int = SUPPORT) -> set[str]:
    """The error texts the concept's conversations of fewer than ``support``
    tasks returned: one conversation's tool result must not put words in
    front of an agent, so such a text is named, not quoted."""
    tasks: dict[str, set[str]] = defaultdict(set)
    for i in insights:
        if (error := _error_of(i.insight)) is not None:
            tasks[error].add(i.task_id)
    return {error for error, seen in tasks.items() if len(seen) < support}


def _unquoted(text: str, lone: set[str]) -> str:
    error = _error_of(text)
    return text.replace(f'"{error}"', LONE_ERROR, 1) if error is not None and error in lone else text


def _conditions(picked: Sequence[Insight], lone: set[str]) -> list[str]:
    """Errors that ended an attempt, grouped by the call and the lookup that
    checks it; then requests rightly left undone."""
    errors: dict[tuple[str, ...], list[str]] = {}
    for i in picked:
        if i.kind == "condition" and i.steps:
            errors.setdefault(i.steps, []).append(_unquoted(i.insight, lone).split("failed with: ", 1)[-1])
    lines = []
    for steps, found in errors.items():
        quoted = ", ".join(list(dict.fromkeys(found))[:3])
        lines.append(f"- Before `{steps[-1]}`, check with `{steps[0]}`: it failed with {quoted}" if len(steps) > 1
                     else f"- `{steps[-1]}` can fail with {quoted}: check for that first")
    undone = [i for i in picked if i.kind == "undone" and i.polarity == "prescriptive"]
    if undone:
        request = quote(first_line(undone[0].task, 400), 160)
        lines.append(f"- Some such requests were rightly left undone: {undone[0].insight[0].lower()}"
                     f"{undone[0].insight[1:]}" + (FOR_REQUEST.format(request.text) if request else ""))
    return lines[:MAX_LINES]


async def integrate(concept: str, aliases: Sequence[str], insights: Sequence[Insight], current: Recipe | None,
                    sample: int, seed: int = 0) -> Recipe:
    anchors = _anchors(insights, concept)
    seen = {s for i in insights if i.kind == SEEN for s in i.steps}
    insights = [i for i in insights if i.kind not in (REQUEST, SEEN)]
    rng = random.Random(content_id([seed, concept, sample, [i.to_json() for i in insights]]))
    picked = [i for i in insights if rng.random() < SAMPLE]
    # never a sample without a procedure: the concept's own when it has one
    procedures = [i for i in insights if i.kind == "steps"]
    own = [i for i in procedures if any(_own(s, concept) for s in i.steps)] or procedures
    if own and not any(i in own for i in picked):
        picked.append(rng.choice(own))
    picked = picked or list(insights[:1])
    rng.shuffle(picked)
    requests = _quoted(_requests(insights, concept))
    head = requests[: MAX_REQUESTS * 2]
    shown = sorted(rng.sample(head, min(MAX_REQUESTS, len(head))), key=head.index)
    learned = [r for r in requests if r not in shown][: MAX_LEARNED - len(shown)]
    title = concept[:1].upper() + concept[1:]
    description = f"{title}." + (EXAMPLES + "; ".join(f'"{first_line(r, 160)}"' for r in shown[:2])
                                 if shown else "")
    old_pitfalls = [p for p in (current.section("Pitfalls") if current else "").splitlines() if p.strip()]
    lone = _lone_errors(insights)
    pitfalls = _distinct([f"- {_unquoted(i.insight, lone)}" for i in picked if i.kind == "pitfall" or
                          (i.kind in ("undone", "note") and i.polarity == "diagnostic")] + old_pitfalls)[:MAX_LINES]
    when = f"The request is to {concept}."
    if shown:
        when += FOR_EXAMPLE + "\n\n" + "\n".join(f'- "{r}"' for r in shown)
    body = build_body([("When to use", when), ("How to perform", _how(concept, insights, current, seen)),
                       ("Conditions", "\n".join(_conditions(picked, lone))), ("Pitfalls", "\n".join(pitfalls)),
                       (LEARNED_FROM, "\n".join(anchor_line(a) for a in anchors)
                        if anchors else "\n".join(f'- "{r}"' for r in learned))])
    sources = list(dict.fromkeys([*(current.sources if current else ()), *(i.source for i in picked)]))
    name = current.name if current else slugify(concept)
    base = current or Recipe(name=name, description="")
    return base.replace(name=name, description=description[:1024], concept=concept,
                        aliases=tuple(a for a in aliases if a != concept), sources=tuple(sources[-50:]), body=body)


def _quoted(requests: Sequence[str]) -> list[str]:
    """The requests as a recipe may quote them (``brewkb.trajectories.quote``):
    those that read as instructions to an agent are held back, not written."""
    return list(dict.fromkeys(q.text for r in requests if (q := quote(r))))
