"""The user simulator of conversational environments (τ²): brewkb's ``user``
LLM role, prompted by the environment (for τ², its user guidelines and the
task's scenario). It sees the conversation from the user's side — the agent's
texts as the other party's, tool traffic hidden — and its turn ends the
conversation when it holds one of the environment's markers (τ²:
``###STOP###``, ``###TRANSFER###``, ``###OUT-OF-SCOPE###``). A marker is
the harness's, not the user's: what the conversation records of the turn
(``said``) leaves it out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from brewkb.errors import AgentError
from brewkb.llm.client import LLMClient
from brewkb.trajectories.formats.base import drop_markers, marker_at

__all__ = ["UserSimulator", "flip"]


def flip(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The agent's conversation as the user sees it: texts only, roles swapped."""
    out = []
    for m in messages:
        content = m.get("content")
        if m.get("role") in ("assistant", "user") and content:
            out.append({"role": "user" if m["role"] == "assistant" else "assistant", "content": str(content)})
    return out


class UserSimulator:
    def __init__(self, client: LLMClient, system_prompt: str, markers: Sequence[str]) -> None:
        self.client, self.system_prompt, self.markers = client, system_prompt, tuple(markers)
        self.calls = self.tokens_in = self.tokens_out = 0

    def ends(self, turn: str) -> bool:
        """Whether the turn ends the conversation: it holds a marker."""
        return marker_at(turn, self.markers) is not None

    def said(self, turn: str) -> str:
        """The turn as the conversation records it: up to its first marker."""
        return drop_markers(turn, self.markers)

    async def reply(self, conversation: Sequence[Mapping[str, Any]]) -> str:
        """The user's next turn; an empty reply raises (the episode fails with it)."""
        messages = [{"role": "system", "content": self.system_prompt}, *flip(conversation)]
        result = await self.client.chat(self.client.request("user", messages))
        self.calls += 1
        self.tokens_in += result.tokens_in
        self.tokens_out += result.tokens_out
        text = (result.content or "").strip()
        if not text:
            raise AgentError("the user simulator's model sent an empty reply")
        return text
