"""Reading what users asked for, by rules that hold for any language of
requests written in English: action verbs (``cancel``, ``refund``, inflections
folded, synonyms such as change/modify/update counted as one intent), the
object an action names, and which of a conversation's turns asks for it.

Which user turns ask for something (``request_turns``): a turn that only
assents, thanks or greets (its words are all stopwords, assent and courtesy
words, placeholders or numbers) asks for nothing, and neither does a turn
whose words the agent's message just before it all said: it consents to what
the agent proposed ("Yes, please go ahead and cancel the reservation" after
"Shall I cancel reservation <reservation_id>?") or answers what the agent
asked ("My user ID is <user_id>"). What the user said after the agent's last
write (a call that changes state) asked for none of the changes made.

The offline reflector and integrator, and the concepts stage, use these; none
of them names a domain.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from brewkb.trajectories.schema import SENTENCE_END, ToolCall, tool_calls
from brewkb.trajectories.tools import concept_of_tool, is_lookup, is_write, name_words

__all__ = ["ACTION_VERBS", "STOPWORDS", "ASSENT", "action_verb", "verb_of", "names_action", "names_object", "asks_for",
           "request_concept", "request_for", "lookup_concept", "verbs_in", "request_clause", "first_line", "IDENTIFIERS",
           "asks_something", "request_turns", "request_text", "MAX_REQUEST"]

STOPWORDS = frozenset("""a an and are as at be but by can do for from has have i if in into is it its me my
no not of on or our please so that the their them then there these they this to too want was we were what
when which while who will with would you your yours also just like need any all some one two
hello hi hey thanks thank dear regards sorry could should would might must shall may can cannot
where how why what know help really because having been same make get got going able""".split())
ACTION_VERBS = frozenset("""add apply book buy cancel change close create delete dispute downgrade edit exchange
extend modify move open pay purchase refund register remove renew replace reschedule reserve reset return
send set subscribe switch transfer unsubscribe update upgrade""".split())
"""Verbs of requests that change something ("order" is left out: in requests it is mostly a noun)."""
ASSENT = frozenset("""yes yeah yep yup no nope ok okay sure fine great good perfect excellent wonderful awesome
alright right correct exactly absolutely definitely certainly indeed agree agreed go ahead proceed confirm confirmed
thanks thank cheers appreciate appreciated welcome bye goodbye much lot
morning afternoon evening day hope hoping well bother bothering disturb disturbing hiya howdy greetings""".split())
"""Words that assent, refuse, thank or greet: a turn made of them (and stopwords) asks for nothing."""
_FUNCTION = frozenset("am im its let us don doesn didn isn aren wasn weren won wouldn couldn shouldn ll ve re".split())
MAX_REQUEST = 500
"""Characters of a conversation's request (``request_text``) kept."""
GENERIC_NOUNS = frozenset({"details", "detail", "info", "information", "status", "data", "list", "by", "id", "all"})
VERB_SYNONYMS = {"change": "update", "modify": "update", "edit": "update", "alter": "update", "amend": "update",
                 "move": "update", "reschedule": "update", "switch": "update", "swap": "update",
                 "reserve": "book", "purchase": "buy", "delete": "remove", "drop": "remove"}
"""Action verbs that name one intent."""
IDENTIFIERS = re.compile(r"\S+@\S+|https?://\S+|\S*\d\S*")


def action_verb(word: str) -> str | None:
    """The base form of an action verb (``cancelled`` → ``cancel``), else ``None``."""
    for cut in (0, 1, 2, 3):
        stem = word[: len(word) - cut]
        if stem in ACTION_VERBS:
            return stem
    return None


def verb_of(name: str) -> str:
    """The leading word of a concept name, synonyms folded (``change flight`` → ``update``)."""
    words = name.split()
    return VERB_SYNONYMS.get(words[0], words[0]) if words else ""


DETERMINERS = frozenset("a an the my your our his her their its this that these those any each every".split())


def verbs_in(text: str) -> list[str]:
    """The actions ``text`` asks for: its action verbs (base forms, in order),
    past forms left out ("a flight I booked" tells what was done, not what is
    asked), and so are "-ing" forms after a determiner, which are nouns ("my
    booking" names a thing, "booking a flight" asks for an action)."""
    words = re.findall(r"[a-z]+", IDENTIFIERS.sub(" ", text.lower()))
    return [v for n, w in enumerate(words) if not w.endswith("ed") and (v := action_verb(w))
            and not (w.endswith("ing") and n and words[n - 1] in DETERMINERS)]


def names_action(text: str, concept: str) -> bool:
    """Whether ``text`` asks for the action that leads ``concept`` (synonyms folded)."""
    verb = verb_of(concept)
    return bool(verb) and any(verb_of(v) == verb for v in verbs_in(text))


def names_object(text: str, concept: str) -> bool:
    """Whether ``text`` mentions what ``concept`` acts on: its last word, by
    its first three letters (``baggages`` ~ "bags", ``flights`` ~ "flight")."""
    words = concept.split()
    return len(words) > 1 and any(w[:3] == words[-1][:3] for w in re.findall(r"[a-z]+", text.lower()))


def asks_for(texts: Sequence[str], concept: str) -> list[str]:
    """The texts that ask for ``concept``'s action (all of them for a concept
    not led by an action verb, such as a lookup), those that also name its
    object first."""
    words = concept.split()
    acts = bool(words) and action_verb(words[0]) is not None
    naming = [t for t in texts if names_action(t, concept)] if acts else list(texts)
    return sorted(naming, key=lambda t: not names_object(t, concept))


def request_for(turns: Sequence[str], concept: str, others: Sequence[str] = ()) -> str:
    """The user turn that asked for ``concept``: one naming its action and its
    object, else its object; else its action, unless another concept of the
    same conversation (``others``) shares that action; else the first turn of
    a conversation with no other concept. Empty when none can be told."""
    words = concept.split()
    acts = bool(words) and action_verb(words[0]) is not None
    if not acts:
        return turns[0] if turns else ""
    both = [t for t in turns if names_action(t, concept) and names_object(t, concept)]
    objects = [t for t in turns if names_object(t, concept)]
    shared = any(verb_of(o) == verb_of(concept) for o in others)
    verbs = [] if shared else [t for t in turns if names_action(t, concept)]
    found = both or objects or verbs or ([] if others else list(turns[:1]))
    return found[0] if found else ""


def request_concept(text: str, calls: Sequence[ToolCall]) -> str | None:
    """A concept for a request nothing was changed for: its first action verb
    and the object of the agent's last lookup (``get_reservation_details`` →
    ``reservation``: what it examined before answering; the last word of its
    name that is not generic), else the verb alone; ``None`` without an action
    verb."""
    verb = next(iter(verbs_in(text)), None)
    if verb is None:
        return None
    for call in reversed([c for c in calls if is_lookup(c.name) and not c.error]):
        objects = [w for w in name_words(call.name)[1:] if w not in GENERIC_NOUNS and w not in STOPWORDS]
        if objects:  # the last word names the thing (``search_direct_flight`` → flight)
            return f"{verb} {objects[-1]}"
    return verb


def lookup_concept(calls: Sequence[ToolCall]) -> str | None:
    """The concept of a conversation that only read: its last lookup (what the answer rested on)."""
    lookups = [c for c in calls if is_lookup(c.name) and not c.error]
    return concept_of_tool(lookups[-1].name) if lookups else None




def request_clause(text: str, concept: str) -> str:
    """The sentences of a user turn that ask for ``concept``'s action (those
    naming its action, else its object), without the greeting and small talk
    around them; the whole turn when none does."""
    sentences = [s for s in SENTENCE_END.split(" ".join(text.split())) if s]
    words = concept.split()
    acts = bool(words) and action_verb(words[0]) is not None
    asking = [s for s in sentences if (names_action(s, concept) if acts else names_object(s, concept))]
    asking = asking or [s for s in sentences if names_object(s, concept)]
    return " ".join(asking) if asking else " ".join(sentences)


def first_line(text: str | None, limit: int = 160) -> str:
    """The first line of ``text``, its spaces collapsed, cut to ``limit`` characters."""
    line = " ".join((text or "").strip().splitlines()[0].split()) if (text or "").strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


_SUFFIXES = ("ations", "ation", "ings", "ing", "ions", "ion", "ed", "es", "s")


def _root(word: str) -> str:
    """A word with its common endings cut, to five letters (``cancelling`` and
    ``cancellation`` are ``cance``, ``bookings`` is ``book``)."""
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            break
    return word[:5]


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z]+", IDENTIFIERS.sub(" ", re.sub(r"<[a-z][a-z0-9_]*>", " ", text.lower())))


def asks_something(turn: str, before: str = "") -> bool:
    """Whether a user turn asks for something, given the agent's message just
    before it: it holds a word that is no stopword, assent or courtesy word,
    placeholder or number, and one of those the agent's message did not say."""
    content = [w for w in _words(turn) if len(w) > 1 and w not in STOPWORDS and w not in ASSENT and w not in _FUNCTION]
    said = {_root(w) for w in _words(before)}
    return any(_root(w) not in said for w in content)


def request_turns(messages: Iterable[Mapping[str, Any]]) -> list[str]:
    """The user turns of a conversation that ask for something
    (``asks_something``), up to the agent's last write: what was said after
    the last change asked for none of the changes made."""
    messages = list(messages)
    writes = [n for n, m in enumerate(messages) if m.get("role") == "assistant"
              and any(is_write(c.name) and not c.error for c in tool_calls([m]))]
    end = writes[-1] if writes else len(messages)
    turns, before = [], ""
    for message in messages[:end]:
        content = message.get("content")
        if not isinstance(content, str) or not content.strip():
            continue
        if message.get("role") == "assistant":
            before = content
        elif message.get("role") == "user":
            if asks_something(content, before):
                turns.append(" ".join(content.split()))
            before = ""
    return turns


def request_text(messages: Iterable[Mapping[str, Any]], limit: int = MAX_REQUEST) -> str:
    """A conversation's request in the user's words: its ``request_turns``
    joined, cut at a word to ``limit`` characters; empty when no turn asks."""
    text = " ".join(request_turns(messages))
    if len(text) <= limit:
        return text
    return text[: limit - 1].rsplit(" ", 1)[0] + "…"
