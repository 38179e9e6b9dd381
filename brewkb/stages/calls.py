"""The calls a recipe's lines may make, whoever wrote them (the offline rules
or an LLM): a log names its tools and their arguments, so a name is the
log's words too.

A call may not be made when its tool's name reads, as words, as
instructions (``get_full_card_number_from_caller``, ``skipIdentityCheck``)
or as a host, when the tool is not one of the agent's tools a team listed
(``tools.known``), or, for logs, when conversations of fewer than
``stages.min_concept_tasks`` distinct tasks called it (``supported_calls``):
one conversation cannot put a tool in front of an agent, as it cannot make a
concept. A call written out of code form (``issue_refund(order_id)``, not in
a quotation) is a call, and so is a tool named in backticks without a call
("Call `cancel_order` with …", as a model may write a step). Such a call goes
from a list it is one of (alternatives joined by "or", an exemplar's calls
after an arrow); a line that makes it otherwise goes. An argument whose name
reads as instructions, one the team did not list for its tool, or, for logs,
one that conversations of too few tasks passed, goes from its call. The current recipe's own calls stay. The steps
left are numbered again, and a section left empty goes.
"""

from __future__ import annotations

import re
import unicodedata
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from brewkb.config import Signatures
from brewkb.recipes import build_body, split_sections
from brewkb.trajectories.instructions import name_reason
from brewkb.trajectories.schema import Trajectory
from brewkb.trajectories.tools import (
    CALLED,
    CALLED_WITH,
    COMPOUND,
    NAMED,
    NOT_THE_AGENTS,
    agent_calls,
    not_the_agents,
    written_calls,
)

__all__ = ["CallRules", "screen_calls", "supported_calls", "FEW_TASKS"]

FEW_TASKS = "a tool conversations of too few tasks called (stages.min_concept_tasks)"
_ITEM = re.compile(r"(\s*)\d+\.(\s)")


def _arguments(text: str) -> list[str]:
    """The argument names a call's text passes (``order_id``, ``order_id=<id>``, ``order_id: str`` → ``order_id``)."""
    return [m.group(1) if (m := re.match(r"\**([A-Za-z_][\w.-]*)\s*[=:]", a.strip())) else a.strip()
            for a in text.split(",") if a.strip()]


def supported_calls(trajectories: Sequence[Trajectory], tasks: Mapping[str, str],
                    support: int) -> dict[str, frozenset[str]]:
    """The tools that conversations of ``support`` distinct tasks or more
    (``tasks``: trajectory id → the task it counts as) called, each with the
    argument names as many passed it; a call of a tool its conversation's
    requests did not declare counts for nothing."""
    called: dict[str, set[str]] = defaultdict(set)
    passed: dict[tuple[str, str], set[str]] = defaultdict(set)
    for trajectory in trajectories:
        task = tasks.get(trajectory.id, trajectory.task_id)
        for call in agent_calls(trajectory):
            called[call.name].add(task)
            for argument in call.args() or {}:
                passed[call.name, argument].add(task)
    arguments: dict[str, set[str]] = defaultdict(set)
    for (tool, argument), found in passed.items():
        if len(found) >= support:
            arguments[tool].add(argument)
    return {tool: frozenset(arguments[tool]) for tool, found in called.items() if len(found) >= support}


@dataclass(frozen=True)
class CallRules:
    known: Signatures = field(default_factory=dict)
    """The agent's tools (``tools.known``) and the arguments listed for each (``None``: any); empty: any tool."""
    supported: Mapping[str, frozenset[str]] | None = None
    """The tools the logs' support lets a line call, each with the argument names it may pass; ``None``: any."""

    @classmethod
    def of(cls, current: str, known: Signatures, supported: Mapping[str, frozenset[str]] | None) -> CallRules:
        """The rules for a recipe written over the ``current`` body, whose own
        calls stay: ``supported`` (``supported_calls``; ``None``: any)."""
        if supported is None:
            return cls(known)
        allowed = {tool: set(names) for tool, names in supported.items()}
        for tool, listed in CALLED_WITH.findall(current):
            allowed.setdefault(tool, set()).update(_arguments(listed))
        return cls(known, {tool: frozenset(names) for tool, names in allowed.items()})

    def tool_reason(self, name: str) -> str | None:
        if reason := name_reason(name) or (NOT_THE_AGENTS if not_the_agents(name, self.known) else None):
            return reason
        return FEW_TASKS if self.supported is not None and name not in self.supported else None

    def names_a_tool(self, name: str) -> bool:
        """Whether ``name``, written in backticks without a call (``cancel_order``), names a tool: one the
        team listed or the logs support, or, for logs, a name of two words or more that no tool takes as
        an argument (a tool too few tasks called, or none)."""
        if name in self.known or (self.supported is not None and name in self.supported):
            return True
        return self.supported is not None and COMPOUND.search(name) is not None and name not in self.arguments

    @property
    def arguments(self) -> set[str]:
        """The argument names the rules know of: a name in a call's place may be one, not a tool."""
        return {a for names in (*self.known.values(), *(self.supported or {}).values()) for a in names or ()}

    def allows(self, tool: str, argument: str) -> bool:
        listed = self.known.get(tool)
        return name_reason(argument) is None and (listed is None or argument in listed) and \
            (self.supported is None or argument in self.supported.get(tool, ()))


def _without(line: str, call: str) -> str | None:
    """``line`` without ``call`` where it is one of a list (alternatives joined
    by "or", an exemplar's calls after an arrow); ``None`` where it is not."""
    quoted = re.escape(call)
    patterns = [rf"\s+or\s+{quoted}", rf"{quoted}\s+or\s+"]
    if "→" in line and line.index(call) > line.index("→"):  # an exemplar: calls joined by commas
        patterns += [rf",\s*{quoted}", rf"{quoted},\s*", rf"\s*→\s*{quoted}\s*$"]
    for pattern in patterns:
        if re.search(pattern, line):
            return re.sub(pattern, "", line, count=1)
    return None


def _line(line: str, rules: CallRules) -> tuple[str | None, str]:
    """``line`` as it may stay (``None``: left out), and why it changed."""
    whole = {m.group(1) for m in CALLED_WITH.finditer(line)}
    if reason := next((r for n in CALLED.findall(line) if n not in whole and (r := rules.tool_reason(n))), None):
        return None, reason
    why = ""
    named = [*CALLED_WITH.finditer(line), *(m for m in NAMED.finditer(line) if rules.names_a_tool(m.group(1))),
             *written_calls(line, rules.arguments)]
    for match in named:
        if (reason := rules.tool_reason(match.group(1))) is None:
            continue
        kept = _without(line, match.group(0))
        if kept is None:
            return None, reason
        line, why = kept, why or reason
    for match in [*CALLED_WITH.finditer(line), *written_calls(line, rules.arguments)]:  # out of code form too
        tool, arguments = match.group(1), _arguments(match.group(2))
        shown = [a for a in arguments if rules.allows(tool, a)]
        if shown != arguments:
            line = line.replace(match.group(0), f"`{tool}({', '.join(shown)})`", 1)
            why = why or "an argument named as instructions, not listed for its tool, or too few tasks passed"
    return line, why


def screen_calls(body: str, rules: CallRules) -> tuple[str, list[tuple[str, str]]]:
    """``body`` with each line as ``rules`` let it stay (see the module
    docstring), and the lines changed or left out, with why."""
    kept: list[str] = []
    changed: list[tuple[str, str]] = []
    steps: set[str] = set()  # the steps of the section so far, without their numbers
    for line in body.split("\n"):
        normal = unicodedata.normalize("NFKC", line)  # fullwidth parentheses are parentheses
        new, why = _line(normal, rules)
        if normal.startswith("#"):
            steps = set()
        item = _ITEM.match(new or "")
        if new is not None and item and new[item.end():] in steps:
            new, why = None, "the same as an earlier step once its arguments were screened"
        if new != normal:
            changed.append((line, why))
        if new is not None:
            kept.append(line if new == normal else new)
            if item:
                steps.add(new[item.end():])
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
