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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, NoReturn

from brewkb.config import LLMConfig, RoleConfig
from brewkb.errors import LLMError
from brewkb.llm.breaker import Breaker
from brewkb.llm.cache import ResponseCache
from brewkb.llm.embedding_calls import EmbeddingCalls, NoModel, connection_failed, root_cause
from brewkb.llm.ledger import Ledger, LedgerEntry
from brewkb.llm.replies import Check, json_of, mode_of, parse_completion, settle, short, shown
from brewkb.llm.structured import (
    is_format_rejection,
    next_mode,
    response_format,
    with_schema_prompt,
)
from brewkb.llm.types import CallBudget, ChatRequest, ChatResult, canonical_json

__all__ = ["LLMClient", "JSONReply", "FormatRejected", "NoModel", "OPENAI_API", "OPENAI_MODEL", "OPENAI_EMBEDDINGS_MODEL"]

OPENAI_API = "https://api.openai.com/v1"
OPENAI_MODEL = "gpt-4o-mini"
"""The chat model on the OpenAI API when none is configured (never assumed for another server)."""
OPENAI_EMBEDDINGS_MODEL = "text-embedding-3-small"

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


class LLMClient(EmbeddingCalls):
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
        self._served: dict[str, list[str]] = {}  # endpoint → the models its GET /models lists
        self.offline_embeddings = ""
        """Why the offline embedder stands in for the embeddings role ("" while it does not)."""

    # ------------------------------------------------------------- endpoints
    def role(self, name: str) -> RoleConfig:
        try:
            cfg: RoleConfig = getattr(self.config.roles, name)
        except AttributeError:
            raise LLMError(f"unknown LLM role {name!r}") from None
        if name == "embeddings" and not cfg.base_url and self._environ.get("OPENAI_EMBEDDINGS_BASE_URL"):
            cfg = replace(cfg, base_url=self._environ["OPENAI_EMBEDDINGS_BASE_URL"])
        return cfg

    # ---------------------------------------------------------------- models
    def given_model(self, role: str) -> str:
        """The model configured for ``role``: its own, else ``llm.model`` (not
        for embeddings), else ``$OPENAI_MODEL`` (``$OPENAI_EMBEDDINGS_MODEL``),
        else on the OpenAI API its small default; "" when only the server can
        tell (a base URL is set and no model is named)."""
        cfg = self.role(role)
        if cfg.model:
            return cfg.model
        if role == "embeddings":
            named = self._environ.get("OPENAI_EMBEDDINGS_MODEL", "")
            default = OPENAI_EMBEDDINGS_MODEL
        else:
            named = self.config.model or self._environ.get("OPENAI_MODEL", "")
            default = OPENAI_MODEL
        return named or ("" if self._base_url(cfg) else default)

    async def model_of(self, role: str) -> str:
        """The model ``role`` calls: the configured one, else the one model its
        server lists under ``GET /models``; ``NoModel`` when it lists another
        number of them."""
        given = self.given_model(role)
        if given:
            return given
        endpoint = self.endpoint(role)
        if endpoint not in self._served:
            try:
                self._served[endpoint] = await self.models(role)
            except LLMError as exc:
                self._served[endpoint] = self._listed_before(endpoint, exc)
            self._remember(endpoint)
        return self._one_served(role, self._served[endpoint])

    def _model_blocking(self, role: str) -> str:
        """``model_of`` for synchronous callers (a blocking ``GET /models``)."""
        given = self.given_model(role)
        if given:
            return given
        endpoint = self.endpoint(role)
        if endpoint not in self._served:
            import openai

            try:
                page = self._sync_client(self.role(role)).get("/models", cast_to=object)
                data = page.get("data") if isinstance(page, dict) else None
                self._served[endpoint] = [str(m.get("id")) for m in data or () if isinstance(m, dict)]
            except openai.APIStatusError as exc:
                self._served[endpoint] = self._listed_before(endpoint, LLMError(f"answered HTTP {exc.status_code}"))
            except (openai.OpenAIError, ValueError) as exc:
                self._served[endpoint] = self._listed_before(endpoint, LLMError(
                    f"{role}: cannot list the models of {endpoint} ({short(str(exc))})"))
            self._remember(endpoint)
        return self._one_served(role, self._served[endpoint])

    def _listed_before(self, endpoint: str, exc: LLMError) -> list[str]:
        """After ``GET /models`` failed: none for a server that does not serve
        the list; for one that cannot be reached, the list the cache kept
        (so a warm cache replays with the server down), else ``exc``."""
        if "answered HTTP" in str(exc):
            return []
        kept = self.cache.get(_models_key(endpoint)) if self.cache is not None else None
        if kept is None:
            raise exc
        return list(json.loads(kept))

    def _remember(self, endpoint: str) -> None:
        if self.cache is not None and self._served[endpoint]:
            self.cache.put(_models_key(endpoint), "models", json.dumps(self._served[endpoint]))

    def _one_served(self, role: str, served: list[str]) -> str:
        if len(served) == 1:
            return served[0]
        listed = f"serves {len(served)} models ({', '.join(served[:5])})" if served else "lists no model"
        setting = ("llm.roles.embeddings.model (or OPENAI_EMBEDDINGS_MODEL)" if role == "embeddings"
                   else "llm.model (or OPENAI_MODEL)")
        raise NoModel(f"{role}: no model is configured and {self.endpoint(role)} {listed}; set {setting}")

    async def check_models(self) -> None:
        """Refuse now, before any call, a chat role whose model cannot be
        named (``NoModel``); a server that cannot be reached is left to the
        first call, which says so."""
        for role in ("agent", "user", "reflector", "integrator", "relabeller", "judge"):
            if not self.given_model(role):
                try:
                    await self.model_of(role)
                except NoModel:
                    raise
                except LLMError:
                    return

    async def _with_model(self, request: ChatRequest) -> ChatRequest:
        return request if request.model else replace(request, model=await self.model_of(request.role))

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
        return ChatRequest(role=role, messages=list(messages), model=self.given_model(role),
                           temperature=cfg.temperature, max_tokens=cfg.max_tokens, tools=list(tools),
                           schema=schema, schema_name=schema_name, seed=self.config.seed + sample,
                           sample=sample)

    async def chat(self, request: ChatRequest) -> ChatResult:
        """One completion, from the cache when an identical request got a good
        reply before. A reply that is empty, or does not parse or match the
        request's schema, is returned but neither cached nor counted as good:
        the ledger records it as an error. Tool calls written in the reply's
        text are recovered as calls (``ChatResult.from_text``)."""
        result, _ = await self.reply(request)
        return result

    async def reply(self, request: ChatRequest, check: Check | None = None) -> tuple[ChatResult, str | None]:
        """The reply and what is wrong with it (``None``: a good reply);
        ``check`` adds content rules to a structured reply's schema. Only good
        replies are cached; a bad one is kept in the invalid-replies file
        beside the ledger, with its role, item and why."""
        request = await self._with_model(request)
        key = request.cache_key(self.endpoint(request.role)) if self.cache is not None else ""
        if self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None:
                result, problem = settle(ChatResult.from_json(json.loads(hit), cached=True), request, check)
                if problem is None:  # an earlier brewkb, or a rule since added, may find a cached one bad
                    self.ledger.record(LedgerEntry(request.role, request.model, result.tokens_in,
                                                   result.tokens_out, cached=True, mode=mode_of(request, result)))
                    return result, None
        self.breaker.check(self.endpoint(request.role))
        start = time.perf_counter()
        try:
            async with self._limit():
                if self.budget is not None:
                    self.budget.take_call()
                raw = await self._call(request)
        except LLMError as exc:
            self.ledger.record(LedgerEntry(request.role, request.model, latency=time.perf_counter() - start,
                                           error=str(exc), mode=mode_of(request)))
            raise
        result, problem = settle(raw, request, check)
        self.ledger.record(LedgerEntry(request.role, request.model, result.tokens_in, result.tokens_out,
                                       latency=time.perf_counter() - start, mode=mode_of(request, result),
                                       error=None if problem is None else f"invalid reply: {problem}"))
        if self.budget is not None:
            self.budget.add_cost(request.model, result.tokens_in, result.tokens_out)
        if problem is None and self.cache is not None:
            self.cache.put(key, "chat", canonical_json(raw.to_json()), request.role)
        if problem is not None:
            self.ledger.reject(request.role, request.model, problem, shown(raw), mode_of(request))
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
            if connection_failed(openai, exc, time.monotonic() - start, self.config.timeout):
                self._unreachable(request.role, where, root_cause(exc))
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
            self._unreachable(request.role, where, root_cause(exc))
        except openai.OpenAIError as exc:
            raise LLMError(f"{request.role}: {short(str(exc))}") from None
        except ValueError as exc:  # a body that is not JSON, cut or garbled
            raise LLMError(f"{request.role}: {where} sent an unreadable reply ({short(str(exc))})") from None
        self.breaker.answered(self.endpoint(request.role))
        return parse_completion(response, request, where)

    def _unreachable(self, role: str, where: str, detail: str) -> NoReturn:
        self.breaker.failed(self.endpoint(role), role, short(detail, 80))
        raise _cannot_reach(role, where, detail)

    async def complete_json(self, request: ChatRequest, check: Check | None = None) -> JSONReply:
        """A reply that parses as JSON, matches ``request.schema`` and passes
        ``check`` (the role's content rules). On a bad reply one repair call
        shows the model its error; a second bad reply is a failed item
        (``JSONReply.error``), not an exception, and neither is cached. Endpoint
        errors after retries are failed items too. An endpoint that rejects the
        structured-output mode is asked again in the next one."""
        schema = request.schema
        if schema is None:
            raise LLMError("complete_json needs a request with a schema")
        request = await self._with_model(request)
        messages = list(request.messages)
        calls, repaired = 0, False
        while True:
            mode = self.structured_mode(request.role, request.model)
            asked = replace(request, messages=with_schema_prompt(messages, mode, schema), structured=mode)
            calls += 1
            try:
                result, problem = await self.reply(asked, check)
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
                kept = self.ledger.rejects
                where = f"; its replies are kept in {kept}" if kept is not None else ""
                return JSONReply(None, f"{request.role}: {self.endpoint(request.role)} returned an invalid reply, "
                                       f"also after one repair ({problem}){where}", calls, mode)
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
            raise _cannot_reach(role, where, root_cause(exc)) from None
        except openai.OpenAIError as exc:
            raise LLMError(f"{role}: {short(str(exc))}") from None
        except ValueError as exc:
            raise LLMError(f"{role}: {where} sent an unreadable model list ({short(str(exc))})") from None
        data = page.get("data") if isinstance(page, dict) else None
        return [str(m.get("id")) for m in data or () if isinstance(m, dict)]

    def _sync_client(self, role: RoleConfig) -> Any:
        import openai

        base_url = self._base_url(role)
        key = base_url or ""
        if key not in self._sync_clients:
            self._sync_clients[key] = openai.OpenAI(base_url=base_url, api_key=self._api_key(base_url),
                                                    timeout=self.config.timeout, max_retries=self.config.max_retries)
        return self._sync_clients[key]


def _http_client(openai: Any) -> Any:
    """The SDK's aiohttp transport, faster than its default one with many
    requests in flight (``bench/llm_throughput.py``); ``None`` (the default
    one) when the SDK or aiohttp lacks it."""
    try:
        return openai.DefaultAioHttpClient()
    except (AttributeError, RuntimeError):  # an SDK before it, or installed without its aiohttp extra
        return None


def _models_key(endpoint: str) -> str:
    return canonical_json({"endpoint": endpoint, "models": True})


def _cannot_reach(role: str, where: str, detail: str) -> LLMError:
    return LLMError(f"{role}: cannot reach {where} ({short(detail)}); check llm.base_url / OPENAI_BASE_URL")
