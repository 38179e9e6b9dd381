"""Probing the endpoint of every role before a run spends anything on it.

For each role: is the endpoint reachable (``GET /models``), is the model
listed, is a key present (its value is never read into a report), which
structured-output mode works (``json_schema``, else ``json_object`` with the
schema, else plain text parsed), whether tool calling works (the agent role),
and whether a long prompt arrives whole (a server with a short context window,
such as Ollama's default, cuts it silently). Roles that share an endpoint and
a model share the probes, so each is sent once.
"""

from __future__ import annotations

import json
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from brewkb.errors import BrewError, LLMError
from brewkb.llm.client import OPENAI_API, FormatRejected, LLMClient, NoModel
from brewkb.llm.schema import validate
from brewkb.llm.structured import MODES, extract_json, with_schema_prompt
from brewkb.llm.turns import states_nothing

__all__ = ["Check", "RoleReport", "diagnose", "CHECKS", "OK", "WARN", "FAIL", "SKIP"]

OK, WARN, FAIL, SKIP = "ok", "warn", "FAIL", "–"
CHECKS = ("reachable", "model", "key", "json_schema", "tools", "plays_user", "long_prompt", "embeddings")

_SCHEMA = {"type": "object", "required": ["answer"], "additionalProperties": False,
           "properties": {"answer": {"type": "integer"}}}
_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}}}
_FILLER = ("the quick brown fox jumps over the lazy dog while a small bird sings near the old "
           "stone bridge and the river runs slowly to the sea ").split()
_WORDS = ("amber", "cobalt", "saffron", "juniper", "marble", "walnut", "copper", "violet")


@dataclass(frozen=True)
class Check:
    """One probe's verdict: ``status`` is ok, warn, FAIL or – (not applicable),
    ``short`` the table cell, ``detail`` a sentence for a person."""

    status: str
    short: str
    detail: str = ""


@dataclass(frozen=True)
class RoleReport:
    role: str
    endpoint: str
    model: str
    checks: dict[str, Check]
    mode: str
    """The structured-output mode the role's calls will use ("" for the agent, the user and embeddings)."""

    @property
    def ok(self) -> bool:
        return all(c.status != FAIL for c in self.checks.values())

    def to_json(self) -> dict[str, Any]:
        return {"role": self.role, "endpoint": self.endpoint, "model": self.model, "mode": self.mode,
                "ok": self.ok, "checks": {k: {"status": c.status, "short": c.short, "detail": c.detail}
                                          for k, c in self.checks.items()}}


class _Probes:
    """Probe results per (endpoint, model, probe), so shared endpoints are asked once."""

    def __init__(self, client: LLMClient, long_prompt: int) -> None:
        self.client, self.long_prompt = client, long_prompt
        self.user: tuple[str, str] = ("", "")
        self._done: dict[tuple[str, str, str], Any] = {}

    async def once(self, role: str, probe: str, run: Callable[[], Awaitable[Any]]) -> Any:
        key = (self.client.endpoint(role), self.client.given_model(role), probe)
        if key not in self._done:
            self._done[key] = await run()
        return self._done[key]


async def diagnose(client: LLMClient, roles: Sequence[str], *, key_present: bool,
                   long_prompt: int = 6000, user: tuple[str, str] | None = None) -> list[RoleReport]:
    """A report per role. ``client`` must have no cache (every probe is a real
    call); ``key_present`` says whether the key variable is set; ``user`` is
    the environment's user prompt for one task and its agent's greeting, which
    the user role is probed with (a short prompt of its own when ``None``)."""
    probes = _Probes(client, long_prompt)
    probes.user = user or (_USER_PROMPT, "Hi! How can I help you today?")
    return [await _role(probes, role, key_present) for role in roles]


async def _role(probes: _Probes, role: str, key_present: bool) -> RoleReport:
    client = probes.client
    cfg = client.role(role)
    model = client.given_model(role)
    endpoint = client.endpoint(role)
    checks = {name: Check(SKIP, SKIP) for name in CHECKS}
    env = client.config.api_key_env
    if key_present:
        checks["key"] = Check(OK, "set", f"{env} is set")
    elif endpoint != OPENAI_API:
        checks["key"] = Check(OK, "none", f"{env} is not set; a local server needs none")
    else:
        checks["key"] = Check(FAIL, "missing", f"{env} is not set; export it or set llm.base_url to a local server")
        return RoleReport(role, endpoint, model, checks, "")
    listed = await probes.once(role, "models", lambda: _models(client, role))
    if isinstance(listed, Check):
        checks["reachable"] = listed
        if listed.status == FAIL:
            return RoleReport(role, endpoint, model, checks, "")
        checks["model"] = Check(WARN, "unknown", "the server does not list its models")
        listed = []
    else:
        checks["reachable"] = Check(OK, "yes")
        checks["model"] = _listed(model, listed) if model else Check(OK, "served")
    if not model:
        try:
            model = await client.model_of(role)
        except NoModel as exc:
            if role != "embeddings":
                checks["model"] = Check(FAIL, "not set", _why(exc, role))
                return RoleReport(role, endpoint, "", checks, "")
            checks["model"] = Check(OK, "not set")
            checks["embeddings"] = Check(WARN, "offline", f"{_why(exc, role)}; the offline embedder (hashed "
                                                          "character n-grams) stands in (docs/llm.md#embeddings)")
            return RoleReport(role, endpoint, "", checks, "")
    mode = ""
    if role == "embeddings":
        checks["embeddings"] = await probes.once(role, "embed", lambda: _embeddings(client, role))
    elif role in ("agent", "user"):  # plain chat; the agent's replies also call tools
        if role == "agent":
            checks["tools"] = await probes.once(role, "tools", lambda: _tools(client, role))
        else:
            checks["plays_user"] = await probes.once(role, "user", lambda: _plays_user(client, role, *probes.user))
        checks["long_prompt"] = await probes.once(role, "long", lambda: _long(client, role, probes.long_prompt))
    else:
        checks["json_schema"], found = await probes.once(role, "structured", lambda: _structured(client, role))
        pinned = cfg.structured_output or client.config.structured_output
        mode = found if pinned == "auto" else pinned
        checks["long_prompt"] = await probes.once(role, "long", lambda: _long(client, role, probes.long_prompt))
    return RoleReport(role, endpoint, model, checks, mode)


async def _models(client: LLMClient, role: str) -> list[str] | Check:
    try:
        return await client.models(role)
    except LLMError as exc:
        text = _why(exc, role)
        if "answered HTTP 404" in text:
            return Check(OK, "yes", "reachable; GET /models is not served")
        if "answered HTTP 401" in text or "answered HTTP 403" in text:
            return Check(FAIL, "key refused", f"{text}; check the key in {client.config.api_key_env}")
        return Check(FAIL, "no", text)


def _why(exc: BrewError, role: str) -> str:
    """An error without the role it was raised for: roles sharing an endpoint share the probe."""
    return str(exc).removeprefix(f"{role}: ")


def _listed(model: str, listed: list[str]) -> Check:
    # Ollama lists "llama3.1:latest" for a model asked for as "llama3.1"
    if model in listed or any(m.split(":")[0] == model for m in listed if m.endswith(":latest")):
        return Check(OK, "yes")
    shown = ", ".join(listed[:5]) + (" …" if len(listed) > 5 else "")
    return Check(WARN, "not listed", f"model {model!r} is not in the server's list ({shown or 'empty'}); "
                                     "calls fail if it is not served under another name")


async def _structured(client: LLMClient, role: str) -> tuple[Check, str]:
    """Tries the modes in order; the first whose reply validates is the mode."""
    notes = []
    user = [{"role": "user", "content": "What is six times seven? Reply as JSON with the key \"answer\"."}]
    for mode in MODES:
        base = client.request(role, user, schema=_SCHEMA, schema_name="answer")
        request = replace(base, messages=with_schema_prompt(base.messages, mode, _SCHEMA), structured=mode,
                          temperature=0.0, max_tokens=64)
        try:
            result = await client.chat(request)
        except FormatRejected as exc:
            notes.append(f"{mode} rejected ({str(exc).split('(', 1)[-1].rstrip(')')})")
            continue
        except LLMError as exc:
            return Check(FAIL, "error", _why(exc, role)), ""
        content = result.content if mode == "json_schema" else extract_json(result.content)
        try:
            valid = not validate(json.loads(content), _SCHEMA)
        except ValueError:
            valid = False
        if valid:
            if mode == "json_schema":
                return Check(OK, "yes"), mode
            return Check(WARN, f"no → {mode}", "; ".join(notes) + f"; {mode} works, the client falls back to it"), mode
        notes.append(f"{mode} accepted but the reply did not match the schema: {result.content[:80]!r}")
    return Check(FAIL, "no mode works", "; ".join(notes)), ""


async def _tools(client: LLMClient, role: str) -> Check:
    request = client.request(role, [{"role": "user", "content": "Call get_weather for Paris."}], tools=[_TOOL])
    try:
        result = await client.chat(replace(request, temperature=0.0, max_tokens=128))
    except LLMError as exc:
        return Check(FAIL, "rejected", f"{exc}; the tool-agent needs a server with tool calling "
                                       "(vLLM: --enable-auto-tool-choice --tool-call-parser …)")
    if not result.tool_calls:
        return Check(FAIL, "no call", f"the model answered without calling the tool: {result.content[:80]!r}")
    if result.from_text:
        return Check(WARN, "from text", "the model writes its tool calls in the reply's text, not as tool_calls; "
                                        "brewkb reads them from there (ledger mode text_tools); a server that "
                                        "parses them is more reliable where the model's template allows "
                                        "(llama-server --jinja; vLLM --enable-auto-tool-choice --tool-call-parser "
                                        "hermes)")
    return Check(OK, "yes")


_USER_PROMPT = ("You are a customer writing to a support agent, not the agent. Your request: you want to move "
                "your appointment from Monday to Friday afternoon. Write your next message to the agent, in "
                "your own words, one short message.")


async def _plays_user(client: LLMClient, role: str, prompt: str, greeting: str) -> Check:
    """Whether the model, prompted as a user simulator and greeted by an agent,
    states a request instead of greeting back as an assistant would."""
    messages = [{"role": "system", "content": prompt}, {"role": "user", "content": greeting}]
    request = client.request(role, messages)
    try:
        result = await client.chat(replace(request, temperature=0.0, max_tokens=128))
    except LLMError as exc:
        return Check(FAIL, "error", _why(exc, role))
    if not result.content.strip() or states_nothing(result.content):
        return Check(FAIL, "no", f"asked to play a user with a request, the model answered as an assistant "
                                 f"({result.content[:60]!r}): conversations with it go nowhere; give the user "
                                 "role a larger model (llm.roles.user.model)")
    return Check(OK, "yes")


async def _long(client: LLMClient, role: str, words: int) -> Check:
    """A prompt of about ``words`` words whose first line holds a code word:
    a server that cut it reports fewer prompt tokens than words (every English
    word is at least one token) or cannot repeat the code word."""
    word = random.Random(words).choice(_WORDS)
    filler = " ".join(_FILLER[i % len(_FILLER)] for i in range(words))
    text = (f"The code word is {word}.\n{filler}\n"
            "What is the code word given in the first line of this message? Reply with the code word only.")
    request = client.request(role, [{"role": "user", "content": text}])
    try:
        result = await client.chat(replace(request, temperature=0.0, max_tokens=16))
    except LLMError as exc:
        return Check(FAIL, "error", f"a prompt of {words} words failed: {exc}")
    sent = len(text.split())
    if 0 < result.tokens_in < 0.8 * sent:
        return Check(FAIL, "truncated", f"a prompt of {sent} words arrived as {result.tokens_in} tokens: the server "
                                        "cuts long prompts silently; raise its context (Ollama: num_ctx)")
    if word not in result.content.lower():
        return Check(WARN, "not recalled", f"the model did not repeat the code word from the start of a "
                                           f"{sent}-word prompt (answered {result.content[:40]!r})")
    return Check(OK, "whole")


async def _embeddings(client: LLMClient, role: str) -> Check:
    try:
        vectors = await client.embed(["doctor probe"], role)
    except LLMError as exc:
        return Check(FAIL, "error", _why(exc, role))
    if client.offline_embeddings:
        return Check(WARN, "offline", f"{_why(LLMError(client.offline_embeddings), role)}; the offline embedder "
                                      "(hashed character n-grams) stands in: concepts merge by spelling, not "
                                      "meaning (docs/llm.md#embeddings)")
    return Check(OK, f"{len(vectors[0])} dims")
