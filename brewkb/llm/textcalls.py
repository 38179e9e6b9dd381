"""Tool calls a model wrote in its reply's text instead of ``tool_calls``.

Small and local models, or a server started without a tool-call parser
(llama.cpp's ``llama-server`` without ``--jinja``), often answer a request
that offers tools with the call written out in the content:

    ```json
    {"name": "find_order", "arguments": {"order_id": "#W1"}}
    ```
    {"name": "find_order", "parameters": {...}}           (bare, or a list of them)
    <tool_call>{"name": "find_order", "arguments": {...}}</tool_call>   (Hermes, Qwen)

``read_calls`` turns such a reply into calls when every call names a tool the
request offered, and says what is wrong when the text is shaped like a call
but is not one (it does not parse, has no name, or names a tool that was not
offered): such a reply is neither a call nor an answer. Any other text is an
answer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["TextCalls", "read_calls", "FROM_TEXT"]

FROM_TEXT = "text_tools"
"""The ledger mode of a reply whose tool calls were recovered from its text."""

_TAG = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)
_FENCE = re.compile(r"```[a-zA-Z]*\s*\n?(.*?)```", re.S)
_CALL_KEYS = ("arguments", "parameters", "args")


@dataclass(frozen=True)
class TextCalls:
    """``calls``: OpenAI-shaped tool calls found in the text (empty when none);
    ``rest``: the text around them; ``problem``: why call-shaped text is not a
    call (``None`` when the text is calls or an answer)."""

    calls: tuple[dict[str, Any], ...] = ()
    rest: str = ""
    problem: str | None = None


def _shaped(value: Any) -> bool:
    """Whether a JSON value is written as a call (or a list of calls)."""
    if isinstance(value, list):
        return bool(value) and all(_shaped(v) for v in value)
    return isinstance(value, dict) and "name" in value and any(k in value for k in _CALL_KEYS)


def _as_calls(value: Any) -> list[dict[str, Any]]:
    items = value if isinstance(value, list) else [value]
    return [v for v in items if isinstance(v, dict)]


def _candidates(text: str) -> Iterable[tuple[str, str, bool]]:
    """(JSON text, the text around it, whether it was tagged as a call)."""
    tags = _TAG.findall(text)
    if tags:
        yield "[" + ",".join(t.strip() or "null" for t in tags) + "]", _TAG.sub(" ", text), True
        return
    for found in _FENCE.finditer(text):
        yield found.group(1).strip(), text[: found.start()] + text[found.end():], False
    stripped = text.strip()
    pairs = sorted((("{", "}"), ("[", "]")), key=lambda p: (stripped.find(p[0]) < 0, stripped.find(p[0])))
    for opener, closer in pairs:  # the outermost first: a list of calls before the first call in it
        start, end = stripped.find(opener), stripped.rfind(closer)
        if start >= 0 and end > start:
            yield stripped[start:end + 1], stripped[:start] + stripped[end + 1:], False


def _looks_like_call(snippet: str) -> bool:
    return bool(re.search(r'"name"\s*:', snippet)) and any(f'"{k}"' in snippet for k in _CALL_KEYS)


def read_calls(content: str, offered: Sequence[str]) -> TextCalls:
    """The calls written in ``content`` to tools named in ``offered``; see the module."""
    if not content.strip():
        return TextCalls()
    for snippet, rest, tagged in _candidates(content):
        try:
            value = json.loads(snippet)
        except RecursionError:
            return TextCalls(problem="a tool call written as text nests too deep")
        except json.JSONDecodeError as exc:
            if tagged or _looks_like_call(snippet):
                return TextCalls(problem=f"a tool call written as text is not valid JSON ({exc.msg})")
            continue
        if not _shaped(value):
            if tagged:
                return TextCalls(problem="a <tool_call> holds no call with a name and arguments")
            continue
        calls = []
        for n, item in enumerate(_as_calls(value)):
            name = item.get("name")
            arguments: Any = next((item[k] for k in _CALL_KEYS if k in item), {})
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments or "{}")
                except RecursionError:
                    return TextCalls(problem=f"the arguments of {name} written as text nest too deep")
                except json.JSONDecodeError as exc:
                    return TextCalls(problem=f"the arguments of {name} written as text are not JSON ({exc.msg})")
            if not isinstance(name, str) or name not in offered:
                return TextCalls(problem=f"the reply writes a call of {name!r}, which is not one of the tools "
                                         f"offered ({', '.join(offered[:8]) or 'none'})")
            if not isinstance(arguments, dict):
                return TextCalls(problem=f"the arguments of {name} written as text are not a JSON object")
            calls.append({"id": f"text_call_{n}", "type": "function",
                          "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}})
        return TextCalls(tuple(calls), " ".join(rest.split()))
    return TextCalls()
