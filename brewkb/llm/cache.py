"""A persistent response cache: SQLite in WAL mode, shared safely by processes.

Keys are SHA-256 digests of the canonical JSON of a request (endpoint
included), so an identical call is never paid for twice and a run with a warm
cache replays exactly. The client stores good replies only. Each entry keeps
the role that asked, and ``uses`` records which runs used which entry, so one
run's or one role's entries can be dropped. No key, header or endpoint address
is stored in clear.

A damaged database file raises ``LLMError`` naming it; ``remove`` deletes
it (``brewkb cache clear``), which always works whatever the damage. A full
disk raises ``OSError`` (``ENOSPC``) naming the file.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Iterator
from typing import Any

from brewkb.errors import LLMError

__all__ = ["ResponseCache", "CacheStats"]


@dataclass(frozen=True)
class CacheStats:
    entries: int
    bytes: int
    by_kind: dict[str, int]
    path: str
    by_role: dict[str, int] = field(default_factory=dict)


class ResponseCache:
    """``run``: the run whose calls use this cache, recorded with every entry it reads or writes."""

    def __init__(self, path: Path, *, run: str = "") -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(path, timeout=30, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, kind TEXT NOT NULL, "
                "value TEXT NOT NULL, created REAL NOT NULL, role TEXT NOT NULL DEFAULT '')"
            )
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(responses)")}
            if "role" not in columns:  # a cache made by an earlier brewkb
                self._db.execute("ALTER TABLE responses ADD COLUMN role TEXT NOT NULL DEFAULT ''")
            self._db.execute("CREATE TABLE IF NOT EXISTS uses (key TEXT NOT NULL, run TEXT NOT NULL, "
                             "PRIMARY KEY (key, run))")
        except sqlite3.DatabaseError as exc:
            raise _problem(path, exc) from None
        self._lock = threading.Lock()
        self.run = run

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "run": self.run}  # the connection is reopened where the cache is unpickled

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"], run=state["run"])  # type: ignore[misc]

    @staticmethod
    def digest(canonical: str) -> str:
        return hashlib.sha256(canonical.encode()).hexdigest()

    @contextlib.contextmanager
    def _using(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                yield self._db
            except sqlite3.DatabaseError as exc:
                raise _problem(self.path, exc) from None

    @staticmethod
    def remove(path: Path) -> None:
        """Delete the cache file (and SQLite's journal files next to it)."""
        for name in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            name.unlink(missing_ok=True)

    def get(self, canonical: str) -> str | None:
        key = self.digest(canonical)
        with self._using():
            row = self._db.execute("SELECT value FROM responses WHERE key = ?", (key,)).fetchone()
            if row and self.run:
                self._db.execute("INSERT OR IGNORE INTO uses VALUES (?, ?)", (key, self.run))
        return row[0] if row else None

    def put(self, canonical: str, kind: str, value: str, role: str = "") -> None:
        key = self.digest(canonical)
        with self._using():
            self._db.execute("INSERT OR REPLACE INTO responses (key, kind, value, created, role) "
                             "VALUES (?, ?, ?, ?, ?)", (key, kind, value, time.time(), role))
            if self.run:
                self._db.execute("INSERT OR IGNORE INTO uses VALUES (?, ?)", (key, self.run))

    def stats(self) -> CacheStats:
        with self._using():
            rows = self._db.execute("SELECT kind, COUNT(*), COALESCE(SUM(LENGTH(value)), 0) "
                                    "FROM responses GROUP BY kind").fetchall()
            roles = self._db.execute("SELECT role, COUNT(*) FROM responses GROUP BY role").fetchall()
        return CacheStats(entries=sum(r[1] for r in rows), bytes=sum(r[2] for r in rows),
                          by_kind={r[0]: r[1] for r in rows}, path=str(self.path),
                          by_role={r[0] or "unknown": r[1] for r in roles})

    def clear(self, *, run: str | None = None, role: str | None = None) -> int:
        """Delete every entry, or those ``run`` used, or those ``role`` asked for
        (both: those of the role that the run used); returns how many."""
        where, args = [], []
        if run is not None:
            where.append("key IN (SELECT key FROM uses WHERE run = ?)")
            args.append(run)
        if role is not None:
            where.append("role = ?")
            args.append(role)
        condition = " WHERE " + " AND ".join(where) if where else ""
        with self._using():
            count = self._db.execute(f"SELECT COUNT(*) FROM responses{condition}", args).fetchone()[0]
            self._db.execute(f"DELETE FROM responses{condition}", args)
            self._db.execute("DELETE FROM uses WHERE key NOT IN (SELECT key FROM responses)")
            if not where:
                self._db.execute("VACUUM")
        return int(count)

    def runs(self) -> set[str]:
        """The runs recorded as using an entry."""
        with self._using():
            return {row[0] for row in self._db.execute("SELECT DISTINCT run FROM uses")}

    def close(self) -> None:
        self._db.close()


def _problem(path: Path, exc: sqlite3.DatabaseError) -> Exception:
    if "full" in str(exc):  # SQLITE_FULL: the disk, not the file
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
    return LLMError(f"the LLM cache {path} is damaged ({exc}); delete it with `brewkb cache clear --yes` "
                    "(the next run pays for its calls again)")
