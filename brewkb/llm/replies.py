"""What a chat completion holds, and what makes a reply unusable for the
request that asked for it (a structured reply that does not match its
schema, tool-call arguments that are not a JSON object, nothing at all)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from brewkb.errors import LLMError
from brewkb.llm.schema import validate
from brewkb.llm.structured import extract_json
from brewkb.llm.types import ChatRequest, ChatResult

__all__ = ["parse_completion", "mode_of", "fault", "json_of", "short"]


def parse_completion(response: Any, request: ChatRequest, where: str) -> ChatResult:
    """The result in ``response`` (a completion's JSON); ``LLMError`` when it has none."""
    try:
        choice = response["choices"][0]
        message = choice["message"]
        calls = tuple(
            {"id": c.get("id", ""), "type": c.get("type", "function"),
             "function": {"name": c["function"]["name"], "arguments": c["function"].get("arguments") or ""}}
            for c in message.get("tool_calls") or ()
        )
    except (KeyError, IndexError, TypeError, AttributeError):
        raise LLMError(f"{request.role}: {where} returned no choices or a malformed one: "
                       f"{short(json.dumps(response, default=str))}") from None
    usage = response.get("usage") or {}
    return ChatResult(content=message.get("content") or "", tool_calls=calls,
                      tokens_in=int(usage.get("prompt_tokens") or 0),
                      tokens_out=int(usage.get("completion_tokens") or 0),
                      model=response.get("model") or request.model, finish_reason=choice.get("finish_reason") or "")


def mode_of(request: ChatRequest) -> str:
    """The structured-output mode the request was sent in ("" for a plain one)."""
    return request.structured if request.schema is not None else ""


def fault(result: ChatResult, request: ChatRequest) -> str | None:
    """What makes ``result`` unusable for ``request``, or ``None``."""
    if request.schema is not None:
        return _check(json_of(result, request.structured), request.schema)
    if not result.content.strip() and not result.tool_calls:
        return "the reply is empty"
    for call in result.tool_calls:
        try:
            arguments = json.loads(call["function"]["arguments"] or "{}")
        except json.JSONDecodeError as exc:
            return f"the arguments of {call['function']['name']} are not JSON ({exc.msg})"
        if not isinstance(arguments, dict):
            return f"the arguments of {call['function']['name']} are not a JSON object"
    return None


def json_of(result: ChatResult, mode: str) -> str:
    """The JSON text of a structured reply: outside ``json_schema`` mode a
    model may wrap it in a code fence or prose."""
    return result.content if mode == "json_schema" else extract_json(result.content)


def _check(content: str, schema: Mapping[str, Any]) -> str | None:
    try:
        value = json.loads(content)
    except json.JSONDecodeError as exc:
        return f"it is not JSON ({exc.msg} at character {exc.pos})"
    errors = validate(value, schema)
    return "; ".join(errors[:5]) if errors else None


def short(text: str, limit: int = 300) -> str:
    """``text`` on one line, cut to ``limit`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
