"""The only code that imports ``openai``: chat and embeddings against any
OpenAI-compatible endpoint, through the cache and the ledger.

``openai`` is imported when the first client is made (it costs about 0.8 s),
so commands that never call a model never pay for it. Retries with backoff on
429, 5xx and timeouts, honouring ``retry-after``, are the SDK's own; a global
semaphore bounds the calls in flight; SDK exceptions become ``LLMError``.

Structured replies start as ``json_schema``; an endpoint that rejects it is
asked in the next mode of ``brewkb.llm.structured`` for the rest of the
process (``llm.structured_output`` pins one), and every ledger line says
which mode it used.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, NoReturn

from brewkb.config import LLMConfig, RoleConfig
from brewkb.errors import LLMError
from brewkb.llm.breaker import Breaker
from brewkb.llm.cache import ResponseCache
from brewkb.llm.ledger import Ledger, LedgerEntry
from brewkb.llm.replies import fault, json_of, mode_of, parse_completion, short
from brewkb.llm.structured import (
    is_format_rejection,
    next_mode,
    response_format,
    with_schema_prompt,
)
from brewkb.llm.types import CallBudget, ChatRequest, ChatResult, canonical_json

__all__ = ["LLMClient", "JSONReply", "FormatRejected", "OPENAI_API"]

OPENAI_API = "https://api.openai.com/v1"

log = logging.getLogger(__name__)


class FormatRejected(LLMError):
    """The endpoint refused the ``response_format`` of a structured request."""


@dataclass(frozen=True)
class JSONReply:
    """A structured reply: ``value`` when it matched the schema (after at most
    one repair), else ``error`` says why the item failed."""

    value: Any | None
    error: str | None
    calls: int
    mode: str = ""
    """The structured-output mode of the last call."""

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

    ``budget``, when set, is charged before every call that is not a cache
    hit and raises ``BudgetExhausted`` (not an ``LLMError``: no item fails)
    when nothing is left.
    """

    def __init__(self, config: LLMConfig, *, cache: ResponseCache | None = None,
                 ledger: Ledger | None = None, environ: Mapping[str, str] | None = None) -> None:
        self.config = config
        self.cache = cache
        self.ledger = ledger if ledger is not None else Ledger()
        self._environ = dict(os.environ if environ is None else environ)
        self._semaphore: asyncio.Semaphore | None = None
        self._clients: dict[str, Any] = {}
        self._sync_clients: dict[str, Any] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._modes: dict[tuple[str, str], str] = {}
        self.budget: CallBudget | None = None
        self.breaker = Breaker()  # an endpoint that keeps refusing connections stops the command

    # ------------------------------------------------------------- endpoints
    def role(self, name: str) -> RoleConfig:
        try:
            return getattr(self.config.roles, name)  # type: ignore[no-any-return]
        except AttributeError:
            raise LLMError(f"unknown LLM role {name!r}") from None

    def _base_url(self, role: RoleConfig) -> str | None:
        return role.base_url or self.config.base_url or self._environ.get("OPENAI_BASE_URL") or None

    def endpoint(self, role: str) -> str:
        """The base URL ``role`` calls: part of every cache key, so another
        server's answers are never replayed."""
        return (self._base_url(self.role(role)) or OPENAI_API).rstrip("/")

    def structured_mode(self, role: str, model: str) -> str:
        """The mode the next structured request of ``role`` is sent in."""
        cfg = self.role(role)
        pinned = cfg.structured_output or self.config.structured_output
        if pinned != "auto":
            return pinned
        return self._modes.get((self.endpoint(role), model), "json_schema")

    def _downgrade(self, request: ChatRequest, error: str) -> bool:
        """After ``request.structured`` was rejected: move the endpoint to the
        next mode; false when there is none or the mode is pinned."""
        cfg = self.role(request.role)
        if (cfg.structured_output or self.config.structured_output) != "auto":
            return False
        after = next_mode(request.structured)
        if after is None:
            return False
        key = (self.endpoint(request.role), request.model)
        if self._modes.get(key, "json_schema") == request.structured:
            self._modes[key] = after
            log.warning("%s; asking in %s mode from now on", error, after)
        return True

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

            self._clients[key] = openai.AsyncOpenAI(
                base_url=base_url, api_key=self._api_key(base_url), timeout=self.config.timeout,
                max_retries=self.config.max_retries, http_client=_http_client(openai),
            )
        return self._clients[key]

    def _api_key(self, base_url: str | None) -> str:
        api_key = self._environ.get(self.config.api_key_env)
        if api_key:
            return api_key
        if base_url is None:
            raise LLMError(
                f"no API key: set {self.config.api_key_env} (or llm.base_url for a local "
                "server that needs none), or use llm.backend = \"offline\""
            )
        return "unused"  # local servers (vLLM, Ollama, llama.cpp) accept any key

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
        blocking, self._sync_clients = list(self._sync_clients.values()), {}
        for sync in blocking:
            sync.close()

    def __getstate__(self) -> dict[str, Any]:
        # pickled to Ray workers: SDK clients and the semaphore belong to this
        # process's loop; the worker makes its own on first use
        # a budget is counted by the driver: calls made in a Ray worker are not charged to it
        return {**self.__dict__, "_clients": {}, "_sync_clients": {}, "_semaphore": None, "_loop": None, "budget": None}

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
        """One completion, from the cache when an identical request got a good
        reply before. A reply that is empty, or does not parse or match the
        request's schema, is returned but neither cached nor counted as good:
        the ledger records it as an error."""
        result, _ = await self._reply(request)
        return result

    async def _reply(self, request: ChatRequest) -> tuple[ChatResult, str | None]:
        """The reply and what is wrong with it (``None``: a good reply)."""
        key = request.cache_key(self.endpoint(request.role)) if self.cache is not None else ""
        if self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None:
                result = ChatResult.from_json(json.loads(hit), cached=True)
                if fault(result, request) is None:  # an earlier brewkb may have cached a bad one
                    self.ledger.record(LedgerEntry(request.role, request.model, result.tokens_in,
                                                   result.tokens_out, cached=True, mode=mode_of(request)))
                    return result, None
        self.breaker.check(self.endpoint(request.role))
        start = time.perf_counter()
        try:
            async with self._limit():
                if self.budget is not None:
                    self.budget.take_call()
                result = await self._call(request)
        except LLMError as exc:
            self.ledger.record(LedgerEntry(request.role, request.model, latency=time.perf_counter() - start,
                                           error=str(exc), mode=mode_of(request)))
            raise
        problem = fault(result, request)
        self.ledger.record(LedgerEntry(request.role, request.model, result.tokens_in, result.tokens_out,
                                       latency=time.perf_counter() - start, mode=mode_of(request),
                                       error=None if problem is None else f"invalid reply: {problem}"))
        if self.budget is not None:
            self.budget.add_cost(request.model, result.tokens_in, result.tokens_out)
        if problem is None and self.cache is not None:
            self.cache.put(key, "chat", canonical_json(result.to_json()), request.role)
        return result, problem

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
            fmt = response_format(request.structured, request.schema_name, request.schema)
            if fmt is not None:
                kwargs["response_format"] = fmt
        where = self._base_url(role) or "the OpenAI API"
        start = time.monotonic()
        try:
            # The SDK's generic `post` keeps its retries, backoff and errors but
            # skips per-call transformation of the request into typed models,
            # about a third of the client's CPU time per call.
            response = await self._client(role).post("/chat/completions", cast_to=object, body=kwargs)
        except openai.APITimeoutError as exc:
            if _connection_failed(openai, exc, time.monotonic() - start, self.config.timeout):
                self._unreachable(request.role, where, _root_cause(exc))
            raise LLMError(f"{request.role}: {where} timed out after {self.config.timeout:g} s "
                           f"({self.config.max_retries} retries); raise llm.timeout or check the server") from None
        except openai.APIStatusError as exc:
            detail = exc.body.get("message") if isinstance(exc.body, dict) else None
            text = str(detail or exc.message)
            if request.schema is not None and request.structured != "text" and \
                    is_format_rejection(exc.status_code, text):
                raise FormatRejected(f"{request.role}: {where} rejects response_format {request.structured} "
                                     f"(HTTP {exc.status_code}: {short(text, 160)})") from None
            raise LLMError(f"{request.role}: {where} answered HTTP {exc.status_code}: "
                           f"{short(str(detail or exc.message))}") from None
        except openai.APIConnectionError as exc:
            self._unreachable(request.role, where, _root_cause(exc))
        except openai.OpenAIError as exc:
            raise LLMError(f"{request.role}: {short(str(exc))}") from None
        except ValueError as exc:  # a body that is not JSON, cut or garbled
            raise LLMError(f"{request.role}: {where} sent an unreadable reply ({short(str(exc))})") from None
        self.breaker.answered(self.endpoint(request.role))
        return parse_completion(response, request, where)

    def _unreachable(self, role: str, where: str, detail: str) -> NoReturn:
        self.breaker.failed(self.endpoint(role), role, short(detail, 80))
        raise _cannot_reach(role, where, detail)

    async def complete_json(self, request: ChatRequest) -> JSONReply:
        """A reply that parses as JSON and matches ``request.schema``. On a bad
        reply one repair call shows the model its error; a second bad reply is
        a failed item (``JSONReply.error``), not an exception. Endpoint errors
        after retries are failed items too. An endpoint that rejects the
        structured-output mode is asked again in the next one."""
        schema = request.schema
        if schema is None:
            raise LLMError("complete_json needs a request with a schema")
        messages = list(request.messages)
        calls, repaired = 0, False
        while True:
            mode = self.structured_mode(request.role, request.model)
            asked = replace(request, messages=with_schema_prompt(messages, mode, schema), structured=mode)
            calls += 1
            try:
                result, problem = await self._reply(asked)
            except FormatRejected as exc:
                if self._downgrade(asked, str(exc)):
                    continue
                hint = ('; set llm.structured_output = "auto" to fall back' if mode != "text" else "")
                return JSONReply(None, f"{exc}{hint}", calls, mode)
            except LLMError as exc:
                return JSONReply(None, str(exc), calls, mode)
            if problem is None:
                return JSONReply(json.loads(json_of(result, mode)), None, calls, mode)
            if repaired:
                return JSONReply(None, f"{request.role}: {self.endpoint(request.role)} returned invalid JSON, "
                                       f"also after one repair ({problem})", calls, mode)
            repaired = True
            messages = messages + [
                {"role": "assistant", "content": result.content},
                {"role": "user", "content": f"That reply is not valid: {problem}. Reply again with only "
                                            "a JSON value that matches the schema."},
            ]

    async def models(self, role: str) -> list[str]:
        """The model ids the role's endpoint lists (``GET /models``)."""
        import openai

        cfg = self.role(role)
        where = self._base_url(cfg) or "the OpenAI API"
        try:
            page = await self._client(cfg).get("/models", cast_to=object)
        except openai.APIStatusError as exc:
            raise LLMError(f"{role}: {where} answered HTTP {exc.status_code} to GET /models") from None
        except openai.APIConnectionError as exc:
            raise _cannot_reach(role, where, str(exc)) from None
        except openai.OpenAIError as exc:
            raise LLMError(f"{role}: {short(str(exc))}") from None
        except ValueError as exc:
            raise LLMError(f"{role}: {where} sent an unreadable model list ({short(str(exc))})") from None
        data = page.get("data") if isinstance(page, dict) else None
        return [str(m.get("id")) for m in data or () if isinstance(m, dict)]

    # ------------------------------------------------------------ embeddings
    async def embed(self, texts: Sequence[str], role: str = "embeddings") -> list[list[float]]:
        """Embedding vectors, each text cached on its own."""
        model, keys, vectors, missing = self._cached_vectors(texts, role)
        if missing:
            async with self._limit():
                with self._embedding_call(role, model, keys, vectors, missing) as reply:
                    reply.append(await self._client(self.role(role)).embeddings.create(
                        model=model, input=[texts[i] for i in missing]))
        return [v for v in vectors if v is not None]

    def embed_blocking(self, texts: Sequence[str], role: str = "embeddings") -> list[list[float]]:
        """``embed`` for synchronous callers (retrieval inside an episode):
        a blocking request through the SDK's synchronous client, so it needs
        no event loop and never nests one; same cache, ledger and budget."""
        model, keys, vectors, missing = self._cached_vectors(texts, role)
        if missing:
            with self._embedding_call(role, model, keys, vectors, missing) as reply:
                reply.append(self._sync_client(self.role(role)).embeddings.create(
                    model=model, input=[texts[i] for i in missing]))
        return [v for v in vectors if v is not None]

    def _sync_client(self, role: RoleConfig) -> Any:
        import openai

        base_url = self._base_url(role)
        key = base_url or ""
        if key not in self._sync_clients:
            self._sync_clients[key] = openai.OpenAI(base_url=base_url, api_key=self._api_key(base_url),
                                                    timeout=self.config.timeout, max_retries=self.config.max_retries)
        return self._sync_clients[key]

    def _cached_vectors(self, texts: Sequence[str],
                        role: str) -> tuple[str, list[str], list[list[float] | None], list[int]]:
        """The role's model, each text's cache key, the cached vectors (``None``
        where there is none) and the indices of the texts still to embed."""
        cfg = self.role(role)
        model = cfg.model or self.config.model
        keys = [canonical_json({"endpoint": self.endpoint(role), "embedding_model": model, "input": t})
                for t in texts]
        vectors: list[list[float] | None] = [None] * len(texts)
        if self.cache is not None:
            for i, key in enumerate(keys):
                hit = self.cache.get(key)
                if hit is not None:
                    vectors[i] = json.loads(hit)
            if any(v is not None for v in vectors):
                self.ledger.record(LedgerEntry(role, model, cached=True, kind="embedding"))
        return model, keys, vectors, [i for i, v in enumerate(vectors) if v is None]

    @contextmanager
    def _embedding_call(self, role: str, model: str, keys: list[str], vectors: list[list[float] | None],
                        missing: list[int]) -> Iterator[list[Any]]:
        """Around one embeddings request for the ``missing`` texts: charge the
        budget, turn SDK errors and short replies into ``LLMError``, record the
        call in the ledger, and fill ``vectors`` (and the cache) from the reply
        the caller appends to the yielded list."""
        import openai

        self.breaker.check(self.endpoint(role))
        start = time.perf_counter()
        reply: list[Any] = []
        try:
            if self.budget is not None:
                self.budget.take_call()
            try:
                yield reply
            except openai.OpenAIError as exc:
                if _connection_failed(openai, exc, time.perf_counter() - start, self.config.timeout):
                    self.breaker.failed(self.endpoint(role), role, short(_root_cause(exc), 80))
                raise LLMError(f"{role}: embeddings failed at {self.endpoint(role)}: {short(str(exc))}") from None
            self.breaker.answered(self.endpoint(role))
            data = reply[0].data
            if len(data) != len(missing) or any(not d.embedding for d in data):
                raise LLMError(f"{role}: asked {self.endpoint(role)} for {len(missing)} embeddings, got "
                               f"{sum(bool(d.embedding) for d in data)}")
        except LLMError as exc:
            self.ledger.record(LedgerEntry(role, model, latency=time.perf_counter() - start, error=str(exc),
                                           kind="embedding"))
            raise
        response = reply[0]
        tokens = response.usage.prompt_tokens if response.usage else 0
        self.ledger.record(LedgerEntry(role, model, tokens_in=tokens, latency=time.perf_counter() - start,
                                       kind="embedding"))
        if self.budget is not None:
            self.budget.add_cost(model, tokens, 0)
        for i, item in zip(missing, sorted(response.data, key=lambda d: d.index), strict=True):
            vectors[i] = list(item.embedding)
            if self.cache is not None:
                self.cache.put(keys[i], "embedding", json.dumps(vectors[i]), role)


def _http_client(openai: Any) -> Any:
    """The SDK's aiohttp transport, faster than its default one with many
    requests in flight (``bench/llm_throughput.py``); ``None`` (the default
    one) when the SDK or aiohttp lacks it."""
    try:
        return openai.DefaultAioHttpClient()
    except (AttributeError, RuntimeError):  # an SDK before it, or installed without its aiohttp extra
        return None


def _connection_failed(openai: Any, exc: Exception, elapsed: float, timeout: float) -> bool:
    """Whether an SDK error means the endpoint could not be reached. The
    aiohttp transport reports a connection the server closed unanswered as a
    timeout; one that came sooner than the timeout is not one."""
    return isinstance(exc, openai.APIConnectionError) and \
        (not isinstance(exc, openai.APITimeoutError) or elapsed < timeout)


def _cannot_reach(role: str, where: str, detail: str) -> LLMError:
    return LLMError(f"{role}: cannot reach {where} ({short(detail)}); check llm.base_url / OPENAI_BASE_URL")


def _root_cause(exc: BaseException) -> str:
    """What the transport said below the SDK's "Connection error." (or its
    mislabelled "Request timed out.")."""
    while exc.__cause__ is not None or exc.__context__ is not None:
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return str(exc) or type(exc).__name__
