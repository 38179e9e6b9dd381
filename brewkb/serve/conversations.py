"""Which conversation a request belongs to.

A client may name it: ``X-Brewkb-Conversation: ID`` (1–128 letters, digits
and ``_ . : -``). A request under a name the server already holds a
conversation of that does not continue that conversation's last turn is
another conversation, ``ID:<random>`` (the answer's header says so): one client
cannot write over another's conversation by sending its name. Otherwise the
resent history says it: a request whose
messages start with all the messages of a conversation's last turn — its
request and the answer — continues that conversation. A request that
continues an earlier turn of a conversation that has gone on since (a
regenerated answer, a branch) starts a conversation of its own, which begins
with the same history. Two conversations whose messages are the same so far
cannot be told apart this way: clients that run such conversations side by
side name them.

The server remembers ``serve.conversations`` conversations (the ones with the
latest turns); a turn of one it has forgotten starts a new one, and the
reader of the recordings puts the two back together (a conversation whose
messages another starts with is that conversation's start).
"""

from __future__ import annotations

import re
import secrets
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from brewkb.trajectories.formats.serve import text_of_content

__all__ = ["Conversations", "Opened", "HEADER", "valid_id"]

HEADER = "X-Brewkb-Conversation"
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}\Z")


def valid_id(value: str) -> bool:
    return bool(_ID.match(value))


@dataclass
class Opened:
    """A request's conversation, and the state of its messages (to which the
    answer is added when it is known)."""

    id: str
    grouped_by: str
    state: int | None = None


def _then(state: int, message: Any) -> int:
    """The state after ``message``: the messages so far compared by role, text,
    tool calls and the call a result answers, the way
    ``trajectories.formats.serve.message_key`` compares them. Python's own hash
    (keyed per process) is enough here and costs a quarter of a digest: the
    states live in this process only."""
    if not isinstance(message, Mapping):
        return hash((state, None))
    calls = tuple((str(c.get("id") or ""), str(c["function"].get("name") or ""),
                   str(c["function"].get("arguments") or ""))
                  for c in message.get("tool_calls") or () if isinstance(c, Mapping)
                  and isinstance(c.get("function"), Mapping))
    return hash((state, str(message.get("role")), text_of_content(message.get("content")) or "", calls,
                 str(message.get("tool_call_id") or "")))


class Conversations:
    """Turns grouped into conversations; lives on the event loop (no locks)."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self._by_state: OrderedDict[int, str] = OrderedDict()  # the state after a conversation's last turn
        self._latest: dict[str, int] = {}
        self._named: OrderedDict[str, int] = OrderedDict()  # a named conversation -> the state after its last turn
        self.started = 0

    def open(self, messages: Sequence[Any], named: str | None) -> Opened:
        """The conversation of a request (``named``: the id the client sent)."""
        state = 0
        found: str | None = None
        answered: set[int] = set()  # the states after each answer the request resends
        for message in messages:
            state = _then(state, message)
            if isinstance(message, Mapping) and message.get("role") == "assistant":
                answered.add(state)
                # only a conversation's last state is kept: an earlier one is a branch, a new conversation
                found = self._by_state.get(state, found)
        if named is not None:
            last = self._named.get(named)
            if last is not None and last not in answered:  # not its next turn: a conversation of its own
                named = f"{named[:120]}:{secrets.token_hex(3)}"
            return Opened(named, "header", state)
        if found is None:
            self.started += 1
            found = "c-" + secrets.token_hex(8)
        return Opened(found, "history", state)

    def close(self, opened: Opened, answer: Mapping[str, Any]) -> None:
        """Note the state the conversation is in after ``answer``."""
        if opened.state is None:
            return
        if opened.grouped_by == "header":
            self._named[opened.id] = _then(opened.state, answer)
            self._named.move_to_end(opened.id)
            while len(self._named) > self.keep:
                self._named.popitem(last=False)
            return
        old = self._latest.pop(opened.id, None)
        if old is not None:
            self._by_state.pop(old, None)
        state = _then(opened.state, answer)
        self._by_state[state] = opened.id
        self._latest[opened.id] = state
        while len(self._by_state) > self.keep:
            _, gone = self._by_state.popitem(last=False)
            self._latest.pop(gone, None)
