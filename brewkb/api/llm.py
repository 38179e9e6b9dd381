"""``cache stats|clear`` and ``ledger RUN``."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from brewkb.config import RolesConfig
from brewkb.errors import ConfigError, LLMError, RunError
from brewkb.kb import KB
from brewkb.llm import cache_path
from brewkb.llm.cache import CacheStats, ResponseCache
from brewkb.llm.ledger import RoleTotals, read_ledger, summarise

__all__ = ["cache_stats", "cache_clear", "ledger_totals", "LEDGER_FILE"]

LEDGER_FILE = "ledger.jsonl"

log = logging.getLogger(__name__)


def cache_stats(*, start: Path = Path(".")) -> CacheStats:
    with KB.open(start) as kb:
        path = cache_path(kb.cache_dir)
        if not path.exists():
            return CacheStats(0, 0, {}, str(path))
        cache = ResponseCache(path)
        try:
            return cache.stats()
        finally:
            cache.close()


def cache_clear(*, run: str | None = None, role: str | None = None, start: Path = Path(".")) -> int:
    """Delete every cached reply, or those ``run`` used, or those ``role`` asked
    for (both: the role's replies that the run used); returns how many."""
    roles = [f.name for f in dataclasses.fields(RolesConfig)]
    if role is not None and role not in roles:
        raise ConfigError(f"--role {role!r}: roles are {', '.join(roles)}")
    with KB.open(start) as kb:
        path = cache_path(kb.cache_dir)
        if not path.exists():
            if run is not None:
                _known(kb, run)
            return 0
        try:
            cache = ResponseCache(path)
        except LLMError:
            if run is not None or role is not None:
                raise
            ResponseCache.remove(path)  # damaged: nothing in it can be read, so all of it goes
            log.warning("the LLM cache %s was damaged; deleted it", path)
            return 0
        try:
            if run is not None and run not in cache.runs():
                _known(kb, run)
            try:
                return cache.clear(run=run, role=role)
            except LLMError:
                if run is not None or role is not None:
                    raise
        finally:
            cache.close()
        ResponseCache.remove(path)
        log.warning("the LLM cache %s was damaged; deleted it", path)
        return 0


def _known(kb: KB, run: str) -> None:
    """Refuse a run that has neither a folder nor a cached reply (a typo), listing the runs."""
    if not (kb.runs_dir / run).is_dir():
        known = sorted(p.name for p in kb.runs_dir.iterdir() if p.is_dir()) if kb.runs_dir.is_dir() else []
        raise RunError(f"no run {run!r} in {kb.runs_dir} and no cached reply of it; runs: {', '.join(known) or 'none'}")


def ledger_totals(run: str, *, start: Path = Path(".")) -> dict[str, RoleTotals]:
    """Calls, tokens and estimated cost per role of a run."""
    with KB.open(start) as kb:
        folder = kb.runs_dir / run
        if not folder.is_dir():
            known = sorted(p.name for p in kb.runs_dir.iterdir() if p.is_dir()) if kb.runs_dir.is_dir() else []
            raise RunError(f"no run {run!r} in {kb.runs_dir}; runs: {', '.join(known) or 'none'}")
        return summarise(read_ledger(folder / LEDGER_FILE), kb.config.llm.prices)
