"""The assistant message of an upstream's answer, for the record: from a
chat completion (JSON) or from its stream of server-sent events, put together
the way the ``openai`` SDK puts deltas together (text is concatenated; tool
calls by their ``index``). Only the first choice is recorded."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Answer", "from_json", "from_events", "DONE"]

DONE = b"[DONE]"


@dataclass
class Answer:
    message: dict[str, Any]
    model: str | None = None
    usage: dict[str, int] = field(default_factory=dict)


def _usage(value: Any) -> dict[str, int]:
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if k in ("prompt_tokens", "completion_tokens", "total_tokens")
            and isinstance(v, int) and not isinstance(v, bool)}


def _model(value: Any) -> str | None:
    return value[:200] if isinstance(value, str) else None


def from_json(body: bytes) -> Answer | None:
    """The answer of a chat completion body, or ``None`` when it holds none."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    choices = data.get("choices") if isinstance(data, dict) else None
    first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else None
    message = first.get("message") if first else None
    if not isinstance(message, dict):
        return None
    return Answer({"role": "assistant", **{k: v for k, v in message.items() if k != "role"}},
                  _model(data.get("model")), _usage(data.get("usage")))


def from_events(stream: bytes) -> Answer | None:
    """The answer of a chat completion's event stream (``data:`` lines up to
    ``[DONE]``), or ``None`` when the stream carried an error or no choice."""
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    model: str | None = None
    usage: dict[str, int] = {}
    seen = False
    for line in stream.splitlines():
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if payload == DONE:
            break
        try:
            event = json.loads(payload)
        except (ValueError, RecursionError):
            return None
        if not isinstance(event, dict) or "error" in event:
            return None
        model = _model(event.get("model")) or model
        usage = _usage(event.get("usage")) or usage
        for choice in event.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            seen = True
            delta = choice["delta"] if isinstance(choice.get("delta"), dict) else {}
            if isinstance(delta.get("content"), str):
                text.append(delta["content"])
            for call in delta.get("tool_calls") or ():
                if isinstance(call, dict):
                    _add_call(calls.setdefault(int(call.get("index") or 0), {}), call)
    if not seen:
        return None
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
    if calls:
        message["tool_calls"] = [{"id": c.get("id", ""), "type": "function",
                                  "function": {"name": c.get("name", ""), "arguments": c.get("arguments", "")}}
                                 for _, c in sorted(calls.items())]
    return Answer(message, model, usage)


def _add_call(into: dict[str, Any], delta: dict[str, Any]) -> None:
    function = delta["function"] if isinstance(delta.get("function"), dict) else {}
    for key, value in (("id", delta.get("id")), ("name", function.get("name")),
                       ("arguments", function.get("arguments"))):
        if isinstance(value, str):
            into[key] = into.get(key, "") + value
