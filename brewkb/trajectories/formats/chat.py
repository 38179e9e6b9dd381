"""One conversation from the model calls of a trace.

Each chat call logs the whole history it was sent plus the reply; rebuilding
the conversation keeps each message once. A call's input that starts with the
conversation so far adds only what follows; otherwise the longest overlap of
the conversation's end and the input's start is dropped (an agent that trims
its history); system messages already present are not repeated.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

__all__ = ["merge_calls", "tool_call", "text_of", "arguments_text"]

Message = dict[str, Any]


def text_of(value: Any) -> str:
    """A tool result or content as text: strings as they are, anything else as JSON."""
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def arguments_text(value: Any) -> str:
    """Tool-call arguments as the JSON string OpenAI messages carry (a string is kept as written)."""
    if value is None:
        return "{}"
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def tool_call(call_id: Any, name: Any, arguments: Any) -> dict[str, Any]:
    return {"id": text_of(call_id), "type": "function",
            "function": {"name": text_of(name), "arguments": arguments_text(arguments)}}


def _canonical_args(text: str) -> str:
    try:
        return json.dumps(json.loads(text), sort_keys=True)
    except (json.JSONDecodeError, RecursionError):
        return text


def _key(message: Message) -> str:
    """What makes two logged copies of a message the same message."""
    calls = [(c.get("id") or "", (c.get("function") or {}).get("name") or "",
              _canonical_args((c.get("function") or {}).get("arguments") or ""))
             for c in message.get("tool_calls") or [] if isinstance(c, dict)]
    content = message.get("content")
    text = " ".join(text_of(content).split()) if content else ""
    return json.dumps([message.get("role"), text, calls, message.get("tool_call_id") or ""])


def _overlap(done: list[str], new: list[str]) -> int:
    """The length of the longest end of ``done`` that ``new`` starts with."""
    for size in range(min(len(done), len(new)), 0, -1):
        if done[-size:] == new[:size]:
            return size
    return 0


def merge_calls(calls: Sequence[tuple[Sequence[Message], Sequence[Message]]]) -> list[Message]:
    """``(input messages, output messages)`` per call, in call order → the conversation."""
    conversation: list[Message] = []
    keys: list[str] = []
    for inputs, outputs in calls:
        new_keys = [_key(m) for m in inputs]
        if new_keys[: len(keys)] == keys:
            start = len(keys)
        else:
            body = [k for k, m in zip(new_keys, inputs, strict=True) if m.get("role") != "system"]
            own = [k for k, m in zip(keys, conversation, strict=True) if m.get("role") != "system"]
            start = _skip_to(new_keys, inputs, _overlap(own, body))
        for key, message in zip(new_keys[start:], inputs[start:], strict=True):
            if message.get("role") == "system" and key in keys:
                continue
            conversation.append(message)
            keys.append(key)
        for message in outputs:
            conversation.append(message)
            keys.append(_key(message))
    return conversation


def _skip_to(keys: list[str], inputs: Sequence[Message], non_system: int) -> int:
    """The index in ``inputs`` after its first ``non_system`` non-system messages."""
    seen = 0
    for index, message in enumerate(inputs):
        if seen == non_system:
            return index
        if message.get("role") != "system":
            seen += 1
    return len(keys)
