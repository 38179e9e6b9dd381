"""The proxy: requests in, the upstream's answers out, unchanged.

``POST /v1/chat/completions`` gets the recipes for its conversation and goes on
to the upstream with the caller's own headers (its ``Authorization`` too, which
is never stored or logged); the answer comes back as the upstream sent it —
status, headers, body — and a stream chunk by chunk as it arrives; a write
waits while the client is more than the socket's buffer (64 KB) behind, and the
next chunk is not read from the upstream meanwhile (so a slow client slows its
upstream connection, not the server's memory). Every other path goes on to
the upstream as it came. ``/v1/X`` (and any other ``/X``) is the upstream's ``BASE/X``.

Failures are answered in OpenAI's error shape: an upstream that cannot be
reached is a 502 naming it, one that stays silent past
``serve.read_timeout`` a 504; a stream that breaks after its first chunk ends
with an ``error`` event. A client that goes away cancels its upstream request.
At most ``serve.concurrency`` requests are forwarded at once; up to
``serve.queue`` more wait, and the next is answered 503.

A request body sent compressed (``Content-Encoding: gzip``) goes on
decompressed, without that header; one that does not decompress is a 400.
Every forwarded request names this server in ``X-Brewkb-Via``: a request that
comes back to it (an upstream that is the server itself, or another proxy
that sends it back) is answered 508 instead of going round again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import secrets
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web

from brewkb.api.serve import Served, Serving, inject
from brewkb.errors import TrajectoryError
from brewkb.serve.answers import Answer, Events, from_json
from brewkb.serve.conversations import HEADER, Conversations, Opened, valid_id
from brewkb.trajectories.tools import declared_in

__all__ = ["Proxy"]

log = logging.getLogger(__name__)

HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                        "trailers", "transfer-encoding", "upgrade", "host", "content-length"})
VIA = "X-Brewkb-Via"
NOT_FORWARDED = HOP_BY_HOP | {"accept-encoding", "content-encoding", HEADER.lower(), VIA.lower()}
NOT_RELAYED = HOP_BY_HOP
OWN_PATHS = {"status": "GET", "outcomes": "POST"}
"""The server's own paths under ``/v1/brewkb/`` and their method; nothing under it goes to the upstream."""
RECORD_BYTES = 4 * 2**20
"""An answer longer than this is relayed whole but not recorded."""


def error(status: int, message: str, kind: str, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.json_response({"error": {"message": message, "type": kind, "param": None, "code": kind}},
                             status=status, headers=headers)


class _Chat:
    """What the proxy keeps of a chat request to record its turn."""

    def __init__(self, opened: Opened, messages: list[Any], served: Served, tools: list[str]) -> None:
        self.opened, self.messages, self.served, self.tools = opened, messages, served, tools
        self.events = Events()
        self.size = 0
        self.dropped = False
        """Too long to record, or the client did not get it whole."""
        self.finished = False


class Proxy:
    def __init__(self, serving: Serving, upstream: str) -> None:
        config = serving.config.serve
        self.serving, self.config, self.base = serving, config, upstream.rstrip("/")
        parts = urlsplit(self.base)
        self.shown = parts._replace(netloc=parts.netloc.rsplit("@", 1)[-1]).geturl()
        """The upstream as messages name it (a user and password in its URL left out)."""
        self.conversations = Conversations(config.conversations)
        self.slots = asyncio.Semaphore(config.concurrency)
        self.waiting = self.in_flight = 0
        self.timeout = aiohttp.ClientTimeout(total=None, connect=config.connect_timeout,
                                             sock_read=config.read_timeout)
        self.session: aiohttp.ClientSession | None = None
        self.token = secrets.token_hex(8)
        """This server's name in ``X-Brewkb-Via``."""
        # hybrid retrieval may wait for an embeddings endpoint: one worker thread, never the event loop
        self.retriever = ThreadPoolExecutor(1, "brewkb-retrieval") if serving.waits else None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.config.max_request_mb * 2**20)
        app.router.add_get("/v1/brewkb/status", self.status)
        app.router.add_post("/v1/brewkb/outcomes", self.outcomes)
        app.router.add_route("*", "/v1/brewkb/{tail:.*}", self.own)
        app.router.add_route("*", "/{tail:.*}", self.any)
        app.on_startup.append(self._open)
        app.on_cleanup.append(self._close)
        return app

    async def _open(self, app: web.Application) -> None:
        connector = aiohttp.TCPConnector(limit=self.config.concurrency, limit_per_host=0, ttl_dns_cache=300)
        self.session = aiohttp.ClientSession(connector=connector, auto_decompress=False,
                                             skip_auto_headers=("Accept-Encoding",), timeout=self.timeout)

    async def _close(self, app: web.Application) -> None:
        if self.session is not None:
            await self.session.close()
        if self.retriever is not None:
            self.retriever.shutdown()

    async def status(self, request: web.Request) -> web.Response:
        return web.json_response({**self.serving.status(), "upstream": self.shown, "in_flight": self.in_flight,
                                  "waiting": self.waiting, "conversations_started": self.conversations.started})

    async def outcomes(self, request: web.Request) -> web.Response:
        raw = await self._body(request)
        if isinstance(raw, web.Response):
            return raw
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):
            return error(400, "the body must be JSON: {\"conversation_id\": ..., \"success\": true} or a list of them",
                         "invalid_request_error")
        rows = body if isinstance(body, list) else [body]
        checked = []
        for row in rows:
            problem = _outcome_problem(row)
            if problem:
                return error(400, problem, "invalid_request_error")
            score = row.get("score")
            checked.append((row["conversation_id"], row.get("success"), None if score is None else float(score)))
        await asyncio.to_thread(self.serving.outcomes, checked)
        return web.json_response({"recorded": len(checked)})

    async def own(self, request: web.Request) -> web.Response:
        """A path of the server's own with another method, or one it does not have: never the upstream's."""
        method = OWN_PATHS.get(request.match_info["tail"])
        if method is not None:
            return error(405, f"{request.rel_url.path} takes {method}", "method_not_allowed", {"Allow": method})
        return error(404, "brewkb serve's own paths are " + ", ".join(
            f"{m} /v1/brewkb/{p}" for p, m in OWN_PATHS.items()), "not_found")

    async def any(self, request: web.Request) -> web.StreamResponse:
        """A chat completion (``/v1/chat/completions``, or any path ending so, as Azure's
        ``/openai/deployments/NAME/chat/completions``) gets recipes; anything else goes through."""
        if request.method == "POST" and request.rel_url.path.endswith("/chat/completions"):
            return await self.chat(request)
        return await self.relay(request)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        raw = await self._body(request)
        if isinstance(raw, web.Response):
            return raw
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):
            body = None
        messages = body.get("messages") if isinstance(body, dict) else None
        if not isinstance(messages, list) or not messages:
            return await self.relay(request, raw)  # the upstream says what is wrong with it
        named = request.headers.get(HEADER)
        if named is not None and not valid_id(named):
            return error(400, f"{HEADER} must be 1-128 letters, digits or _ . : - (starting with a letter or digit)",
                         "invalid_request_error")
        self.serving.counts["chat"] += 1
        opened = self.conversations.open(messages, named)
        served = self.serving.given(messages) if self.retriever is None else \
            await asyncio.get_running_loop().run_in_executor(self.retriever, self.serving.given, messages)
        sent = inject(messages, served.block, self.config.placement)
        # a lone surrogate (a JSON escape such as \ud800) goes on written as the client wrote it
        data = raw if sent is messages else json.dumps({**body, "messages": sent},
                                                       ensure_ascii=False).encode("utf-8", "backslashreplace")
        headers = {HEADER: opened.id, "X-Brewkb-Revision": served.revision,
                   "X-Brewkb-Recipes": ",".join(served.recipes)}
        try:
            declared = declared_in(body.get("tools"))
        except TrajectoryError:  # the upstream answers such a request; what it offered the model is not known
            declared = []
        chat = _Chat(opened, messages, served, declared)
        return await self.forward(request, data, headers, chat)

    async def relay(self, request: web.Request, raw: bytes | None = None) -> web.StreamResponse:
        data = raw if raw is not None else await self._body(request)
        if isinstance(data, web.Response):
            return data
        return await self.forward(request, data, {}, None)

    async def _body(self, request: web.Request) -> bytes | web.Response:
        """The request's body (decompressed), or the error answer when the client
        did not send it whole in time or it does not decompress."""
        try:
            async with asyncio.timeout(self.config.body_timeout):
                return await request.read()
        except TimeoutError:
            return self._failed(408, f"the request's body did not arrive whole within "
                                     f"{self.config.body_timeout:g} s (serve.body_timeout)", "request_timeout")
        except web.HTTPRequestEntityTooLarge:
            return self._failed(413, f"the request's body is over {self.config.max_request_mb} MB "
                                     "(serve.max_request_mb)", "request_too_large")
        except web.RequestPayloadError as exc:
            return self._failed(400, f"the request's body could not be read: {str(exc).splitlines()[-1].strip()} "
                                     f"(Content-Encoding: {request.headers.get('Content-Encoding', 'none')})",
                                "invalid_request_error")

    async def forward(self, request: web.Request, data: bytes, extra: dict[str, str],
                      chat: _Chat | None) -> web.StreamResponse:
        self.serving.counts["requests"] += 1
        via = [name.strip() for name in request.headers.get(VIA, "").split(",") if name.strip()]
        if self.token in via:
            return self._failed(508, f"this request came back to brewkb serve through its upstream {self.shown}: "
                                     "the upstream leads back to this server (is --upstream the server's own URL, or "
                                     "OPENAI_BASE_URL already pointed at it?); give the model's endpoint as --upstream",
                                "loop_detected")
        extra_via = {VIA: ", ".join([*via[-7:], self.token])}
        if self.waiting >= self.config.queue and self.slots.locked():
            return error(503, f"brewkb serve is forwarding {self.config.concurrency} requests and "
                              f"{self.waiting} more wait (serve.concurrency, serve.queue); retry shortly",
                         "server_busy", {"Retry-After": "1"})
        self.waiting += 1
        try:
            await self.slots.acquire()
        finally:
            self.waiting -= 1
        self.in_flight += 1
        try:
            return await self._exchange(request, data, extra, chat, extra_via)
        finally:
            self.in_flight -= 1
            self.slots.release()

    async def _exchange(self, request: web.Request, data: bytes, extra: dict[str, str],
                        chat: _Chat | None, via: dict[str, str]) -> web.StreamResponse:
        assert self.session is not None
        path = request.rel_url.path
        if {".", ".."} & set(path.split("/")):  # the upstream would read them as a way out of its base path
            return error(400, f"{path} has . or .. segments; brewkb serve forwards only paths below the upstream's",
                         "invalid_request_error")
        tail = path[3:] if path == "/v1" or path.startswith("/v1/") else path
        url = self.base + tail + (f"?{request.rel_url.raw_query_string}" if request.rel_url.raw_query_string else "")
        headers = {**{k: v for k, v in request.headers.items() if k.lower() not in NOT_FORWARDED}, **via}
        try:
            upstream = await self.session.request(request.method, url, data=data or None, headers=headers,
                                                  allow_redirects=False)
        except (asyncio.TimeoutError, aiohttp.ServerTimeoutError):
            return self._failed(504, f"the upstream {self.shown} did not answer within "
                                     f"{self.config.read_timeout:g} s (serve.read_timeout)", "upstream_timeout")
        except aiohttp.ClientError as exc:
            return self._failed(502, f"brewkb serve could not reach the upstream {self.shown}: "
                                     f"{_reason(exc)}", "upstream_unreachable")
        try:
            return await self._answer(request, upstream, extra, chat)
        finally:
            if upstream.content.is_eof():
                upstream.release()
            else:  # the client went away, or the stream broke: the upstream's request is cancelled with it
                upstream.close()

    def _broken(self, exc: BaseException) -> tuple[int, str, str]:
        """Status, message and kind of an answer the upstream began and did not finish."""
        if isinstance(exc, asyncio.TimeoutError):
            return 504, (f"the upstream {self.shown} said nothing for {self.config.read_timeout:g} s "
                         "(serve.read_timeout)"), "upstream_timeout"
        return 502, f"the upstream {self.shown} broke off its answer: {_reason(exc)}", "upstream_error"

    def _failed(self, status: int, message: str, kind: str) -> web.Response:
        self.serving.counts["errors"] += 1
        log.warning("%s", message)
        return error(status, message, kind)

    async def _answer(self, request: web.Request, upstream: aiohttp.ClientResponse, extra: dict[str, str],
                      chat: _Chat | None) -> web.StreamResponse:
        headers = {k: v for k, v in upstream.headers.items() if k.lower() not in NOT_RELAYED}
        response = web.StreamResponse(status=upstream.status, reason=upstream.reason, headers={**headers, **extra})
        events = upstream.headers.get("content-type", "").startswith("text/event-stream")
        recording = chat if chat is not None and 200 <= upstream.status < 300 else None
        if recording is not None and not events:  # a whole answer: its state is noted before the client reads it
            try:
                body = await upstream.read()
            except (asyncio.TimeoutError, aiohttp.ClientError) as exc:
                return self._failed(*self._broken(exc))
            self._finish(recording, from_json(body))
            response.content_length = len(body)
            await response.prepare(request)
            await response.write(body)
            await response.write_eof()
            return response
        if upstream.content_length is not None and not events:
            response.content_length = upstream.content_length
        try:
            await response.prepare(request)
            while True:
                try:
                    chunk = await upstream.content.readany()
                except (asyncio.TimeoutError, aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError) as exc:
                    recording = None
                    status, message, kind = self._broken(exc)
                    self._failed(status, message, kind)
                    if events:
                        event = {"error": {"message": message, "type": kind}}
                        await response.write(b"data: " + json.dumps(event).encode() + b"\n\n")
                    break
                if not chunk:
                    break
                if recording is not None:
                    self._keep(recording, chunk)
                await response.write(chunk)
            if recording is not None:
                self._finish(recording, recording.events.answer())
            await response.write_eof()
        except ConnectionResetError:  # the client went away; its answer is not recorded (it never saw it whole)
            self.serving.counts["gone"] += 1
        return response

    def _keep(self, chat: _Chat, chunk: bytes) -> None:
        if chat.dropped or chat.finished:
            return
        if chat.size + len(chunk) > RECORD_BYTES:
            chat.dropped = True
            return
        chat.size += len(chunk)
        chat.events.feed(chunk)
        if chat.events.done:  # the client may send its next turn as soon as it reads this: note the state first
            self._finish(chat, chat.events.answer())

    def _finish(self, chat: _Chat, answer: Answer | None) -> None:
        if chat.finished or chat.dropped:
            return
        chat.finished = True
        if answer is None:
            self.serving.counts["unrecorded"] += 1  # an answer with no message to record
            return
        self.conversations.close(chat.opened, answer.message)
        self.serving.record(chat.opened.id, chat.opened.grouped_by, chat.messages, answer.message, chat.served,
                            answer.model, answer.usage, chat.tools)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, aiohttp.ClientConnectorError):
        return str(exc.os_error.strerror or exc.os_error) if exc.os_error else str(exc)
    return str(exc) or type(exc).__name__


def _outcome_problem(row: Any) -> str | None:
    if not isinstance(row, dict):
        return "an outcome is an object: {\"conversation_id\": ..., \"success\": true} (or \"score\": 0.5)"
    conversation = row.get("conversation_id")
    if not isinstance(conversation, str) or not valid_id(conversation):
        return "`conversation_id` must be the conversation's id (the X-Brewkb-Conversation header of its answers)"
    success, score = row.get("success"), row.get("score")
    if not isinstance(success, bool | None):
        return "`success` must be true or false"
    if score is not None and (isinstance(score, bool) or not isinstance(score, int | float)
                              or not math.isfinite(score)):
        return "`score` must be a finite number"
    if success is None and score is None:
        return "an outcome needs `success` (true/false) or `score` (a number)"
    return None
