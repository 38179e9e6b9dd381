"""Quoting log text into a recipe: the one place that decides what of a log
a recipe may say, and how.

``quote(text)`` returns the text made safe to write on one line of markdown,
or *holds it back* with the reason:

- **made safe**: normalised (``boundary.normalise``), made one line (so it
  can never start a heading, a list item or a section), markup characters
  replaced by plain look-alikes (backticks and double quotes by ``'``, so
  a quotation of it ends where it should; brackets by parentheses; angle
  brackets that are not a placeholder such as ``<email>`` by ``‹ ›``), any
  id-shaped token left replaced by ``<id>``,
  and cut to a length.
- **held back** when the text reads as instructions to an agent, by the
  eight general rules of ``brewkb.trajectories.instructions``.

A held-back text is not written into the recipe; ``held_back`` lists such
texts of a set of trajectories with their reason and the conversations they
came from, for the pull request to show a reviewer ("Held back from the
logs"). ``screen`` applies the same rules to a recipe an LLM wrote: a line
with a sentence that reads as instructions and repeats log text (four words
in a row, or a link) is dropped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from brewkb.trajectories.boundary import normalise
from brewkb.trajectories.instructions import (
    DIRECTS_A_CALL,
    PLACEHOLDER,
    REMEMBERED,
    TO_THE_AGENT,
    instruction_reason,
)
from brewkb.trajectories.schema import SENTENCE_END, Trajectory, tool_calls
from brewkb.trajectories.scrub import ID_SHAPE

__all__ = ["Quote", "HeldBack", "quote", "held_back", "log_texts", "read_texts", "screen", "MAX_QUOTE", "LogIndex",
           "Copies", "COPIES", "shown"]

MAX_QUOTE = 240
"""Characters a quoted text keeps by default."""
SHOWN = 200
"""Characters of a held-back text the PR shows."""

@dataclass(frozen=True)
class Quote:
    """A log text as a recipe may write it (``text``), or held back (``held``, the reason, and ``text`` empty)."""

    text: str
    held: str | None = None

    def __bool__(self) -> bool:
        return self.held is None and bool(self.text)


_LOOKALIKE = str.maketrans({"`": "'", "[": "(", "]": ")", "|": "/", "\\": "/", '"': "'", "“": "'", "”": "'"})


def _plain(line: str) -> str:
    """One line with markup characters replaced by plain look-alikes (placeholders kept)."""
    line = line.translate(_LOOKALIKE)
    parts = re.split(r"(<[a-z][a-z0-9_]*>)", line)
    return "".join(p if PLACEHOLDER.fullmatch(p) else p.replace("<", "‹").replace(">", "›") for p in parts)


def _bounded(line: str, limit: int) -> str:
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def quote(text: str | None, limit: int = MAX_QUOTE) -> Quote:
    """``text`` from a log as a recipe may quote it, or held back (see the module docstring)."""
    text = text or ""
    return _quoted(text, limit) if len(text) <= REMEMBERED else _quote(text, limit)


def _quote(text: str, limit: int) -> Quote:
    normal = normalise(text, 100_000)
    reason = instruction_reason(normal)
    if reason is not None:
        return Quote("", reason)
    line = " ".join(normal.split())
    line = ID_SHAPE.sub("<id>", line)  # ids are data: none reaches a recipe, marked or not
    return Quote(_bounded(_plain(line), limit))


_quoted = lru_cache(maxsize=16384)(_quote)  # the same requests are quoted for every sample of a concept


def shown(text: str) -> str:
    """A held-back text as a reviewer sees it in the PR: one plain line, cut,
    meant to sit in a code span (no link or markup renders there)."""
    return _bounded(" ".join(normalise(text, 100_000).replace("`", "'").split()), SHOWN)


# ------------------------------------------------------------------ held back
@dataclass
class HeldBack:
    """A text of the logs held back, why, and the trajectories it came from."""

    text: str
    reason: str
    sources: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {"text": self.text, "reason": self.reason, "sources": list(self.sources)}


def log_texts(trajectory: Trajectory) -> list[str]:
    """What of a trajectory rules quote into recipes: the task, the user's
    turns and the first line of each failed tool call's result."""
    texts = [trajectory.task] if trajectory.task.strip() else []
    texts += [str(m["content"]) for m in trajectory.messages
              if m.get("role") == "user" and isinstance(m.get("content"), str) and m["content"].strip()]
    texts += [(c.result or "").strip().splitlines()[0] for c in tool_calls(trajectory.messages)
              if c.error and (c.result or "").strip()]
    return texts


def _result_texts(result: str) -> list[str]:
    """A tool's result as the rules read it for the PR: each string of a JSON result, else each line."""
    try:
        value = json.loads(result)
    except (ValueError, RecursionError):
        value = None
    if not isinstance(value, dict | list):
        return [line for line in result.splitlines() if line.strip()]
    texts: list[str] = []
    stack: list[object] = [value]
    while stack:  # without recursion: a result's depth is bounded at import, and never trusted
        item = stack.pop()
        if isinstance(item, str):
            texts.append(item)
        elif isinstance(item, dict):
            stack.extend(reversed([*item.keys(), *item.values()]))
        elif isinstance(item, list):
            stack.extend(reversed(item))
    return texts


def read_texts(trajectory: Trajectory) -> list[str]:
    """The texts of a trajectory that others wrote, once each: what rules quote
    (``log_texts``) and every string of every tool result, which an LLM role
    reads though no rule quotes a result that did not fail. The agent's own
    turns are not among them: no rule quotes them, and a model's markdown and
    talk of policy would read as instructions."""
    results = [text for call in tool_calls(trajectory.messages) if call.result for text in _result_texts(call.result)]
    return list(dict.fromkeys([*log_texts(trajectory), *results]))


def held_back(trajectories: Iterable[Trajectory]) -> list[HeldBack]:
    """Every text of ``trajectories`` (``read_texts``) that ``quote`` holds
    back, once, with the ids of the trajectories it came from, in order of
    first seen."""
    found: dict[str, HeldBack] = {}
    for trajectory in trajectories:
        for text in read_texts(trajectory):
            reason = instruction_reason(text)
            if reason is None:
                continue
            item = found.setdefault(shown(text), HeldBack(shown(text), reason))
            if trajectory.id not in item.sources:
                item.sources.append(trajectory.id)
    return list(found.values())


# ------------------------------------------------------------ written lines
COPIED_WORDS = 8
"""Words in a row of what users and tools said that a written line may not repeat outside double quotes."""
COPIES = "repeats the logs' words outside quotation marks"
_DOUBLE_QUOTED = re.compile(r'"[^"\n]*"|“[^”\n]*”')


class Copies:
    """What users and tools said in some conversations, to tell a written line that copies it: ``COPIED_WORDS``
    words in a row outside double quotes. A quotation is how a recipe quotes a log, and an agent is given it
    elided (``recipes.served``); copied words anywhere else — single or other quotation marks, a code span, a
    heading, a step — would reach an agent as the recipe's own."""

    def __init__(self, texts: Iterable[str]) -> None:
        self.grams: set[tuple[str, ...]] = set()
        for text in texts:
            self.grams |= _grams(text, COPIED_WORDS)

    def screen(self, text: str) -> tuple[str, list[tuple[str, str]]]:
        """``text`` without its lines that copy (what is kept, [(line, reason)])."""
        kept, dropped = [], []
        for line in text.split("\n"):
            if self.grams and _grams(_DOUBLE_QUOTED.sub(" ", line), COPIED_WORDS) & self.grams:
                dropped.append((line, COPIES))
            else:
                kept.append(line)
        return "\n".join(kept), dropped


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", normalise(text, 100_000).lower())


_URL = re.compile(r"(?i)(?:https?://|www\.)?[a-z0-9-]+(?:\.[a-z0-9-]+)*\.[a-z]{2,}(?:/\S*)?")


def _grams(text: str, n: int = 4) -> set[tuple[str, ...]]:
    words = _words(text)
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


class LogIndex:
    """The texts of some logs, to tell whether a line repeats them: four
    words in a row, or a host name (``evil.example``), of any one of them."""

    N = 4

    def __init__(self, texts: Iterable[str]) -> None:
        self.grams: set[tuple[str, ...]] = set()
        self.lower: list[str] = []
        for text in texts:
            self.grams |= _grams(text, self.N)
            self.lower.append(normalise(text, 100_000).lower())

    def shares(self, line: str) -> bool:
        if _grams(line, self.N) & self.grams:
            return True
        hosts = {m.group(0).lower().split("/")[0] for m in _URL.finditer(normalise(line, 100_000))}
        return any(h in text for h in hosts for text in self.lower)

    def wrote(self, line: str) -> bool:
        """Whether a recipe's line came from these logs: it quotes (a span in
        double quotes of three words or more) or repeats them, its steps'
        calls left out (a tool's name is an identifier, checked at import)."""
        text = re.sub(r"`[^`\n]*`", " ", line)
        return _QUOTED.search(text) is not None or self.shares(text)


_QUOTED = re.compile(r'"[^"\n]*?\w+\W+\w+\W+\w+[^"\n]*"')


_STRUCTURE = re.compile(r"^\s*(?:#{1,6}|[-*+]|\d+[.)])\s+")


def screen(body: str, texts: Sequence[str] | LogIndex) -> tuple[str, list[tuple[str, str]]]:
    """A recipe text (body or description) without the lines one of whose
    sentences reads as instructions and repeats log text (``texts``): (what is
    kept, [(line, reason)]). The sentence, not the line, is what must do both: a
    description is one line, and its one sentence naming a tool an error named
    does not make another one, telling the agent what to do, a quote."""
    index = texts if isinstance(texts, LogIndex) else LogIndex(texts)
    kept, dropped = [], []
    for line in body.split("\n"):
        content = _STRUCTURE.sub("", line)  # the recipe's own heading or list mark is not the line's content
        reason = next((r for s in SENTENCE_END.split(content) if s.strip()
                       and (r := instruction_reason(s, skip=(TO_THE_AGENT, DIRECTS_A_CALL))) is not None
                       and index.shares(s)), None)
        if reason is not None:
            dropped.append((line, reason))
        else:
            kept.append(line)
    return "\n".join(kept), dropped
