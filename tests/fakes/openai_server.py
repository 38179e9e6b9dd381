"""A fake OpenAI-compatible server on 127.0.0.1, for tests and benchmarks.

It answers ``/v1/chat/completions`` and ``/v1/embeddings`` from a script of
replies, counts every request, and injects faults on request:

    {"content": "text"}                            a normal reply
    {"tool_calls": [{"name": "f", "arguments": {...}}]}
    {"status": 429, "headers": {"retry-after": "0"}}   an error status
    {"delay": 3.0, ...}                            wait before answering (timeouts)
    {"raw": "{\"choices\": [ {"}                  a truncated or invalid body
    {"choices": []}                                no choices
    {"drop": True}                                 close the connection without answering (a dead server)

    {"content": "x", "prompt_tokens": 2048}        the usage the reply reports

A request with ``"stream": true`` is answered with server-sent events as the
OpenAI API sends them: a role chunk, the text a word at a time, each tool
call's name and then its arguments in pieces, the finish reason, the usage
(with ``stream_options.include_usage``) and ``[DONE]``;
``{"chunk_delay": 0.2, ...}`` waits between chunks. ``headers`` holds each
request's headers, ``disconnects`` counts streams whose client went away.

A callable in the script gets the request body and returns one of these.
When the script is empty, ``default`` answers (``{"content": "ok"}``).
``embed`` (texts → vectors) answers ``/v1/embeddings`` instead of hashed
bytes; ``tests/fakes/roles.py`` plays every brewkb role.
``GET /v1/models`` lists ``models`` (404 when it is ``None``). With
``embeddings=False`` the server has no embeddings endpoint and answers it with
HTTP 501, as llama.cpp's ``llama-server`` started without ``--embeddings``.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # the default backlog of 5 resets bursts of connections


def _words(value: Any) -> int:
    return len(json.dumps(value).split())


class FakeOpenAI:
    def __init__(self, latency: float = 0.0, default: Reply | None = None,
                 embed: Callable[[list[str]], list[list[float]]] | None = None,
                 models: Sequence[str] | None = ("fake",), embeddings: bool = True) -> None:
        self.latency = latency
        self.embeddings = embeddings
        self.models = None if models is None else list(models)
        self.default: Reply = default or {"content": "ok"}
        self.embed = embed
        self.script: deque[Reply] = deque()
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.headers: list[dict[str, str]] = []
        self.disconnects = 0
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    @property
    def count(self) -> int:
        return len(self.requests)

    def reply(self, *replies: Reply) -> FakeOpenAI:
        self.script.extend(replies)
        return self

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _next(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            reply = self.script.popleft() if self.script else self.default
        return reply(body) if callable(reply) else reply

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # else every request stalls ~45 ms

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                path = self.path.split("?")[0]
                with fake._lock:
                    fake.requests.append((path, {}))
                    fake.headers.append(dict(self.headers.items()))
                if path.endswith("/models") and fake.models is not None:
                    self._send(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in fake.models]})
                else:
                    self._send(404, {"error": {"message": f"no route {path}"}})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                path = self.path.split("?")[0]
                with fake._lock:
                    fake.requests.append((path, body))
                    fake.headers.append(dict(self.headers.items()))
                if fake.latency:
                    time.sleep(fake.latency)
                if path.endswith("/embeddings"):
                    if not fake.embeddings:
                        self._send(501, {"error": {"code": 501, "type": "not_supported_error", "message":
                                                   "This server does not support embeddings. Start it with "
                                                   "`--embeddings`"}})
                        return
                    self._send(200, _embeddings(body, fake.embed))
                    return
                if not path.endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {path}"}})
                    return
                spec = fake._next(body)
                if spec.get("drop"):  # the client sees a connection error, as from a server that went away
                    self.close_connection = True
                    return
                if spec.get("delay"):
                    time.sleep(spec["delay"])
                if "raw" in spec:
                    self._send(spec.get("status", 200), spec["raw"])
                elif spec.get("status", 200) != 200:
                    self._send(spec["status"], {"error": {"message": spec.get("message", "injected fault"),
                                                          "type": "fake"}}, spec.get("headers"))
                elif body.get("stream"):
                    self._stream(_events(body, spec), spec.get("chunk_delay", 0.0))
                else:
                    self._send(200, _completion(body, spec))

            def _stream(self, events: list[bytes], delay: float) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                try:
                    for event in events:
                        if delay:
                            time.sleep(delay)
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    with fake._lock:
                        fake.disconnects += 1
                    self.close_connection = True

            def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
                data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        return Handler


def _completion(body: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    if "choices" in spec:
        choices = spec["choices"]
    else:
        message: dict[str, Any] = {"role": "assistant", "content": spec.get("content")}
        if spec.get("tool_calls"):
            message["tool_calls"] = [
                {"id": c.get("id", f"call_{i}"), "type": "function",
                 "function": {"name": c["name"], "arguments": c["arguments"] if isinstance(c["arguments"], str)
                              else json.dumps(c["arguments"])}}
                for i, c in enumerate(spec["tool_calls"])
            ]
        choices = [{"index": 0, "message": message,
                    "finish_reason": "tool_calls" if spec.get("tool_calls") else "stop"}]
    content = spec.get("content") or ""
    prompt_tokens = spec.get("prompt_tokens", _words(body.get("messages")))
    return {
        "id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": body.get("model", "fake"),
        "choices": choices,
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": len(content.split()),
                  "total_tokens": prompt_tokens + len(content.split())},
    }


def _events(body: dict[str, Any], spec: dict[str, Any]) -> list[bytes]:
    """The server-sent events of a streamed answer to ``body``."""
    whole = _completion(body, spec)
    message = whole["choices"][0]["message"] if whole["choices"] else {}
    head = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0, "model": whole["model"]}
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    text = message.get("content") or ""
    deltas += [{"content": piece} for piece in re.findall(r"\S+\s*|\s+", text)]
    for index, call in enumerate(message.get("tool_calls") or []):
        deltas.append({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                       "function": {"name": call["function"]["name"], "arguments": ""}}]})
        arguments = call["function"]["arguments"]
        cut = len(arguments) // 2
        deltas += [{"tool_calls": [{"index": index, "function": {"arguments": part}}]}
                   for part in (arguments[:cut], arguments[cut:]) if part]
    chunks = [{**head, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
    finish = whole["choices"][0]["finish_reason"] if whole["choices"] else "stop"
    chunks.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    if (body.get("stream_options") or {}).get("include_usage"):
        chunks.append({**head, "choices": [], "usage": whole["usage"]})
    return [b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks] + [b"data: [DONE]\n\n"]


def _embeddings(body: dict[str, Any], embed: Callable[[list[str]], list[list[float]]] | None) -> dict[str, Any]:
    inputs = body.get("input")
    inputs = [inputs] if isinstance(inputs, str) else inputs
    vectors = embed([str(t) for t in inputs]) if embed is not None else [
        [b / 255 for b in hashlib.sha256(str(t).encode()).digest()[:16]] for t in inputs]
    data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
    return {"object": "list", "data": data, "model": body.get("model", "fake"),
            "usage": {"prompt_tokens": sum(len(str(t).split()) for t in inputs), "total_tokens": 0}}


def main() -> None:
    """Run the server on its own (``python -m tests.fakes.openai_server``), so a
    benchmark's client does not share a process with it. Prints the base URL."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(description="fake OpenAI-compatible server on 127.0.0.1")
    parser.add_argument("--latency", type=float, default=0.0)
    args = parser.parse_args()
    with FakeOpenAI(latency=args.latency) as fake:
        print(fake.base_url, flush=True)
        sys.stdin.read()  # until the parent closes our stdin


if __name__ == "__main__":
    main()
