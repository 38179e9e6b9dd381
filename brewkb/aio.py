"""asyncio helpers shared by the stages and the search."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from typing import Any

__all__ = ["gather_all"]


async def gather_all(work: Iterable[Awaitable[Any]]) -> list[Any]:
    """``asyncio.gather`` that lets every awaitable finish before raising the
    first exception, so no sibling is left running unawaited when one fails
    (a budget that runs out stops all of them at their next call, and the
    items that finished are saved)."""
    results = await asyncio.gather(*work, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results
