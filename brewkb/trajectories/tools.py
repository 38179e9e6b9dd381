"""What a tool call does, told from the tool's name, and the step convention
recipes write procedures in.

A tool whose name starts with a read verb (``get``, ``find``, ``list``,
``search``, ...) is a *lookup*; a tool that talks to the user (``respond``,
``reply``, ...) is a *message*; a tool that hands the conversation to a person
(``transfer_to_human_agents``, ``escalate``) is a *hand-off*; any other tool is
a *write*: it changes state. A hand-off is an action too (it ends the agent's
part of the case), so ``actions`` of a trajectory are its writes and hand-offs.
Names split on ``_``, ``-``, ``.`` and camel case, so ``orders.cancel`` is a
write and ``getOrder`` a lookup. ``tools.known`` in ``brewkb.toml`` lists the
agent's own tools when a team gives them (``not_the_agents``).

A procedure step is a numbered line that starts with a backticked call:
``1. `find_customer(email)` — why``. Alternatives share a line, each call
backticked, joined by "or": ``2. `find_by_email(email)` or `find_by_name(name, zip)```.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence

from brewkb.config import TOOL_NAME
from brewkb.errors import TrajectoryError
from brewkb.trajectories.schema import ToolCall, Trajectory, tool_calls

__all__ = ["ALSO_ASKED", "READ_VERBS", "used_tools", "is_lookup", "is_talk", "is_handoff", "is_write",
           "concept_of_tool", "step_text", "parse_step", "parse_alternatives", "procedure", "name_words",
           "user_turns", "writes_of", "CALLED", "CALLED_WITH", "written_calls", "line_calls", "passed_names", "NAMED", "COMPOUND", "NOT_THE_AGENTS",
           "not_the_agents", "DECLARED", "MAX_DECLARED", "declared_in", "undeclared",
           "agent_calls"]

READ_VERBS = frozenset({
    "get", "find", "list", "search", "lookup", "look", "read", "fetch", "check", "calculate", "compute",
    "think", "query", "show", "view", "describe", "retrieve", "count", "browse", "open", "inspect", "load",
})
TALK_VERBS = frozenset({"respond", "reply", "say", "send_message", "message", "ask", "answer", "final"})
HANDOFF_VERBS = frozenset({"transfer", "escalate", "handoff", "hand", "route", "forward"})
HANDOFF_TARGETS = frozenset({"human", "humans", "agent", "agents", "person", "operator", "support", "staff",
                             "representative", "supervisor", "manager"})
ALSO_ASKED = "only when the request also asks to"
"""What a step line says after its call when the step is conditional: a write
that runs made together with the recipe's own, for requests that asked for
both. An agent takes it only when its request asks for that too."""
STEP_RE = re.compile(r"^\s*(?:\d+[.)]|[-*])\s*`([A-Za-z_][\w.]*)\(([^)`]*)\)`")
CALL_RE = re.compile(r"`([A-Za-z_][\w.]*)\(([^)`]*)\)`")
_CALLEE = r"`([A-Za-z_][\w.-]*) ?\("
CALLED = re.compile(_CALLEE)
"""The name of every tool a line of a recipe calls (a call in backticks)."""
CALLED_WITH = re.compile(_CALLEE + r"([^)`]*)\)`")
"""A call in backticks, whole: its tool and the text of its arguments."""
_ARGUMENT = (r"(?:\*{0,2}[A-Za-z_][\w.-]*(?: ?[:=][^,()`\n]*)?|-?\d[\w.]*|\"[^\"\n]*\"|'[^'\n]*'"
             r"|\{[^{}()\n]*\})")
_WRITTEN = re.compile(r"(?<![\w.`-])\**([A-Za-z][A-Za-z0-9]*(?:[_.][A-Za-z0-9]+)+"
                     r"|[a-z][a-z0-9]+(?:[A-Z][a-z0-9]*)+(?=\**\()|[a-z][a-z0-9]*(?:-[a-z0-9]+)+(?=\**\())\** ?"
                     r"\(\s*((?:" + _ARGUMENT + r"(?:\s*,\s*" + _ARGUMENT + r")*)?)\s*\)")
"""A call written out of code form (``issue_gift_card(order_id)``, ``issueGiftCard(orderId)``,
``**issue-gift-card**(order_id, 5)``): a name of two words or more joined by ``_`` or ``.`` (a space may
follow), or in camel case or joined by ``-`` (the parenthesis right after it), then its arguments: names
(typed or given values), numbers, quoted texts or objects. Prose in parentheses ("the order_id (as the
customer gave it)") is none."""
_QUOTED = re.compile(r'"[^"\n]*"')
"""A quotation in a recipe line: what a log said (an error text), where a name before parentheses calls nothing."""
NAMED = re.compile(r"`([A-Za-z_][\w.-]*)`")
"""A name in backticks without a call (``cancel_order``), as a model writes "Call `cancel_order` with …"."""
COMPOUND = re.compile(r"[_.-]|[a-z][A-Z]")
"""A name of two words or more (``cancel_order``, ``orders.cancel``, ``cancelOrder``): a tool's, not a word of prose."""


def passed_names(text: str) -> set[str]:
    """The argument names the calls in code form of ``text`` pass (``order_id=7`` passes ``order_id``)."""
    return {a.split("=")[0].strip() for _, passed in CALLED_WITH.findall(text) for a in passed.split(",")}


def line_calls(line: str, arguments: Collection[str] = ()) -> list[tuple[str, str]]:
    """(tool, the text of its arguments) for each call ``line`` writes, in code form or out of it
    (``written_calls``, of names that are no ``arguments``)."""
    return CALLED_WITH.findall(line) + [(m.group(1), m.group(2)) for m in written_calls(line, arguments)]


def written_calls(line: str, arguments: Collection[str] = ()) -> list[re.Match[str]]:
    """The calls ``line`` writes out of code form (``_WRITTEN``), outside its quotations, of names that are no
    ``arguments`` (a field named before a remark in parentheses)."""
    unquoted = _QUOTED.sub(lambda m: " " * len(m.group(0)), line)
    return [m for m in _WRITTEN.finditer(unquoted) if m.group(1) not in arguments]


NOT_THE_AGENTS = "not one of the agent's tools (tools.known in brewkb.toml)"


def not_the_agents(name: str, known: Collection[str]) -> bool:
    """Whether a team that listed its agent's tools (``known``; empty: none
    listed) did not list ``name``."""
    return bool(known) and name not in known


DECLARED = "tools"
"""The ``meta`` key of a conversation that holds the tools its requests declared to the model (an empty list:
it was offered none)."""
MAX_DECLARED = 1024
"""The most tools one conversation may declare: far more than a model API takes in one request."""


def declared_in(tools: object) -> list[str]:
    """The names of the functions a list of tool definitions declares:
    OpenAI's ``{type, function: {name, …}}``, or the flat ``{type, name, …}``
    of OpenTelemetry's ``gen_ai.tool.definitions``. ``None`` declares
    nothing; anything else that is not such a list of at most
    ``MAX_DECLARED`` definitions, each named by an identifier, is refused
    (TrajectoryError): a list brewkb cannot read would otherwise let every
    call count."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise TrajectoryError(f"its tools must be a list of tool definitions, not {type(tools).__name__}")
    if len(tools) > MAX_DECLARED:
        raise TrajectoryError(f"it declares {len(tools)} tools, more than {MAX_DECLARED}")
    found = []
    for n, tool in enumerate(tools):
        function = tool.get("function", tool) if isinstance(tool, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
            raise TrajectoryError(f"its tools[{n}] is not a tool definition named by an identifier "
                                  f"({repr(name if isinstance(name, str) else tool)[:60]})")
        found.append(name)
    return sorted(set(found))


def undeclared(name: str, trajectory: Trajectory) -> bool:
    """Whether ``trajectory`` says which tools its requests declared, and
    ``name`` is not one of them: a call the model made up, which no recipe
    learns from."""
    declared = trajectory.meta.get(DECLARED)
    return isinstance(declared, list) and name not in declared


def agent_calls(trajectory: Trajectory, known: Collection[str] = ()) -> list[ToolCall]:
    """The calls of ``trajectory`` that an agent could make: of the tools its
    requests declared (when it says), and of the agent's ``known`` tools (when a
    team lists them). Any other call is none of its actions."""
    return [c for c in tool_calls(trajectory.messages) if not undeclared(c.name, trajectory)
            and not not_the_agents(c.name, known)]


def name_words(name: str) -> list[str]:
    """``cancelOrder`` / ``cancel_order`` / ``orders.cancel`` → its lowercase words."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name)
    return [w for w in re.split(r"[_\W]+", spaced.lower()) if w]


VIEWED = frozenset({"file", "files", "url", "page", "link", "document", "doc", "tab", "browser", "app", "folder",
                    "window", "image", "sheet", "spreadsheet", "workbook", "pdf", "website", "site", "details"})
"""What ``open`` reads when it names one (``open_file``, ``open_url``); otherwise it creates (``open_claim``,
``open_ticket``)."""


def is_lookup(name: str) -> bool:
    words = name_words(name)
    return bool(words) and words[0] in READ_VERBS and (words[0] != "open" or bool(VIEWED & set(words[1:])))


def is_talk(name: str) -> bool:
    words = name_words(name)
    return bool(words) and (words[0] in TALK_VERBS or "_".join(words) in TALK_VERBS)


def is_handoff(name: str) -> bool:
    """A tool that hands the conversation to a person (``transfer_to_human_agents``,
    ``escalate``): it ends the agent's part, it is not what the user wanted done."""
    words = name_words(name)
    return bool(words) and (words[0] in {"escalate", "handoff"} or
                            (words[0] in HANDOFF_VERBS and bool(HANDOFF_TARGETS & set(words[1:]))))


def is_write(name: str) -> bool:
    """A tool that changes state (not a lookup, a message or a hand-off)."""
    return not (is_lookup(name) or is_talk(name) or is_handoff(name))


def concept_of_tool(name: str) -> str:
    """``cancel_reservation`` → ``cancel reservation``."""
    return " ".join(name_words(name)) or name


def step_text(call: ToolCall) -> str:
    """A call written in the recipe step convention: ``name(arg1, arg2)``."""
    args = call.args() or {}
    return f"{call.name}({', '.join(args)})"


def parse_step(line: str) -> tuple[str, list[str]] | None:
    """The tool and argument names of a step line like ``1. `find_customer(email)` — why``."""
    match = STEP_RE.match(line)
    if not match:
        return None
    return match.group(1), [a.strip() for a in match.group(2).split(",") if a.strip()]


def parse_alternatives(line: str) -> list[tuple[str, list[str]]]:
    """Every call a step line offers: the first, and those it joins with "or"."""
    first = parse_step(line)
    if first is None:
        return []
    found = [first]
    rest = line[STEP_RE.match(line).end():]  # type: ignore[union-attr]
    while (match := re.match(r"\s+or\s+" + CALL_RE.pattern, rest)) is not None:
        found.append((match.group(1), [a.strip() for a in match.group(2).split(",") if a.strip()]))
        rest = rest[match.end():]
    return found


def procedure(text: str) -> list[frozenset[str]]:
    """The steps of a procedure text: for each step line, the tools it offers."""
    return [frozenset(name for name, _ in alts) for line in text.splitlines()
            if (alts := parse_alternatives(line))]


def user_turns(trajectory: Trajectory) -> list[str]:
    return [str(m["content"]) for m in trajectory.messages
            if m.get("role") == "user" and isinstance(m.get("content"), str) and m["content"].strip()]


def writes_of(calls: Iterable[ToolCall] | Trajectory) -> list[str]:
    """The tools of the writes that were done (calls that did not fail), in order of first use."""
    found = tool_calls(calls.messages) if isinstance(calls, Trajectory) else calls
    return list(dict.fromkeys(c.name for c in found if not c.error and is_write(c.name)))


def used_tools(calls: Sequence[ToolCall]) -> list[str]:
    """The tools a conversation used without an error, messages left out, in order of first use."""
    return list(dict.fromkeys(c.name for c in calls if not c.error and not is_talk(c.name)))
