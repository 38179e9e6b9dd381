"""Asking for JSON when an endpoint cannot take a schema.

Three modes, tried in this order by ``structured_output = "auto"``:

  json_schema   ``response_format: {"type": "json_schema", ...}`` (OpenAI, vLLM,
                Ollama ≥ 0.5, llama.cpp's ``llama-server``)
  json_object   ``response_format: {"type": "json_object", "schema": ...}`` plus
                the schema in the prompt (llama-cpp-python's server, JSON mode
                of older servers)
  text          no ``response_format``; the schema in the prompt and the JSON
                cut out of the reply (code fences and prose around it dropped)

Every mode's reply is validated against the schema all the same.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["MODES", "next_mode", "response_format", "with_schema_prompt", "extract_json", "is_format_rejection"]

MODES = ("json_schema", "json_object", "text")

_REJECTION_WORDS = ("response_format", "json_schema", "json_object", "schema", "grammar", "format")


def next_mode(mode: str) -> str | None:
    """The mode to try after ``mode`` was rejected (``None`` after ``text``)."""
    i = MODES.index(mode)
    return MODES[i + 1] if i + 1 < len(MODES) else None


def response_format(mode: str, name: str, schema: Mapping[str, Any]) -> dict[str, Any] | None:
    if mode == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": name, "schema": dict(schema)}}
    if mode == "json_object":
        return {"type": "json_object", "schema": dict(schema)}
    return None


def with_schema_prompt(messages: Sequence[Mapping[str, Any]], mode: str,
                       schema: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """``messages`` with the schema spelled out in the system message (the
    wording differs per mode, so the cache never mixes their replies)."""
    if mode == "json_schema":
        return list(messages)
    how = "JSON mode is on; reply" if mode == "json_object" else "Reply"
    text = (f"{how} with only one JSON value, no prose and no code fence, that matches this JSON Schema:\n"
            + json.dumps(dict(schema), sort_keys=True))
    out = [dict(m) for m in messages]
    if out and out[0].get("role") == "system" and isinstance(out[0].get("content"), str):
        out[0]["content"] = f"{out[0]['content']}\n\n{text}"
    else:
        out.insert(0, {"role": "system", "content": text})
    result: list[Mapping[str, Any]] = list(out)
    return result


def extract_json(content: str) -> str:
    """The JSON value inside a reply that may wrap it in a code fence or prose
    (the content unchanged when nothing JSON-like is found)."""
    text = content.strip()
    if text.startswith("```"):
        text = text.split("\n", 1)[1] if "\n" in text else ""
        text = text.rsplit("```", 1)[0].strip()
    starts = [i for i in (text.find("{"), text.find("[")) if i >= 0]
    if not starts:
        return text
    start = min(starts)
    end = text.rfind("}" if text[start] == "{" else "]")
    return text[start:end + 1] if end > start else text


def is_format_rejection(status: int, message: str) -> bool:
    """Whether an HTTP error says the endpoint does not take this ``response_format``."""
    if status not in (400, 404, 415, 422, 500, 501):
        return False
    lowered = message.lower()
    return any(word in lowered for word in _REJECTION_WORDS)
