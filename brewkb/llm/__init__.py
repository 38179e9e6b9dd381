"""The LLM layer: an OpenAI-compatible client with cache, ledger and limits,
the LLM-played roles, and the offline backend that plays them by rules.

Nothing here imports ``openai`` until a client makes its first call. It may
import config, recipes and trajectories; the endpoint is reached only through
``client``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from brewkb.config import LLMConfig
from brewkb.llm.roles import Backend, load_backend

__all__ = ["open_backend", "cache_path"]

CACHE_FILE = "llm-cache.sqlite"


def cache_path(cache_dir: Path) -> Path:
    return cache_dir / CACHE_FILE


def open_backend(config: LLMConfig, *, cache_dir: Path, ledger_path: Path | None = None,
                 no_cache: bool = False, seed: int = 0, run: str = "") -> tuple[Backend, Any]:
    """The configured backend and its ``LLMClient`` (``None`` for offline);
    ``run`` is recorded with the cache entries its calls use."""
    cls = load_backend(config.backend)
    if config.backend == "offline":
        return cls(seed=seed), None
    from brewkb.llm.cache import ResponseCache
    from brewkb.llm.client import LLMClient
    from brewkb.llm.ledger import Ledger

    cache = None if no_cache or not config.cache else ResponseCache(cache_path(cache_dir), run=run)
    client = LLMClient(config, cache=cache, ledger=Ledger(ledger_path))
    return cls(client), client
