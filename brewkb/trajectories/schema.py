"""Trajectories: one agent episode as a frozen value and one JSON line.

Messages are OpenAI chat messages (``system``, ``user``, ``assistant`` with
``tool_calls``, ``tool`` with ``tool_call_id``). Tool-call arguments are kept as
the string the agent produced, even when it is not valid JSON: a malformed
call is part of what the agent did.

Reading is streaming; a bad line is reported with its line number and either
stops the read or, with ``skip_bad``, is skipped and counted.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from brewkb.errors import TrajectoryError
from brewkb.fsutil import append_line, write_atomic

__all__ = [
    "COPY_KEY",
    "UNNAMED_TASK",
    "Outcome",
    "UNKNOWN",
    "KBUse",
    "ToolCall",
    "Trajectory",
    "ReadStats",
    "read_jsonl",
    "write_jsonl",
    "append_jsonl",
    "tool_calls",
    "content_id",
    "render_compact",
    "SENTENCE_END",
]

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


COPY_KEY = "copy_key"
"""``meta`` key: a hash of a conversation's messages as its log held them (before
scrubbing, which makes distinct conversations alike), written at import.
Support for a recipe counts conversations with the same one as one task,
whatever task ids their log gives them (``brewkb.stages.concepts.tasks_of``)."""

UNNAMED_TASK = "unnamed_task"
"""``meta`` key: true when the log named no task, so the task id is the importer's
(an ``openai`` line's number and a digest of its messages)."""

SENTENCE_END = re.compile(r"(?<=[.!?])(?<!\bDr\.)(?<!\bMr\.)(?<!\bMrs\.)(?<!\bMs\.)(?<!\bMx\.)(?<!\bSt\.)(?<!\bProf\.)\s+")
"""Where a sentence of a message ends: after a full stop, an exclamation or a question mark, not after a title
("Dr. Hart")."""


def content_id(value: Any, length: int = 16) -> str:
    """A stable id from the canonical JSON of ``value``."""
    raw = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:length]  # a lone \ud800 too


@dataclass(frozen=True)
class Outcome:
    """What the grader said: ``success``, a ``score`` in [0, 1], and its detail.

    A logged conversation may carry no verdict at all: ``success`` (and
    ``score``) are then ``None``, and readers must not count it as a success
    or a failure. ``UNKNOWN`` is that outcome."""

    success: bool | None
    score: float | None
    detail: Mapping[str, Any] = field(default_factory=dict)

    @property
    def known(self) -> bool:
        return self.success is not None


UNKNOWN = Outcome(None, None)


@dataclass(frozen=True)
class KBUse:
    """The KB revision an episode ran with and the recipes it retrieved."""

    revision: str | None = None
    recipes: tuple[str, ...] = ()


@dataclass(frozen=True)
class ToolCall:
    """A tool call and its result, paired from the messages."""

    id: str
    name: str
    arguments: str
    result: str | None
    error: bool

    def args(self) -> dict[str, Any] | None:
        """The arguments as a dict, or ``None`` when they are not a JSON object."""
        try:
            value = json.loads(self.arguments or "{}")
        except (json.JSONDecodeError, RecursionError):
            return None
        return value if isinstance(value, dict) else None


@dataclass(frozen=True)
class Trajectory:
    """One episode. ``messages`` are plain dicts: treat them as read-only.

    Attributes:
      id: content-derived (task, messages, outcome, relabelling), stable across runs.
      task_id, task, split: the task and the split it belongs to.
      messages: the conversation in OpenAI chat format.
      outcome: the grader's verdict.
      rubric: rubric scores and notes (``{"scores": {...}, "notes": {...}}``), may be empty.
      kb: the KB revision and the recipes retrieved for the episode.
      steps: agent turns (assistant messages).
      usage: token and call counts of the agent.
      relabelled_from: id of the trajectory this one relabels, if any.
      meta: anything else (agent stderr, errors, importer details).
    """

    task_id: str
    task: str
    messages: tuple[Mapping[str, Any], ...]
    outcome: Outcome
    split: str = "train"
    rubric: Mapping[str, Any] = field(default_factory=dict)
    kb: KBUse = KBUse()
    steps: int = -1
    usage: Mapping[str, Any] = field(default_factory=dict)
    relabelled_from: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)
    id: str = ""

    def __post_init__(self) -> None:
        if self.steps < 0:
            object.__setattr__(self, "steps", sum(1 for m in self.messages if m.get("role") == "assistant"))
        if not self.id:
            object.__setattr__(self, "id", content_id({
                "task_id": self.task_id, "task": self.task, "messages": list(self.messages),
                "success": self.outcome.success, "score": self.outcome.score,
                "relabelled_from": self.relabelled_from, "kb": self.kb.recipes,
            }))

    @property
    def success(self) -> bool | None:
        """``None`` when the outcome is unknown (see ``Outcome``)."""
        return self.outcome.success

    @property
    def labelled(self) -> bool:
        return self.outcome.success is not None

    def with_(self, **changes: Any) -> Trajectory:
        """A copy with changes; the id is kept (grades and rubric notes do not
        make a different episode)."""
        return replace(self, **changes)

    def derived(self, **changes: Any) -> Trajectory:
        """A copy with changes and its id derived anew from the new content."""
        return replace(self, **changes, id="")

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "task_id": self.task_id, "task": self.task, "split": self.split,
            "messages": list(self.messages),
            "outcome": {"success": self.outcome.success, "score": self.outcome.score,
                        "detail": dict(self.outcome.detail)},
            "rubric": dict(self.rubric),
            "kb": {"revision": self.kb.revision, "recipes": list(self.kb.recipes)},
            "steps": self.steps, "usage": dict(self.usage),
            "relabelled_from": self.relabelled_from, "meta": dict(self.meta),
        }

    def to_line(self) -> str:
        return json.dumps(self.to_json(), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, data: Any) -> Trajectory:
        """Validate and build; errors name the offending field."""
        if not isinstance(data, dict):
            raise TrajectoryError(f"expected a JSON object, got {type(data).__name__}")
        messages = data.get("messages")
        if not isinstance(messages, list) or not messages:
            raise TrajectoryError("`messages` must be a non-empty list of chat messages")
        for i, message in enumerate(messages):
            _check_message(message, f"messages[{i}]")
        outcome = data.get("outcome")
        if not isinstance(outcome, dict) or "success" not in outcome or not isinstance(outcome["success"], bool | None):
            raise TrajectoryError("`outcome.success` must be true, false or null (unknown)")
        success = outcome["success"]
        score = outcome.get("score", None if success is None else 1.0 if success else 0.0)
        if success is None and score is not None:
            raise TrajectoryError("`outcome.score` must be null when `outcome.success` is null (unknown)")
        if success is not None and (not isinstance(score, int | float) or isinstance(score, bool)):
            raise TrajectoryError(f"`outcome.score` must be a number, got {score!r}")
        kb = data.get("kb") or {}
        for key in ("task_id", "task"):
            if not isinstance(data.get(key), str | int):
                raise TrajectoryError(f"`{key}` must be a string")
        for key, kind in (("kb", dict), ("rubric", dict), ("usage", dict), ("meta", dict)):
            if not isinstance(data.get(key) or {}, kind):
                raise TrajectoryError(f"`{key}` must be an object")
        if not isinstance(outcome.get("detail") or {}, dict):
            raise TrajectoryError("`outcome.detail` must be an object")
        if not isinstance(data.get("steps", -1), int) or not isinstance(kb.get("recipes") or [], list):
            raise TrajectoryError("`steps` must be an integer and `kb.recipes` a list")
        return cls(
            id=str(data.get("id") or ""), task_id=str(data["task_id"]), task=str(data["task"]),
            split=str(data.get("split") or "train"), messages=tuple(messages),
            outcome=Outcome(success, None if score is None else float(score),
                            dict(outcome.get("detail") or {})),
            rubric=dict(data.get("rubric") or {}),
            kb=KBUse(kb.get("revision"), tuple(kb.get("recipes") or ())),
            steps=int(data.get("steps", -1)), usage=dict(data.get("usage") or {}),
            relabelled_from=data.get("relabelled_from"), meta=dict(data.get("meta") or {}),
        )


def _check_message(message: Any, where: str) -> None:
    if not isinstance(message, dict):
        raise TrajectoryError(f"{where}: a message must be an object")
    role = message.get("role")
    if role not in ROLES:
        raise TrajectoryError(f"{where}: unknown role {role!r}; expected one of {sorted(ROLES)}")
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise TrajectoryError(f"{where}.tool_calls must be a list")
    for j, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise TrajectoryError(f"{where}.tool_calls[{j}]: needs `function.name`")
        if not isinstance(function.get("arguments", ""), str):
            raise TrajectoryError(
                f"{where}.tool_calls[{j}].function.arguments must be a JSON string, as in the OpenAI format"
            )


def _is_error(content: str) -> bool:
    head = content.strip()[:200].lower()
    if head.startswith(("error", "exception", "traceback")):
        return True
    if head.startswith("{"):
        try:
            value = json.loads(content)
        except json.JSONDecodeError:
            return False
        return isinstance(value, dict) and bool(value.get("error"))
    return False


def tool_calls(messages: Iterable[Mapping[str, Any]]) -> list[ToolCall]:
    """Every tool call in order, paired with its result (``None`` if none came).
    A result pairs with the earliest unanswered call of its ``tool_call_id``
    (ids are sometimes reused), or of any id when it has none."""
    calls: list[list[Any]] = []  # [id, name, arguments, result]
    for message in messages:
        if message.get("role") == "assistant":
            for call in message.get("tool_calls") or []:
                fn = call.get("function") or {}
                calls.append([str(call.get("id") or ""), fn.get("name", ""), fn.get("arguments") or "", None])
        elif message.get("role") == "tool":
            content = message.get("content")
            text = content if isinstance(content, str) else json.dumps(content)
            key = str(message.get("tool_call_id") or "")
            for call in calls:
                if call[3] is None and (not key or call[0] == key):
                    call[3] = text
                    break
    return [ToolCall(cid, name, args, result, _is_error(result or "")) for cid, name, args, result in calls]


def render_compact(trajectory: Trajectory, max_chars: int = 6000) -> str:
    """A readable transcript for prompts: one line per message, long contents
    cut, the grade first."""
    if trajectory.success is None:
        verdict = "Outcome: UNKNOWN (the log carries no verdict)"
    else:
        verdict = f"Outcome: {'PASSED' if trajectory.success else 'FAILED'} (score {trajectory.outcome.score:g})"
    lines = [f"Task: {trajectory.task}", verdict]
    for message in trajectory.messages:
        role = message.get("role")
        if role == "system":
            continue
        content = message.get("content")
        text = content if isinstance(content, str) else json.dumps(content) if content else ""
        text = " ".join(text.split())
        if len(text) > 300:
            text = text[:299] + "…"
        if text:
            lines.append(f"{role}: {text}")
        for call in message.get("tool_calls") or []:
            fn = call.get("function") or {}
            lines.append(f"{role} calls {fn.get('name')}({fn.get('arguments', '')[:300]})")
    out = "\n".join(lines)
    return out if len(out) <= max_chars else out[: max_chars // 2] + "\n[…]\n" + out[-max_chars // 2 :]


@dataclass
class ReadStats:
    read: int = 0
    skipped: int = 0
    errors: list[str] = field(default_factory=list)


def read_jsonl(path: Path, *, skip_bad: bool = False, stats: ReadStats | None = None) -> Iterator[Trajectory]:
    """Stream trajectories from a JSONL file. A bad line raises
    ``TrajectoryError`` naming ``path:line``, or is skipped and counted in
    ``stats`` with ``skip_bad``."""
    stats = stats if stats is not None else ReadStats()
    try:
        handle = path.open(encoding="utf-8")
    except OSError as exc:
        raise TrajectoryError(f"{path}: cannot read ({exc.strerror})") from None
    with handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                trajectory = Trajectory.from_json(json.loads(line))
            except (json.JSONDecodeError, TrajectoryError) as exc:
                message = f"{path}:{number}: {exc}"
                if not skip_bad:
                    raise TrajectoryError(f"{message} (fix or remove that line; `brewkb import --skip-bad` skips "
                                          "such lines when importing)") from None
                stats.skipped += 1
                stats.errors.append(message)
                continue
            stats.read += 1
            yield trajectory


def write_jsonl(path: Path, trajectories: Iterable[Trajectory]) -> int:
    """Write all trajectories atomically; returns how many."""
    lines = [t.to_line() for t in trajectories]
    write_atomic(path, "".join(line + "\n" for line in lines))
    return len(lines)


def append_jsonl(path: Path, trajectory: Trajectory) -> None:
    """Append one trajectory as a line (a crash loses at most that line)."""
    append_line(path, trajectory.to_line())
