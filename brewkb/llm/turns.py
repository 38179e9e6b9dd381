"""Conversations that go nowhere: a simulated user who plays the assistant,
and turns that repeat.

A small model asked to play a customer often answers the agent's greeting
with a greeting of its own ("Hello! How can I assist you today?"); the agent,
another small model, greets back, and the episode runs to its step budget.
These rules name such a conversation from its texts alone, whatever the
domain: the words are those of a help desk's opening, not of any task.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

__all__ = ["offers_help", "states_nothing", "repeated", "degenerate", "REPEATS"]

REPEATS = 3
"""A text said this many times by one side makes the conversation repetitive."""

_OFFER = re.compile(
    r"\b(how (can|may|could) i (help|assist)|what can i (do|help) (for|with)|(happy|glad|here) to (help|assist)"
    r"|assist you|help you (today|with)|anything (else )?i can (help|do)|how can i be of)", re.I)
_GREETING = re.compile(r"^\W*(hi|hello|hey|good (morning|afternoon|evening)|greetings|thanks?|thank you|ok(ay)?)"
                       r"\b[^\d@]{0,16}$", re.I)


def offers_help(text: str) -> bool:
    """Whether ``text`` is a help desk's offer of help (an assistant's line)."""
    return bool(_OFFER.search(text))


def states_nothing(text: str) -> bool:
    """Whether ``text`` is only an offer of help or a short greeting: no request in it."""
    return offers_help(text) or bool(_GREETING.match(text.strip()))


def _key(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


def repeated(texts: Sequence[str]) -> tuple[str, int] | None:
    """The text said most often among ``texts``, and how often, when that is ``REPEATS`` times or more."""
    counts = Counter(k for k in map(_key, texts) if k)
    if not counts:
        return None
    text, n = counts.most_common(1)[0]
    return (text, n) if n >= REPEATS else None


def degenerate(user_turns: Sequence[str], agent_turns: Sequence[str]) -> str | None:
    """Why a conversation is degenerate, or ``None``: its simulated user never
    stated a request (every turn an offer of help or a bare greeting), or one
    side said the same text ``REPEATS`` times or more."""
    if user_turns and all(states_nothing(t) for t in user_turns):
        return f"the user never stated a request ({len(user_turns)} turns of greetings or offers of help)"
    for side, turns in (("user", user_turns), ("agent", agent_turns)):
        found = repeated(turns)
        if found is not None:
            return f"the {side} said the same text {found[1]} times ({found[0][:60]!r})"
    return None
