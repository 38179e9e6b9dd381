"""Content rules for the replies of the LLM roles: a reply can match its
schema and still be garbage. Each rule returns what is wrong, or ``None``;
``LLMClient.complete_json`` treats a broken rule as an invalid reply (one
repair, then a failed item; never cached).

- A reflection's steps and insight may name only tools the episode has: a
  name written as a call (``cancel_order(...)``, a step that is a lone
  identifier, "calls `x`") must occur somewhere in the episode (its calls,
  its messages, the tools it was offered). The steps of a passing episode are
  the calls it made, so they may not claim one it did not make; an episode
  that made no call cannot be said to have made one.
- A reflection's concept may not be an example from the reflector's prompt,
  and a concept or an insight must say something: a word of three letters or
  more that is not one of the words that stand for nothing ("n/a", "none",
  "unknown", ...).
- A recipe may name only tools its insights or its current version name, and
  when they name tools its procedure must name one: a procedure of no call,
  where the insights show calls, says nothing an agent can do.
- A judge reply must score at least one of the rubrics it was asked about.

Concept names are compared in ``normal_name`` form: lower case, words split
at spaces, underscores, hyphens and case changes (``Change-Flight``,
``change_flight`` and ``changeFlight`` are ``change flight``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from importlib import resources
from typing import Any

from brewkb.trajectories.schema import Trajectory, tool_calls

__all__ = ["normal_name", "prompt_examples", "reflection_problem", "recipe_problem", "judge_problem", "called_names",
           "episode_names"]

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_CALL = re.compile(rf"(?<![\w.])({_IDENT})\(")
_CLAIM = re.compile(rf"\b(?:call(?:s|ed|ing)?|invok(?:e|es|ed|ing)|us(?:e|es|ed|ing))\s+(?:the\s+)?`({_IDENT})`"
                    rf"|`({_IDENT})`\s+tool\b", re.I)
_LONE = re.compile(rf"^\s*(?:\d+[.)]\s*)?`?({_IDENT})`?\s*\.?\s*$")


def normal_name(name: str) -> str:
    """A concept name in one form whatever its case or separators."""
    text = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name)
    return " ".join(re.sub(r"[_\-/]+", " ", text).split()).lower()


@cache
def prompt_examples(prompt: str) -> frozenset[str]:
    """The phrases a prompt of ``brewkb/prompts/`` quotes as examples, in ``normal_name`` form."""
    text = resources.files("brewkb").joinpath("prompts", f"{prompt}.md").read_text(encoding="utf-8")
    return frozenset(normal_name(q) for q in re.findall(r"[\"“]([^\"”\n]{3,80})[\"”]", text))


def _named(text: str, lone: bool = False) -> list[str]:
    """Tool names ``text`` writes as calls (``lone``: a step that is one identifier with an underscore)."""
    names = _CALL.findall(text) + [a or b for a, b in _CLAIM.findall(text)]
    found = _LONE.match(text) if lone else None
    if found and "_" in found.group(1):
        names.append(found.group(1))
    return list(dict.fromkeys(names))


def called_names(trajectory: Trajectory) -> set[str]:
    """The tools the episode called."""
    return {c.name for c in tool_calls(trajectory.messages)}


def episode_names(trajectory: Trajectory) -> set[str]:
    """Every identifier the episode holds: its calls, its texts, the tools it was offered."""
    words = set(re.findall(_IDENT, trajectory.task))
    for m in trajectory.messages:
        content = m.get("content")
        words.update(re.findall(_IDENT, content if isinstance(content, str) else json.dumps(content or "")))
        if m.get("name"):
            words.add(str(m["name"]))
    for call in tool_calls(trajectory.messages):
        words.add(call.name)
        words.update(re.findall(_IDENT, call.arguments))
    offered = trajectory.meta.get("tools")
    if isinstance(offered, list):
        words.update(str(t) for t in offered)
    return words


def reflection_problem(value: Mapping[str, Any], trajectory: Trajectory) -> str | None:
    """What makes a reflection of ``trajectory`` garbage (see the module)."""
    called = called_names(trajectory)
    known = episode_names(trajectory)
    examples = prompt_examples("reflector")
    shown = ", ".join(sorted(called)[:8]) or "none"
    for item in value.get("insights", []):
        concept = normal_name(str(item.get("concept", "")))
        if concept in examples:
            return (f"the concept {item['concept']!r} is an example from the instructions, not something this "
                    "episode shows; name what the episode is about")
        for field in ("concept", "insight"):
            if _says_nothing(str(item.get(field, ""))):
                return (f"the {field} {str(item.get(field, ''))[:60]!r} says nothing; name what the episode did or "
                        "what went wrong, in words")
        for step in item.get("steps", []):
            for name in _named(str(step), lone=True):
                if name not in known:
                    return (f"the step {step!r} names the tool {name}, which this episode does not have (the tools "
                            f"it called: {shown}); write only calls the episode shows")
                if trajectory.success is True and name not in called:
                    return (f"the step {step!r} claims a call of {name}, which this episode did not make (the "
                            f"tools it called: {shown}); the steps of a passing episode are the calls it made")
        for name in _named(str(item.get("insight", ""))):
            if name not in known:
                return (f"the insight names the tool {name}, which this episode does not have (the tools it "
                        f"called: {shown})")
            if not called and trajectory.success is not False and _CLAIM.search(str(item.get("insight", ""))):
                return f"the insight says the agent called {name}, but this episode made no tool call"
    return None


def recipe_problem(value: Mapping[str, Any], sources: Iterable[str]) -> str | None:
    """What makes a recipe garbage: a tool named that none of ``sources``
    (its insights, their steps and tasks, the current recipe) names."""
    known: set[str] = set()
    for text in sources:
        known.update(re.findall(_IDENT, text))
    for field in ("description", "when_to_use", "how_to_perform", "pitfalls", "example"):
        for line in str(value.get(field, "")).splitlines():
            for name in _named(line):
                if name not in known:
                    return (f"{field} names the tool {name}, which no insight and no current version of the recipe "
                            "names; use only the tools the insights show")
    shown = {name for text in sources for name in _CALL.findall(text)}
    if shown and not _named(str(value.get("how_to_perform", ""))):
        return ("how_to_perform names no tool call, though the insights show calls "
                f"({', '.join(sorted(shown)[:6])}); write the steps as the calls to make")
    return None


_NOTHING = frozenset("na n/a none null nil nothing unknown tbd todo undefined".split())


def _says_nothing(text: str) -> bool:
    """Whether ``text`` holds no word of three letters or more but those that stand for nothing."""
    words = re.findall(r"[^\W\d_]{3,}", text.lower())
    return not [w for w in words if w not in _NOTHING]


def judge_problem(value: Mapping[str, Any], rubrics: Sequence[str]) -> str | None:
    """A judge reply that scores none of ``rubrics``."""
    if not any(isinstance(e, Mapping) and e.get("id") in rubrics for e in value.get("scores", [])):
        return (f"the reply scored none of the rubrics {sorted(rubrics)}; score each of them by its id")
    return None
