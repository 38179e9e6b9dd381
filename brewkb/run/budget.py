"""Budgets: agent episodes, LLM calls and cost a run may spend in total.

A ``Budget`` starts from what the run already spent (read from its ledger, so
``--resume`` with a raised limit continues and one with the same limit stops
at once) and is charged *before* spending: the LLM client takes a call before
sending it, and ``BudgetedExecutor`` submits only the episodes the budget
still allows, lets them finish and be saved, then stops. So a run never makes
more calls or episodes than its limits; cost is known only after a reply, so
``max_cost`` stops new calls once it is reached and the calls already in
flight (at most ``llm.concurrency``) may pass it.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from brewkb.config import Price
from brewkb.errors import BudgetExhausted
from brewkb.llm.ledger import Ledger, LedgerEntry, call_cost

__all__ = ["Limits", "Budget", "BudgetExhausted", "BudgetedExecutor", "spent"]


@dataclass(frozen=True)
class Limits:
    """``None``: no limit."""

    episodes: int | None = None
    llm_calls: int | None = None
    cost: float | None = None

    @property
    def any(self) -> bool:
        return any(v is not None for v in (self.episodes, self.llm_calls, self.cost))


def spent(entries: Sequence[LedgerEntry], prices: Mapping[str, Price]) -> tuple[int, int, float]:
    """Episodes run, LLM calls sent (cache hits are free) and their cost, from ledger entries."""
    episodes = calls = 0
    cost = 0.0
    for e in entries:
        if e.kind == "episode":
            episodes += 0 if e.cached else e.count
        elif not e.cached:
            calls += e.count
            cost += call_cost(prices, e.model, e.tokens_in, e.tokens_out)
    return episodes, calls, cost


class Budget:
    """Counts spending against ``limits``; safe to share between threads.
    ``here`` is ``-C DIR `` when the KB is not the current folder, for the
    command its message suggests."""

    def __init__(self, limits: Limits, prices: Mapping[str, Price], *, episodes: int = 0, calls: int = 0,
                 cost: float = 0.0, run: str = "", here: str = "") -> None:
        self.limits, self.prices, self.run, self.here = limits, dict(prices), run, here
        self.episodes, self.calls, self.cost = episodes, calls, cost
        self._lock = threading.Lock()

    def check(self) -> None:
        """Raise when nothing more may be spent."""
        with self._lock:
            self._check_calls()
            if self.limits.episodes is not None and self.episodes >= self.limits.episodes:
                raise self.exhausted("--max-episodes", f"{self.limits.episodes} agent episodes")

    def _check_calls(self) -> None:
        if self.limits.llm_calls is not None and self.calls >= self.limits.llm_calls:
            raise self.exhausted("--max-llm-calls", f"{self.limits.llm_calls} LLM calls")
        if self.limits.cost is not None and self.cost >= self.limits.cost:
            raise self.exhausted("--max-cost", f"${self.limits.cost:g} (${self.cost:.4f} spent)")

    def exhausted(self, option: str, what: str, extra: str = "") -> BudgetExhausted:
        run = self.run or "RUN"
        return BudgetExhausted(f"stopped: the budget of {what} is spent{extra}; what finished is saved. Continue "
                               f"with `brewkb {self.here}refine --resume {run} {option} N` and a larger N", option)

    def take_call(self) -> None:
        """Count one LLM call about to be sent, or raise if none is left."""
        with self._lock:
            self._check_calls()
            self.calls += 1

    def add_cost(self, model: str, tokens_in: int, tokens_out: int) -> None:
        with self._lock:
            self.cost += call_cost(self.prices, model, tokens_in, tokens_out)

    def take_episodes(self, wanted: int) -> int:
        """How many of ``wanted`` episodes may run (counted as run)."""
        with self._lock:
            allowed = wanted if self.limits.episodes is None else max(0, min(wanted, self.limits.episodes -
                                                                              self.episodes))
            self.episodes += allowed
            return allowed


class BudgetedExecutor:
    """An executor that runs only the episodes the budget allows, records each
    in the ledger as it finishes, and raises ``BudgetExhausted`` after the
    allowed ones when a batch was cut (or an episode was stopped midway by
    the call or cost limit: that one is dropped, not saved as a failure)."""

    def __init__(self, inner: Any, budget: Budget, ledger: Ledger) -> None:
        self.inner, self.budget, self.ledger = inner, budget, ledger

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def run(self, agent: Any, env: Any, jobs: Sequence[Any], on_result: Any) -> None:
        if jobs:
            self.budget.check()
        allowed = self.budget.take_episodes(len(jobs))
        cut: list[str] = []

        def recorded(i: int, trajectory: Any) -> None:
            option = trajectory.meta.get("budget_exhausted")
            if option:  # stopped midway by the call or cost budget: dropped, run again on resume
                cut.append(option)
                return
            self.ledger.record(LedgerEntry("agent", "episodes", kind="episode", count=1))
            on_result(i, trajectory)

        if allowed:
            await self.inner.run(agent, env, list(jobs)[:allowed], recorded)
        if cut:
            self.budget.check()  # raises: the limit that cut the episodes
        if allowed < len(jobs):
            raise self.budget.exhausted("--max-episodes", f"{self.budget.limits.episodes} agent episodes",
                                    f" ({len(jobs) - allowed} of a batch of {len(jobs)} not run)")
