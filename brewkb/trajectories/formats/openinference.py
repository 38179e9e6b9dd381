"""``openinference``: spans following the OpenInference conventions (Arize
Phoenix and the ``openinference-instrumentation-*`` packages), in OTLP JSON
(see ``otlp``).

An LLM span (``openinference.span.kind`` = ``LLM``) is one model call; its
messages are the flattened attributes ``llm.input_messages.N.message.role``,
``...message.content`` (or ``...message.contents.M.message_content.text``),
``...message.tool_calls.K.tool_call.{id,function.name,function.arguments}``
and ``...message.tool_call_id``, and the same under ``llm.output_messages``
(nested values, as some exporters write them, are read too). A conversation
is the LLM spans under one ``AGENT`` span, else those sharing ``session.id``,
else those of one trace. When every LLM span says which tools it offered the
model (``llm.tools.N.tool.json_schema``), those are the conversation's
declared tools (``meta.tools``). Its outcome is unknown: attach labels with
``--outcomes``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import brewkb.trajectories.formats.otlp as otlp
from brewkb.errors import TrajectoryError
from brewkb.trajectories.formats.base import Item, guarded
from brewkb.trajectories.formats.chat import Message, text_of, tool_call
from brewkb.trajectories.tools import declared_in

__all__ = ["read", "looks_like", "indexed"]

KIND = "openinference.span.kind"
INPUT, OUTPUT = "llm.input_messages", "llm.output_messages"
TOOLS = "llm.tools"


def _is_llm(name: str, attrs: dict[str, Any]) -> bool:
    return attrs.get(KIND) == "LLM" or any(k.startswith((INPUT, OUTPUT)) for k in attrs)


def _is_agent(attrs: dict[str, Any]) -> bool:
    return attrs.get(KIND) == "AGENT"


def read(path: Path, split: str, tasks: Path | None = None) -> Iterator[Item]:
    trace = otlp.read_trace(path, _is_llm, _is_agent, lambda name: False)
    yield from trace.skipped
    for ids, spans in otlp.groups(trace, ("session.id",)):
        where = f"{path}: trace {ids['trace_id']}"
        item = guarded(where, lambda: _convert(where, ids, spans, split))
        if item is not None:
            yield item


def _offered(attrs: dict[str, Any]) -> list[str] | None:
    """The tools an LLM span offered the model (``llm.tools.N.tool.json_schema``, each an OpenAI tool as JSON
    text); ``None`` when the span does not say."""
    tools = []
    for n, fields in enumerate(indexed(attrs, TOOLS)):
        try:
            tools.append(json.loads(fields.get("tool.json_schema") or "null"))
        except (TypeError, json.JSONDecodeError, RecursionError):
            raise TrajectoryError(f"{TOOLS}.{n}.tool.json_schema is not JSON text") from None
    if not tools:
        return None
    try:
        return declared_in(tools)
    except TrajectoryError as exc:
        raise TrajectoryError(f"{TOOLS}: {exc}") from None


CONVENTIONS = otlp.Conventions(
    "openinference", "llm.token_count.prompt", "llm.token_count.completion", "llm.model_name",
    "its LLM spans hold no messages (`llm.input_messages`); check that the instrumentation does not hide inputs "
    "(OPENINFERENCE_HIDE_INPUTS)", _offered)


def _convert(where: str, ids: dict[str, str], spans: list[otlp.Span], split: str) -> Item:
    calls = [(_messages(s.attrs, INPUT), _messages(s.attrs, OUTPUT)[:1]) for s in spans]
    return otlp.conversation(where, ids, spans, calls, split, CONVENTIONS)


def _flat(value: Any, prefix: str, out: dict[str, Any]) -> None:
    """Nested dicts and lists → dotted keys, as OTLP attributes are written."""
    if isinstance(value, dict):
        for key, item in value.items():
            _flat(item, f"{prefix}.{key}", out)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _flat(item, f"{prefix}.{index}", out)
    else:
        out[prefix] = value


def indexed(attrs: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    """``prefix.N.rest`` keys → one dict of ``rest`` keys per ``N``, in index order."""
    flat: dict[str, Any] = {}
    for key, value in attrs.items():
        if key == prefix or key.startswith(prefix + "."):
            _flat(value, key, flat)
    found: dict[int, dict[str, Any]] = {}
    pattern = re.compile(re.escape(prefix) + r"\.(\d+)\.(.+)")
    for key, value in flat.items():
        match = pattern.fullmatch(key)
        if match:
            found.setdefault(int(match.group(1)), {})[match.group(2)] = value
    return [found[i] for i in sorted(found)]


def _messages(attrs: dict[str, Any], prefix: str) -> list[Message]:
    out: list[Message] = []
    for fields in indexed(attrs, prefix):
        role = fields.get("message.role")
        content = fields.get("message.content")
        if content is None:
            parts = indexed(fields, "message.contents")
            texts = [text_of(p.get("message_content.text")) for p in parts
                     if p.get("message_content.type", "text") == "text" and p.get("message_content.text")]
            content = "\n".join(texts) if texts else None
        message: Message = {"role": role, "content": None if content is None else text_of(content)}
        calls = [tool_call(c.get("tool_call.id"), c.get("tool_call.function.name"),
                           c.get("tool_call.function.arguments")) for c in indexed(fields, "message.tool_calls")]
        if calls:
            message["tool_calls"] = calls
        if role == "tool":
            message["tool_call_id"] = text_of(fields.get("message.tool_call_id"))
            message["content"] = message["content"] or ""
        if message["content"] is not None or calls or role == "tool":
            out.append(message)
    return out


def looks_like(head: str) -> bool:
    return otlp.looks_like(head) and ('"openinference.span.kind"' in head or '"llm.input_messages.' in head)
