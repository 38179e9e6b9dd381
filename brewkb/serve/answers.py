"""The assistant message of an upstream's answer, for the record: from a
chat completion (JSON) or from its stream of server-sent events, put together
the way the ``openai`` SDK puts deltas together (text is concatenated; tool
calls by their ``index``). Only the first choice is recorded."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Answer", "Events", "from_json", "DONE"]

DONE = b"[DONE]"
_DECODE = json.JSONDecoder().raw_decode
"""One event's JSON (``json.loads`` is its wrapper, at twice the cost for an event this small)."""


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


class Events:
    """A chat completion's event stream (``data:`` lines up to ``[DONE]``),
    read as its chunks arrive, so that the answer is ready when the last one
    is: each event is parsed when its line is whole."""

    def __init__(self) -> None:
        self.done = False
        """``[DONE]`` came, or the stream carried an error or an event that is no JSON."""
        self._failed = False
        self._rest: list[bytes] = []
        self._seen = False
        self._text: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._model: str | None = None
        self._usage: dict[str, int] = {}

    def feed(self, chunk: bytes) -> None:
        if self.done:
            return
        if b"\r" in chunk:  # lines may end in CR LF or CR alone
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if b"\n" not in chunk:  # a line still coming: kept in parts, joined once whole
            self._rest.append(chunk)
            return
        *lines, rest = b"".join((*self._rest, chunk)).split(b"\n")
        self._rest = [rest] if rest else []
        for line in lines:
            if line.startswith(b"data:"):
                self._event(line[5:].strip())
                if self.done:
                    return

    def _event(self, payload: bytes) -> None:
        if payload == DONE:
            self.done = True
            return
        try:
            text = payload.decode()
            event, end = _DECODE(text)
            if end != len(text):
                event = None
        except (ValueError, RecursionError):
            event = None
        if not isinstance(event, dict) or "error" in event:
            self.done = self._failed = True
            return
        self._model = _model(event.get("model")) or self._model
        self._usage = _usage(event.get("usage")) or self._usage
        for choice in event.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            self._seen = True
            delta = choice["delta"] if isinstance(choice.get("delta"), dict) else {}
            if isinstance(delta.get("content"), str):
                self._text.append(delta["content"])
            for call in delta.get("tool_calls") or ():
                if isinstance(call, dict):
                    _add_call(self._calls.setdefault(int(call.get("index") or 0), {}), call)

    def answer(self) -> Answer | None:
        """The answer so far, or ``None`` when the stream carried an error or no choice."""
        if not self.done and self._rest:
            self.feed(b"\n")  # a last line without its newline
        if self._failed or not self._seen:
            return None
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self._text) or None}
        if self._calls:
            message["tool_calls"] = [{"id": c.get("id", ""), "type": "function",
                                      "function": {"name": c.get("name", ""), "arguments": c.get("arguments", "")}}
                                     for _, c in sorted(self._calls.items())]
        return Answer(message, self._model, self._usage)


def _add_call(into: dict[str, Any], delta: dict[str, Any]) -> None:
    function = delta["function"] if isinstance(delta.get("function"), dict) else {}
    for key, value in (("id", delta.get("id")), ("name", function.get("name")),
                       ("arguments", function.get("arguments"))):
        if isinstance(value, str):
            into[key] = into.get(key, "") + value
