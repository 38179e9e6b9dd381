"""A persistent response cache: SQLite in WAL mode, shared safely by processes.

Keys are SHA-256 digests of the canonical JSON of a request, so an identical
call is never paid for twice and a run with a warm cache replays exactly. The
cache holds replies only; no key, header or endpoint address is stored.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from brewkb.errors import LLMError

__all__ = ["ResponseCache", "CacheStats"]


@dataclass(frozen=True)
class CacheStats:
    entries: int
    bytes: int
    by_kind: dict[str, int]
    path: str


class ResponseCache:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(path, timeout=30, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, kind TEXT NOT NULL, "
                "value TEXT NOT NULL, created REAL NOT NULL)"
            )
        except sqlite3.DatabaseError as exc:
            raise LLMError(f"the LLM cache {path} is unusable ({exc}); delete it or run `brewkb cache clear`") from None
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Path]:
        return {"path": self.path}  # the connection is reopened where the cache is unpickled

    def __setstate__(self, state: dict[str, Path]) -> None:
        self.__init__(state["path"])  # type: ignore[misc]

    @staticmethod
    def digest(canonical: str) -> str:
        return hashlib.sha256(canonical.encode()).hexdigest()

    def get(self, canonical: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM responses WHERE key = ?", (self.digest(canonical),)).fetchone()
        return row[0] if row else None

    def put(self, canonical: str, kind: str, value: str) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?)",
                             (self.digest(canonical), kind, value, time.time()))

    def stats(self) -> CacheStats:
        with self._lock:
            rows = self._db.execute("SELECT kind, COUNT(*), COALESCE(SUM(LENGTH(value)), 0) "
                                    "FROM responses GROUP BY kind").fetchall()
        return CacheStats(entries=sum(r[1] for r in rows), bytes=sum(r[2] for r in rows),
                          by_kind={r[0]: r[1] for r in rows}, path=str(self.path))

    def clear(self) -> int:
        with self._lock:
            count = self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
            self._db.execute("DELETE FROM responses")
            self._db.execute("VACUUM")
        return int(count)

    def close(self) -> None:
        self._db.close()
