"""The embeddings half of ``LLMClient``: vectors through the cache, the
ledger and the budget, and the offline embedder in place of an endpoint that
has none.

An embeddings role has no endpoint when no model can be named for it (a base
URL is set, no model is configured and the server lists another number than
one) or when the server answers ``/embeddings`` with HTTP 404, 405 or 501
(llama.cpp's ``llama-server`` without ``--embeddings``): then every text is
embedded by the offline embedder (hashed character n-grams, one text at a
time), and a warning says so once per command.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from brewkb.config import LLMConfig, RoleConfig
from brewkb.errors import ConfigError, LLMError
from brewkb.llm.breaker import Breaker
from brewkb.llm.cache import ResponseCache
from brewkb.llm.embed import hashed_ngram_embeddings
from brewkb.llm.ledger import Ledger, LedgerEntry
from brewkb.llm.replies import short
from brewkb.llm.types import CallBudget, canonical_json

__all__ = ["EmbeddingCalls", "NoModel", "NoEmbeddings", "connection_failed", "root_cause"]

log = logging.getLogger(__name__)


class NoModel(ConfigError):
    """No model is configured for a role and its server does not serve exactly one."""


class NoEmbeddings(LLMError):
    """The embeddings role has no endpoint (HTTP 404/405/501)."""


class EmbeddingCalls:
    """Mixed into ``LLMClient``, whose attributes and methods these use."""

    config: LLMConfig
    cache: ResponseCache | None
    ledger: Ledger
    budget: CallBudget | None
    breaker: Breaker
    offline_embeddings: str
    """Why the offline embedder stands in for the embeddings role ("" while it does not)."""

    if TYPE_CHECKING:  # defined by LLMClient
        def role(self, name: str) -> RoleConfig: ...
        def endpoint(self, role: str) -> str: ...
        async def model_of(self, role: str) -> str: ...
        def _model_blocking(self, role: str) -> str: ...
        def _limit(self) -> Any: ...
        def _client(self, role: RoleConfig) -> Any: ...
        def _sync_client(self, role: RoleConfig) -> Any: ...

    async def embed(self, texts: Sequence[str], role: str = "embeddings") -> list[list[float]]:
        """Embedding vectors, each text cached on its own; the offline
        embedder's when the role has no endpoint (see ``_offline``)."""
        if self.offline_embeddings:
            return _offline(texts)
        try:
            model = await self.model_of(role)
        except NoModel as exc:
            return self._offline(texts, str(exc))
        keys, vectors, missing = self._cached_vectors(texts, role, model)
        if missing:
            try:
                async with self._limit():
                    with self._embedding_call(role, model, keys, vectors, missing) as reply:
                        client = self._client(self.role(role))
                        inputs = [texts[i] for i in missing]
                        try:  # once without the SDK's retries: a server without embeddings says so at once
                            reply.append(await client.with_options(max_retries=0).embeddings.create(
                                model=model, input=inputs))
                        except Exception as exc:
                            if _missing(exc):
                                raise
                            reply.append(await client.embeddings.create(model=model, input=inputs))
            except NoEmbeddings as exc:
                return self._offline(texts, str(exc))
        return [v for v in vectors if v is not None]

    def embed_blocking(self, texts: Sequence[str], role: str = "embeddings") -> list[list[float]]:
        """``embed`` for synchronous callers (retrieval inside an episode):
        a blocking request through the SDK's synchronous client, so it needs
        no event loop and never nests one; same cache, ledger and budget."""
        if self.offline_embeddings:
            return _offline(texts)
        try:
            model = self._model_blocking(role)
        except NoModel as exc:
            return self._offline(texts, str(exc))
        keys, vectors, missing = self._cached_vectors(texts, role, model)
        if missing:
            try:
                with self._embedding_call(role, model, keys, vectors, missing) as reply:
                    client = self._sync_client(self.role(role))
                    inputs = [texts[i] for i in missing]
                    try:  # as in ``embed``
                        reply.append(client.with_options(max_retries=0).embeddings.create(model=model, input=inputs))
                    except Exception as exc:
                        if _missing(exc):
                            raise
                        reply.append(client.embeddings.create(model=model, input=inputs))
            except NoEmbeddings as exc:
                return self._offline(texts, str(exc))
        return [v for v in vectors if v is not None]

    def _offline(self, texts: Sequence[str], why: str) -> list[list[float]]:
        """The offline embedder's vectors, in place of an embeddings endpoint
        there is none of; the first time, a warning says why."""
        if not self.offline_embeddings:
            self.offline_embeddings = why
            log.warning("%s; using the offline embedder (hashed character n-grams) instead; "
                        "docs/llm.md#embeddings says how to serve embeddings", why)
        return _offline(texts)

    def _cached_vectors(self, texts: Sequence[str], role: str,
                        model: str) -> tuple[list[str], list[list[float] | None], list[int]]:
        """Each text's cache key, the cached vectors (``None`` where there is
        none) and the indices of the texts still to embed."""
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
        return keys, vectors, [i for i, v in enumerate(vectors) if v is None]

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
                if connection_failed(openai, exc, time.perf_counter() - start, self.config.timeout):
                    self.breaker.failed(self.endpoint(role), role, short(root_cause(exc), 80))
                if _missing(exc):
                    raise NoEmbeddings(f"{role}: {self.endpoint(role)} has no embeddings endpoint (HTTP "
                                       f"{getattr(exc, 'status_code', '?')}: {short(str(exc), 120)})") from None
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


def _missing(exc: BaseException) -> bool:
    """Whether an SDK error says the server has no embeddings endpoint."""
    return getattr(exc, "status_code", None) in (404, 405, 501)


def _offline(texts: Sequence[str]) -> list[list[float]]:
    """The offline embedder one text at a time, so a text's vector never depends on its batch."""
    return [hashed_ngram_embeddings([t])[0].tolist() for t in texts]


def connection_failed(openai: Any, exc: Exception, elapsed: float, timeout: float) -> bool:
    """Whether an SDK error means the endpoint could not be reached. The
    aiohttp transport reports a connection the server closed unanswered as a
    timeout; one that came sooner than the timeout is not one."""
    return isinstance(exc, openai.APIConnectionError) and \
        (not isinstance(exc, openai.APITimeoutError) or elapsed < timeout)


def root_cause(exc: BaseException) -> str:
    """What the transport said below the SDK's "Connection error." (or its
    mislabelled "Request timed out.")."""
    while exc.__cause__ is not None or exc.__context__ is not None:
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return str(exc) or type(exc).__name__
