"""Scrubbing personal data: trajectories and texts → the same with typed
placeholders (``<email>``, ``<user_id>``, ``<reservation_id>`` …).

Two kinds of rule, both configurable under ``[scrub]`` in ``brewkb.toml``:

- **patterns** (``kind = regex``): every match becomes ``<kind>``. A pattern
  with a capture group replaces only the group (``reservation (ABC123)``
  keeps the word "reservation"). The defaults cover e-mail addresses, phone
  numbers, payment card numbers, payment-method ids, handle-style user ids
  (``jane_doe_1234``), order codes (``#W1234567``), a booking code named as
  one (``reservation ID SI5UKW``), a name someone gives
  (``I'm Jane Doe``) and a zip code given as one.
- **keys**: in a trajectory, the value of any of these JSON keys in a tool
  call's arguments or a tool's result (``user_id``, ``reservation_id``,
  ``first_name`` …) is personal, and every occurrence of that value anywhere
  in the trajectory (task text, messages, other calls) becomes ``<key>``.
  This is what catches a booking code like ``ZFA04Y`` that no regex could
  tell from a flight number: the agent's own tool schema says what it is.

A scrubbed trajectory keeps its id (it is the same episode, told without
names), so provenance still points to the logged original.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache
from typing import Any

from brewkb.config import ScrubConfig
from brewkb.errors import ConfigError
from brewkb.trajectories.schema import Trajectory

__all__ = ["DEFAULT_PATTERNS", "DEFAULT_KEYS", "Scrubber", "Finding", "scrubber_of"]

DEFAULT_PATTERNS: dict[str, str] = {
    "email": r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}",
    "card_number": r"(?<![\w-])(?:\d{4}[ -]){3}\d{1,7}(?![\w-])|(?<![\w-])\d{15,16}(?![\w-])",
    "phone": r"(?<![\w-])(?:\+\d{1,3}[ .-]?)?\(?\d{3}\)?[ .-]\d{3}[ .-]\d{4}(?![\w-])",
    "payment_id": r"\b(?:credit_card|debit_card|gift_card|certificate|paypal|bank_account|card)_\d{4,}\b",
    "user_id": r"\b[a-z]+_[a-z]+_\d{3,}\b",
    "order_id": r"#[A-Z]?\d{5,}\b",
    "booking_code": r"\b(?:[Rr]eservation|[Bb]ooking|[Cc]onfirmation|[Tt]icket)(?:\s+(?:ID|id|number|code|no\.?))?"
                    r"(?:\s+is)?[\s:#]+((?=[A-Z0-9]*\d)(?=[A-Z0-9]*[A-Z])[A-Z0-9]{5,10}|[A-Z]{6})\b",
    "name": r"\b(?:[Ii]'m|I am|[Mm]y name is|[Tt]his is|[Yy]ou are)\s+([A-Z][^\W\d_]+(?:\s+[A-Z][^\W\d_]+)+)",
    "zip": r"\b(?:zip|postal)(?:\s+code)?(?:\s+is)?[:\s]+(\d{5})\b",
}
"""Placeholder kind → regex. Order matters: earlier patterns win."""

DEFAULT_KEYS: tuple[str, ...] = (
    "user_id", "customer_id", "account_id", "member_id", "order_id", "reservation_id", "booking_id",
    "confirmation_code", "ticket_id", "payment_id", "payment_method_id", "email", "phone", "phone_number",
    "first_name", "last_name", "full_name", "dob", "date_of_birth", "address1", "address2", "zip",
)
"""JSON keys whose values in tool calls and results name a person or a booking."""

PERSON_FIELDS = frozenset({"name", "address", "street", "city", "zip_code", "postal_code", "postcode"})
"""Keys that are personal inside a record that also holds one of the personal keys."""

NAME_KEYS = frozenset({"name", "full_name"})

MIN_VALUE = 2  # a one-character value is too common to replace everywhere
DONE_CACHE = 20_000  # texts whose scrubbed form a scrubber keeps
_PLACEHOLDER = re.compile(r"<[a-z_]+>")


@dataclass(frozen=True)
class Finding:
    """One match of a pattern in a text: 1-based line, the kind, the text matched."""

    line: int
    kind: str
    text: str


@dataclass(frozen=True)
class Scrubber:
    """Replaces personal data by typed placeholders (see the module docstring).

    ``patterns`` are (kind, compiled regex) in order; ``keys`` the JSON keys
    whose values are personal. Pure: it never mutates what it is given."""

    patterns: tuple[tuple[str, re.Pattern[str]], ...]
    keys: frozenset[str]
    known: Mapping[str, str] = field(default_factory=dict)
    """Personal values other trajectories of the run named (value → kind), replaced
    in every trajectory too: one user's name or address may appear in another's words."""
    # Texts already passed through the patterns: the episodes of one task repeat most
    # of their messages (tool results, the task text), run after run.
    _done: dict[str, str] = field(default_factory=dict, init=False, repr=False, compare=False)

    def knowing(self, trajectories: Iterable[Trajectory]) -> Scrubber:
        """This scrubber, also replacing every personal value ``trajectories`` name."""
        known: dict[str, str] = dict(self.known)
        for trajectory in trajectories:
            for value, kind in self.values_of(trajectory).items():
                known.setdefault(value, kind)
        return replace(self, known=known)

    @cached_property
    def _known(self) -> re.Pattern[str] | None:
        if not self.known:
            return None
        values = sorted(self.known, key=lambda v: (-len(v), v))
        return re.compile(r"(?<![\w@.])(?:" + "|".join(map(re.escape, values)) + r")(?![\w@])")

    @classmethod
    def build(cls, patterns: Mapping[str, str] | None = None, keys: Iterable[str] | None = None,
              defaults: bool = True) -> Scrubber:
        """The default patterns and keys, with ``patterns`` and ``keys`` added
        (a kind that exists replaces its regex; an empty regex turns a default
        off). A bad regex is a ``ConfigError`` naming its key."""
        merged = dict(DEFAULT_PATTERNS) if defaults else {}
        merged.update(patterns or {})
        compiled = []
        for kind, rx in merged.items():
            if not re.fullmatch(r"[a-z][a-z0-9_]*", kind):
                raise ConfigError(f"scrub.patterns.{kind}: a placeholder kind is lowercase letters, digits "
                                  "and underscores; rename it")
            try:
                compiled.append((kind, re.compile(rx))) if rx else None
            except re.error as exc:
                raise ConfigError(f"scrub.patterns.{kind}: not a valid regex ({exc}); fix it") from None
        return cls(tuple(compiled), frozenset({*DEFAULT_KEYS, *(k.lower() for k in keys or ())}))

    # ---------------------------------------------------------------- texts
    def text(self, text: str, values: Mapping[str, str] | None = None) -> str:
        """``text`` with every pattern match and every known personal value replaced."""
        for value, kind in sorted((values or {}).items(), key=lambda kv: -len(kv[0])):
            if value in text:  # most of a trajectory's values are not in a given message
                text = _value_pattern(value).sub(f"<{kind}>", text)
        if self._known is not None:
            text = self._known.sub(lambda m: f"<{self.known[m.group(0)]}>", text)
        done = self._done.get(text)
        if done is None:
            done = text
            for kind, rx in self.patterns:
                done = rx.sub(lambda m, k=kind: _replace(m, k), done)  # type: ignore[misc]
            if len(self._done) >= DONE_CACHE:
                self._done.clear()
            self._done[text] = done
        return done

    def find(self, text: str) -> list[Finding]:
        """Pattern matches in ``text`` (placeholders themselves never match)."""
        found = []
        for number, line in enumerate(text.splitlines(), start=1):
            for kind, rx in self.patterns:
                for match in rx.finditer(_PLACEHOLDER.sub(" ", line)):
                    found.append(Finding(number, kind, match.group(match.lastindex or 0)))
        return found

    # --------------------------------------------------------- trajectories
    def values_of(self, trajectory: Trajectory) -> dict[str, str]:
        """Personal values the trajectory's own tool calls and results name:
        value → placeholder kind (the JSON key)."""
        found: dict[str, str] = {}
        for message in trajectory.messages:
            for call in message.get("tool_calls") or ():
                self._collect(_loads((call.get("function") or {}).get("arguments")), found)
            if message.get("role") == "tool":
                self._collect(_loads(message.get("content")), found)
        return found

    def _collect(self, data: Any, found: dict[str, str]) -> None:
        if isinstance(data, dict):
            # a record with a personal key is about a person: its name and address are personal too
            person = any(k.lower() in self.keys for k in data)
            for key, value in data.items():
                personal = key.lower() in self.keys or (person and key.lower() in PERSON_FIELDS)
                if personal and isinstance(value, str | int) and not isinstance(value, bool):
                    text = str(value).strip()
                    if len(text) >= MIN_VALUE and not _PLACEHOLDER.fullmatch(text):
                        found.setdefault(text, key.lower())
                        if key.lower() in NAME_KEYS:  # "Umar Rossi" → also "Umar" and "Rossi" on their own
                            for part in re.findall(r"\b[A-Z][a-z]{2,}\b", text):
                                found.setdefault(part, key.lower())
                else:
                    self._collect(value, found)
        elif isinstance(data, list):
            for item in data:
                self._collect(item, found)

    def trajectory(self, trajectory: Trajectory) -> Trajectory:
        """The trajectory with its task text, messages and tool calls scrubbed; same id."""
        values = self.values_of(trajectory)
        messages = tuple(self._message(m, values) for m in trajectory.messages)
        return trajectory.with_(task=self.text(trajectory.task, values), messages=messages)

    def _message(self, message: Mapping[str, Any], values: Mapping[str, str]) -> dict[str, Any]:
        out = dict(message)
        if isinstance(out.get("content"), str):
            out["content"] = self.text(out["content"], values)
        if out.get("tool_calls"):
            calls = []
            for call in out["tool_calls"]:
                call = dict(call)
                function = dict(call.get("function") or {})
                if isinstance(function.get("arguments"), str):
                    function["arguments"] = self.text(function["arguments"], values)
                call["function"] = function
                calls.append(call)
            out["tool_calls"] = calls
        return out


def scrubber_of(config: ScrubConfig) -> Scrubber:
    """The scrubber of a ``[scrub]`` table (its patterns and keys added to the
    defaults); with ``enabled = false`` one that changes nothing."""
    if not config.enabled:
        return Scrubber((), frozenset())
    return Scrubber.build(config.patterns, config.keys)


def _replace(match: re.Match[str], kind: str) -> str:
    if not match.lastindex:
        return f"<{kind}>"
    start, end = match.span(1)
    whole = match.group(0)
    offset = match.start(0)
    return whole[: start - offset] + f"<{kind}>" + whole[end - offset :]


@lru_cache(maxsize=4096)
def _value_pattern(value: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w@.]){re.escape(value)}(?![\w@])")


def _loads(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except (json.JSONDecodeError, ValueError):
        return None
