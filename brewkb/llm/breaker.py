"""Stopping a command at an endpoint that cannot be reached, instead of
failing every item on it one by one.

An endpoint whose connections failed ``LIMIT`` times in a row (each after the
SDK's own retries), with no call answered in between, is down for the rest
of the command; so is one whose very first call of the command could not
connect (nothing suggests it will come up). The call that sees the failure
and every later call to that endpoint raise ``EndpointDown``. No stage turns that error into a failed
item, so the command stops with one message while what finished stays saved.
Timeouts do not count: a slow server is not a dead one.
"""

from __future__ import annotations

import threading

from brewkb.errors import EndpointDown

__all__ = ["Breaker", "LIMIT"]

LIMIT = 3


class Breaker:
    """Connection failures in a row per endpoint; safe to share between the
    command's loop and the worker threads of episodes."""

    def __init__(self, limit: int = LIMIT) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._failures: dict[str, int] = {}
        self._answered: set[str] = set()
        self._down: dict[str, str] = {}
        """Endpoint → what the stop says (each raise makes a fresh exception: tasks and threads share it)."""

    def __getstate__(self) -> dict[str, int]:
        # a Ray worker gets a breaker of its own (a lock does not pickle); the driver's counts stay with it
        return {"limit": self.limit}

    def __setstate__(self, state: dict[str, int]) -> None:
        self.__init__(state["limit"])  # type: ignore[misc]

    def check(self, endpoint: str) -> None:
        """Raise the endpoint's ``EndpointDown`` when it is down."""
        with self._lock:
            down = self._down.get(endpoint)
        if down is not None:
            raise EndpointDown(down)

    def answered(self, endpoint: str) -> None:
        with self._lock:
            self._failures[endpoint] = 0
            self._answered.add(endpoint)

    def failed(self, endpoint: str, role: str, detail: str) -> None:
        """Count one connection failure; raise ``EndpointDown`` at the ``limit``-th
        in a row, or at the first when the endpoint has not answered yet."""
        with self._lock:
            count = self._failures.get(endpoint, 0) + 1
            self._failures[endpoint] = count
            if (count >= self.limit or endpoint not in self._answered) and endpoint not in self._down:
                calls = f"{count} calls in a row could not connect" if endpoint in self._answered else \
                    "no call of this command could connect"
                self._down[endpoint] = (
                    f"{role}: cannot reach {endpoint}: {calls} ({detail}); "
                    "stopped without trying the remaining ones. Start the server, or point llm.base_url / "
                    "OPENAI_BASE_URL (or the role's base_url) at one that runs; `brewkb doctor` checks every role")
            down = self._down.get(endpoint)
        if down is not None:
            raise EndpointDown(down)
