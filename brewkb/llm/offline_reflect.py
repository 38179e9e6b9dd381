"""The offline Reflector: insights from the tool calls, errors and user turns
of one (scrubbed) trajectory, by rules that hold for any tool-calling log.

Concepts. Every write the run made is a concept named from its tool
(``cancel_reservation`` → "cancel reservation"), in order of first call, up
to ``MAX_CONCEPTS`` of them (no conversation a person has asks for more, and
each costs reflection time); a failing run's failed attempts are concepts
too. A run that wrote nothing is
named for the *request*: its first action verb and the object of its last
lookup ("cancel reservation"); a run that handed the request to a person
without one is named for the hand-off tool; a run that only read, for its last
lookup. A run with no action verb, no hand-off and no lookup names nothing.

Insights (a run whose outcome is unknown teaches as a passing one does, its
insights ``observed`` rather than prescriptive).
- A passing run gives, for each write, a *procedure* (kind ``steps``): the
  lookups before it whose answers the write used (one of the write's argument
  values is one the lookup was given or answered with; a scratchpad, a lookup
  that returned nothing or one such as a calculator whose answer no argument
  holds informed no step), and those whose answers such a lookup used in the
  same way (the search that found the id a used record was read by), the
  write, then the first message tool it told the user with, in order of first
  use (never another write of the run).
- A passing run that made several writes gives each of them the others'
  calls (kind ``together``): what else such requests asked for.
- A passing run that handed off gives the procedure that led to the hand-off;
  a passing run that only read, its lookups (kind ``steps`` for a lookup
  concept). A run that changed nothing for a request with an action verb
  gives an ``undone`` insight (an aside, a request rightly refused, or, when
  it failed, one that needed an action), which the concepts stage folds into
  a concept of the same action or drops.
- A write that failed and was not done again by the run becomes a
  *condition* (kind ``condition``): the error, and the lookup that could check
  it first (the last one before it that shares an argument value with it).
  A failed call the run recovered from becomes a *pitfall*: the error and what
  the run did next.
- A failing run whose calls all succeeded gives a pitfall: the change was
  made with the wrong details.
- A failing run's write that succeeded gives the run's procedure for it, as
  for a passing run, of kind ``tried``: the integrator writes it only for a
  concept no passing run did, and says so.
- Every concept of a run gets the run's request (kind ``request``): the user
  turns that ask for something (``brewkb.llm.requests.request_turns``), and,
  when the run passed, its calls in order (talk and failed calls left out):
  the recipe's anchors and their exemplars.
Each insight quotes the request as the user put it: the turn that asks for its
concept's action (synonyms folded; one that also names the object first),
else the first turn that asks for something; a turn that only assents,
thanks, or consents to what the agent proposed is never quoted. Error texts are
quoted through ``brewkb.trajectories.quote``: one safe line, or held back when
they read as instructions (the integrator quotes requests the same way).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence

from brewkb.llm.requests import (
    action_verb,
    first_line,
    lookup_concept,
    request_clause,
    request_concept,
    request_for,
    request_text,
    request_turns,
)
from brewkb.llm.roles import DIAGNOSTIC, REQUEST, Insight, polarity_of
from brewkb.trajectories.quote import quote
from brewkb.trajectories.schema import ToolCall, Trajectory, tool_calls
from brewkb.trajectories.tools import (
    concept_of_tool,
    is_handoff,
    is_lookup,
    is_talk,
    is_write,
    step_text,
    user_turns,
)

__all__ = ["reflect", "concepts_of", "MAX_STEPS", "MAX_CONCEPTS"]

MAX_STEPS = 10
MAX_READ = 2_000
"""Characters of a user or assistant message, or a tool's error, the rules read:
a request is said, and an error explained, in the first ones, and a longer text
would only make every rule slower."""
MAX_CONCEPTS = 10
"""Distinct writes of one conversation that become concepts (its first ones)."""
MAX_EXEMPLAR = 20
MIN_VALUE = 3
HELD_ERROR = "(an error text held back for review)"
"""What an insight says in place of an error text that reads as instructions (``brewkb.trajectories.quote``)."""
A_RUN = {True: "A passing run", None: "A run whose outcome is unknown"}
Add = Callable[..., None]


def concepts_of(trajectory: Trajectory) -> list[tuple[str, int | None]]:
    """Concept names and the index of the call that defines each (``None`` for
    a concept named for the request)."""
    calls = tool_calls(trajectory.messages)
    found: dict[str, int | None] = {}
    for i, call in enumerate(calls):
        if is_write(call.name) and not (call.error and trajectory.success is True):
            found.setdefault(concept_of_tool(call.name), i)
    if found:
        return list(found.items())[:MAX_CONCEPTS]
    request = _request(trajectory, calls)
    return [(request, None)] if request else []


def _request(trajectory: Trajectory, calls: Sequence[ToolCall]) -> str | None:
    named = request_concept(" ".join(user_turns(trajectory)) or trajectory.task, calls)
    if named:
        return named
    handoff = next((c for c in calls if is_handoff(c.name) and not c.error), None)
    return concept_of_tool(handoff.name) if handoff else lookup_concept(calls)


def _informed(call: ToolCall) -> bool:
    """A lookup that answered something: one that returned nothing (a
    scratchpad such as ``think``) told the run nothing, so it is no step."""
    return not call.error and is_lookup(call.name) and bool((call.result or "").strip())


def _lookups_before(calls: Sequence[ToolCall], index: int, start: int = 0) -> list[ToolCall]:
    return [c for c in calls[start:index] if _informed(c)]


def _leaves(value: object) -> Iterator[str]:
    """The text and number values inside a call's arguments, nested or not."""
    if isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)
    elif isinstance(value, str | int | float) and not isinstance(value, bool):
        yield str(value)


def _acts_on(call: ToolCall) -> set[str]:
    return {v for v in _leaves(call.args() or {}) if v}


def _informs(lookup: ToolCall, write: ToolCall) -> bool:
    """Whether the write acted on what the lookup read: one of the write's
    argument values is one the lookup was given, or one it answered with (a
    value of ``MIN_VALUE`` characters or more, so a count of 1 found in a
    long answer does not tie every call to every other)."""
    values, answer = _acts_on(write), lookup.result or ""
    return bool(values & _acts_on(lookup)) or any(
        re.search(rf"(?<![\w.-]){re.escape(v)}(?![\w-])", answer) for v in values if len(v) >= MIN_VALUE)


def _procedure(calls: Sequence[ToolCall], index: int) -> list[ToolCall]:
    """A write's procedure: the lookups before it whose answers it used, or
    whose answers a lookup it used was given (the search that found the id a
    later read was given), the write, and what the run told the user about it."""
    used: list[ToolCall] = []  # latest first
    for lookup in reversed(_lookups_before(calls, index)):
        if any(_informs(lookup, later) for later in (calls[index], *used)):
            used.append(lookup)
    return [*reversed(used), calls[index], *_told_after(calls, index)]


def _told_after(calls: Sequence[ToolCall], index: int) -> list[ToolCall]:
    """The first message the run sent the user after the call at ``index``,
    before its next write (what it told the user about it)."""
    for call in calls[index + 1:]:
        if is_write(call.name):
            return []
        if is_talk(call.name) and not call.error:
            return [call]
    return []


def _steps(calls: Sequence[ToolCall], limit: int = MAX_STEPS) -> tuple[str, ...]:
    return tuple(dict.fromkeys(step_text(c) for c in calls))[-limit:]


def _check(calls: Sequence[ToolCall], index: int) -> ToolCall | None:
    """The lookup that could have checked the failed call at ``index``: the
    last one before it that was given something the failed call acted on."""
    values = _acts_on(calls[index])
    return next((c for c in reversed(_lookups_before(calls, index)) if values & _acts_on(c)), None)


def _read(trajectory: Trajectory) -> Trajectory:
    """The trajectory as the rules read it: its task and each message's text cut
    to ``MAX_READ`` (a tool's result that is JSON kept whole: its values are what
    tells which lookup fed which write)."""
    def cut(message: dict) -> dict:
        content = message.get("content")
        if not isinstance(content, str) or len(content) <= MAX_READ or (
                message.get("role") == "tool" and content.lstrip()[:1] in ("{", "[")):
            return message
        return {**message, "content": content[:MAX_READ]}

    if len(trajectory.task) <= MAX_READ and all(len(str(m.get("content") or "")) <= MAX_READ
                                                 for m in trajectory.messages):
        return trajectory
    return trajectory.with_(task=trajectory.task[:MAX_READ], messages=tuple(cut(dict(m)) for m in trajectory.messages))


async def reflect(trajectory: Trajectory) -> list[Insight]:
    trajectory = _read(trajectory)
    calls = tool_calls(trajectory.messages)
    concepts = concepts_of(trajectory)
    # the turns that ask: assent, thanks and consent to what the agent proposed quote no request
    turns = request_turns(trajectory.messages) or ([] if user_turns(trajectory) else [trajectory.task])
    insights: list[Insight] = []

    def add(concept: str, text: str, polarity: str, kind: str, steps: tuple[str, ...] = ()) -> None:
        request = request_for(turns, concept, [c for c, _ in concepts if c != concept])
        insights.append(Insight(concept, text, polarity, trajectory.id, trajectory.task_id,
                                first_line(request_clause(request, concept), 400) if request else "", steps, kind))

    for concept, index in concepts:
        if index is None:
            _request_insight(trajectory, calls, concept, add)
        elif trajectory.success is not False:  # an unlabelled run's procedure, said as such
            steps = _steps(_procedure(calls, index))
            add(concept, f"{A_RUN[trajectory.success]} did: " + "; then ".join(f"`{s}`" for s in steps),
                polarity_of(trajectory.success), "steps", steps)
        elif not calls[index].error:
            steps = _steps(_procedure(calls, index))
            add(concept, "A failing run did: " + "; then ".join(f"`{s}`" for s in steps), DIAGNOSTIC, "tried", steps)
            if not any(c.error for c in calls):
                add(concept, f"A run that called `{step_text(calls[index])}` without errors still failed: check "
                             "that every detail the request asks for is used, and nothing else", DIAGNOSTIC, "pitfall")
    _together(trajectory, calls, concepts, add)
    _handoff_after_writes(trajectory, calls, concepts, add)
    _errors(trajectory, calls, concepts, add)
    insights += _requests(trajectory, calls, [c for c, _ in concepts])
    return insights


def _requests(trajectory: Trajectory, calls: Sequence[ToolCall], concepts: Sequence[str]) -> list[Insight]:
    """The conversation's request as an anchor of each of its concepts, with
    its calls (the exemplar) when it passed."""
    request = request_text(trajectory.messages)
    if not request:
        return []
    steps = _steps([c for c in calls if not c.error and not is_talk(c.name)], MAX_EXEMPLAR) \
        if trajectory.success is True else ()
    return [Insight(concept, "The request, in the user's words", polarity_of(trajectory.success), trajectory.id,
                    trajectory.task_id, request, steps, REQUEST) for concept in concepts]


def _request_insight(trajectory: Trajectory, calls: Sequence[ToolCall], concept: str, add: Add) -> None:
    """What a run that changed nothing teaches about the request it was given."""
    handoff = next((c for c in calls if is_handoff(c.name) and not c.error), None)
    looked = [c for c in calls if _informed(c)]
    if trajectory.success is False:
        if handoff:
            add(concept, f"A run that handed the request to a person with `{step_text(handoff)}` failed", DIAGNOSTIC,
                "pitfall")
        else:
            add(concept, "A run that changed nothing failed: the request needed an action, or a clear refusal that "
                         "the rules support", DIAGNOSTIC, "undone")
    elif handoff is not None:
        steps = _steps([*[c for c in looked if calls.index(c) < calls.index(handoff)], handoff])
        add(concept, f"{A_RUN[trajectory.success]} handed the request to a person: "
            + "; then ".join(f"`{s}`" for s in steps), polarity_of(trajectory.success), "steps", steps)
    else:
        last = max((n for n, c in enumerate(calls) if not c.error and not is_talk(c.name)), default=-1)
        steps = _steps([*looked, *_told_after(calls, last)])
        checked = ", ".join(f"`{s}`" for s in steps) or "the request"
        # a request nothing was done for is an aside or a refusal; a lookup concept's reads are its procedure
        kind = "undone" if action_verb(concept.split()[0]) or not steps else "steps"
        add(concept, f"{A_RUN[trajectory.success]} changed nothing: it checked {checked} and answered",
            polarity_of(trajectory.success), kind, steps)


def _together(trajectory: Trajectory, calls: Sequence[ToolCall], concepts: list[tuple[str, int | None]],
              add: Add) -> None:
    """A passing run that made several writes teaches each of them what else
    its request asked for (kind ``together``)."""
    if trajectory.success is not True:
        return
    writes = {concept: step_text(calls[index]) for concept, index in concepts if index is not None}
    for concept in writes:
        for other, step in writes.items():
            if other != concept:
                add(concept, f"A passing run also did `{step}` for the same request", polarity_of(True), "together",
                    (step,))


def _handoff_after_writes(trajectory: Trajectory, calls: Sequence[ToolCall], concepts: list[tuple[str, int | None]],
                          add: Add) -> None:
    """A passing run that made its changes and then handed the rest to a
    person teaches when to hand off: named for the request that followed."""
    writes = [i for _, i in concepts if i is not None]
    if trajectory.success is False or not writes:
        return
    handoff = next((i for i, c in enumerate(calls) if i > max(writes) and is_handoff(c.name) and not c.error), None)
    if handoff is None:
        return
    later = _later_turns(trajectory, calls, max(writes))
    concept = request_concept(" ".join(later), calls[: handoff + 1]) if later else None
    if concept is None or any(concept == c for c, _ in concepts):
        return
    steps = _steps([*_lookups_before(calls, handoff, max(writes) + 1), calls[handoff]])
    add(concept, f"{A_RUN[trajectory.success]} handed the request to a person: "
        + "; then ".join(f"`{s}`" for s in steps), polarity_of(trajectory.success), "steps", steps)


def _later_turns(trajectory: Trajectory, calls: Sequence[ToolCall], index: int) -> list[str]:
    """The user turns after the call at ``index``."""
    seen, after = 0, False
    turns: list[str] = []
    for message in trajectory.messages:
        if message.get("role") == "assistant":
            seen += len(message.get("tool_calls") or [])
            after = seen > index
        elif after and message.get("role") == "user" and isinstance(message.get("content"), str):
            turns.append(str(message["content"]))
    return turns


def _errors(trajectory: Trajectory, calls: Sequence[ToolCall], concepts: list[tuple[str, int | None]],
            add: Add) -> None:
    """Conditions from failed writes the run did not do again; pitfalls from
    failed calls it recovered from or that served a write."""
    for i, call in enumerate(calls):
        if not call.error or is_talk(call.name):
            continue
        error = quote(first_line(call.result, 400), 160)  # log text: quoted safely, or held back for a reviewer
        text = f"`{step_text(call)}` failed with: " + (f"\"{error.text}\"" if error else HELD_ERROR)
        owner: str | None
        if is_write(call.name):
            owner = concept_of_tool(call.name)
            if not any(c.name == call.name and not c.error for c in calls[i + 1:]):
                check = _check(calls, i)
                add(owner, text, DIAGNOSTIC, "condition", (*([step_text(check)] if check else []), step_text(call)))
                continue
        else:  # a failed lookup or hand-off: the next write it served, else the run's first concept
            owner = next((c for c, w in concepts if w is not None and w > i), concepts[0][0] if concepts else None)
            if owner is None:
                continue
        after = next((c for c in calls[i + 1:] if not c.error and not is_talk(c.name)), None)
        if after is not None:
            text += f"; the run went on with `{step_text(after)}`"
        add(owner, text, DIAGNOSTIC, "pitfall")
