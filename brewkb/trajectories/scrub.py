"""Scrubbing secrets and personal data: trajectories and texts → the same
with typed placeholders (``<secret>``, ``<email>``, ``<user_id>`` …).

Three kinds of rule; patterns and keys are configurable under ``[scrub]`` in
``brewkb.toml``:

- **secrets** (``<secret>``): API keys, cloud keys, tokens, JWTs, private
  keys and high-entropy strings, found by ``detect-secrets``
  (``brewkb.trajectories.secrets``). Always on, even with ``enabled = false``.
- **patterns** (``kind = regex``, defaults in ``brewkb.trajectories.patterns``):
  every match becomes ``<kind>``. A pattern
  with a capture group replaces only the group (``reservation (ABC123)``
  keeps the word "reservation"). The defaults cover passwords said in text
  (``my password is …``, or a passphrase that is not a plain word), card security codes and PINs given as such
  (``CVV 123``, ``PIN 1234``), birth dates given as such (``DOB 1980-02-03``),
  e-mail addresses (obfuscated ones too:
  ``name(at)domain(dot)com``, ``name at domain.com``, ``name . x @ domain . com``),
  social security numbers, IBANs (check digits verified), payment card numbers
  (digits in groups of four, or 4-6-5, with spaces, dots or dashes), phone
  numbers (ten digits grouped, or after a word such as "phone" or "call";
  national ones that begin with 0;
  international ones with ``+`` or ``00``), account numbers given as such,
  passport numbers given as such, street addresses (a number and a street
  word, in English, French, Spanish, Italian, Portuguese and German forms),
  payment-method ids, handle-style user ids (``jane_doe_1234``), order codes
  (``#W1234567``), a booking code named as one (``reservation ID SI5UKW``),
  a name someone gives (``I'm Jane Doe``, ``Jane Doe here``, ``Dr. Jane Doe``)
  and a zip code given as one.
- **values of tool calls and results**: in a trajectory, the value of any
  of ``keys`` in a tool call's arguments or a tool's result (``user_id``,
  ``reservation_id``, ``first_name`` …) is personal, and so is every *id*: a
  value under a key whose name ends in ``id``/``ids`` (``order_id``,
  ``userId``, ``ID``), ``code``/``codes`` or ``number``/``numbers``, or a
  value shaped like one under any key (one token of letters and digits with
  both, 5 characters or more: ``W2905754``, ``PMT-440291``). Every occurrence
  of such a value anywhere in the trajectory (task text, messages, other
  calls) becomes ``<key>``, with or without a leading mark (``#W2905754``
  and ``W2905754`` alike), and an id (5 letters and digits or more, a digit
  among them) however it is written: in any case, with spaces, dots, dashes
  or underscores between its characters (``ZQ8 W2K``, ``SOFIA KIM 7287`` for
  ``sofia_kim_7287``), and its number alone when letters come before a
  number of 6 digits or more (``2905754`` for ``W2905754``, ``4959530`` for
  ``credit_card_4959530``). An id-shaped
  item of a list under any key is one too: ``{"reservations": ["ZQ8W2K"]}``
  names a ``<reservation_id>``, unless something else names it. This is what catches a booking code like
  ``ZFA04Y`` that no regex could tell from a flight number: the agent's own
  tool schema says what it is.

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
from brewkb.trajectories.keys import (
    DEFAULT_KEYS,
    ID_END,
    MARKS,
    MIN_ID,
    NAME_KEYS,
    PERSON_FIELDS,
    SENSITIVE_KEY,
    STREET_FIELDS,
    is_id_key,
    unmarked,
)
from brewkb.trajectories.names import PEOPLE_KEY, PERSON_NAME, is_full_name, is_person, people_key, person_named
from brewkb.trajectories.patterns import (
    DEFAULT_PATTERNS,
    NAME_BESIDE,
    VALIDATORS,
    date_of,
    date_written,
    whole_name,
)
from brewkb.trajectories.schema import Trajectory
from brewkb.trajectories.secrets import SECRET, secret_spans

__all__ = [
    "ADMITTED",
    "DEFAULT_PATTERNS",
    "ID_SHAPE",
    "Finding",
    "Scrubber",
    "message_texts",
    "scrubber_of",
]


ID_SHAPE = re.compile(r"(?<![\w#№<-])[#№]?(?=[A-Za-z0-9_-]*\d)(?=[A-Za-z0-9_-]*[A-Za-z])"
                      r"[A-Za-z0-9][A-Za-z0-9_-]{4,39}(?![\w>-])")
"""A token shaped like an identifier: letters and digits (both), 5 to 40
characters, maybe with ``_``/``-`` and a leading mark (``W2905754``,
``#W2905754``, ``PMT-440291``)."""
def _id_value(text: str, keyed: bool) -> bool:
    """Whether a tool's value is an id: under an id key, one token with a
    digit (or a short all-capitals code such as ``HXDUBJ``); under any key, one
    shaped like ``ID_SHAPE``."""
    bare = unmarked(text)
    if keyed and len(bare) >= MIN_ID and re.fullmatch(r"[\w.:/-]+(?: [\w.:/-]+){0,5}", bare):
        return any(c.isdigit() for c in bare) or re.fullmatch(r"[A-Z]{4,12}", bare) is not None
    return ID_SHAPE.fullmatch(text) is not None


def _is_scalar(value: Any) -> bool:
    return isinstance(value, str | int) and not isinstance(value, bool)


def _kind_of(key: str) -> str:
    """A placeholder kind from a log's key (a key that is not a plain name becomes ``id``)."""
    kind = key.lower()
    return kind if re.fullmatch(r"[a-z][a-z0-9_]{0,39}", kind) else "id"


ADMITTED = "admitted"
"""The ``meta`` key ``boundary.admit`` sets on a trajectory it scrubbed: scrubbing it again changes nothing."""

MIN_VALUE = 2  # a one-character value is too common to replace everywhere
CACHED_CHARS = 20_000_000
"""Characters of texts a scrubber keeps the scrubbed form of (then it starts over)."""


class _Cache(dict[str, Any]):
    """Texts → what was found in them, holding at most ``CACHED_CHARS`` characters of texts."""

    chars = 0

    def keep(self, text: str, value: Any) -> Any:
        if self.chars + len(text) > CACHED_CHARS:
            self.clear()
            self.chars = 0
        self[text] = value
        self.chars += len(text)
        return value


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
    personal: bool = True
    """Whether tool values (``keys`` and ids) are personal; ``False`` when ``[scrub]`` is disabled."""
    secrets: bool = True
    """Whether secrets are replaced (always, unless a test builds a scrubber without)."""
    # Texts already passed through the patterns: the episodes of one task repeat most
    # of their messages (tool results, the task text), run after run.
    _done: _Cache = field(default_factory=_Cache, init=False, repr=False, compare=False)
    _said: _Cache = field(default_factory=_Cache, init=False, repr=False, compare=False)

    def knowing(self, trajectories: Iterable[Trajectory]) -> Scrubber:
        """This scrubber, also replacing every personal value ``trajectories`` name."""
        known: dict[str, str] = dict(self.known)
        for trajectory in trajectories:
            for value, kind in self.values_of(trajectory).items():
                if known.get(value, "id") == "id":  # a key that names the value wins over a list that holds it
                    known[value] = kind
        return replace(self, known=known)

    @cached_property
    def _known(self) -> re.Pattern[str] | None:
        if not self.known:
            return None
        values = sorted(self.known, key=lambda v: (-len(v), v))
        return re.compile(rf"(?<![\w@.{MARKS}])[{MARKS}]?(" + "|".join(map(_written, values)) + r")(?![\w@])")

    @cached_property
    def _known_kinds(self) -> dict[str, str]:
        """The kind of each known value, by the letters and digits it is written with (any case, any separators)."""
        kinds: dict[str, str] = {}
        for value, kind in sorted(self.known.items(), key=lambda kv: (-len(kv[0]), kv[0])):
            for form in _forms(value):
                kinds.setdefault(form, kind)
        return kinds

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

    @classmethod
    def secrets_only(cls) -> Scrubber:
        """A scrubber that replaces secrets and nothing else."""
        return cls((), frozenset(), personal=False)

    def _matches(self, kind: str, rx: re.Pattern[str], text: str) -> Iterable[re.Match[str]]:
        check = VALIDATORS.get(kind)
        return (m for m in rx.finditer(text) if check is None or check(m.group(m.lastindex or 0), m.group(0)))

    # ---------------------------------------------------------------- texts
    def text(self, text: str, values: Mapping[str, str] | None = None) -> str:
        """``text`` with every secret, every known personal value and every pattern match replaced."""
        squashed = _squashed(text) if values else ""
        for value, kind in sorted((values or {}).items(), key=lambda kv: -len(kv[0])):
            date = date_of(value)
            # most values are not in a message; a date may be there written another way, with its year
            if value in text or any(form in squashed for form in _forms(value)) or (date and str(date[0]) in text):
                kind = self.known.get(value, kind) if kind == "id" else kind
                text = _value_pattern(value).sub(f"<{kind}>", text)
        if self._known is not None:
            text = self._known.sub(lambda m: f"<{self._known_kinds.get(_squashed(m.group(1)), 'id')}>", text)
        done = self._done.get(text)
        if done is None:
            done = _spliced(text, secret_spans(text), f"<{SECRET}>") if self.secrets else text
            for kind, rx in self.patterns:
                check = VALIDATORS.get(kind)
                done = rx.sub(lambda m, k=kind, c=check: _replace(m, k)  # type: ignore[misc]
                              if c is None or c(m.group(m.lastindex or 0), m.group(0)) else m.group(0), done)
            self._done.keep(text, done)
        return NAME_BESIDE.sub(whole_name, done) if "<" in done else done

    def find(self, text: str) -> list[Finding]:
        """Pattern matches in ``text`` (placeholders themselves never match)."""
        found: list[Finding] = []
        for number, line in enumerate(text.splitlines(), start=1):
            line = _PLACEHOLDER.sub("<>", line)  # no value: "password is <password> Email" finds no password
            if self.secrets:
                found.extend(Finding(number, SECRET, line[a:b]) for a, b in secret_spans(line)
                             if line[a:b].replace("<>", "").strip())  # a placeholder is no secret: user:<secret>@host
            for kind, rx in self.patterns:
                for match in self._matches(kind, rx, line):
                    found.append(Finding(number, kind, match.group(match.lastindex or 0)))
        return found

    # --------------------------------------------------------- trajectories
    def values_of(self, trajectory: Trajectory) -> dict[str, str]:
        """Personal values the trajectory's own tool calls and results name:
        value → placeholder kind (the JSON key); none for one already admitted."""
        found: dict[str, str] = {}
        listed: dict[str, str] = {}
        if trajectory.meta.get(ADMITTED):
            return found
        for message in trajectory.messages:
            for call in message.get("tool_calls") or ():
                self._collect(_loads((call.get("function") or {}).get("arguments")), found, listed)
            if message.get("role") == "tool":
                self._collect(_loads(message.get("content")), found, listed)
        if self.personal:
            for text in (trajectory.task, *(m.get("content") for m in trajectory.messages)):
                for value, kind in self.said(text) if isinstance(text, str) else ():
                    found.setdefault(value, kind)
        for value, kind in listed.items():
            found.setdefault(value, kind)
        return found

    @cached_property
    def _telling(self) -> tuple[tuple[str, re.Pattern[str]], ...]:
        """The patterns that know a value by its context or its mark (the others find it wherever it stands)."""
        return tuple((kind, rx) for kind, rx in self.patterns if rx.groups or any(m in rx.pattern for m in MARKS))

    def said(self, text: str) -> tuple[tuple[str, str], ...]:
        """Values the patterns find in ``text`` by what stands around them (``reservation
        ABC123``, ``I'm Jane Doe``) or by their mark (``#W2905754``): (value without its
        mark, kind). Written again bare, elsewhere, no pattern would know them."""
        said = self._said.get(text)
        if said is None:
            found = []
            for kind, rx in self._telling:
                for match in self._matches(kind, rx, text):
                    value = match.group(match.lastindex or 0).strip()
                    bare = unmarked(value)
                    if (match.lastindex or bare != value) and len(bare) >= MIN_ID:
                        found.append((bare, kind))
            said = self._said.keep(text, tuple(found))
        return said

    @cached_property
    def _ending(self) -> re.Pattern[str]:
        return re.compile("_(?:" + "|".join(map(re.escape, sorted(self.keys))) + ")$") if self.keys else re.compile("$^")

    def _personal_key(self, key: str) -> bool:
        """A personal key, one that ends in one after an underscore (``vehicle_plate``, ``home_postcode``), or
        one of someone's health or household (``SENSITIVE_KEY``)."""
        key = key.lower()
        return key in self.keys or self._ending.search(key) is not None or SENSITIVE_KEY.search(key) is not None

    def _collect(self, data: Any, found: dict[str, str], listed: dict[str, str], address: bool = False,
                 people: bool = False) -> None:
        """Personal values of a tool's JSON into ``found``; id-shaped items of
        a list no key names as ids (``{"reservations": ["ZQ8W2K"]}``) into
        ``listed``, which names them only when nothing else does. ``address``:
        ``data`` is the value of a street's key (``{"address": {"city": …}}``);
        ``people``: of a key that says it is people (``{"beneficiaries": [{"name": …}]}``)."""
        if not self.personal:
            return
        if isinstance(data, dict):
            # a record with a personal key is about a person: its name and address are personal too; so is
            # the name of a record with an id, when it is shaped like a person's and has a person's name in it and
            # its id says it is a person (``patient_id``), or is a given name and a surname beside an id of nothing
            # named (``id``: "Maria Gonzalez"); the name of a record whose ids are all of things is a thing's
            # ("Mango Lassi" beside ``item_id``, "Victoria Dock" beside ``station_id``)
            ids = [ID_END.sub("", str(k)) for k in data if is_id_key(str(k))]
            thing = bool(ids) and all(i and not PEOPLE_KEY.search(i) for i in ids)  # only ids of things: station_id
            name = data.get("name")
            person = people or any(str(k).lower() in self.keys for k in data) or (
                isinstance(name, str) and PERSON_NAME.fullmatch(name.strip()) is not None and bool(ids) and (
                    any(PEOPLE_KEY.search(i) for i in ids) and is_person(name) or not thing and is_full_name(name)))
            # its town and postcode are where someone lives when it holds a street (a hotel's city is no one's)
            fields = PERSON_FIELDS if address or any(str(k).lower() in STREET_FIELDS for k in data) else NAME_KEYS
            for key, value in data.items():
                key = str(key)
                scalar = isinstance(value, str | int) and not isinstance(value, bool)
                text = str(value).strip() if scalar else ""
                named = person_named(key, text) and not (thing and key.lower() in NAME_KEYS)
                personal = self._personal_key(key) or (person and key.lower() in fields) or named
                if personal and scalar:
                    if len(unmarked(text)) >= MIN_VALUE and not _PLACEHOLDER.fullmatch(text):
                        found.setdefault(unmarked(text), key.lower())
                        if key.lower() in NAME_KEYS or named:  # "Umar Rossi" → also "Umar" and "Rossi" on their own
                            for part in re.findall(r"\b[A-Z][a-z]{2,}\b", text):
                                if is_person(part):  # not "The" of "The Palmer House", nor "Team" of "Finance Team"
                                    found.setdefault(part, key.lower())
                elif scalar and _id_value(text, is_id_key(key)):
                    found.setdefault(unmarked(text), _kind_of(key))
                elif isinstance(value, list) and (personal or is_id_key(key) or people_key(key) or any(
                        _is_scalar(item) and person_named(key, str(item).strip()) for item in value)):
                    # {"order_ids": ["#W1", "#W2"]}, {"drivers": ["Thiago Almeida"]}, {"guests": [{"name": …}]}
                    self._collect([{key: item} if _is_scalar(item) else item for item in value], found, listed,
                                  people=people_key(key))
                elif isinstance(value, list):  # {"reservations": ["ZQ8W2K"]}: ids of a reservation
                    for item in value:
                        if _is_scalar(item) and _id_value(str(item).strip(), False):
                            listed.setdefault(unmarked(str(item).strip()), _kind_of(re.sub(r"s$", "", key) + "_id"))
                        else:
                            self._collect(item, found, listed)
                else:
                    self._collect(value, found, listed, key.lower() in STREET_FIELDS, people_key(key))
        elif isinstance(data, list):
            for item in data:
                if _is_scalar(item) and _id_value(str(item).strip(), False):
                    listed.setdefault(unmarked(str(item).strip()), "id")
                else:
                    self._collect(item, found, listed, people=people)

    def trajectory(self, trajectory: Trajectory, values: Mapping[str, str] | None = None) -> Trajectory:
        """The trajectory with its task text, messages and tool calls scrubbed
        (``values``: its ``values_of``, when the caller has them); same id."""
        if trajectory.meta.get(ADMITTED):  # scrubbed when it entered the run (``boundary.admit``)
            return trajectory
        values = self.values_of(trajectory) if values is None else values
        messages = tuple(message_texts(m, lambda text: self.text(text, values)) for m in trajectory.messages)
        return trajectory.with_(task=self.text(trajectory.task, values), messages=messages)


def message_texts(message: Mapping[str, Any], text: Any, value: Any = None) -> dict[str, Any]:
    """``message`` with ``text`` applied to its content and tool-call arguments
    when they are text, and ``value`` (when given) to content that is JSON;
    roles, names and ids are left as they are."""
    out = dict(message)
    if isinstance(out.get("content"), str):
        out["content"] = text(out["content"])
    elif value is not None and isinstance(out.get("content"), list | dict):
        out["content"] = value(out["content"])
    if out.get("tool_calls"):
        calls = []
        for call in out["tool_calls"]:
            call = dict(call)
            function = dict(call.get("function") or {})
            if isinstance(function.get("arguments"), str):
                function["arguments"] = text(function["arguments"])
            call["function"] = function
            calls.append(call)
        out["tool_calls"] = calls
    return out


def scrubber_of(config: ScrubConfig) -> Scrubber:
    """The scrubber of a ``[scrub]`` table (its patterns and keys added to the
    defaults); with ``enabled = false`` one that changes nothing."""
    if not config.enabled:
        return Scrubber((), frozenset(), personal=False)
    return Scrubber.build(config.patterns, config.keys)


def _spliced(text: str, spans: list[tuple[int, int]], placeholder: str) -> str:
    for start, end in reversed(spans):
        text = text[:start] + placeholder + text[end:]
    return text


def _replace(match: re.Match[str], kind: str) -> str:
    if not match.lastindex:
        return f"<{kind}>"
    start, end = match.span(match.lastindex)  # the group that matched, of a pattern's alternatives
    whole = match.group(0)
    offset = match.start(0)
    return whole[: start - offset] + f"<{kind}>" + whole[end - offset :]


MIN_LOOSE = 5
"""Letters and digits an id needs to be found written another way (``ZQ8 W2K``, ``sofia.kim.7287``)."""
MIN_DIGITS = 6
"""Digits an id's number needs to be found without its letters (``2905754`` of ``W2905754``)."""


def _squashed(text: str) -> str:
    """Only the letters and digits of ``text``, in lower case."""
    return re.sub(r"[\W_]+", "", text).lower()


@lru_cache(maxsize=65536)
def _forms(value: str) -> tuple[str, ...]:
    """How an id may be written other than as a tool had it, squashed: the
    value in any case with any separators, and its number alone (when it has
    a few letters before a long number); a value without a digit (a name) only
    as it is."""
    core = _squashed(value)
    if len(core) < MIN_LOOSE or not any(c.isdigit() for c in core):
        return (core,)
    number = re.fullmatch(rf"[a-z]+(\d{{{MIN_DIGITS},}})", core)
    return (core, number.group(1)) if number else (core,)


@lru_cache(maxsize=65536)
def _written(value: str) -> str:
    """A regex of ``value`` as written in text: as it is (words of several in any case and spacing: ``oluwaseun
    adeyemi``), and each of its other ``_forms`` (an id in any case, with a space, dot, dash or underscore
    between any of its characters: ``SOFIA KIM 7287``, ``W 2905754``); a date
    in every way people write one (``patterns.date_written``)."""
    loose = [form for form in _forms(value) if any(c.isdigit() for c in form)]
    date = date_of(value)
    words = value.split()
    as_is = re.escape(value) if len(words) < 2 else "(?i:" + r"\s+".join(map(re.escape, words)) + ")"
    return "|".join([as_is, *("(?i:" + r"[\s._-]?".join(form) + ")" for form in loose),
                     *([date_written(date)] if date else [])])


@lru_cache(maxsize=4096)
def _value_pattern(value: str) -> re.Pattern[str]:
    """A personal value where it stands as a word of its own, with or without a
    leading mark, written as a tool had it or another way (``_written``)."""
    return re.compile(rf"(?<![\w@.{MARKS}])[{MARKS}]?(?:{_written(value)})(?![\w@])")


def _loads(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except (json.JSONDecodeError, ValueError):
        return None
