"""The calls a recipe's lines may make, whoever wrote them (the offline rules
or an LLM): a log names its tools and their arguments, so a name is the
log's words too.

A line is left out when a tool it calls reads, as words, as instructions
(``get_full_card_number_from_caller``), or is not one of the agent's tools
when a team lists them (``tools.known``), or an argument it passes reads as
instructions (``bypass_the_identity_checks``); a step that offers such a
tool as one of its alternatives ("`a(x)` or `b(y)`") keeps the others. For
logs, an argument is shown only when the run's conversations of several
distinct tasks passed it to that tool (``supported_arguments``), or the
current recipe already does: one conversation cannot add an argument to a
step, as it cannot add a concept. When the team listed a tool's arguments, a
call passes only those.
The steps left are numbered again, and a section left empty goes.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from brewkb.config import Signatures
from brewkb.recipes import build_body, split_sections
from brewkb.trajectories.quote import name_reason
from brewkb.trajectories.schema import Trajectory, tool_calls
from brewkb.trajectories.tools import CALLED, CALLED_WITH, NOT_THE_AGENTS, not_the_agents

__all__ = ["CallRules", "screen_calls", "supported_arguments"]

_ITEM = re.compile(r"(\s*)\d+\.(\s)")


def _arguments(text: str) -> list[str]:
    return [a.strip() for a in text.split(",") if a.strip()]


@dataclass(frozen=True)
class CallRules:
    known: Signatures = field(default_factory=dict)
    """The agent's tools (``tools.known``) and the arguments listed for each (``None``: any); empty: any tool."""
    arguments: Mapping[str, frozenset[str]] | None = None
    """Tool → the argument names the logs' support lets a line pass it; ``None``: any."""

    @classmethod
    def of(cls, current: str, known: Signatures, arguments: Mapping[str, frozenset[str]] | None) -> CallRules:
        """The rules for a recipe written over the ``current`` body, whose own
        arguments stay: ``arguments`` (``supported_arguments``; ``None``: any)."""
        if arguments is None:
            return cls(known)
        allowed = {tool: set(names) for tool, names in arguments.items()}
        for tool, listed in CALLED_WITH.findall(current):
            allowed.setdefault(tool, set()).update(_arguments(listed))
        return cls(known, {tool: frozenset(names) for tool, names in allowed.items()})

    def tool_reason(self, name: str) -> str | None:
        return name_reason(name) or (NOT_THE_AGENTS if not_the_agents(name, self.known) else None)

    def allows(self, tool: str, argument: str) -> bool:
        listed = self.known.get(tool)
        return (listed is None or argument in listed) and \
            (self.arguments is None or argument in self.arguments.get(tool, ()))


def supported_arguments(trajectories: Sequence[Trajectory], tasks: Mapping[str, str],
                        support: int) -> dict[str, frozenset[str]]:
    """Tool → the argument names that conversations of ``support`` distinct
    tasks or more (``tasks``: trajectory id → the task it counts as) passed it."""
    passed: dict[tuple[str, str], set[str]] = defaultdict(set)
    for trajectory in trajectories:
        for call in tool_calls(trajectory.messages):
            for argument in call.args() or {}:
                passed[call.name, argument].add(tasks.get(trajectory.id, trajectory.task_id))
    allowed: dict[str, set[str]] = defaultdict(set)
    for (tool, argument), found in passed.items():
        if len(found) >= support:
            allowed[tool].add(argument)
    return {tool: frozenset(names) for tool, names in allowed.items()}


def _line(line: str, rules: CallRules) -> tuple[str | None, str]:
    """``line`` as it may stay (``None``: left out), and why it changed."""
    calls = list(CALLED_WITH.finditer(line))
    named = {m.group(1) for m in calls}
    if (reason := next((r for n in CALLED.findall(line) if n not in named and (r := rules.tool_reason(n))), None)):
        return None, reason
    bad = [(m, r) for m in calls if (r := rules.tool_reason(m.group(1))) is not None]
    for match, reason in bad:  # an alternative goes; a step with no other goes whole
        joined = re.compile(rf"\s+or\s+{re.escape(match.group(0))}|{re.escape(match.group(0))}\s+or\s+")
        if len(bad) == len(calls) or not joined.search(line):
            return None, reason
        line = joined.sub("", line, count=1)
    why = bad[0][1] if bad else ""
    for match in CALLED_WITH.finditer(line):
        tool, arguments = match.group(1), _arguments(match.group(2))
        if (reason := next((r for a in arguments if (r := name_reason(a)) is not None), None)) is not None:
            return None, f"an argument name {reason}"
        shown = [a for a in arguments if rules.allows(tool, a)]
        if shown != arguments:
            line = line.replace(match.group(0), f"`{tool}({', '.join(shown)})`", 1)
            why = why or "an argument the agent's tools do not list, or too few tasks passed"
    return line, why


def screen_calls(body: str, rules: CallRules) -> tuple[str, list[tuple[str, str]]]:
    """``body`` with each line as ``rules`` let it stay (see the module
    docstring), and the lines changed or left out, with why."""
    kept: list[str] = []
    changed: list[tuple[str, str]] = []
    for line in body.split("\n"):
        new, why = _line(line, rules)
        if new != line:
            changed.append((line, why))
        if new is not None:
            kept.append(new)
    if not changed:
        return body, changed
    number = 0
    for n, line in enumerate(kept):  # the steps left, numbered again one after another
        item = _ITEM.match(line)
        number = number + 1 if item else 0
        kept[n] = f"{item.group(1)}{number}.{item.group(2)}{line[item.end():]}" if item else line
    text = "\n".join(kept)
    sections = split_sections(text)  # without those left empty
    head = re.split(r"(?m)^##[ \t]", text, maxsplit=1)[0]
    return (head.rstrip("\n") + build_body(sections) if sections else text), changed
