"""``serve``: the conversations ``brewkb serve`` recorded, in a serve run's
``serve/`` folder (SOURCE is the run's folder or that folder).

Each server process appends to files of its own: ``<writer>.jsonl``, one
trajectory per line — a conversation as it stood after its latest turn,
written again when it goes on — and ``<writer>.outcomes.jsonl``, the outcomes
posted to it. Reading them back:

- the line of a conversation id with the most messages stands for the
  conversation; the revision and recipes served at each of its turns
  (``meta.turns``) are gathered from all its lines;
- a conversation grouped by its history whose messages are where another
  such conversation's messages start is that conversation cut in two (a
  server that had forgotten it, or replicas that each saw some turns): it is
  left out and its turns go to the longer one;
- the last outcome posted for a conversation labels it.

The helpers that say what a recorded message is (``recorded_message``) and
when two messages are the same (``message_key``, ``states``) are shared with
the server, which groups turns by the same rule.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from brewkb.errors import TrajectoryError
from brewkb.trajectories.formats.base import Item, Skipped, parse_json
from brewkb.trajectories.schema import ROLES, KBUse, Outcome, Trajectory

__all__ = ["read", "recorded_message", "message_key", "states", "text_of_content", "OUTCOMES_SUFFIX",
           "LABEL"]

OUTCOMES_SUFFIX = ".outcomes.jsonl"
LABEL = "posted to brewkb serve"


def text_of_content(content: Any) -> str | None:
    """A message's content as text: a string as it is, content parts as their
    text (a part that is not text, such as an image, as ``[image_url]``)."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, dict):
                parts.append(f"[{str(part.get('type') or 'part')[:40]}]")
        return "\n".join(parts)
    return json.dumps(content, ensure_ascii=False)


def recorded_message(message: Any) -> dict[str, Any] | None:
    """The message as a trajectory keeps it (role, text content, tool calls,
    ``tool_call_id``, a tool result's ``name``), or ``None`` when it is not a
    chat message."""
    if not isinstance(message, Mapping) or not isinstance(message.get("role"), str) or message["role"] not in ROLES:
        return None
    out: dict[str, Any] = {"role": message["role"], "content": text_of_content(message.get("content"))}
    calls = message.get("tool_calls")
    if calls:
        if not isinstance(calls, list):
            return None
        kept = []
        for call in calls:
            function = call.get("function") if isinstance(call, Mapping) else None
            if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
                return None
            arguments = function.get("arguments")
            kept.append({"id": str(call.get("id") or ""), "type": "function",
                         "function": {"name": function["name"], "arguments": arguments if isinstance(arguments, str)
                                      else json.dumps(arguments, ensure_ascii=False)}})
        out["tool_calls"] = kept
    if isinstance(message.get("tool_call_id"), str):
        out["tool_call_id"] = message["tool_call_id"]
    if out["role"] in ("tool", "function") and isinstance(message.get("name"), str):
        out["name"] = message["name"]  # the tool's (a user's or an assistant's name is not kept)
    return out


def message_key(message: Any) -> bytes:
    """What makes two copies of a message the same message: its role, text,
    tool calls and the call it answers (not the fields a client may add or
    drop when it sends the message back, such as ``refusal: null``). Each part
    is prefixed by its length, so no text can pass for two parts."""
    if not isinstance(message, Mapping):
        return b"?"
    parts = [str(message.get("role")), text_of_content(message.get("content")) or ""]
    for call in message.get("tool_calls") or ():
        if isinstance(call, Mapping):
            function = call["function"] if isinstance(call.get("function"), Mapping) else {}
            parts += [str(call.get("id") or ""), str(function.get("name") or ""), str(function.get("arguments") or "")]
    parts.append(str(message.get("tool_call_id") or ""))
    return "".join(f"{len(part)}:{part}" for part in parts).encode("utf-8", "surrogatepass")


def states(messages: Sequence[Any]) -> list[bytes]:
    """The conversation's states: a digest of the messages up to each
    assistant message (the end of a turn). One conversation continues another
    when one of its states is the other's last."""
    digest = hashlib.blake2b(digest_size=16)
    found = []
    for message in messages:
        digest.update(message_key(message))
        if isinstance(message, Mapping) and message.get("role") == "assistant":
            found.append(digest.copy().digest())
    return found


@dataclass
class _Entry:
    journal: Path
    offset: int
    size: int
    history: bool
    """Grouped by its history (not by an id the client sent)."""
    order: int
    states: list[bytes]
    turns: dict[int, dict[str, Any]] = field(default_factory=dict)
    absorbed: list[str] = field(default_factory=list)
    """The conversations found to be its start (their outcomes label it when it has none)."""


def _turns(trajectory: Trajectory) -> dict[int, dict[str, Any]]:
    turns = trajectory.meta.get("turns")
    return {int(t["at"]): dict(t) for t in turns if isinstance(t, dict) and isinstance(t.get("at"), int)} \
        if isinstance(turns, list) else {}


def _folder(path: Path) -> Path:
    """The ``serve/`` folder of a serve run's folder, or ``path`` itself (given that folder)."""
    return path / "serve" if (path / "serve").is_dir() else path


def looks_like(path: Path) -> bool:
    """Whether ``path`` is a serve run's folder (or its ``serve/`` folder) with conversations recorded."""
    folder = _folder(path)
    return folder.name == "serve" and any(not p.name.endswith(OUTCOMES_SUFFIX) for p in folder.glob("*.jsonl"))


def _journals(path: Path) -> list[Path]:
    folder = _folder(path)
    if not folder.is_dir():
        raise TrajectoryError(f"{path}: `serve` reads a serve run's folder (runs/RUN) or its serve/ folder")
    found = sorted(p for p in folder.glob("*.jsonl") if not p.name.endswith(OUTCOMES_SUFFIX))
    if not found:
        raise TrajectoryError(f"{folder}: no conversations recorded by `brewkb serve` (no <writer>.jsonl file)")
    return found


def read(path: Path, split: str, tasks: Path | None = None) -> Iterator[Item]:
    entries: dict[str, _Entry] = {}
    for journal in _journals(path):
        yield from _index(journal, entries)
    wanted = set(entries)
    kept = _absorb(entries)
    labels = _labels(path, wanted)
    for conversation, entry in sorted(kept.items(), key=lambda item: item[1].order):
        with entry.journal.open("rb") as handle:
            handle.seek(entry.offset)
            trajectory = Trajectory.from_json(parse_json(handle.readline()))
        turns = [entry.turns[at] for at in sorted(entry.turns)]
        recipes = tuple(dict.fromkeys(r for t in turns for r in t.get("recipes") or () if isinstance(r, str)))
        revision = next((t.get("revision") for t in reversed(turns) if t.get("revision")), None)
        changes: dict[str, Any] = {"kb": KBUse(revision, recipes), "split": split,
                                   "meta": {**trajectory.meta, "turns": turns}}
        label = labels.get(conversation) or next((labels[c] for c in entry.absorbed if c in labels), None)
        if label is not None:
            changes["outcome"] = label
        yield trajectory.derived(**changes)


def _index(journal: Path, entries: dict[str, _Entry]) -> Iterator[Skipped]:
    """Note where each conversation's longest line is; a line cut short (a
    server killed while writing) or not written by the server is skipped."""
    offset = 0
    with journal.open("rb") as handle:
        for number, line in enumerate(handle, start=1):
            start, offset = offset, offset + len(line)
            if not line.strip():
                continue
            where = f"{journal}:{number}"
            try:
                trajectory = Trajectory.from_json(parse_json(line))
            except TrajectoryError as exc:
                yield Skipped(where, str(exc))
                continue
            conversation = trajectory.meta.get("conversation_id")
            if not isinstance(conversation, str):
                yield Skipped(where, "no meta.conversation_id: not a line `brewkb serve` wrote")
                continue
            entry = entries.get(conversation)
            if entry is None or len(trajectory.messages) >= entry.size:
                turns = entry.turns if entry is not None else {}
                entry = _Entry(journal, start, len(trajectory.messages),
                               trajectory.meta.get("grouped_by") != "header",
                               entry.order if entry is not None else len(entries), states(trajectory.messages),
                               turns)
                entries[conversation] = entry
            entry.turns.update(_turns(trajectory))


def _absorb(entries: dict[str, _Entry]) -> dict[str, _Entry]:
    """The conversations that are not the start of a longer one grouped by
    history; each takes the turns of those it absorbed."""
    last = {e.states[-1]: c for c, e in entries.items() if e.history and e.states}
    kept = dict(entries)
    for conversation, entry in sorted(entries.items(), key=lambda item: -item[1].size):
        if conversation not in kept or not entry.history:
            continue
        for state in entry.states[:-1]:
            other = last.get(state)
            if other is not None and other != conversation and other in kept:
                gone = kept.pop(other)
                entry.turns = {**gone.turns, **entry.turns}
                entry.absorbed += [other, *gone.absorbed]
                entry.order = min(entry.order, gone.order)  # it began when its first part did
    return kept


def _labels(path: Path, wanted: set[str]) -> dict[str, Outcome]:
    """The outcome last posted for each conversation of ``wanted`` (the recorded ones: outcomes
    posted for others are read past, so they take no memory, however many); a bad line is skipped."""
    folder = _folder(path)
    last: dict[str, tuple[float, Outcome]] = {}
    for file in sorted(folder.glob(f"*{OUTCOMES_SUFFIX}")):
        with file.open("rb") as handle:
            for line in handle:
                try:
                    row = json.loads(line)
                except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
                    continue
                conversation = row.get("conversation_id") if isinstance(row, dict) else None
                if not isinstance(conversation, str) or conversation not in wanted:
                    continue
                outcome = _outcome(row)
                time = float(row["time"]) if _number(row.get("time")) else 0.0
                if outcome is not None and time >= last.get(conversation, (-math.inf, None))[0]:
                    last[conversation] = (time, outcome)
    return {conversation: outcome for conversation, (_, outcome) in last.items()}


def _outcome(row: dict[str, Any]) -> Outcome | None:
    success, score = row.get("success"), row.get("score")
    if not isinstance(success, bool | None) or (score is not None and not _number(score)):
        return None
    if success is None and score is None:
        return None
    if success is None:
        success = score is not None and score >= 1.0
    return Outcome(success, float(score) if score is not None else float(success), {"label": LABEL})


def _number(value: Any) -> bool:
    try:
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    except OverflowError:  # an integer too large for a float
        return False
