"""The trust boundary: every trajectory that enters a run from a log passes
through ``admit`` (``brewkb import`` calls it on each record; any other way
logs come in — a recording of live conversations — must call it too).

Logs are untrusted: whoever can put a conversation into them can try to write
into the KB, and they hold secrets and personal data. ``admit`` returns the
trajectory with every text in it (task, message contents, tool-call ids and
arguments, tool results, and the strings of ``meta``, the outcome's detail
and rubric notes), once the calls of tools its requests did not offer the
model (when the log says which: ``offered_only``) are taken out with their
results:

1. **normalised**: Unicode NFKC (fullwidth and compatibility forms folded);
   zero-width characters, bidirectional controls, Unicode tag characters,
   variation selectors and every other control or format character removed,
   except newline and tab; line and paragraph separators and carriage returns
   made newlines. Text that is JSON (tool arguments, most tool results) is
   normalised value by value, so its structure survives.
2. **scrubbed** of secrets and personal data (``brewkb.trajectories.scrub``).
3. **bounded**: each text, and each string inside a JSON text, is cut to
   ``max_text`` characters (``[scrub] max_text``), after scrubbing (a secret
   cut in two might no longer be told).

Ids are data everywhere in a run, not only in the conversation that named
them: ``RunIds`` gathers the ids the tool calls and results of many
trajectories named and replaces them in every one (``admit_all`` does both
steps for a batch; ``brewkb import`` does the second at the end of an import,
over the whole run).

The id is kept: an admitted trajectory is the same episode, told safely, and
provenance and outcomes files still find it. ``meta.admitted`` marks it, so
the scrubbing that the reflector and the judges do before they read a
trajectory (for an environment's episodes) leaves it as it is.
"""

from __future__ import annotations

import html
import json
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from brewkb.config import TOOL_NAME
from brewkb.recipes import HIDDEN
from brewkb.trajectories.schema import Trajectory, tool_calls
from brewkb.trajectories.keys import MARKS, MIN_ID, unmarked
from brewkb.trajectories.scrub import ADMITTED, Scrubber, message_texts
from brewkb.trajectories.tools import DECLARED

__all__ = ["normalise", "offered_only", "admit", "admit_all", "RunIds", "MAX_TEXT", "SCRUB_BOUND", "invisible"]

MAX_TEXT = 20_000
"""Characters one text of a trajectory keeps (``[scrub] max_text``)."""
CUT = " […]"
SCRUB_BOUND = 10
"""How many times ``max_text`` a text may be while it is scrubbed, before it is bounded."""

_REMOVED = re.compile(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u206f"
    "\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8\U000e0000-\U000e0fff\U0001bca0-\U0001bca3]"
)
"""Invisible characters NFKC keeps: zero-width, bidi controls and marks, tag characters, variation selectors."""
_NEWLINES = re.compile("\r\n|[\r\u2028\u2029\x85\x0b\x0c]")


_ASCII_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f]")


_REFERENCE = re.compile(r"&#(?:[0-9]{1,7}|[xX][0-9a-fA-F]{1,6});|&(?:lt|gt|amp|quot|apos|nbsp);")
"""An HTML character reference: a character written by its number (``&#8238;``, ``&#x200B;``) or one of the
names of markup characters. A page or a model renders it as that character."""


def _unescaped(text: str) -> str:
    """``text`` with its character references replaced by their characters (twice escaped ones too)."""
    for _ in range(3):
        decoded = _REFERENCE.sub(lambda m: html.unescape(m.group(0)), text)
        if decoded == text:
            break
        text = decoded
    return text


def normalise(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` in NFKC, its HTML character references read as the characters they stand for, without
    invisible, bidi, tag or control characters (newline and tab kept), its ideographic full stops dots, cut to
    ``limit`` characters."""
    if "&" in text and _REFERENCE.search(text):
        text = _unescaped(text)
    if text.isascii() and not _ASCII_CONTROL.search(text):  # most text: nothing to do but the bound
        return text if len(text) <= limit else text[: limit - len(CUT)] + CUT
    # the ideographic full stop reads as a dot in a link or an address (brewair。com), which NFKC leaves as it is
    text = _NEWLINES.sub("\n", unicodedata.normalize("NFKC", text)).replace("\u3002", ".")
    text = _REMOVED.sub("", text)
    if not text.isprintable():  # what is left: other control and format characters
        text = "".join(c for c in text if c in "\n\t" or unicodedata.category(c) not in ("Cc", "Cf", "Cs", "Co"))
    return text if len(text) <= limit else text[: limit - len(CUT)] + CUT


def invisible(text: str) -> list[str]:
    """The characters of ``text`` that ``normalise`` removes or makes line feeds, written as themselves or as
    character references (as ``U+XXXX``, once each, in order)."""
    if "&" in text:  # written as character references, they are those characters to whoever renders them
        text = _unescaped(text)
    found = [c for c in text if _REMOVED.match(c) or (c not in "\n\t" and unicodedata.category(c) in HIDDEN)]
    return list(dict.fromkeys(f"U+{ord(c):04X}" for c in found))


def _normal_json(value: Any, limit: int) -> Any:
    if isinstance(value, str):
        return normalise(value, limit)
    if isinstance(value, list):
        return [_normal_json(v, limit) for v in value]
    if isinstance(value, dict):
        return {normalise(str(k), 200): _normal_json(v, limit) for k, v in value.items()}
    return value


def _normal_text(text: str, limit: int) -> str:
    """A text normalised; JSON (an object or an array) value by value, kept as written when nothing changes and
    no ``\\u`` escape hides a letter (``"Tom\\u00e1s"`` is written ``"Tomás"``, so that scrubbing and the rules read
    what it says)."""
    head = text.lstrip()[:1]
    if head in ("{", "["):
        try:
            value = json.loads(text)
        except (json.JSONDecodeError, RecursionError):
            value = None
        if isinstance(value, dict | list):
            normal = _normal_json(value, limit)
            return text if normal == value and "\\u" not in text else json.dumps(normal, ensure_ascii=False)
    return normalise(text, limit)


def _texts(value: Any, change: Any) -> Any:
    """``value`` (JSON-like) with ``change`` applied to every string in it."""
    if isinstance(value, str):
        return change(value)
    if isinstance(value, list | tuple):
        return [_texts(v, change) for v in value]
    if isinstance(value, dict):
        return {k: _texts(v, change) for k, v in value.items()}
    return value


def _meta(meta: dict[str, Any], change: Any) -> dict[str, Any]:
    """``meta`` with ``change`` applied to its strings, but for the tools a
    conversation declared (``meta.tools``): identifiers, never personal data,
    kept as they are (a log that made a tool's name look like an id would
    otherwise have it replaced, and every call of the tool would count as one
    the model made up); a list that is not all identifiers is dropped."""
    out = {k: _texts(v, change) for k, v in meta.items() if k != DECLARED}
    declared = meta.get(DECLARED)
    if isinstance(declared, list) and all(isinstance(n, str) and TOOL_NAME.fullmatch(n) for n in declared):
        out[DECLARED] = list(declared)
    return out


def offered_only(trajectory: Trajectory) -> Trajectory:
    """``trajectory`` without the calls of tools its requests did not offer
    the model (``meta.tools``, when the log says), nor their results: the
    model made those up, or someone wrote them into the log, so no stage, and
    no evaluation, sees them."""
    declared = trajectory.meta.get(DECLARED)
    if not isinstance(declared, list):
        return trajectory
    offered = set(declared)
    gone: set[str] = set()
    messages = []
    for message in trajectory.messages:
        calls = message.get("tool_calls") or []
        if calls:
            kept = [c for c in calls if (c.get("function") or {}).get("name") in offered]
            gone |= {str(c.get("id")) for c in calls if c not in kept}
            if len(kept) < len(calls):
                message = {**message, "tool_calls": kept} if kept else {k: v for k, v in message.items()
                                                                        if k != "tool_calls"}
                if not kept and not message.get("content"):
                    continue
        if message.get("role") == "tool" and str(message.get("tool_call_id")) in gone:
            continue
        messages.append(message)
    return trajectory if not gone else trajectory.with_(messages=tuple(messages))


def admit(trajectory: Trajectory, scrubber: Scrubber, limit: int = MAX_TEXT) -> Trajectory:
    """``trajectory`` normalised, bounded and scrubbed (see the module
    docstring); its id is kept. The one function through which a logged
    trajectory enters a run."""
    # bounded after scrubbing (a secret cut in two might no longer be told), and before it at a far larger
    # bound, so no single text can make the scrubbing slow
    first = limit * SCRUB_BOUND
    trajectory = offered_only(trajectory)
    messages = tuple(message_texts(m, lambda s: _normal_text(s, first), lambda v: _normal_json(v, first))
                     for m in trajectory.messages)
    normal = trajectory.with_(task=normalise(trajectory.task, first), messages=messages)
    values = scrubber.values_of(normal)
    clean = scrubber.trajectory(normal, values)

    def scrub(text: str) -> str:
        return normalise(scrubber.text(normalise(text, first), values), limit)

    outcome = clean.outcome
    detail = _texts(dict(outcome.detail), scrub)
    bounded = tuple(message_texts(m, lambda s: _normal_text(s, limit), lambda v: _normal_json(v, limit))
                    for m in clean.messages)
    meta = {**_meta(dict(trajectory.meta), scrub), ADMITTED: True}
    return clean.with_(task=normalise(clean.task, limit), messages=bounded, meta=meta,
                       rubric=_texts(dict(trajectory.rubric), scrub),
                       outcome=type(outcome)(outcome.success, outcome.score, detail))


@dataclass
class RunIds:
    """The ids and other personal values that the tool calls and results of a
    run's trajectories named, gathered before they are scrubbed, and replaced
    in every trajectory of the run: one-word values (ids, with or without a
    leading mark) looked up word by word, so a run naming thousands costs one
    pass; values of several words (a name, a city, a street) by one pattern."""

    found: dict[str, str] = field(default_factory=dict)
    """One-word value (without its mark) → placeholder kind."""
    phrases: dict[str, str] = field(default_factory=dict)
    """Value of several words → placeholder kind."""
    names: set[str] = field(default_factory=set)
    """The names of the tools and arguments the run's calls used: never an id, whatever a call passed, so one
    conversation cannot make another's argument names or calls disappear."""

    def add(self, trajectory: Trajectory, scrubber: Scrubber) -> None:
        """Gather the values ``trajectory`` (not yet scrubbed) names."""
        for call in tool_calls(trajectory.messages):
            self.names.add(call.name)
            self.names.update(call.args() or {})
        for value, kind in scrubber.values_of(trajectory).items():
            if len(value) < MIN_ID:
                continue
            if _WORD.fullmatch(value):
                self.found.setdefault(value, kind)
            elif len(value.split()) > 1:
                self.phrases.setdefault(" ".join(value.split()), kind)
        self.__dict__.pop("_phrase", None)

    @cached_property
    def _phrase(self) -> re.Pattern[str] | None:
        if not self.phrases:
            return None
        values = sorted(self.phrases, key=lambda v: (-len(v), v))
        return re.compile(r"(?<![\w@.])(" + "|".join(r"\s+".join(map(re.escape, v.split())) for v in values)
                          + r")(?![\w@])")

    def text(self, text: str) -> str:
        if self._phrase is not None:
            text = self._phrase.sub(lambda m: f"<{self.phrases[' '.join(m.group(1).split())]}>", text)
        if not self.found or self.found.keys().isdisjoint(unmarked(w) for w in _WORDS.findall(text)):
            return text
        return _WORDS.sub(lambda m: f"<{self.found[k]}>" if (k := unmarked(m.group(0))) in self.found
                          and m.group(0) not in self.names else m.group(0), text)

    def trajectory(self, trajectory: Trajectory) -> Trajectory:
        """``trajectory`` with every gathered value replaced, wherever it stands."""
        if not self.found and not self.phrases:
            return trajectory
        def value(data: Any) -> Any:
            return _texts(data, self.text)

        outcome = trajectory.outcome
        return trajectory.with_(task=self.text(trajectory.task),
                                messages=tuple(message_texts(m, self.text, value) for m in trajectory.messages),
                                meta=_meta(dict(trajectory.meta), self.text), rubric=value(dict(trajectory.rubric)),
                                outcome=type(outcome)(outcome.success, outcome.score, value(dict(outcome.detail))))


_WORD = re.compile(r"[\w][\w.+-]*[\w]|\w")
_WORDS = re.compile(rf"(?<![\w@.{MARKS}])[{MARKS}]?(?:[\w][\w.+-]*[\w]|\w)")


def admit_all(trajectories: Iterable[Trajectory], scrubber: Scrubber, limit: int = MAX_TEXT) -> list[Trajectory]:
    """Each trajectory through ``admit``, then every id any of them named
    replaced in all of them (``RunIds``): for a batch that enters a run together."""
    ids = RunIds()
    admitted = []
    for trajectory in trajectories:
        ids.add(trajectory, scrubber)
        admitted.append(admit(trajectory, scrubber, limit))
    return [ids.trajectory(t) for t in admitted]
