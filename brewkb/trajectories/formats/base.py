"""What every format's reader shares: the items it yields, outcomes from
rewards, and reading records one at a time whatever their shape or depth.

A reader yields ``Trajectory`` values, or ``Skipped`` for a record it cannot
read (with where it is: ``file:line`` or ``file[index]``). It raises
``TrajectoryError`` only for a file it cannot read at all, never for one
record's content: every record, however malformed or deeply nested, becomes
an item.

Names are identifiers. Every reader builds its trajectories with ``build``,
which refuses a record whose tool names or argument names do not match
``config.TOOL_NAME`` (a letter or ``_``, then letters, digits, ``_``, ``.`` or
``-``; at most 64 characters; no run of four digits): a name is what recipes
write steps with, so a name carrying a newline, markdown, an instruction or a
number of a person's must never get that far.
The record becomes a ``Skipped`` naming the message and call, with the name
shown only as a short escaped repr.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import IO, Any

import ijson

from brewkb.config import TOOL_NAME
from brewkb.errors import TrajectoryError
from brewkb.trajectories.schema import UNKNOWN, Outcome, Trajectory

__all__ = ["Skipped", "Item", "Reader", "MAX_DEPTH", "RECORD_ERRORS", "outcome_of", "outcome_json", "UNKNOWN_JSON", "build", "obj", "first_line", "first_user", "guarded", "parse_json",
           "json_lines", "json_items", "open_text", "depth_ok", "bad_name", "shown_name",
           "without_markers", "drop_markers", "marker_at"]

MAX_DEPTH = 200
"""Nesting deeper than this is refused: no chat message needs it, and deeper
values would exhaust the recursion of every later step that walks them."""

RECORD_ERRORS = (TypeError, ValueError, AttributeError, KeyError, IndexError, RecursionError)
"""What reading a record of an unexpected shape may raise; it becomes a ``Skipped``."""


@dataclass(frozen=True)
class Skipped:
    where: str
    reason: str
    never_ran: bool = False
    """A record of a conversation that never took place (the harness failed before it began): nothing to
    learn from and nothing wrong with the file, so it is counted and skipped without ``--skip-bad``."""


Item = Trajectory | Skipped
Reader = Callable[[Path, str, Path | None], Iterator[Item]]
"""``(path, split, tasks)`` → items; ``tasks`` is optional context (a tasks file or folder)."""


def depth_ok(value: Any, limit: int = MAX_DEPTH) -> bool:
    """True when ``value`` nests at most ``limit`` containers deep (walked level
    by level, without recursion)."""
    level = [value] if isinstance(value, dict | list) else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return False
        below: list[Any] = []
        for item in level:
            below.extend([c for c in (item.values() if type(item) is dict else item) if type(c) in _CONTAINERS])
        level = below
    return True


_CONTAINERS = (dict, list)
BOM = b"\xef\xbb\xbf"


def parse_json(text: str | bytes) -> Any:
    """One JSON value; malformed or too deeply nested text raises ``TrajectoryError``."""
    if isinstance(text, str):
        text = text.removeprefix("\ufeff")  # a byte-order mark (bytes are decoded by json itself, BOM or not)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        message = exc.msg.removesuffix(" at")  # "Unterminated string starting at": the column says where
        raise TrajectoryError(f"not JSON ({message} at column {exc.colno})") from None
    except RecursionError:
        raise TrajectoryError(f"nested more than {MAX_DEPTH} levels deep") from None
    if not depth_ok(value):
        raise TrajectoryError(f"nested more than {MAX_DEPTH} levels deep")
    return value


def open_text(path: Path) -> IO[str]:
    try:
        return path.open(encoding="utf-8-sig", errors="replace")  # -sig: a byte-order mark is not text
    except OSError as exc:
        raise TrajectoryError(f"{path}: cannot read ({exc.strerror})") from None


def json_lines(path: Path) -> Iterator[tuple[int, Any | TrajectoryError]]:
    """``(line number, value)`` for each non-blank line of a JSONL file; a line
    that is not a JSON value gives its ``TrajectoryError`` instead."""
    with open_text(path) as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                yield number, parse_json(line)
            except TrajectoryError as exc:
                yield number, exc


def json_items(path: Path, prefix: str) -> Iterator[tuple[int, Any | TrajectoryError]]:
    """``(index, value)`` of each item under ``prefix`` (``item`` for a top-level
    array, ``simulations.item``...), parsed one at a time. Text that stops
    being JSON ends the stream with one ``TrajectoryError`` at the index it
    reached: nothing after it can be read."""
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise TrajectoryError(f"{path}: cannot read ({exc.strerror})") from None
    index = 0
    with handle:
        if handle.read(3) != BOM:  # a byte-order mark, which editors on Windows write, is not JSON
            handle.seek(0)
        values = ijson.items(handle, prefix, use_float=True)
        while True:
            try:
                value = next(values)
            except StopIteration:
                return
            except (ijson.JSONError, UnicodeDecodeError) as exc:
                detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                yield index, TrajectoryError(f"not JSON from here on ({detail}); the rest of the file cannot be read")
                return
            yield index, value if depth_ok(value) else TrajectoryError(f"nested more than {MAX_DEPTH} levels deep")
            index += 1


def obj(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def first_line(head: str) -> Any:
    """The JSON value on the first line of ``head``, or ``None``."""
    try:
        return parse_json(head.lstrip().split("\n", 1)[0])
    except TrajectoryError:
        return None


def first_user(messages: Any) -> str:
    if not isinstance(messages, list):
        return ""
    for m in messages:
        if isinstance(m, dict) and m.get("role") == "user":
            content = m.get("content")
            return content if isinstance(content, str) else json.dumps(content) if content else ""
    return ""


def without_markers(messages: Any, markers: Sequence[str]) -> Any:
    """``messages`` with the control markers a user simulator writes into its
    turns (τ-bench's ``###STOP###``) taken out of the user's text, and what
    follows them (``drop_markers``): the harness said them, not the user, so
    no request is read from them. A user turn of
    nothing else is left out (one that also calls a tool keeps its calls).
    Anything that is not a list of messages is returned as it is, for the
    reader to refuse."""
    if not isinstance(messages, list):
        return messages
    out = []
    for m in messages:
        content = m.get("content") if isinstance(m, dict) and m.get("role") == "user" else None
        text = _until_marker(content, markers) if isinstance(content, str) else None
        if text is not None:
            if not text and not m.get("tool_calls"):
                continue
            m = {**m, "content": text or None}
        out.append(m)
    return out


@lru_cache(maxsize=16)
def _markers(markers: tuple[str, ...]) -> re.Pattern[str]:
    """The markers in any case, with spaces between their characters allowed."""
    return re.compile("|".join(r"\s*".join(map(re.escape, m.replace(" ", ""))) for m in markers), re.IGNORECASE)


def _plain(text: str) -> str:
    """``text`` as a marker is looked for in it: NFKC (fullwidth ``＃`` is ``#``), without format characters."""
    return unicodedata.normalize("NFKC", "".join(c for c in text if unicodedata.category(c) != "Cf"))


def marker_at(text: str, markers: Sequence[str]) -> int | None:
    """Where the first of ``markers`` begins in ``_plain(text)`` (written in any case,
    fullwidth, or with spaces or invisible characters inside), or ``None``."""
    found = _markers(tuple(markers)).search(_plain(text)) if markers else None
    return found.start() if found else None


def _until_marker(text: str, markers: Sequence[str]) -> str | None:
    """``text`` up to its first marker, its spaces collapsed; ``None`` when it holds none."""
    at = marker_at(text, markers)
    return None if at is None else " ".join(_plain(text)[:at].split())


def drop_markers(text: str, markers: Sequence[str]) -> str:
    """``text`` up to its first marker (``marker_at``), its spaces collapsed:
    the simulated user's turn ends there, and whatever follows a marker was
    not said to the agent (a log's author can put anything there)."""
    kept = _until_marker(text, markers)
    return " ".join(text.split()) if kept is None else kept


def outcome_of(reward: Any, success: Any = None) -> Outcome:
    """The outcome a log states: ``success`` when it is a boolean (or ``1`` / ``0``, as an outcomes file may say
    it), else a numeric ``reward`` (1 or more is a success), else unknown. A reward that is there but is not a
    number is an error, not an unknown outcome."""
    if type(success) is int and success in (0, 1):
        success = bool(success)
    if isinstance(success, bool):
        return Outcome(success, float(reward) if _number(reward) else float(success))
    if success is not None:
        raise TrajectoryError(f"`success` must be true or false (or 1 or 0), got {success!r}")
    if reward is None:
        return UNKNOWN
    if not _number(reward):
        raise TrajectoryError(f"`reward` must be a finite number, got {reward!r}")
    return Outcome(reward >= 1.0, float(reward))


def _number(value: Any) -> bool:
    """A finite number (JSON's ``1e999`` reads as infinity, and NaN is no reward)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer too large for a float
        return False


UNKNOWN_JSON: dict[str, Any] = {"success": None, "score": None}
"""The outcome of a conversation whose log carries no verdict."""


def outcome_json(outcome: Outcome) -> dict[str, Any]:
    return {"success": outcome.success, "score": outcome.score}


SHOWN_NAME = 40
"""Characters of a refused name an error message shows (escaped)."""


def shown_name(name: Any) -> str:
    """A refused name as an error may show it: escaped (``repr``: no newline,
    invisible or control character survives) and cut to ``SHOWN_NAME`` characters."""
    text = name if isinstance(name, str) else json.dumps(name)[:SHOWN_NAME + 1]
    cut = text[:SHOWN_NAME]
    return ascii(cut) + (f" (and {len(text) - SHOWN_NAME:,} characters more)" if len(text) > SHOWN_NAME else "")


def bad_name(messages: Sequence[Any]) -> str | None:
    """Why the first tool or argument name of ``messages`` that is not an
    ``config.TOOL_NAME`` is refused, with where it is; ``None`` when all are."""
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        name = message.get("name")
        if message.get("role") in ("tool", "function") and name is not None and not _identifier(name):
            return f"messages[{i}].name {shown_name(name)} is not a tool name"
        for j, call in enumerate(message.get("tool_calls") or ()):
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict):
                continue
            where = f"messages[{i}].tool_calls[{j}].function"
            if not _identifier(function.get("name")):
                return f"{where}.name {shown_name(function.get('name'))} is not a tool name"
            arguments = function.get("arguments")
            try:
                args = json.loads(arguments) if isinstance(arguments, str) else None
            except (json.JSONDecodeError, RecursionError):
                args = None  # arguments that are not JSON are kept as the agent wrote them: they name nothing
            for key in args if isinstance(args, dict) else ():
                if not _identifier(key):
                    return f"{where}.arguments: argument name {shown_name(key)} is not an identifier"
    return None


def _deep_arguments(messages: Sequence[Any]) -> str | None:
    """Where the first tool call of ``messages`` whose arguments nest more than
    ``MAX_DEPTH`` levels deep is; ``None`` when none does."""
    for i, message in enumerate(messages):
        for j, call in enumerate(message.get("tool_calls") or () if isinstance(message, dict) else ()):
            function = call.get("function") if isinstance(call, dict) else None
            arguments = function.get("arguments") if isinstance(function, dict) else None
            if not isinstance(arguments, str) or arguments.count("[") + arguments.count("{") <= MAX_DEPTH:
                continue  # too few brackets to nest that deep: no second parse of every call's arguments
            try:
                parse_json(arguments)
            except TrajectoryError as exc:
                if str(exc).startswith("nested"):
                    return f"messages[{i}].tool_calls[{j}].function.arguments: {exc}"
    return None


def _identifier(name: Any) -> bool:
    return isinstance(name, str) and TOOL_NAME.fullmatch(name) is not None


def build(where: str, **fields: Any) -> Item:
    """A ``Trajectory`` from its JSON fields, or ``Skipped`` naming what is
    wrong (a tool or argument name that is not an identifier included)."""
    messages = fields.get("messages")
    if isinstance(messages, list) and (deep := _deep_arguments(messages)) is not None:
        return Skipped(where, deep)
    if isinstance(messages, list) and (why := bad_name(messages)) is not None:
        return Skipped(where, f"{why}: tool and argument names must be identifiers (a letter or _, then letters, "
                              "digits, _ . -; at most 64 characters; no run of four digits); the record is refused, the name is not kept")
    try:
        return Trajectory.from_json(fields)
    except TrajectoryError as exc:
        return Skipped(where, str(exc))


def guarded(where: str, convert: Callable[[], Item | None]) -> Item | None:
    """``convert()``, with a record whose shape it did not expect turned into a
    ``Skipped`` rather than a crash of the whole import."""
    try:
        return convert()
    except TrajectoryError as exc:
        return Skipped(where, str(exc))
    except RECORD_ERRORS as exc:
        return Skipped(where, f"a record of a shape this format does not have ({type(exc).__name__}: "
                              f"{str(exc)[:200]})")
