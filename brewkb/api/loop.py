"""The one owner of the event loop: each API command runs its coroutine here.

Everything below ``brewkb.api`` is ``async`` or runs in worker threads and
never starts a loop of its own, so an LLM agent, the stages, the search and
the executors share this loop, and the LLM client is closed once on it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from brewkb.errors import BrewError

__all__ = ["run_command"]

T = TypeVar("T")


def run_command(main: Coroutine[Any, Any, T]) -> T:
    """Run one command's coroutine on a new event loop, closed when it returns."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main)
    main.close()
    raise BrewError("brewkb's API functions run their own event loop and cannot be called from a running one "
                    "(a notebook, an async app); call them in a thread: `await asyncio.to_thread(...)`")
