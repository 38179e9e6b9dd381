"""The only code that imports ``openai``: chat and embeddings against any
OpenAI-compatible endpoint, through the cache and the ledger.

``openai`` is imported when the first client is made (it costs about 0.8 s),
so commands that never call a model never pay for it. Retries with backoff on
429, 5xx and timeouts, honouring ``retry-after``, are the SDK's own; a global
semaphore bounds the calls in flight; SDK exceptions become ``LLMError``.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from brewkb.config import LLMConfig, RoleConfig
from brewkb.errors import LLMError
from brewkb.llm.cache import ResponseCache
from brewkb.llm.ledger import Ledger, LedgerEntry
from brewkb.llm.schema import validate
from brewkb.llm.types import ChatRequest, ChatResult, canonical_json

__all__ = ["LLMClient", "JSONReply"]


@dataclass(frozen=True)
class JSONReply:
    """A structured reply: ``value`` when it matched the schema (after at most
    one repair), else ``error`` says why the item failed."""

    value: Any | None
    error: str | None
    calls: int

    @property
    def ok(self) -> bool:
        return self.error is None


class LLMClient:
    """Calls one or more OpenAI-compatible endpoints on behalf of brewkb's roles.

    Args:
      config: the ``[llm]`` table.
      cache: the response cache, or ``None`` to call the endpoint every time.
      ledger: where each call is recorded (an in-memory one by default).
      environ: where ``OPENAI_BASE_URL`` and the key variable are read.
    """

    def __init__(self, config: LLMConfig, *, cache: ResponseCache | None = None,
                 ledger: Ledger | None = None, environ: Mapping[str, str] | None = None) -> None:
        self.config = config
        self.cache = cache
        self.ledger = ledger if ledger is not None else Ledger()
        self._environ = dict(os.environ if environ is None else environ)
        self._semaphore: asyncio.Semaphore | None = None
        self._clients: dict[str, Any] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    # ------------------------------------------------------------- endpoints
    def role(self, name: str) -> RoleConfig:
        try:
            return getattr(self.config.roles, name)  # type: ignore[no-any-return]
        except AttributeError:
            raise LLMError(f"unknown LLM role {name!r}") from None

    def _base_url(self, role: RoleConfig) -> str | None:
        return role.base_url or self.config.base_url or self._environ.get("OPENAI_BASE_URL") or None

    def _bind_loop(self) -> None:
        # SDK clients and semaphores belong to one event loop: the command's
        # (docs/pipeline.md). A client reused on a later loop, after aclose,
        # makes fresh ones.
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._loop = loop
            self._clients = {}
            self._semaphore = None

    def _client(self, role: RoleConfig) -> Any:
        self._bind_loop()
        base_url = self._base_url(role)
        key = base_url or ""
        if key not in self._clients:
            import openai

            api_key = self._environ.get(self.config.api_key_env)
            if not api_key:
                if base_url is None:
                    raise LLMError(
                        f"no API key: set {self.config.api_key_env} (or llm.base_url for a local "
                        "server that needs none), or use llm.backend = \"offline\""
                    )
                api_key = "unused"  # local servers (vLLM, Ollama, llama.cpp) accept any key
            self._clients[key] = openai.AsyncOpenAI(
                base_url=base_url, api_key=api_key, timeout=self.config.timeout,
                max_retries=self.config.max_retries,
            )
        return self._clients[key]

    def _limit(self) -> asyncio.Semaphore:
        self._bind_loop()
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self.config.concurrency)
        return self._semaphore

    async def aclose(self) -> None:
        """Close the SDK clients on the loop that made them; call it once, when
        the command (or a Ray worker's episodes) is done."""
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.close()

    def __getstate__(self) -> dict[str, Any]:
        # pickled to Ray workers: SDK clients and the semaphore belong to this
        # process's loop; the worker makes its own on first use
        return {**self.__dict__, "_clients": {}, "_semaphore": None, "_loop": None}

    # ------------------------------------------------------------------ chat
    def request(self, role: str, messages: Sequence[Mapping[str, Any]], *, tools: Sequence[Mapping[str, Any]] = (),
                schema: Mapping[str, Any] | None = None, schema_name: str = "reply",
                sample: int = 0) -> ChatRequest:
        """A request with the role's model, temperature and token limit."""
        cfg = self.role(role)
        return ChatRequest(role=role, messages=list(messages), model=cfg.model or self.config.model,
                           temperature=cfg.temperature, max_tokens=cfg.max_tokens, tools=list(tools),
                           schema=schema, schema_name=schema_name, seed=self.config.seed + sample,
                           sample=sample)

    async def chat(self, request: ChatRequest) -> ChatResult:
        """One completion, from the cache when an identical request was made."""
        key = request.cache_key()
        if self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None:
                result = ChatResult.from_json(json.loads(hit), cached=True)
                self.ledger.record(LedgerEntry(request.role, request.model, result.tokens_in,
                                               result.tokens_out, cached=True))
                return result
        start = time.perf_counter()
        try:
            async with self._limit():
                result = await self._call(request)
        except LLMError as exc:
            self.ledger.record(LedgerEntry(request.role, request.model, latency=time.perf_counter() - start,
                                           error=str(exc)))
            raise
        self.ledger.record(LedgerEntry(request.role, request.model, result.tokens_in, result.tokens_out,
                                       latency=time.perf_counter() - start))
        if self.cache is not None:
            self.cache.put(key, "chat", canonical_json(result.to_json()))
        return result

    async def _call(self, request: ChatRequest) -> ChatResult:
        import openai

        role = self.role(request.role)
        kwargs: dict[str, Any] = {
            "model": request.model, "messages": list(request.messages),
            "temperature": request.temperature, "max_tokens": request.max_tokens, "seed": request.seed,
        }
        if request.tools:
            kwargs["tools"] = list(request.tools)
        if request.schema is not None:
            kwargs["response_format"] = {"type": "json_schema", "json_schema": {
                "name": request.schema_name, "schema": dict(request.schema)}}
        where = self._base_url(role) or "the OpenAI API"
        try:
            # The SDK's generic `post` keeps its retries, backoff and errors but
            # skips per-call transformation of the request into typed models,
            # about a third of the client's CPU time per call.
            response = await self._client(role).post("/chat/completions", cast_to=object, body=kwargs)
        except openai.APITimeoutError:
            raise LLMError(f"{request.role}: {where} timed out after {self.config.timeout:g} s "
                           f"({self.config.max_retries} retries); raise llm.timeout or check the server") from None
        except openai.APIStatusError as exc:
            detail = exc.body.get("message") if isinstance(exc.body, dict) else None
            raise LLMError(f"{request.role}: {where} answered HTTP {exc.status_code}: "
                           f"{_short(str(detail or exc.message))}") from None
        except openai.APIConnectionError as exc:
            raise LLMError(f"{request.role}: cannot reach {where} ({_short(str(exc))}); "
                           "check llm.base_url / OPENAI_BASE_URL") from None
        except openai.OpenAIError as exc:
            raise LLMError(f"{request.role}: {_short(str(exc))}") from None
        except ValueError as exc:  # a body that is not JSON, cut or garbled
            raise LLMError(f"{request.role}: {where} sent an unreadable reply ({_short(str(exc))})") from None
        return _parse_completion(response, request, where)

    async def complete_json(self, request: ChatRequest) -> JSONReply:
        """A reply that parses as JSON and matches ``request.schema``. On a bad
        reply one repair call shows the model its error; a second bad reply is
        a failed item (``JSONReply.error``), not an exception. Endpoint errors
        after retries are failed items too."""
        if request.schema is None:
            raise LLMError("complete_json needs a request with a schema")
        messages = list(request.messages)
        for attempt in range(2):
            try:
                result = await self.chat(_with_messages(request, messages))
            except LLMError as exc:
                return JSONReply(None, str(exc), attempt + 1)
            problem = _check(result.content, request.schema)
            if problem is None:
                return JSONReply(json.loads(result.content), None, attempt + 1)
            messages = messages + [
                {"role": "assistant", "content": result.content},
                {"role": "user", "content": f"That reply is not valid: {problem}. Reply again with only "
                                            "a JSON value that matches the schema."},
            ]
        return JSONReply(None, f"{request.role}: invalid JSON after one repair: {problem}", 2)

    # ------------------------------------------------------------ embeddings
    async def embed(self, texts: Sequence[str], role: str = "embeddings") -> list[list[float]]:
        """Embedding vectors, each text cached on its own."""
        cfg = self.role(role)
        model = cfg.model or self.config.model
        keys = [canonical_json({"embedding_model": model, "input": t}) for t in texts]
        vectors: list[list[float] | None] = [None] * len(texts)
        if self.cache is not None:
            for i, key in enumerate(keys):
                hit = self.cache.get(key)
                if hit is not None:
                    vectors[i] = json.loads(hit)
            if any(v is not None for v in vectors):
                self.ledger.record(LedgerEntry(role, model, cached=True, kind="embedding"))
        missing = [i for i, v in enumerate(vectors) if v is None]
        if missing:
            import openai

            start = time.perf_counter()
            try:
                async with self._limit():
                    response = await self._client(cfg).embeddings.create(
                        model=model, input=[texts[i] for i in missing])
            except openai.OpenAIError as exc:
                self.ledger.record(LedgerEntry(role, model, error=str(exc), kind="embedding"))
                raise LLMError(f"{role}: embeddings failed: {_short(str(exc))}") from None
            data = sorted(response.data, key=lambda d: d.index)
            if len(data) != len(missing):
                raise LLMError(f"{role}: asked for {len(missing)} embeddings, got {len(data)}")
            tokens = response.usage.prompt_tokens if response.usage else 0
            self.ledger.record(LedgerEntry(role, model, tokens_in=tokens, latency=time.perf_counter() - start,
                                           kind="embedding"))
            for i, item in zip(missing, data, strict=True):
                vectors[i] = list(item.embedding)
                if self.cache is not None:
                    self.cache.put(keys[i], "embedding", json.dumps(vectors[i]))
        return [v for v in vectors if v is not None]


def _parse_completion(response: Any, request: ChatRequest, where: str) -> ChatResult:
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
                       f"{_short(json.dumps(response, default=str))}") from None
    usage = response.get("usage") or {}
    return ChatResult(content=message.get("content") or "", tool_calls=calls,
                      tokens_in=int(usage.get("prompt_tokens") or 0),
                      tokens_out=int(usage.get("completion_tokens") or 0),
                      model=response.get("model") or request.model, finish_reason=choice.get("finish_reason") or "")


def _with_messages(request: ChatRequest, messages: list[Mapping[str, Any]]) -> ChatRequest:
    return replace(request, messages=messages)


def _check(content: str, schema: Mapping[str, Any]) -> str | None:
    try:
        value = json.loads(content)
    except json.JSONDecodeError as exc:
        return f"it is not JSON ({exc.msg} at character {exc.pos})"
    errors = validate(value, schema)
    return "; ".join(errors[:5]) if errors else None


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
