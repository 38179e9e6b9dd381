"""A scripted endpoint that plays every role brewkb asks an LLM to play.

``role_player(body)`` reads one ``/chat/completions`` request body — its
``response_format`` schema name, its prompt and its tools — and returns a reply
for ``FakeOpenAI`` (``{"content": ...}`` or ``{"tool_calls": [...]}``):

    reflection   1–2 insights named after the tools the episode called
    recipe       a recipe for the ``Concept:`` of the prompt, steps from its insights
    relabel      the episode's own task, as the behaviour it shows
    judge        a score for every rubric id listed in the prompt
    outcome      failure when the episode mentions an error or an apology, else success
    (tools)      a tool-calling agent: looks things up, acts once, then answers
    (other)      a short text answer

Replies are deterministic functions of the request, so a cached run replays
exactly. ``embed(texts)`` gives hashed bag-of-words vectors in which names
sharing words are close, so concept clustering behaves as with real
embeddings. Use it as ``FakeOpenAI(default=role_player, embed=embed)``, or
``RolePlayer(policy=...)`` to plug a domain-specific agent policy: a function
from the request body to a reply, or ``None`` to fall back to the generic one.
Wrappers inject faults: ``InvalidFirst`` (the first N structured prompts and their
repairs are answered with text that is not JSON), ``Outage`` (every call fails until ``recover()``).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["role_player", "RolePlayer", "embed", "agent_reply", "InvalidFirst", "Outage", "Policy", "SmallModel",
           "schema_name", "written", "GREETING"]

Body = dict[str, Any]
Policy = Callable[[Body], "dict[str, Any] | None"]

READ_PREFIXES = ("get", "find", "list", "search", "lookup", "read", "check", "show", "query")
MAX_TOOL_CALLS = 3


def _seed(*parts: Any) -> int:
    return int.from_bytes(hashlib.sha256(json.dumps(parts, default=str).encode()).digest()[:4], "big")


def schema_name(body: Body) -> str | None:
    fmt = body.get("response_format") or {}
    if fmt.get("type") == "json_schema":
        return str((fmt.get("json_schema") or {}).get("name") or "reply")
    return None


def _text(body: Body, role: str) -> str:
    return "\n".join(str(m.get("content") or "") for m in body.get("messages", []) if m.get("role") == role)


def _first_user(body: Body) -> str:
    return next((str(m.get("content") or "") for m in body.get("messages", []) if m.get("role") == "user"), "")


def _humanise(tool: str) -> str:
    return " ".join(tool.replace("-", "_").split("_")).strip().lower()


# ---------------------------------------------------------------- the roles
def _reflection(body: Body) -> dict[str, Any]:
    transcript = _first_user(body)
    called = re.findall(r"calls ([A-Za-z_][\w-]*)\(", transcript)
    acting = [c for c in called if not c.lower().startswith(READ_PREFIXES)]
    passed = "Outcome: PASSED" in transcript
    main = (acting or called or ["reply"])[-1]
    insights = [{"concept": _humanise(main),
                 "insight": (f"Use {main} once the facts it needs are known." if passed else
                             f"Check the facts {main} depends on before calling it."),
                 "steps": [f"`{c}`" for c in dict.fromkeys(called)][:4]}]
    reads = [c for c in dict.fromkeys(called) if c.lower().startswith(READ_PREFIXES)]
    if reads and _seed(transcript) % 2:
        insights.append({"concept": f"look up with {_humanise(reads[0])}",
                         "insight": f"Call {reads[0]} first to learn what the task refers to.",
                         "steps": [f"`{reads[0]}`"]})
    return {"insights": insights}


def _recipe(body: Body) -> dict[str, Any]:
    prompt = _first_user(body)
    concept = (re.search(r"^Concept: (.+)$", prompt, re.M) or [None, "the task"])[1]
    given = [name for line in prompt.splitlines() if " Steps: " in line
             for name in re.findall(r"([A-Za-z_][\w-]*)(?:\(|;|\s\(|$)", line.split(" Steps: ", 1)[1].split(" (task:")[0])]
    steps = list(dict.fromkeys(re.findall(r"`([A-Za-z_][\w-]*)`", prompt) + given))[:5]
    how = "\n".join(f"{n}. Call `{s}` with the values the customer gave." for n, s in enumerate(steps, 1)) or \
        "1. Answer the customer with what the tools returned."
    pitfalls = [line[2:].split(" Steps:")[0] for line in prompt.splitlines() if line.startswith("- [diagnostic]")]
    return {"description": f"How to {concept} with the tools at hand.",
            "when_to_use": f"When the user asks to {concept}.",
            "how_to_perform": how,
            "pitfalls": "\n".join(f"- {p}" for p in pitfalls[:3]) or "- Do not act before the facts are checked.",
            "example": f"A user asks to {concept}; follow the steps in order"
                       + (": " + ", then ".join(f"{s}(order_id)" for s in steps) if steps else "") + "."}


def _relabel(body: Body) -> dict[str, Any]:
    task = (re.search(r"^Task: (.+)$", _first_user(body), re.M) or [None, "help the user"])[1]
    return {"summary": "The agent looked the request up and answered.", "task": task}


def _judge(body: Body) -> dict[str, Any]:
    prompt = _first_user(body)
    ids = re.findall(r"^- ([^:\n]+):", prompt.split("Episode:")[0], re.M)
    return {"scores": [{"id": i.strip(), "score": round((_seed(i, prompt) % 5) / 4, 2), "note": "as observed"}
                       for i in ids]}


def _outcome(body: Body) -> dict[str, Any]:
    failed = re.search(r"\b(error|sorry|cannot)\b", _first_user(body), re.I) is not None
    return {"success": not failed, "score": 0.0 if failed else 1.0,
            "note": "a tool call failed" if failed else "the request was done"}


STRUCTURED: dict[str, Callable[[Body], dict[str, Any]]] = {
    "reflection": _reflection, "recipe": _recipe, "relabel": _relabel, "judge": _judge, "outcome": _outcome,
}


# ---------------------------------------------------------------- the agent
def _values(text: str) -> dict[str, list[str]]:
    return {"email": re.findall(r"[\w.+-]+@[\w-]+\.[\w.]+", text),
            "id": re.findall(r"#?[A-Za-z]*\d[\w-]*", text),
            "zip": re.findall(r"\b\d{5}\b", text),
            "name": re.findall(r"\b[A-Z][a-z]+\b", text)}


def _fill(params: dict[str, Any], values: dict[str, list[str]], text: str) -> dict[str, Any] | None:
    """Arguments for the required parameters from values in the conversation, or None."""
    props = params.get("properties") or {}
    args: dict[str, Any] = {}
    for name in params.get("required") or []:
        spec = props.get(name) or {}
        key = name.lower()
        if "enum" in spec:
            args[name] = next((e for e in spec["enum"] if str(e).lower() in text.lower()), spec["enum"][0])
        elif spec.get("type") == "array":
            ids = [v for v in values["id"] if not v.startswith("#")]
            if not ids:
                return None
            args[name] = ids[:1]
        elif "email" in key and values["email"]:
            args[name] = values["email"][0]
        elif "zip" in key and values["zip"]:
            args[name] = values["zip"][0]
        elif key.endswith("id") and values["id"]:
            args[name] = next((v for v in values["id"] if v.startswith("#")), values["id"][0])
        elif "name" in key and len(values["name"]) >= 2:
            args[name] = values["name"][0 if "first" in key else 1]
        elif key in ("message", "summary", "text", "content", "reason", "note"):
            args[name] = "Done as you asked."
        else:
            return None
    return args


def agent_reply(body: Body) -> dict[str, Any]:
    """The generic tool-calling agent: each read-like tool it can fill once,
    then one acting tool, then a text answer (at most ``MAX_TOOL_CALLS`` calls)."""
    messages = body.get("messages", [])
    done = [c["function"]["name"] for m in messages for c in (m.get("tool_calls") or [])]
    text = "\n".join(str(m.get("content") or "") for m in messages if m.get("role") in ("user", "tool"))
    values = _values(text)
    if len(done) < MAX_TOOL_CALLS:
        tools = [t["function"] for t in body.get("tools", []) if t.get("type") == "function"]
        reads = [t for t in tools if t["name"].lower().startswith(READ_PREFIXES)]
        acts = [t for t in tools if t not in reads and t["name"] not in ("reply", "transfer_to_human")]
        acted = any(d in {t["name"] for t in acts} for d in done)
        words = set(re.findall(r"[a-z]+", _first_user(body).lower()))
        acts.sort(key=lambda t: -len(words & set(t["name"].lower().split("_"))))
        for tool in reads + ([] if acted else acts[:1]):
            if tool["name"] in done:
                continue
            args = _fill(tool.get("parameters") or {}, values, text)
            if args is not None:
                return {"tool_calls": [{"id": f"call_{len(done)}", "name": tool["name"], "arguments": args}]}
    return {"content": "I have taken care of your request."}


# ------------------------------------------------------------- the player
class RolePlayer:
    """Every role; ``policy`` answers agent requests first (return ``None``
    to let the generic agent answer)."""

    def __init__(self, policy: Policy | None = None) -> None:
        self.policy = policy

    def __call__(self, body: Body) -> dict[str, Any]:
        name = schema_name(body)
        if name in STRUCTURED:
            return {"content": json.dumps(STRUCTURED[name](body))}
        if body.get("tools"):
            reply = self.policy(body) if self.policy is not None else None
            return reply if reply is not None else agent_reply(body)
        return {"content": "ok"}


role_player = RolePlayer()
"""The player with the generic agent: ``FakeOpenAI(default=role_player, embed=embed)``."""


def embed(texts: Sequence[str], dims: int = 64) -> list[list[float]]:
    """Unit vectors of hashed, signed word counts: texts sharing words are close."""
    out = []
    for text in texts:
        vector = [0.0] * dims
        for word in re.findall(r"[a-z0-9]+", str(text).lower()):
            h = _seed(word)
            vector[h % dims] += 1.0 if (h >> 8) % 2 else -1.0
        norm = sum(v * v for v in vector) ** 0.5 or 1.0
        out.append([v / norm for v in vector])
    return out


# ----------------------------------------------------------------- faults
class InvalidFirst:
    """For the first ``n`` structured prompts, the reply and the reply to its
    repair are not JSON (so each of those items fails, whatever order
    concurrent requests arrive in); then ``player`` answers, the same prompts too."""

    def __init__(self, n: int, player: Callable[[Body], dict[str, Any]] = role_player) -> None:
        self.n, self.player, self._lock = n, player, threading.Lock()
        self._bad: dict[str, int] = {}  # prompt → invalid replies it was given

    def __call__(self, body: Body) -> dict[str, Any]:
        if schema_name(body) is not None:
            prompt = json.dumps(body["messages"][:2], sort_keys=True)
            with self._lock:
                if prompt not in self._bad and len(self._bad) < self.n:
                    self._bad[prompt] = 0
                bad = prompt in self._bad and self._bad[prompt] < 2
                if bad:
                    self._bad[prompt] += 1
            if bad:
                return {"content": "Sure! Here is the JSON you asked for: {insights: ["}
        return self.player(body)


class Outage:
    """Every call fails with ``status`` until ``recover()`` (or, with ``calls``,
    the first ``calls`` calls fail); then ``player`` answers."""

    def __init__(self, status: int = 500, player: Callable[[Body], dict[str, Any]] = role_player,
                 calls: int | None = None) -> None:
        self.status, self.player, self.down, self.left = status, player, True, calls
        self._lock = threading.Lock()

    def recover(self) -> None:
        self.down = False

    def __call__(self, body: Body) -> dict[str, Any]:
        with self._lock:
            if self.left is not None:
                self.down, self.left = self.left > 0, self.left - 1
            down = self.down
        if down:
            return {"status": self.status, "message": "the model is overloaded"}
        return self.player(body)


# ------------------------------------------------------- a small local model
GREETING = "Hello! How can I assist you today?"


class SmallModel:
    """``player`` answering the way a small local model does, one habit at a time:

    calls_as          "fenced": the agent's tool calls written in the content as a fenced JSON object;
                      "tags": inside Hermes/Qwen ``<tool_call>`` tags; "broken": call-shaped text that
                      is not JSON (no ``tool_calls`` in any of them)
    user_greets       the user simulator (a request with neither tools nor a schema) greets like an
                      assistant instead of stating its request
    judge_scores_none the judge answers ``{"scores": []}``: it fits the schema, scores no rubric
    reflector         "invents": an insight claiming a call of a tool the episode does not have, with
                      placeholder steps; "example": the reflector prompt's own example as the concept
    """

    def __init__(self, player: Callable[[Body], dict[str, Any]] = role_player, *, calls_as: str | None = None,
                 user_greets: bool = False, judge_scores_none: bool = False, reflector: str | None = None) -> None:
        self.player, self.calls_as, self.user_greets = player, calls_as, user_greets
        self.judge_scores_none, self.reflector = judge_scores_none, reflector

    def __call__(self, body: Body) -> dict[str, Any]:
        name = schema_name(body)
        if name == "judge" and self.judge_scores_none:
            return {"content": json.dumps({"scores": []})}
        if name == "reflection" and self.reflector == "invents":
            return {"content": json.dumps({"insights": [{
                "concept": "cancel order", "insight": "The agent correctly calls the `cancel_order_now` tool.",
                "steps": ["tool_name(order_id, reason)"]}]})}
        if name == "reflection" and self.reflector == "example":
            return {"content": json.dumps({"insights": [{
                "concept": "Exchange delivered items", "insight": "Follow the usual procedure.", "steps": []}]})}
        if name is None and not body.get("tools") and self.user_greets:
            return {"content": GREETING}
        reply = self.player(body)
        if self.calls_as and reply.get("tool_calls"):
            return {"content": written(reply["tool_calls"], self.calls_as)}
        return reply


def written(calls: Sequence[dict[str, Any]], style: str) -> str:
    """Tool calls as a small model writes them in its text."""
    objects = [json.dumps({"name": c["name"], "arguments": c["arguments"]}) for c in calls]
    if style == "tags":
        return "\n".join(f"<tool_call>\n{o}\n</tool_call>" for o in objects)
    if style == "broken":
        return '```json\n{"name": "' + calls[0]["name"] + '", "arguments": {order_id: W1}\n```'
    return "I will look that up.\n```json\n" + "\n".join(objects) + "\n```"
