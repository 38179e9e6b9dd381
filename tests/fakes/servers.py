"""Fake servers that behave like vLLM, Ollama and llama-cpp-python's server,
built on ``FakeOpenAI``, to test the doctor, the structured-output fallbacks
and the profiles of docs/llm.md.

Every profile answers structured requests with a value built from the schema
it finds (in ``response_format``, or in the prompt when the client falls back),
scores the rubrics a judge prompt lists, calls the first tool it is offered,
and repeats a code word it can see. The differences are the ones that matter:

  vllm()            takes ``json_schema``, tools, long prompts
  ollama(context)   takes ``json_schema``; keeps only the last ``context``
                    tokens of a prompt and reports that many, silently
  llamacpp_python() rejects ``json_schema`` with HTTP 422 (pydantic's error),
                    takes ``json_object`` with a ``schema``
  llama_server()    llama.cpp's own server: one model, ``json_schema``, tool calls
                    parsed with ``--jinja`` (without it, written in the text),
                    and no embeddings endpoint (HTTP 501) unless ``embeddings``
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from tests.fakes.openai_server import FakeOpenAI

__all__ = ["vllm", "ollama", "llamacpp_python", "llama_server", "responder", "value_for"]

CONCEPT = "check the order before changing it"


def value_for(schema: dict[str, Any], text: str = "", key: str = "") -> Any:
    """A plausible value matching ``schema`` (the subset brewkb's roles use)."""
    kind = schema.get("type")
    kind = kind[0] if isinstance(kind, list) else kind
    if "enum" in schema:
        return schema["enum"][0]
    if kind == "object":
        props = schema.get("properties", {})
        if "scores" in props:  # the judge: score every rubric the prompt lists
            ids = re.findall(r"^- ([a-z0-9-]+): ", text, flags=re.M)
            return {"scores": [{"id": i, "score": 0.8, "note": "mostly followed"} for i in ids]}
        return {k: value_for(v, text, k) for k, v in props.items()}
    if kind == "array":
        return [value_for(schema.get("items", {}), text, key) for _ in range(max(1, schema.get("minItems", 1)))]
    if kind in ("integer", "number"):
        return 42 if key == "answer" else max(schema.get("minimum", 1), min(schema.get("maximum", 1), 1))
    if kind == "boolean":
        return True
    words = {"concept": CONCEPT, "insight": "Look the order up and confirm its status before changing it.",
             "task": "Cancel the pending order of the customer after checking it.",
             "description": "Use when a customer asks to change or cancel an order.",
             "how_to_perform": "1. Look the order up.\n2. Confirm the status.\n3. Make the change."}
    return words.get(key, f"{key or 'text'} written by the fake server")


def _schema_in(body: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    fmt = body.get("response_format") or {}
    if fmt.get("type") == "json_schema":
        return fmt["json_schema"]["schema"], "json_schema"
    if fmt.get("type") == "json_object" and fmt.get("schema"):
        return fmt["schema"], "json_object"
    for m in body.get("messages", []):
        found = re.search(r"matches this JSON Schema:\n(\{.*\})\s*$", str(m.get("content") or ""), flags=re.S)
        if found:
            return json.loads(found.group(1)), "text"
    return None, ""


def _text(body: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content") or "") for m in body.get("messages", []))


def responder(*, context: int | None = None, reject_json_schema: bool = False,
              prose_around_json: bool = False) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The reply function of a profile (see the module docstring)."""

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        fmt = (body.get("response_format") or {}).get("type")
        if reject_json_schema and fmt == "json_schema":
            return {"status": 422, "message": "1 validation error for CreateChatCompletionRequest\n"
                                              "response_format.type\n  Input should be 'text' or 'json_object'"}
        text = _text(body)
        words = text.split()
        extra: dict[str, Any] = {}
        if context is not None and len(words) > context:
            words = words[-context:]  # what a short context window keeps, without a word of warning
            text = " ".join(words)
            extra["prompt_tokens"] = context
        messages = body.get("messages", [])
        if body.get("tools") and messages and messages[-1].get("role") != "tool":
            tool = body["tools"][0]["function"]
            args = value_for(tool.get("parameters") or {"type": "object"}, text)
            return {"tool_calls": [{"name": tool["name"], "arguments": args}], **extra}
        code = re.search(r"The code word is (\w+)\.", text)
        if "code word" in text and "Reply with the code word only" in text:
            return {"content": code.group(1) if code else "I cannot see a code word.", **extra}
        schema, _ = _schema_in(body)
        if schema is None:
            return {"content": "Done.", **extra}
        value = json.dumps(value_for(schema, text))
        return {"content": f"Here is the JSON:\n```json\n{value}\n```" if prose_around_json else value, **extra}

    return answer


def vllm(model: str = "Qwen/Qwen2.5-7B-Instruct") -> FakeOpenAI:
    return FakeOpenAI(default=responder(), models=[model])


def ollama(model: str = "llama3.1", context: int = 2048) -> FakeOpenAI:
    return FakeOpenAI(default=responder(context=context), models=[f"{model}:latest"])


def llamacpp_python(model: str = "/models/qwen2.5-7b-instruct-q4_k_m.gguf") -> FakeOpenAI:
    return FakeOpenAI(default=responder(reject_json_schema=True), models=[model])


def llama_server(model: str = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", *, jinja: bool = True,
                 embeddings: bool = False) -> FakeOpenAI:
    from tests.fakes.roles import SmallModel

    answer = responder() if jinja else SmallModel(responder(), calls_as="tags")
    return FakeOpenAI(default=answer, models=[model], embeddings=embeddings)
