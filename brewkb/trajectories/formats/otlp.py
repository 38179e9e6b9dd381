"""OTLP JSON as the OpenTelemetry Collector's file exporter writes it: one
``ExportTraceServiceRequest`` (``{"resourceSpans": [...]}``) or
``ExportLogsServiceRequest`` (``{"resourceLogs": [...]}``) per line, or one
such request as a whole JSON document.

This module turns those into ``Span`` and ``LogEvent`` values (attribute
values decoded from OTLP's ``AnyValue``) and groups the spans a format keeps
into conversations: the spans under one agent span, else those sharing a
conversation id attribute, else those of one trace. The GenAI and
OpenInference readers say which spans they keep and what a conversation is
made of.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from brewkb.errors import TrajectoryError
from brewkb.trajectories.formats.base import (
    RECORD_ERRORS,
    UNKNOWN_JSON,
    Item,
    Skipped,
    build,
    first_user,
    json_items,
    json_lines,
    obj,
    open_text,
)
from brewkb.trajectories.formats.chat import Message, merge_calls
from brewkb.trajectories.tools import DECLARED

__all__ = ["Span", "LogEvent", "Trace", "read_trace", "any_value", "attributes", "groups", "looks_like",
           "Conventions", "conversation"]


@dataclass
class Span:
    trace: str
    id: str
    parent: str
    name: str
    start: int
    order: int
    attrs: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


@dataclass
class LogEvent:
    """A log record that belongs to a span (the event-based GenAI conventions)."""

    trace: str
    span: str
    name: str
    order: int
    attrs: dict[str, Any]
    body: Any


@dataclass
class Trace:
    """What a file held: the spans a format keeps, every span's parent (to find
    agent spans above them), log events by span, and what could not be read."""

    spans: list[Span] = field(default_factory=list)
    parents: dict[tuple[str, str], str] = field(default_factory=dict)
    agents: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    logs: dict[tuple[str, str], list[LogEvent]] = field(default_factory=dict)
    skipped: list[Skipped] = field(default_factory=list)
    requests: int = 0


def any_value(value: Any) -> Any:
    """OTLP's ``AnyValue`` → a Python value (lists and dicts for arrays and kvlists)."""
    if not isinstance(value, dict):
        return value
    # recursion is safe: the reader refused anything nested more than MAX_DEPTH deep
    if "stringValue" in value:
        return value["stringValue"]
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "intValue" in value:
        try:
            return int(value["intValue"])
        except (TypeError, ValueError):
            return value["intValue"]
    if "doubleValue" in value:
        return value["doubleValue"]
    if "arrayValue" in value:
        return [any_value(v) for v in _list(obj(value["arrayValue"]).get("values"))]
    if "kvlistValue" in value:
        return attributes(obj(value["kvlistValue"]).get("values"))
    if "bytesValue" in value:
        return value["bytesValue"]
    return None


def attributes(items: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in _list(items):
        if isinstance(item, dict) and isinstance(item.get("key"), str):
            out[item["key"]] = any_value(item.get("value"))
    return out


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _id(value: Any) -> str:
    """Span and trace ids as hex, as OTLP/JSON writes them (protobuf's base64 is converted)."""
    if not isinstance(value, str):
        return ""
    if value and all(c in "0123456789abcdefABCDEF" for c in value):
        return value.lower()
    try:
        return base64.b64decode(value, validate=True).hex()
    except (binascii.Error, ValueError):
        return value


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


KeepSpan = Callable[[str, dict[str, Any]], bool]
IsAgent = Callable[[dict[str, Any]], bool]


def read_trace(path: Path, keep_span: KeepSpan, is_agent: IsAgent, keep_log: Callable[[str], bool]) -> Trace:
    """Every request of the file, read one at a time; a request or span that
    cannot be read becomes a ``Skipped`` naming its line (or index)."""
    trace = Trace()
    order = 0
    for where, request in _requests(path):
        if isinstance(request, TrajectoryError):
            trace.skipped.append(Skipped(where, str(request)))
            continue
        if not isinstance(request, dict) or not ({"resourceSpans", "resourceLogs"} & set(request)):
            trace.skipped.append(Skipped(where, "not an OTLP export request (no `resourceSpans` or `resourceLogs`)"))
            continue
        trace.requests += 1
        for n, raw in enumerate(_records(request, "resourceSpans", ("scopeSpans", "instrumentationLibrarySpans"),
                                         "spans")):
            order += 1
            try:
                _add_span(trace, raw, order, keep_span, is_agent)
            except (TrajectoryError, *RECORD_ERRORS) as exc:
                trace.skipped.append(Skipped(f"{where}: span {n}", str(exc) if isinstance(exc, TrajectoryError)
                                             else f"an OTLP span of an unexpected shape ({exc})"))
        for n, raw in enumerate(_records(request, "resourceLogs", ("scopeLogs", "instrumentationLibraryLogs"),
                                         "logRecords")):
            order += 1
            try:
                _add_log(trace, raw, order, keep_log)
            except RECORD_ERRORS as exc:
                trace.skipped.append(Skipped(f"{where}: log record {n}",
                                             f"an OTLP log record of an unexpected shape ({exc})"))
    return trace


def _add_span(trace: Trace, raw: Any, order: int, keep_span: KeepSpan, is_agent: IsAgent) -> None:
    if not isinstance(raw, dict) or not raw.get("spanId"):
        raise TrajectoryError("not an OTLP span (no `spanId`)")
    key = (_id(raw.get("traceId")), _id(raw.get("spanId")))
    attrs = attributes(raw.get("attributes"))
    trace.parents[key] = _id(raw.get("parentSpanId"))
    if is_agent(attrs):
        trace.agents[key] = attrs
    name = str(raw.get("name") or "")
    if keep_span(name, attrs):
        events = [(e["name"], attributes(e.get("attributes"))) for e in _list(raw.get("events"))
                  if isinstance(e, dict) and isinstance(e.get("name"), str)]
        trace.spans.append(Span(key[0], key[1], trace.parents[key], name, _int(raw.get("startTimeUnixNano")),
                                order, attrs, events))


def _add_log(trace: Trace, raw: Any, order: int, keep_log: Callable[[str], bool]) -> None:
    if not isinstance(raw, dict):
        return
    attrs = attributes(raw.get("attributes"))
    name = raw.get("eventName") or attrs.get("event.name") or ""
    if isinstance(name, str) and name and keep_log(name) and raw.get("spanId"):
        key = (_id(raw.get("traceId")), _id(raw.get("spanId")))
        trace.logs.setdefault(key, []).append(LogEvent(key[0], key[1], name, order, attrs,
                                                       any_value(raw.get("body"))))


def _records(request: dict[str, Any], top: str, scopes: Sequence[str], leaf: str) -> Iterator[Any]:
    for resource in _list(request.get(top)):
        if not isinstance(resource, dict):
            continue
        for scope_key in scopes:
            for scope in _list(resource.get(scope_key)):
                if isinstance(scope, dict):
                    yield from _list(scope.get(leaf))


def _requests(path: Path) -> Iterator[tuple[str, Any]]:
    """``(where, request)``: per line for the file exporter's JSONL, else the
    items of one JSON document's ``resourceSpans`` and ``resourceLogs``."""
    if _one_request_per_line(path):
        for number, value in json_lines(path):
            yield f"{path}:{number}", value
        return
    for top in ("resourceSpans", "resourceLogs"):
        for index, value in json_items(path, f"{top}.item"):
            where = f"{path}:{top}[{index}]"
            yield where, value if isinstance(value, TrajectoryError) else {top: [value]}


def _one_request_per_line(path: Path) -> bool:
    with open_text(path) as handle:
        for line in handle:
            if line.strip():
                text = line.strip()
                return text.startswith("{") and text.endswith("}") and ("resourceSpans" in text
                                                                        or "resourceLogs" in text)
    return False


def groups(trace: Trace, conversation_keys: Sequence[str]) -> list[tuple[dict[str, str], list[Span]]]:
    """The kept spans grouped into conversations, each in start order, with
    its ids (``trace_id``, ``conversation_id``): under the nearest agent span,
    else by a conversation id attribute, else by trace."""
    found: dict[tuple[str, str], tuple[dict[str, str], list[Span]]] = {}
    for span in sorted(trace.spans, key=lambda s: (s.start, s.order)):
        agent = _agent_above(trace, span)
        conversation = next((str(a[k]) for a in (span.attrs, trace.agents.get((span.trace, agent or ""), {}))
                             for k in conversation_keys if a.get(k) not in (None, "")), None)
        if agent is not None:
            key = ("agent", f"{span.trace}:{agent}")
        elif conversation is not None:
            key = ("conversation", conversation)
        else:
            key = ("trace", span.trace)
        ids = {"trace_id": span.trace, "conversation_id": conversation or (span.trace if key[0] == "trace"
                                                                           else key[1])}
        found.setdefault(key, (ids, []))[1].append(span)
    return list(found.values())


def _agent_above(trace: Trace, span: Span) -> str | None:
    seen: set[str] = set()
    current = span.parent
    while current and current not in seen:
        seen.add(current)
        if (span.trace, current) in trace.agents:
            return current
        current = trace.parents.get((span.trace, current), "")
    return None


def looks_like(head: str) -> bool:
    text = head.lstrip()
    return text.startswith("{") and ('"resourceSpans"' in text[:2000] or '"resourceLogs"' in text[:2000])


@dataclass(frozen=True)
class Conventions:
    """Where a convention keeps a model call's usage and model, and what to say
    when its spans carry no messages."""

    source: str
    tokens_in: str
    tokens_out: str
    model: str
    no_messages: str
    tools: Callable[[dict[str, Any]], list[str] | None]
    """The tools a model call's span says it offered the model (``None`` when it does not say)."""


def conversation(where: str, ids: dict[str, str], spans: Sequence[Span],
                 calls: Sequence[tuple[list[Message], list[Message]]], split: str, conventions: Conventions) -> Item:
    """One conversation from its model calls' (input, output) messages, with
    the spans' usage and models."""
    calls = [c for c in calls if c[0] or c[1]]
    if not calls:
        raise TrajectoryError(conventions.no_messages)
    messages = merge_calls(calls)
    usage = {"calls": len(spans),
             "tokens_in": sum(_count(s.attrs.get(conventions.tokens_in)) for s in spans),
             "tokens_out": sum(_count(s.attrs.get(conventions.tokens_out)) for s in spans)}
    models = sorted({str(s.attrs[conventions.model]) for s in spans if s.attrs.get(conventions.model)})
    offered = [conventions.tools(s.attrs) for s in spans]  # declared only when every model call says what it offered
    declared = None if any(o is None for o in offered) else sorted({name for o in offered for name in o or ()})
    return build(where, task_id=ids["conversation_id"], task=first_user(messages), split=split, messages=messages,
                 outcome=UNKNOWN_JSON, usage=usage,
                 meta={"source": conventions.source, **ids, "models": models, "spans": len(spans),
                       **({DECLARED: declared} if declared is not None else {})})


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
