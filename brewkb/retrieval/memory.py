"""The memories a KB is compared with, as documents the same BM25 ranks.

- ``trajectories`` (the paper's in-context baseline; near-verbatim episodic
  memories behave the same way): one document per past conversation that
  passed, its text every user turn and every assistant reply, its procedure
  the tools it called, in order.
- ``notes`` (the Agent-Mem / A-Mem style): one short note per past
  conversation that passed: the request in one line and the tool steps.

Both are built from scrubbed trajectories. A document carries its procedure
in the recipe step convention under ``## How to perform``, so a KB's recipes
and the baselines are read, ranked and scored by the same code.
"""

from __future__ import annotations

from collections.abc import Iterable

from brewkb.recipes import Recipe, build_body
from brewkb.trajectories.schema import Trajectory, tool_calls
from brewkb.trajectories.tools import is_talk, step_text, user_turns

__all__ = ["MEMORIES", "memory_documents", "steps_block"]

MEMORIES = ("trajectories", "notes")
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
    scrubbed), named ``<kind>-<id>``."""
    if kind not in MEMORIES:
        raise ValueError(f"unknown memory {kind!r}; expected one of {MEMORIES}")
    documents = []
    for t in trajectories:
        if t.success is not True:
            continue
        turns = user_turns(t) or [t.task]
        steps = steps_block(t)
        if kind == "trajectories":
            text = "\n\n".join(turns + _replies(t))
            body = build_body([("Conversation", text), ("How to perform", steps)])
            description = ""
        else:
            request = " ".join(turns[0].split())
            description = request if len(request) <= NOTE_REQUEST_CHARS else request[: NOTE_REQUEST_CHARS - 1] + "…"
            body = build_body([("How to perform", steps)])
        documents.append(Recipe(name=f"{kind}-{t.id}", description=description, body=body))
    return documents
