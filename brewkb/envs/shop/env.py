"""The shop environment: tasks by split, live tool sessions, and the grader.

The grader replays the tool calls of a trajectory on a fresh copy of the
task's world, so it grades any agent that acts through the shop's tools,
whatever produced the trajectory. Success: the final state equals the state
after the gold actions (compared by a hash of the canonical dump) and every
required fact was said to the customer. The score gives partial credit: 0.6
for the state (the share of touched orders that end as they should) and 0.4
for the facts said.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from brewkb.config import EnvConfig
from brewkb.envs.base import SPLITS, Task
from brewkb.envs.shop.tasks import identity_sentence, make_tasks
from brewkb.envs.shop.tools import STATE_CHANGING, TOOLS, ShopSession
from brewkb.envs.shop.world import State, generate, state_hash
from brewkb.errors import ConfigError
from brewkb.trajectories.schema import Outcome, Trajectory, tool_calls

__all__ = ["ShopEnvironment", "DEFAULT_COUNTS"]

DEFAULT_COUNTS = {"train": 40, "eval": 24, "test": 40}
GOLD_CACHE = 4096  # tasks whose gold outcome is kept (a few kB each)


@dataclass(frozen=True)
class _Expected:
    """A task's world after its gold actions (read only): the state's hash,
    its orders and transfers, and the orders the world started with."""

    hash: str
    orders: Mapping[str, Any]
    transfers: list[Any]
    start_orders: Mapping[str, Any]


def _replay(state: State, calls: Sequence[tuple[str, Mapping[str, Any] | None]]) -> ShopSession:
    session = ShopSession(state)
    for name, args in calls:
        if args is None:
            continue  # arguments that were not JSON never reached the tool
        session.call(name, args)
        if session.done:
            break
    return session


def _said(trajectory: Trajectory, session: ShopSession) -> str:
    final = [str(m.get("content") or "") for m in trajectory.messages if m.get("role") == "assistant"]
    return " ".join(session.replies + final[-1:]).lower()


class ShopEnvironment:
    """A simulated customer-support desk (see ``brewkb/envs/shop/``)."""

    name = "shop"

    def __init__(self, seed: int = 0, counts: Mapping[str, int] | None = None) -> None:
        self.seed = seed
        self.counts = {**DEFAULT_COUNTS, **(counts or {})}
        self._cache: dict[str, list[Task]] = {}
        self._gold: dict[tuple[Any, str], _Expected] = {}

    @classmethod
    def from_config(cls, config: EnvConfig, root: Path) -> ShopEnvironment:
        counts = {}
        for split in SPLITS:
            value = config.options.get(split, DEFAULT_COUNTS[split])
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"env.options.{split}: expected a task count ≥ 0, got {value!r}")
            counts[split] = value
        return cls(seed=config.seed, counts=counts)

    def tasks(self, split: str) -> list[Task]:
        if split not in SPLITS:
            raise ConfigError(f"unknown split {split!r}; the shop has {', '.join(SPLITS)}")
        if split not in self._cache:
            self._cache[split] = make_tasks(split, self.counts[split], self.seed)
        return list(self._cache[split])

    def tools(self) -> list[dict[str, Any]]:
        return json.loads(json.dumps(TOOLS))  # a copy: callers must not change ours

    def session(self, task: Task) -> ShopSession:
        return ShopSession(generate(task.data["seed"]))

    def grade(self, task: Task, trajectory: Trajectory) -> Outcome:
        calls = [(c.name, c.args()) for c in tool_calls(trajectory.messages)]
        done = _replay(generate(task.data["seed"]), calls)
        gold = self._expected(task)
        same = state_hash(done.state) == gold.hash
        said = _said(trajectory, done)
        facts = task.data.get("facts", [])
        facts_said = [f for f in facts if f.lower() in said]
        start = gold.start_orders
        touched = [o for o in start if done.state["orders"][o] != start[o] or gold.orders[o] != start[o]]
        touched_ok = sum(done.state["orders"][o] == gold.orders[o] for o in touched)
        transfers_ok = done.state["transfers"] == gold.transfers
        parts = touched_ok + transfers_ok
        state_score = 1.0 if same else parts / (len(touched) + 1)
        fact_score = len(facts_said) / len(facts) if facts else 1.0
        return Outcome(same and len(facts_said) == len(facts), round(0.6 * state_score + 0.4 * fact_score, 4), {
            "state_matches": same, "facts_missing": [f for f in facts if f not in facts_said],
            "family": task.data.get("family"), "errors": sum(r.startswith("Error") for r in _results(trajectory)),
        })

    def _expected(self, task: Task) -> _Expected:
        # A task is graded once per episode, and the search runs its tasks again and again: what
        # its gold actions lead to is worked out once (keyed by the repr, which tells a tuple
        # from a list and 1 from True, as the tools do).
        key = (task.data["seed"], repr(task.data["gold"]))
        found = self._gold.get(key)
        if found is None:
            gold = _replay(generate(task.data["seed"]), [(n, a) for n, a in task.data["gold"]]).state
            found = _Expected(state_hash(gold), gold["orders"], gold["transfers"],
                              generate(task.data["seed"])["orders"])
            if len(self._gold) >= GOLD_CACHE:
                self._gold.clear()
            self._gold[key] = found
        return found

    def relabel_task(self, task: Task, actions: Sequence[tuple[str, Mapping[str, Any]]], text: str) -> Task | None:
        """A task whose gold is what the run did: the state-changing calls that
        the world accepted, worded with the customer's identity so an agent can
        act on it. ``None`` when the run changed nothing."""
        state = generate(task.data["seed"])
        session = ShopSession(state)
        kept: list[list[Any]] = []
        for name, args in actions:
            result = session.call(name, args)
            if name in STATE_CHANGING and not result.startswith("Error"):
                kept.append([name, dict(args)])
        if not kept:
            return None
        customer = next((state["customers"][c] for c in state["customers"] if c == session.customer), None)
        if customer is None:
            return None
        ident, find = identity_sentence(random.Random(task.data["seed"]), customer)
        wording = text.strip() or "Please " + "; then ".join(_describe(n, a) for n, a in kept) + "."
        return Task(id=f"{task.id}-relabelled", text=f"{ident} {wording}", split=task.split, data={
            "family": "relabelled", "seed": task.data["seed"], "gold": [[find[0], find[1]], *kept], "facts": [],
            "relabelled_from_task": task.id})


def _describe(name: str, args: Mapping[str, Any]) -> str:
    return name.replace("_", " ") + " with " + ", ".join(f"{k} {v}" for k, v in args.items())


def _results(trajectory: Trajectory) -> list[str]:
    return [c.result or "" for c in tool_calls(trajectory.messages)]
