"""The memories a KB is compared with, as documents the same BM25 ranks.

- ``trajectories`` (the paper's in-context baseline; near-verbatim episodic
  memories behave the same way): one document per past conversation that
  passed, its text every user turn and every assistant reply, its procedure
  the tools it called, in order.
- ``notes`` (the Agent-Mem / A-Mem style): one short note per past
  conversation that passed: the request in one line and the tool steps.
- ``all-trajectories``: ``trajectories`` of every past conversation, those
  that failed or carry no outcome too (a team that kept all its logs).

Both are built from scrubbed trajectories. A document carries its procedure
in the recipe step convention under ``## How to perform``, so a KB's recipes
and the baselines are read, ranked and scored by the same code.
"""

from __future__ import annotations

from collections.abc import Iterable

from brewkb.llm.requests import request_text
from brewkb.recipes import LEARNED_FROM, Anchor, Recipe, anchor_line, build_body
from brewkb.trajectories.schema import Trajectory, tool_calls
from brewkb.trajectories.tools import (
    concept_of_tool,
    is_talk,
    step_text,
    user_turns,
    writes_of,
)

__all__ = ["MEMORIES", "memory_documents", "steps_block"]

MEMORIES = ("trajectories", "notes", "all-trajectories")
NOTE_REQUEST_CHARS = 200


def steps_block(trajectory: Trajectory) -> str:
    """The calls a conversation made without an error (messages to the user
    left out), numbered in the step convention, each tool once."""
    steps = list(dict.fromkeys(step_text(c) for c in tool_calls(trajectory.messages)
                               if not c.error and not is_talk(c.name)))
    return "\n".join(f"{n}. `{s}`" for n, s in enumerate(steps, 1))


def _replies(trajectory: Trajectory) -> list[str]:
    return [str(m["content"]) for m in trajectory.messages
            if m.get("role") == "assistant" and isinstance(m.get("content"), str) and m["content"].strip()]


def memory_documents(kind: str, trajectories: Iterable[Trajectory]) -> list[Recipe]:
    """One document per passing conversation of ``trajectories`` (already
    scrubbed; every conversation for ``all-trajectories``), named ``<kind>-<id>``."""
    if kind not in MEMORIES:
        raise ValueError(f"unknown memory {kind!r}; expected one of {MEMORIES}")
    documents = []
    for t in trajectories:
        if t.success is not True and kind != "all-trajectories":
            continue
        turns = user_turns(t) or [t.task]
        steps = steps_block(t)
        request = request_text(t.messages)  # its anchor: a past conversation is found as a recipe is
        anchor = anchor_line(Anchor(request)) if request else ""
        if kind != "notes":
            text = "\n\n".join(turns + _replies(t))
            body = build_body([("Conversation", text), ("How to perform", steps), (LEARNED_FROM, anchor)])
            description = ""
        else:
            first = " ".join(turns[0].split())
            description = first if len(first) <= NOTE_REQUEST_CHARS else first[: NOTE_REQUEST_CHARS - 1] + "…"
            body = build_body([("How to perform", steps), (LEARNED_FROM, anchor)])
        # named, as a recipe is, after the changes it made
        aliases = tuple(concept_of_tool(w) for w in writes_of(t))
        documents.append(Recipe(name=f"{kind}-{t.id}", description=description, aliases=aliases, body=body))
    return documents
