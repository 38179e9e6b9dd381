"""The tool channel: an episode's tools served to an external agent (``command``,
``python``) over loopback HTTP with a per-episode token.

    GET  <url>/tools                      → {"tools": [OpenAI tool schemas]}
    POST <url>/call  {"name", "arguments"} → {"content": "<the tool's result text>"}

Every request carries ``Authorization: Bearer <token>``; others get 401. Calls
run one at a time against the episode's session and are recorded in order;
brewkb's record, not the agent's report, is what the trajectory holds and the
grader replays (``with_recorded_calls``).
"""

from __future__ import annotations

import hmac
import json
import secrets
import threading
from collections.abc import Callable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from brewkb.envs.base import Environment, Task, ToolSession
from brewkb.trajectories.schema import Trajectory

__all__ = ["ToolChannel", "serve_tools", "with_recorded_calls"]

MAX_BODY = 1_000_000


class _Server(ThreadingHTTPServer):
    daemon_threads = True


class ToolChannel:
    """A context manager serving ``session`` on 127.0.0.1 for one episode."""

    def __init__(self, session: ToolSession, tools: Sequence[Mapping[str, Any]]) -> None:
        self.session, self.tools = session, [dict(t) for t in tools]
        self.token = secrets.token_urlsafe(24)
        self.calls: list[tuple[str, dict[str, Any], str]] = []
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def describe(self) -> dict[str, str]:
        """What the agent is told: the endpoint and its token."""
        return {"url": self.url, "token": self.token}

    def __enter__(self) -> ToolChannel:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        with self._lock:
            content = self.session.call(name, arguments)
            self.calls.append((name, arguments, content))
            return content

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        channel = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _authorised(self) -> bool:
                given = self.headers.get("Authorization", "").removeprefix("Bearer ").strip()
                if hmac.compare_digest(given.encode(), channel.token.encode()):
                    return True
                self._send(401, {"error": "missing or wrong token: send Authorization: Bearer <token>"})
                return False

            def do_GET(self) -> None:
                if not self._authorised():
                    return
                if self.path.rstrip("/") == "/tools":
                    self._send(200, {"tools": channel.tools})
                else:
                    self._send(404, {"error": "use GET /tools or POST /call"})

            def do_POST(self) -> None:
                if not self._authorised():
                    return
                if self.path.rstrip("/") != "/call":
                    self._send(404, {"error": "use GET /tools or POST /call"})
                    return
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(min(length, MAX_BODY)) or b"null")
                except json.JSONDecodeError:
                    body = None
                if not isinstance(body, dict) or not isinstance(body.get("name"), str) or \
                        not isinstance(body.get("arguments", {}), dict):
                    self._send(400, {"error": 'send {"name": "<tool>", "arguments": {...}}'})
                    return
                self._send(200, {"content": channel._call(body["name"], dict(body.get("arguments") or {}))})

        return Handler


def with_recorded_calls(messages: Sequence[Mapping[str, Any]],
                        calls: Sequence[tuple[str, Mapping[str, Any], str]]) -> list[dict[str, Any]]:
    """The agent's messages with its tool traffic replaced by the channel's record:
    the recorded calls go, in order, before the agent's last reply."""
    kept = [dict(m) for m in messages if m.get("role") != "tool" and not m.get("tool_calls")]
    pairs: list[dict[str, Any]] = []
    for n, (name, arguments, content) in enumerate(calls):
        call_id = f"channel_{n}"
        pairs.append({"role": "assistant", "content": None, "tool_calls": [{
            "id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments, sort_keys=True)}}]})
        pairs.append({"role": "tool", "tool_call_id": call_id, "name": name, "content": content})
    last = len(kept) - 1 if kept and kept[-1].get("role") == "assistant" else len(kept)
    return kept[:last] + pairs + kept[last:]


def serve_tools(env: Environment, task: Task, data: dict[str, Any],
                run: Callable[[Task, dict[str, Any]], Trajectory]) -> Trajectory:
    """Run an external agent's episode with the environment's tools on a channel
    (``data`` gains ``tools`` and ``tool_channel``). When the agent called tools
    through it, the trajectory holds the channel's record of them."""
    try:
        tools = env.tools()
    except NotImplementedError:
        tools = []
    if not tools:
        return run(task, data)
    with ToolChannel(env.session(task), tools) as channel:
        trajectory = run(task, {**data, "tools": tools, "tool_channel": channel.describe()})
    if not channel.calls:
        return trajectory
    return trajectory.derived(messages=tuple(with_recorded_calls(trajectory.messages, channel.calls)),
                            meta={**trajectory.meta, "tool_channel_calls": len(channel.calls)})
