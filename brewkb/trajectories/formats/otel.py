"""``otel``: OpenTelemetry GenAI traces in OTLP JSON (see ``otlp``).

A chat span (``gen_ai.operation.name`` ``chat``, ``text_completion`` or
``generate_content``, or any span with GenAI message content) is one model
call. Its messages come from, in this order of preference:

- the span's ``gen_ai.input.messages`` / ``gen_ai.output.messages`` (and
  ``gen_ai.system_instructions``), JSON text or structured values, with parts
  of type ``text``, ``tool_call`` and ``tool_call_response``; the same
  attributes on a ``gen_ai.client.inference.operation.details`` log record;
- the older event form: ``gen_ai.system.message``, ``gen_ai.user.message``,
  ``gen_ai.assistant.message``, ``gen_ai.tool.message`` and ``gen_ai.choice``
  events, as log records of the span or as span events;
- the oldest: ``gen_ai.content.prompt`` / ``gen_ai.content.completion`` span
  events holding ``gen_ai.prompt`` / ``gen_ai.completion`` JSON.

A conversation is the chat spans under one ``invoke_agent`` span, else those
sharing ``gen_ai.conversation.id``, else those of one trace, in start order
(``chat.merge_calls`` keeps each repeated message once). When every chat span
says which tools it offered the model (``gen_ai.tool.definitions``), those are
the conversation's declared tools (``meta.tools``). Its outcome is unknown:
attach labels with ``--outcomes``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import brewkb.trajectories.formats.otlp as otlp
from brewkb.errors import TrajectoryError
from brewkb.trajectories.formats.base import Item, guarded, obj
from brewkb.trajectories.formats.chat import Message, text_of, tool_call
from brewkb.trajectories.tools import declared_in

__all__ = ["read", "looks_like", "genai_messages"]

CHAT_OPERATIONS = {"chat", "text_completion", "generate_content"}
CONTENT_KEYS = ("gen_ai.input.messages", "gen_ai.output.messages")
ROLE_EVENTS = {"gen_ai.system.message": "system", "gen_ai.user.message": "user",
               "gen_ai.assistant.message": "assistant", "gen_ai.tool.message": "tool"}
DETAILS_EVENT = "gen_ai.client.inference.operation.details"
TOOL_DEFINITIONS = "gen_ai.tool.definitions"


def _is_chat(name: str, attrs: dict[str, Any]) -> bool:
    return attrs.get("gen_ai.operation.name") in CHAT_OPERATIONS or any(k in attrs for k in CONTENT_KEYS)


def _is_agent(attrs: dict[str, Any]) -> bool:
    return attrs.get("gen_ai.operation.name") == "invoke_agent"


def read(path: Path, split: str, tasks: Path | None = None) -> Iterator[Item]:
    trace = otlp.read_trace(path, _is_chat, _is_agent, lambda name: name.startswith("gen_ai."))
    yield from trace.skipped
    for ids, spans in otlp.groups(trace, ("gen_ai.conversation.id",)):
        where = f"{path}: trace {ids['trace_id']}"
        item = guarded(where, lambda: _convert(where, trace, ids, spans, split))
        if item is not None:
            yield item


def _offered(attrs: dict[str, Any]) -> list[str] | None:
    """The tools a chat span's ``gen_ai.tool.definitions`` declares (JSON text or a structured list); ``None``
    when the span does not say."""
    value = attrs.get(TOOL_DEFINITIONS)
    if value is None:
        return None
    try:
        return declared_in(json.loads(value) if isinstance(value, str) else value)
    except (json.JSONDecodeError, RecursionError):
        raise TrajectoryError(f"{TOOL_DEFINITIONS} is not JSON: {value[:60]!r}") from None
    except TrajectoryError as exc:
        raise TrajectoryError(f"{TOOL_DEFINITIONS}: {exc}") from None


CONVENTIONS = otlp.Conventions(
    "otel", "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "gen_ai.request.model",
    "its chat spans hold no message content (turn content capture on: "
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT)", _offered)


def _convert(where: str, trace: otlp.Trace, ids: dict[str, str], spans: list[otlp.Span], split: str) -> Item | None:
    calls = [_call(span, trace.logs.get((span.trace, span.id), [])) for span in spans]
    return otlp.conversation(where, ids, spans, calls, split, CONVENTIONS)


def _call(span: otlp.Span, logs: list[otlp.LogEvent]) -> tuple[list[Message], list[Message]]:
    """The input and output messages of one chat span."""
    attrs = dict(span.attrs)
    for log in logs:  # content that was emitted as a details event instead of span attributes
        if log.name == DETAILS_EVENT:
            attrs.update({k: v for k, v in log.attrs.items() if k not in attrs})
    if any(k in attrs for k in CONTENT_KEYS):
        inputs = genai_messages(attrs.get("gen_ai.system_instructions"), system=True)
        inputs += genai_messages(attrs.get("gen_ai.input.messages"))
        return inputs, genai_messages(attrs.get("gen_ai.output.messages"))[:1]
    events = [(log.name, log.body if isinstance(log.body, dict) else log.attrs) for log in logs]
    events += [(name, _event_body(attrs)) for name, attrs in span.events]
    return _from_events(events)


def _parsed(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            raise TrajectoryError(f"GenAI message content is not JSON: {value[:80]!r}") from None
    return value


def genai_messages(value: Any, system: bool = False) -> list[Message]:
    """GenAI semantic-convention messages (``{role, parts[]}``) → OpenAI chat messages.
    ``system``: ``value`` is ``gen_ai.system_instructions`` (a list of parts)."""
    value = _parsed(value)
    if value is None:
        return []
    if not isinstance(value, list):
        raise TrajectoryError("GenAI messages must be a list")
    if system:
        value = [{"role": "system", "parts": value}] if value else []
    out: list[Message] = []
    for message in value:
        if not isinstance(message, dict):
            raise TrajectoryError("a GenAI message must be an object")
        role, parts = message.get("role"), message.get("parts")
        if not isinstance(parts, list):
            parts = [{"type": "text", "content": message.get("content")}] if message.get("content") else []
        texts, calls, results = [], [], []
        for part in parts:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text":
                texts.append(text_of(part.get("content")))
            elif kind == "tool_call":
                calls.append(tool_call(part.get("id"), part.get("name"), part.get("arguments")))
            elif kind == "tool_call_response":
                results.append({"role": "tool", "tool_call_id": text_of(part.get("id")),
                                "content": text_of(part.get("response", part.get("result")))})
            # reasoning, blobs, files and URIs are not part of an OpenAI chat transcript
        if texts or calls:
            chat: Message = {"role": role, "content": "\n".join(texts) if texts else None}
            if calls:
                chat["tool_calls"] = calls
            out.append(chat)
        out.extend(results)
    return out


def _event_body(attrs: dict[str, Any]) -> dict[str, Any]:
    """A span event's content: its attributes, or the JSON some SDKs put in one."""
    for key in ("gen_ai.event.content", "event.body", "body"):
        if isinstance(attrs.get(key), str):
            body = _parsed(attrs[key])
            if isinstance(body, dict):
                return body
    return attrs


def _event_message(role: str, body: dict[str, Any]) -> Message:
    message: Message = {"role": body.get("role") if isinstance(body.get("role"), str) else role,
                        "content": None if body.get("content") is None else text_of(body.get("content"))}
    calls = body.get("tool_calls")
    if isinstance(calls, list) and calls:
        message["tool_calls"] = [
            tool_call(c.get("id"), (c.get("function") or {}).get("name"), (c.get("function") or {}).get("arguments"))
            for c in calls if isinstance(c, dict)]
    if role == "tool":
        message["tool_call_id"] = text_of(body.get("id") or body.get("tool_call_id"))
        message["content"] = message["content"] or ""
    return message


def _from_events(events: list[tuple[str, Any]]) -> tuple[list[Message], list[Message]]:
    inputs: list[Message] = []
    outputs: list[Message] = []
    for name, body in events:
        body = body if isinstance(body, dict) else {}
        if name in ROLE_EVENTS:
            inputs.append(_event_message(ROLE_EVENTS[name], body))
        elif name == "gen_ai.choice" and not outputs and body.get("index", 0) in (0, "0"):
            outputs.append(_event_message("assistant", obj(body.get("message")) or body))
        elif name == "gen_ai.content.prompt":
            inputs.extend(_openai_list(body.get("gen_ai.prompt")))
        elif name == "gen_ai.content.completion":
            outputs.extend(_openai_list(body.get("gen_ai.completion"))[:1])
    return inputs, outputs


def _openai_list(value: Any) -> list[Message]:
    value = _parsed(value)
    if not isinstance(value, list):
        return []
    return [_event_message(str(m.get("role") or "assistant"), m) for m in value if isinstance(m, dict)]


def looks_like(head: str) -> bool:
    return otlp.looks_like(head) and '"gen_ai.' in head
