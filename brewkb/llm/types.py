"""Requests and results of the LLM layer, as plain values."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["ChatRequest", "ChatResult", "canonical_json"]


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class ChatRequest:
    """One chat completion.

    ``schema`` asks for a JSON reply matching it (``schema_name`` names it for
    the endpoint). ``structured`` is how the schema is asked for: ``json_schema``
    (``response_format`` with the schema), ``json_object`` (JSON mode plus the
    schema in the prompt) or ``text`` (the schema in the prompt, the reply
    parsed); the prompt differs between the last two and the first, so the
    cache keeps them apart. ``sample`` tells samples of the same prompt apart: at a
    temperature above 0, samples 0, 1 and 2 are three cache entries and three
    seeds, and asking for sample 2 again is a cache hit.
    """

    role: str
    messages: Sequence[Mapping[str, Any]]
    model: str = ""
    temperature: float = 0.1
    max_tokens: int = 2048
    tools: Sequence[Mapping[str, Any]] = ()
    schema: Mapping[str, Any] | None = None
    schema_name: str = "reply"
    seed: int = 0
    sample: int = 0
    structured: str = "json_schema"

    def cache_key(self, endpoint: str = "") -> str:
        """The canonical JSON of everything that determines the reply, and the
        ``endpoint`` (base URL) that gives it."""
        return canonical_json({
            "endpoint": endpoint, "model": self.model, "messages": list(self.messages), "tools": list(self.tools),
            "schema": self.schema, "temperature": self.temperature, "max_tokens": self.max_tokens,
            "seed": self.seed, "sample": self.sample,
        })


@dataclass(frozen=True)
class ChatResult:
    """The assistant message of a reply and its token usage."""

    content: str
    tool_calls: tuple[Mapping[str, Any], ...] = ()
    tokens_in: int = 0
    tokens_out: int = 0
    cached: bool = False
    model: str = ""
    finish_reason: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)
    from_text: bool = False
    """The tool calls were written in the reply's text and recovered from it
    (``brewkb.llm.textcalls``); the cache keeps the reply as it came."""

    def message(self) -> dict[str, Any]:
        """The reply as an OpenAI chat message, ready to append to a conversation."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [dict(c) for c in self.tool_calls]
        return message

    def to_json(self) -> dict[str, Any]:
        return {"content": self.content, "tool_calls": [dict(c) for c in self.tool_calls],
                "tokens_in": self.tokens_in, "tokens_out": self.tokens_out, "model": self.model,
                "finish_reason": self.finish_reason}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, cached: bool = False) -> ChatResult:
        return cls(content=data.get("content") or "", tool_calls=tuple(data.get("tool_calls") or ()),
                   tokens_in=int(data.get("tokens_in", 0)), tokens_out=int(data.get("tokens_out", 0)),
                   model=data.get("model", ""), finish_reason=data.get("finish_reason", ""), cached=cached)


class CallBudget(Protocol):
    """What the client charges before and after a call (``brewkb.run.budget.Budget``)."""

    def take_call(self) -> None:
        """Count one call about to be sent; raise ``BudgetExhausted`` when none is left."""

    def add_cost(self, model: str, tokens_in: int, tokens_out: int) -> None:
        """Count what a reply cost."""
