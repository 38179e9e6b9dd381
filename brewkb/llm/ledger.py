"""The ledger: one JSON line per LLM call, and totals per role.

A line holds the role, model, tokens in and out, whether the cache answered,
latency and any error. Costs are computed when summing, from prices in the
config (US dollars per million tokens); a model without a price costs 0.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Mapping
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field
from pathlib import Path

from brewkb.config import Price
from brewkb.fsutil import append_line

__all__ = ["Ledger", "LedgerEntry", "RoleTotals", "summarise", "read_ledger", "call_cost", "ITEM", "REJECTS_FILE"]

ITEM: ContextVar[str] = ContextVar("brewkb_item", default="")
"""The item the calls of the current task are made for (``stage:key``, or a
task id in an episode); the stages and the executors set it, and each invalid
reply kept is labelled with it."""

REJECTS_FILE = "invalid-replies.jsonl"
"""Beside a ledger: every reply that failed validation, for a person to read."""


@dataclass(frozen=True)
class LedgerEntry:
    role: str
    model: str
    tokens_in: int = 0
    tokens_out: int = 0
    cached: bool = False
    latency: float = 0.0
    error: str | None = None
    kind: str = "chat"
    count: int = 1
    """How many calls (or agent episodes) the line stands for."""
    mode: str = ""
    """How a structured reply was asked for (``json_schema``, ``json_object``,
    ``text``); empty for calls without a schema."""
    time: float = field(default_factory=time.time)


@dataclass
class RoleTotals:
    calls: int = 0
    cached: int = 0
    errors: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost: float = 0.0
    episodes_run: int = 0
    episodes_reused: int = 0
    modes: dict[str, int] = field(default_factory=dict)
    """Structured calls per mode (``json_schema``, ``json_object``, ``text``)."""


class Ledger:
    """Appends entries to ``path`` (when given) and keeps them in memory."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.entries: list[LedgerEntry] = []
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Path | None]:
        return {"path": self.path}  # a Ray worker appends to the same file, keeps its own entries

    def __setstate__(self, state: dict[str, Path | None]) -> None:
        self.__init__(state["path"])  # type: ignore[misc]

    def record(self, entry: LedgerEntry) -> None:
        with self._lock:
            self.entries.append(entry)
            if self.path is not None:
                append_line(self.path, json.dumps(asdict(entry), sort_keys=True))

    @property
    def rejects(self) -> Path | None:
        """Where invalid replies are kept (beside the ledger file; none without one)."""
        return None if self.path is None else self.path.with_name(REJECTS_FILE)

    def reject(self, role: str, model: str, why: str, text: str, mode: str = "") -> None:
        """Keep a reply that failed validation: role, item, why, and its text."""
        if self.path is None:
            return
        record = {"time": round(time.time(), 3), "role": role, "item": ITEM.get(), "model": model, "mode": mode,
                  "why": why, "text": text}
        with self._lock:
            append_line(self.path.with_name(REJECTS_FILE), json.dumps(record, ensure_ascii=False, sort_keys=True))


def read_ledger(path: Path) -> list[LedgerEntry]:
    if not path.exists():
        return []
    entries = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            try:
                entries.append(LedgerEntry(**json.loads(line)))
            except (json.JSONDecodeError, TypeError):
                continue  # a line cut by a crash; the rest still counts
    return entries


def summarise(entries: Iterable[LedgerEntry], prices: Mapping[str, Price]) -> dict[str, RoleTotals]:
    """Totals per role (episode entries count separately from calls)."""
    totals: dict[str, RoleTotals] = {}
    for e in entries:
        t = totals.setdefault(e.role, RoleTotals())
        if e.kind == "episode":
            if e.cached:
                t.episodes_reused += e.count
            else:
                t.episodes_run += e.count
            continue
        t.calls += 1
        if e.mode:
            t.modes[e.mode] = t.modes.get(e.mode, 0) + 1
        t.cached += e.cached
        t.errors += e.error is not None
        if not e.cached:
            t.tokens_in += e.tokens_in
            t.tokens_out += e.tokens_out
            t.cost += call_cost(prices, e.model, e.tokens_in, e.tokens_out)
    return dict(sorted(totals.items()))


def call_cost(prices: Mapping[str, Price], model: str, tokens_in: int, tokens_out: int) -> float:
    """US dollars of one call (0 for a model without a price)."""
    price = prices.get(model)
    return 0.0 if price is None else (tokens_in * price.input + tokens_out * price.output) / 1e6

