from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from brewkb.agents.base import run_episode
from brewkb.envs.base import Task
from brewkb.envs.shop import ShopEnvironment
from brewkb.envs.shop.agent import ScriptedAgent, entities, parse_recipes
from brewkb.envs.shop.tasks import FAMILIES
from brewkb.envs.shop.tools import ShopSession
from brewkb.envs.shop.world import generate, state_hash
from brewkb.recipes import read_recipe
from brewkb.retrieval.context import RecipeContext
from brewkb.retrieval.index import RecipeIndex
from brewkb.trajectories.schema import KBUse, Outcome, Trajectory, tool_calls

RECIPES = Path(__file__).parent / "fixtures" / "shop-recipes"
ENV = ShopEnvironment()


def as_trajectory(task: Task, calls: list[tuple[str, dict[str, Any]]], final: str = "") -> Trajectory:
    messages: list[dict[str, Any]] = [{"role": "user", "content": task.text}]
    for i, (name, args) in enumerate(calls):
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]})
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": "-"})
    messages.append({"role": "assistant", "content": final})
    return Trajectory(task_id=task.id, task=task.text, messages=tuple(messages), outcome=Outcome(False, 0.0))


def world() -> tuple[ShopSession, dict[str, Any]]:
    state = generate(7)
    return ShopSession(state), state


def first(state: dict[str, Any], status: str) -> dict[str, Any]:
    return next(o for o in state["orders"].values() if o["status"] == status)


def identify(session: ShopSession, state: dict[str, Any], order: dict[str, Any]) -> None:
    session.call("find_customer_by_email", {"email": state["customers"][order["customer_id"]]["email"]})


VIOLATIONS = {
    "order tool before identifying": lambda s, st: s.call("cancel_order", {
        "order_id": first(st, "pending")["order_id"], "reason": "no longer needed"}),
    "someone else's order": lambda s, st: (
        s.call("find_customer_by_email", {"email": next(c["email"] for c in st["customers"].values()
                                                        if c["customer_id"] != first(st, "pending")["customer_id"])}),
        s.call("cancel_order", {"order_id": first(st, "pending")["order_id"], "reason": "no longer needed"}))[-1],
    "cancel a delivered order": lambda s, st: (identify(s, st, first(st, "delivered")), s.call(
        "cancel_order", {"order_id": first(st, "delivered")["order_id"], "reason": "no longer needed"}))[-1],
    "cancel with a made-up reason": lambda s, st: (identify(s, st, first(st, "pending")), s.call(
        "cancel_order", {"order_id": first(st, "pending")["order_id"], "reason": "too expensive"}))[-1],
    "return a pending order": lambda s, st: (identify(s, st, first(st, "pending")), s.call("return_items", {
        "order_id": first(st, "pending")["order_id"], "item_ids": [first(st, "pending")["items"][0]["item_id"]],
        "refund_method_id": first(st, "pending")["payment_method_id"]}))[-1],
    "refund to a stranger's method": lambda s, st: (identify(s, st, first(st, "delivered")), s.call("return_items", {
        "order_id": first(st, "delivered")["order_id"], "item_ids": [first(st, "delivered")["items"][0]["item_id"]],
        "refund_method_id": "card_000000"}))[-1],
    "exchange for another product": lambda s, st: (identify(s, st, first(st, "delivered")), s.call(
        "exchange_items", {"order_id": first(st, "delivered")["order_id"],
                           "item_ids": [first(st, "delivered")["items"][0]["item_id"]],
                           "new_item_ids": [next(v["item_id"] for p in st["products"].values()
                                                 if p["product_id"] != first(st, "delivered")["items"][0]["product_id"]
                                                 for v in p["variants"])]}))[-1],
    "address of a delivered order": lambda s, st: (identify(s, st, first(st, "delivered")), s.call(
        "change_address", {"order_id": first(st, "delivered")["order_id"], "address": "1 Elm Road, Ashford"}))[-1],
    "wrong argument types": lambda s, st: s.call("get_order", {"order_id": 42}),
    "unknown tool": lambda s, st: s.call("refund_everything", {}),
}


@pytest.mark.parametrize("violation", sorted(VIOLATIONS))
def test_policy_violations_are_refused_without_changing_state(violation: str) -> None:
    session, state = world()
    before = state_hash(generate(7))
    result = VIOLATIONS[violation](session, state)
    assert result.startswith("Error: ")
    assert state_hash(session.state) == before


def test_a_second_return_on_the_same_order_is_refused() -> None:
    session, state = world()
    order = first(state, "delivered")
    identify(session, state, order)
    args = {"order_id": order["order_id"], "item_ids": [order["items"][0]["item_id"]],
            "refund_method_id": order["payment_method_id"]}
    assert not session.call("return_items", args).startswith("Error")
    after_first = state_hash(session.state)
    assert session.call("return_items", args).startswith("Error: ")
    assert state_hash(session.state) == after_first


@pytest.mark.parametrize("split", ["train", "eval", "test"])
def test_gold_actions_of_every_task_pass(split: str) -> None:
    for task in ENV.tasks(split):
        trajectory = as_trajectory(task, [(n, a) for n, a in task.data["gold"]], " ".join(task.data["facts"]))
        outcome = ENV.grade(task, trajectory)
        assert outcome.success and outcome.score == 1.0, (task.id, outcome)


def test_a_wrong_item_list_fails() -> None:
    task = next(t for t in ENV.tasks("train") if t.data["family"] == "return")
    gold = [(n, dict(a)) for n, a in task.data["gold"]]
    name, args = gold[-1]
    order = generate(task.data["seed"])["orders"][args["order_id"]]
    others = [i["item_id"] for i in order["items"] if i["item_id"] not in args["item_ids"]]
    wrong = {**args, "item_ids": args["item_ids"][:-1] + others if others else args["item_ids"] + ["I99999"]}
    outcome = ENV.grade(task, as_trajectory(task, gold[:-1] + [(name, wrong)]))
    assert not outcome.success and outcome.detail["state_matches"] is False and outcome.score < 1.0


def test_worlds_are_fresh_copies_and_grades_repeat_for_a_task_and_differ_for_its_gold() -> None:
    state = generate(11)
    state["orders"].clear()
    state["products"]["P100"]["variants"][0]["price"] = -1
    fresh = generate(11)
    assert fresh["orders"] and fresh["products"]["P100"]["variants"][0]["price"] > 0
    assert state_hash(generate(11)) == state_hash(fresh)
    env = ShopEnvironment()
    task = next(t for t in env.tasks("train") if t.data["family"] == "cancel")
    done = as_trajectory(task, [(n, a) for n, a in task.data["gold"]], " ".join(task.data["facts"]))
    grades = [env.grade(task, done) for _ in range(3)]
    assert grades[0].success and grades[1:] == grades[:-1]
    # the same world, another gold: what the agent did no longer matches it
    other = Task(task.id, task.text, task.split, {**task.data, "gold": task.data["gold"][:1]})
    assert not env.grade(other, done).success
    assert env.grade(task, done) == grades[0]


def test_facts_must_be_said() -> None:
    task = next(t for t in ENV.tasks("train") if t.data["family"] == "status")
    silent = ENV.grade(task, as_trajectory(task, [(n, a) for n, a in task.data["gold"]], "Bye."))
    assert not silent.success and silent.detail["facts_missing"] == task.data["facts"]
    assert silent.score == pytest.approx(0.6)


def test_splits_are_disjoint_stable_and_test_has_unseen_phrasings() -> None:
    splits = {s: ENV.tasks(s) for s in ("train", "eval", "test")}
    seeds = {s: {t.data["seed"] for t in ts} for s, ts in splits.items()}
    assert not (seeds["train"] & seeds["eval"]) and not (seeds["train"] & seeds["test"])
    assert not (seeds["eval"] & seeds["test"])
    assert ShopEnvironment().tasks("test") == splits["test"]
    assert ShopEnvironment(seed=1).tasks("test") != splits["test"]
    assert len({t.data["family"] for t in splits["train"]}) == len(FAMILIES) >= 8
    held_out = {len(FAMILIES[f][1]) - 1 for f in FAMILIES}
    assert {t.data["phrasing"] for t in splits["train"] + splits["eval"]}.isdisjoint(held_out)
    assert any(t.data["phrasing"] in held_out for t in splits["test"])


def test_entities_of_a_task() -> None:
    found = entities("I'm Maya Rossi, zip code 12345. Ship order #W1234567 to 12 Oak Street, Riverton, "
                     "I ordered it by mistake.")
    assert found["first_name"] == "Maya" and found["zip"] == "12345" and found["order_ids"] == ["#W1234567"]
    assert found["address"] == "12 Oak Street, Riverton" and found["reason"] == "ordered by mistake"


def test_scripted_agent_follows_steps_in_order_and_binds_from_results() -> None:
    task = next(t for t in ShopEnvironment(counts={"train": 200}).tasks("train")
                if t.data["family"] == "return" and "gift card" in t.text)
    # alternatives share a line: the agent takes the first whose arguments the task gives
    context = ("## Recipe: return-items\nReturn items.\n\n## How to perform\n"
               "1. `find_customer_by_name_zip(first_name, last_name, zip)` or `find_customer_by_email(email)`\n"
               "2. `get_order(order_id)`\n3. `return_items(order_id, item_ids, refund_method_id)`\n")
    steps = parse_recipes(context)[0].steps
    assert [[tool for tool, _ in step] for step in steps] == [
        ["find_customer_by_name_zip", "find_customer_by_email"], ["get_order"], ["return_items"]]
    result = run_episode(ScriptedAgent(), task, context, ENV, KBUse())
    calls = tool_calls(result.messages)
    identify = "find_customer_by_email" if "@" in task.text else "find_customer_by_name_zip"
    assert [c.name for c in calls] == [identify, "get_order", "return_items"]
    returned = calls[-1].args()
    assert returned is not None
    gift = next(m["id"] for m in json.loads(calls[0].result or "{}")["payment_methods"] if m["kind"] == "gift_card")
    assert returned["refund_method_id"] == gift  # from the find_customer result
    assert sorted(returned["item_ids"]) == task.data["gold"][-1][1]["item_ids"]  # from the get_order result
    assert result.success


def _rate(context: RecipeContext | None, split: str = "test") -> float:
    agent = ScriptedAgent()
    done = []
    for task in ENV.tasks(split):
        text, kb = context.context(task.text) if context else ("", KBUse())
        done.append(run_episode(agent, task, text, ENV, kb).success)
    return sum(done) / len(done)


def test_hand_written_recipes_beat_no_recipes() -> None:
    recipes = [read_recipe(p) for p in sorted(RECIPES.glob("*.md"))]
    with_kb = _rate(RecipeContext(RecipeIndex.build(recipes), None))
    without = _rate(None)
    assert 0.0 < without < 0.6
    assert with_kb >= without + 0.3


def test_relabelled_task_is_gradeable() -> None:
    task = next(t for t in ENV.tasks("train") if t.data["family"] == "cancel")
    state = generate(task.data["seed"])
    other = next(o for o in state["orders"].values() if o["status"] == "pending")
    email = state["customers"][other["customer_id"]]["email"]
    actions = [("find_customer_by_email", {"email": email}),
               ("cancel_order", {"order_id": other["order_id"], "reason": "ordered by mistake"})]
    relabelled = ENV.relabel_task(task, actions, "")
    assert relabelled is not None and other["order_id"] in relabelled.text
    gold = [(n, a) for n, a in relabelled.data["gold"]]
    assert ENV.grade(relabelled, as_trajectory(relabelled, gold)).success
    assert ENV.relabel_task(task, actions[:1], "") is None  # nothing changed: nothing to learn
