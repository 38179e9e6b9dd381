"""``shop-scripted``: an agent for the shop that needs no LLM but reads recipes.

With recipes in its context it follows the first retrieved recipe whose
"How to perform" section lists tool calls in the step convention of
``docs/recipes.md``, taking of alternatives the first whose arguments the
task gives (a retrieved past conversation or note of one, the
baselines of ``brewkb eval --context trajectories|notes``, lists its steps the
same way and is followed the same way) (a numbered line starting with a backticked call such as
`` `find_customer_by_email(email)` ``), binding each argument by its name
from the task's entities and from earlier tool results. It then follows
further retrieved recipes whose goal the task also asks for (a two-step
task); a step a recipe takes "only when the request also asks to" do
something else is left to that action's own recipe. Without a usable recipe
it falls back to a weak policy: the tool whose name shares most words with
the task, with seeded exploration over whether to
identify the customer and look up the order first. That policy sometimes
succeeds and often breaks a policy of the world — the material BREW learns from.

It is a simulation of an agent, not a language model.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from brewkb.envs.base import Environment, Task
from brewkb.envs.shop.tools import STATE_CHANGING, TOOLS
from brewkb.envs.shop.world import COLORS, SIZES
from brewkb.trajectories.schema import Outcome, Trajectory, content_id
from brewkb.trajectories.tools import ALSO_ASKED, parse_alternatives

__all__ = ["ScriptedAgent", "parse_recipes", "entities"]

TOOL_NAMES = [t["function"]["name"] for t in TOOLS]
GOAL_WORDS = {"cancel_order": "cancel", "return_items": "return", "exchange_items": "exchange",
              "change_address": "address", "transfer_to_human": "transfer", "reply": "status",
              "get_order": "status"}
ADDRESS_RE = re.compile(r"\b\d+ [A-Z][a-z]+ (?:Street|Avenue|Road|Lane), [A-Z][a-z]+")


Call = tuple[str, tuple[str, ...]]


@dataclass(frozen=True)
class RecipeSteps:
    name: str
    steps: tuple[tuple[Call, ...], ...]
    """Each step: the calls it offers (one, or alternatives joined by "or")."""

    @property
    def goal(self) -> str:
        """The recipe's last state-changing tool, else ``reply`` (an answer)."""
        changing = [t for step in self.steps for t, _ in step if t in STATE_CHANGING]
        return changing[-1] if changing else "reply"


def parse_recipes(context: str) -> list[RecipeSteps]:
    """The recipes of a rendered context block, with the steps each one lists;
    a retrieved example or note of a past conversation counts as a recipe."""
    found = []
    for chunk in re.split(r"(?m)^## (?:Recipe|Example|Note): ", context)[1:]:
        name = chunk.split("\n", 1)[0].strip()
        match = re.search(r"(?ms)^## How to perform\s*\n(.*?)(?=^## |\Z)", chunk)
        steps = []
        for line in (match.group(1) if match else "").splitlines():
            if ALSO_ASKED in line:
                continue  # another action's step: the recipe for that action, when retrieved, is followed
            calls = tuple((tool, tuple(args)) for tool, args in parse_alternatives(line) if tool in TOOL_NAMES)
            if calls:
                steps.append(calls)
        found.append(RecipeSteps(name, tuple(steps)))
    return found


def entities(text: str) -> dict[str, Any]:
    """What the task text says: order ids, email, name, zip, address, item
    words, literal item and payment-method ids, the cancellation reason."""
    found: dict[str, Any] = {"order_ids": re.findall(r"#W\d{7}", text)}
    if m := re.search(r"[\w.+-]+@[\w-]+\.[\w.]+", text):
        found["email"] = m.group(0).rstrip(".")
    if m := re.search(r"\b(?:I'm|I am|my name is|This is)\s+([A-Z][a-z]+)\s+([A-Z][a-z]+)", text):
        found["first_name"], found["last_name"] = m.group(1), m.group(2)
    if m := re.search(r"\b\d{5}\b", text):
        found["zip"] = m.group(0)
    if m := ADDRESS_RE.search(text):
        found["address"] = m.group(0)
    found["item_ids"] = re.findall(r"\bI\d{5}\b", text)
    found["method_ids"] = re.findall(r"\b(?:card|gift_card|paypal)_\d{6}\b", text)
    found["reason"] = "ordered by mistake" if "mistake" in text.lower() else "no longer needed"
    return found


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z]+", text.lower()))


@dataclass
class _Episode:
    task: Task
    session: Any
    rng: random.Random
    max_steps: int
    messages: list[dict[str, Any]] = field(default_factory=list)
    known: dict[str, Any] = field(default_factory=dict)
    last_error: str | None = None
    said: list[str] = field(default_factory=list)

    def call(self, name: str, args: Mapping[str, Any]) -> str | None:
        if sum(m["role"] == "assistant" for m in self.messages) >= self.max_steps - 1:
            return None
        call_id = f"call_{len(self.messages)}"
        self.messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(dict(args))}}]})
        result = self.session.call(name, args)
        self.messages.append({"role": "tool", "tool_call_id": call_id, "name": name, "content": result})
        if result.startswith("Error"):
            self.last_error = result
            return result
        self.last_error = None
        if name == "reply":
            self.said.append(str(args.get("message", "")))
        try:
            value = json.loads(result)
        except json.JSONDecodeError:
            return result
        if name.startswith("find_customer"):
            self.known["customer"] = value
        elif name == "get_order":
            self.known["order"] = value
        elif name == "get_product":
            self.known["product"] = value
        return result


class ScriptedAgent:
    """See the module docstring. ``epsilon`` is the weak policy's exploration."""

    name = "shop-scripted"
    retrieves_per_step = False

    def __init__(self, seed: int = 0, max_steps: int = 30, epsilon: float = 0.5) -> None:
        self.seed, self.max_steps, self.epsilon = seed, max_steps, epsilon

    def run(self, task: Task, context: str, env: Environment) -> Trajectory:
        rng = random.Random(content_id([self.seed, task.id, task.text, context]))
        episode = _Episode(task, env.session(task), rng, self.max_steps,
                           messages=[{"role": "user", "content": task.text}], known=entities(task.text))
        recipes = [r for r in parse_recipes(context) if r.steps]
        if recipes:
            self._follow(episode, recipes[0])
            for other in recipes[1:]:
                if other.goal != recipes[0].goal and GOAL_WORDS.get(other.goal, "?") in _words(task.text):
                    self._follow(episode, other)
        else:
            self._weak(episode)
        final = (f"Sorry, I could not do that: {episode.last_error}" if episode.last_error
                 else (episode.said[-1] if episode.said else "Done."))
        episode.messages.append({"role": "assistant", "content": final})
        meta = {"followed": [r.name for r in recipes[:1]]} if recipes else {"policy": "weak"}
        return Trajectory(task_id=task.id, task=task.text, split=task.split, messages=tuple(episode.messages),
                          outcome=Outcome(False, 0.0), meta=meta)

    # -------------------------------------------------------------- recipes
    def _follow(self, ep: _Episode, recipe: RecipeSteps) -> None:
        ep.known["goal_word"] = GOAL_WORDS.get(recipe.goal, "")
        for step in recipe.steps:
            if any(tool.startswith("find_customer") for tool, _ in step) and "customer" in ep.known:
                continue  # already identified by an earlier recipe
            # the first alternative this task gives every argument of
            bound = [(tool, {name: self._bind(ep, name) for name in argnames}) for tool, argnames in step]
            usable = [(tool, args) for tool, args in bound if all(v is not None for v in args.values())]
            if not usable:
                continue  # the recipe asks for something this task does not give
            if ep.call(*usable[0]) is None:
                return

    # ---------------------------------------------------------------- binding
    def _order_id(self, ep: _Episode) -> str | None:
        ids = ep.known.get("order_ids") or []
        if len(ids) <= 1:
            return ids[0] if ids else None
        text = ep.task.text.lower()
        anchor = text.find(ep.known.get("goal_word") or "\0")
        if anchor < 0:
            return ids[0]
        return min(ids, key=lambda oid: abs(text.find(oid.lower()) - anchor))

    def _bind(self, ep: _Episode, name: str) -> Any:
        known, text = ep.known, ep.task.text
        order = known.get("order") or {}
        if name in ("email", "first_name", "last_name", "zip", "address", "reason"):
            return known.get(name)
        if name == "order_id":
            return self._order_id(ep)
        if name == "customer_id":
            return (known.get("customer") or {}).get("customer_id")
        if name == "summary":
            return text
        if name == "item_ids":
            return known["item_ids"] or self._described_items(ep, order)
        if name == "product_id":
            items = self._described_items(ep, order)
            matched = [i for i in order.get("items", []) if i["item_id"] in (items or [])]
            return matched[0]["product_id"] if matched else None
        if name == "new_item_ids":
            return self._new_variants(ep, order)
        if name == "refund_method_id":
            if known["method_ids"]:
                return known["method_ids"][0]
            if "gift card" in text.lower():
                methods = (known.get("customer") or {}).get("payment_methods", [])
                return next((m["id"] for m in methods if m["kind"] == "gift_card"), None)
            return order.get("payment_method_id")
        if name == "message":
            if ep.last_error:
                return f"Sorry, I cannot do that: {ep.last_error}"
            if order:
                return f"Your order {order['order_id']} is {order['status']}."
            return "Done."
        return None

    @staticmethod
    def _described_items(ep: _Episode, order: Mapping[str, Any]) -> list[str] | None:
        text = ep.task.text.lower()
        chosen = []
        for item in order.get("items", []):
            words = [item["name"], *item["options"].values()]
            if all(re.search(rf"\b{re.escape(w)}\b", text) for w in words):
                chosen.append(item["item_id"])
        return chosen or None

    def _new_variants(self, ep: _Episode, order: Mapping[str, Any]) -> list[str] | None:
        product = ep.known.get("product") or {}
        old_ids = self._described_items(ep, order) or []
        old = next((i for i in order.get("items", []) if i["item_id"] in old_ids), None)
        if not product or old is None:
            return None
        text = ep.task.text.lower()
        wanted = _words(text[text.rfind(" for ") :]) if " for " in text else set()
        wanted &= set(COLORS) | set(SIZES)
        best = None
        for variant in product.get("variants", []):
            if variant["item_id"] == old["item_id"] or not variant.get("available"):
                continue
            values = set(variant["options"].values())
            score = (len(values & wanted), len(values & set(old["options"].values())))
            if values & wanted and (best is None or score > best[0]):
                best = (score, variant["item_id"])
        return [best[1]] if best else None

    # ------------------------------------------------------------ no recipe
    def _weak(self, ep: _Episode) -> None:
        task_words = _words(ep.task.text)
        scored = [(len(task_words & set(t.split("_"))), ep.rng.random(), t) for t in TOOL_NAMES
                  if not t.startswith(("find_", "list_", "get_product"))]
        goal = max(scored)[2]
        ep.known["goal_word"] = GOAL_WORDS.get(goal, "")
        identify = ("find_customer_by_email", ["email"]) if "email" in ep.known else \
            ("find_customer_by_name_zip", ["first_name", "last_name", "zip"])
        if ep.rng.random() < self.epsilon:
            self._try(ep, *identify)
        if ep.rng.random() < self.epsilon:
            self._try(ep, "get_order", ["order_id"])
        params = next(t["function"]["parameters"]["required"] for t in TOOLS if t["function"]["name"] == goal)
        self._try(ep, goal, params)
        if ep.last_error and "identify" in ep.last_error and ep.rng.random() < self.epsilon:
            self._try(ep, *identify)
            self._try(ep, goal, params)
        if goal != "reply":
            self._try(ep, "reply", ["message"])

    def _try(self, ep: _Episode, tool: str, argnames: list[str]) -> None:
        args = {name: self._bind(ep, name) for name in argnames}
        ep.call(tool, {k: ("" if v is None else v) for k, v in args.items()})
