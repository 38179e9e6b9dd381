"""What a chat completion holds, and what makes a reply unusable for the
request that asked for it (a structured reply that does not match its
schema, tool-call arguments that are not a JSON object, nothing at all)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from typing import Any

from brewkb.errors import LLMError
from brewkb.llm.schema import validate
from brewkb.llm.structured import extract_json
from brewkb.llm.textcalls import FROM_TEXT, read_calls
from brewkb.llm.types import ChatRequest, ChatResult
from brewkb.trajectories.formats.base import depth_ok

__all__ = ["parse_completion", "mode_of", "fault", "json_of", "short", "settle", "Check", "shown"]

MAX_REPLY_DEPTH = 32
"""Levels a structured reply may nest (every schema a role asks for nests a few): a deeper one is invalid."""

Check = Callable[[Any], "str | None"]
"""A content check of a structured reply's value: what is wrong with it, or ``None``."""


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


def mode_of(request: ChatRequest, result: ChatResult | None = None) -> str:
    """The structured-output mode the request was sent in ("" for a plain one;
    ``text_tools`` for a reply whose tool calls were recovered from its text)."""
    if result is not None and result.from_text:
        return FROM_TEXT
    return request.structured if request.schema is not None else ""


def settle(result: ChatResult, request: ChatRequest, check: Check | None = None) -> tuple[ChatResult, str | None]:
    """The reply as brewkb uses it, and what is wrong with it (``None``: good).

    A reply to a request that offers tools, with no ``tool_calls`` but calls
    written in its text, gets them as calls (``from_text``); text shaped like
    a call that is not one is a fault. A structured reply must match its
    schema and then pass ``check``, the caller's content rules."""
    if request.tools and not result.tool_calls and result.content.strip():
        offered = [str((t.get("function") or {}).get("name")) for t in request.tools]
        found = read_calls(result.content, offered)
        if found.problem is not None:
            return result, found.problem
        if found.calls:
            result = dataclasses.replace(result, tool_calls=found.calls, content=found.rest, from_text=True)
    problem = fault(result, request)
    if problem is None and check is not None and request.schema is not None:
        problem = check(json.loads(json_of(result, request.structured)))
    return result, problem


def shown(result: ChatResult) -> str:
    """A reply's text and tool calls, as a person reads them."""
    calls = [f"{c['function']['name']}({c['function'].get('arguments') or ''})" for c in result.tool_calls]
    return "\n".join([result.content, *calls]).strip()


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
        except RecursionError:
            return f"the arguments of {call['function']['name']} nest too deep"
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
    except RecursionError:
        return f"it nests more than {MAX_REPLY_DEPTH} levels deep"
    if not depth_ok(value, MAX_REPLY_DEPTH):
        return f"it nests more than {MAX_REPLY_DEPTH} levels deep"
    errors = validate(value, schema)
    return "; ".join(errors[:5]) if errors else None


def short(text: str, limit: int = 300) -> str:
    """``text`` on one line, cut to ``limit`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
