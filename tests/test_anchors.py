"""Recipes found by the requests they served: which user turns are requests,
anchors as retrieval units, exemplars shown (and scored) for a close request,
and which held-out conversations recur in what a KB learned from."""

from __future__ import annotations

import asyncio
import json

from brewkb.config import Boosts
from brewkb.kb import KB
from brewkb.llm.offline import OfflineBackend
from brewkb.llm.requests import request_text, request_turns
from brewkb.recipes import (
    LEARNED_FROM,
    Anchor,
    Recipe,
    anchor_line,
    anchors,
    build_body,
    render_recipe,
)
from brewkb.retrieval.index import RecipeIndex
from brewkb.retrieval.logeval import cases_of, shown_procedure
from brewkb.retrieval.memory import memory_documents
from brewkb.retrieval.ranking import (
    EXEMPLAR_LEAD,
    Retriever,
    open_index,
    render_context,
)
from brewkb.trajectories.schema import Outcome, Trajectory
from tests.conftest import MakeRepo


def _call(n: int, name: str, args: dict, result: str) -> list[dict]:
    return [{"role": "assistant", "content": None, "tool_calls": [{"id": f"c{n}", "type": "function", "function": {
        "name": name, "arguments": json.dumps(args)}}]}, {"role": "tool", "tool_call_id": f"c{n}", "content": result}]


def _say(role: str, text: str) -> dict:
    return {"role": role, "content": text}


def test_turns_that_assent_consent_or_answer_are_no_requests() -> None:
    messages = [_say("user", "Hi!"),
                _say("assistant", "Hello! How can I help you today?"),
                _say("user", "I want to cancel my trip to Denver, my plans changed."),
                _say("assistant", "Could you give me your user ID?"),
                _say("user", "Sure, my user ID is <user_id>."),  # answers what the agent asked
                _say("assistant", "Shall I cancel reservation <reservation_id> and refund the card?"),
                _say("user", "Yes, please go ahead and cancel the reservation."),  # consents to the proposal
                *_call(1, "cancel_reservation", {"reservation_id": "X"}, "ok"),
                _say("user", "Thank you so much, and can you also tell me the weather?")]  # after the last change
    assert request_turns(messages) == ["I want to cancel my trip to Denver, my plans changed."]
    # with no change made, every turn that asks counts; thanks and greetings still do not
    assert request_turns(messages[:7] + messages[9:]) == [
        "I want to cancel my trip to Denver, my plans changed.",
        "Thank you so much, and can you also tell me the weather?"]
    long = [_say("user", "word " * 200)]
    assert len(request_text(long)) <= 500 and request_text(long).endswith("…")


def _recipe(name: str, aliases: tuple[str, ...], requests: list[Anchor], how: str) -> Recipe:
    return Recipe(name=name, description=f"{name.replace('-', ' ').capitalize()}.", concept=name.replace("-", " "),
                  aliases=aliases, body=build_body([
                      ("When to use", f"The request is to {name.replace('-', ' ')}."), ("How to perform", how),
                      (LEARNED_FROM, "\n".join(anchor_line(a) for a in requests))]))


KB_RECIPES = [
    _recipe("update-reservation-flights", ("change flight", "modify flight"),
            [Anchor("I want to change my flight to a later one on the same day."),
             Anchor("Can I move my return flight to May 24?")], "1. `update_reservation_flights(reservation_id)`"),
    _recipe("send-certificate", ("send certificate",),
            [Anchor("My flight was delayed and I missed my meeting, I want compensation for the delay.",
                    ("get_user_details(user_id)", "get_flight_status(flight_number)", "send_certificate(user_id)")),
             Anchor("The delay ruined my trip, what compensation can you offer?")],
            "1. `get_user_details(user_id)`\n2. `send_certificate(user_id, amount)`"),
    _recipe("cancel-reservation", ("cancel reservation",), [Anchor("Please cancel my reservation, my plans changed.")],
            "1. `cancel_reservation(reservation_id)`")]
DELAY = ("Hi, my flight was delayed by five hours. It was the flight from PHX to SEA. Because the flight was late I "
         "missed my meeting. I expect compensation for the delay. Yes, that flight.")


def test_anchors_are_quoted_lines_and_read_back_with_their_exemplars() -> None:
    [update, send, _] = KB_RECIPES
    assert anchors(send)[0].steps == ("get_user_details(user_id)", "get_flight_status(flight_number)",
                                      "send_certificate(user_id)")
    assert [a.steps for a in anchors(update)] == [(), ()]
    # a hand-written recipe is anchored by the requests it quotes under "When to use" too
    hand = Recipe(name="refund", description="Refund.", body='\n## When to use\n\n- "Refund my order <order_id>."\n')
    assert anchors(hand) == [Anchor("Refund my order <order_id>.")]


def test_a_name_sharing_a_common_word_does_not_outrank_the_recipe_whose_anchors_match() -> None:
    ranked = [h.name for h in RecipeIndex.build(KB_RECIPES, Boosts()).search(DELAY, 3)]
    assert ranked[0] == "send-certificate"
    # without anchors, "flight" said four times meets the name and aliases of the flight recipe first
    assert RecipeIndex.build(KB_RECIPES, Boosts(anchors=0)).search(DELAY, 1)[0].name == "update-reservation-flights"


def test_a_close_request_is_shown_and_scored_with_its_exemplar() -> None:
    index = Retriever(similarity=0.5).index(KB_RECIPES)
    close = index.search("My flight was delayed and I missed my meeting. I want compensation for the delay.", 1)[0]
    assert close.exemplar is not None and close.exemplar.steps[1] == "get_flight_status(flight_number)"
    block = render_context([close])
    assert EXEMPLAR_LEAD in block and "2. `get_flight_status(flight_number)`" in block
    assert "send_certificate(user_id, amount)" not in block  # the general procedure gives way
    assert shown_procedure(close).steps == (frozenset({"get_user_details"}), frozenset({"get_flight_status"}),
                                            frozenset({"send_certificate"}))
    far = index.search("Send me a certificate.", 1)[0]
    assert far.name == "send-certificate" and far.exemplar is None
    assert "2. `send_certificate(user_id, amount)`" in render_context([far])
    assert Retriever().index(KB_RECIPES).search(DELAY, 1)[0].exemplar is None  # no similarity: never


def test_an_index_on_disk_keeps_its_anchors(make_repo: MakeRepo) -> None:
    root = make_repo({f"recipes/{r.name}.md": render_recipe(r) for r in KB_RECIPES})
    kb = KB.open(root)
    built = [h.name for h in open_index(kb).search(DELAY, 3)]
    again = [h.name for h in open_index(kb).search(DELAY, 3)]  # read back from the cache folder
    assert built == again and built[0] == "send-certificate"
    assert len(list((root / ".brewkb" / "index").rglob("anchors.npz"))) == 1


def _logged(task_id: str, task: str, turn: str, ok: bool = True, meta: dict | None = None) -> Trajectory:
    messages = [_say("user", turn), *_call(1, "cancel_order", {"order_id": "O-1"}, "ok")]
    return Trajectory(task_id=task_id, task=task, messages=tuple(messages), outcome=Outcome(ok, float(ok)),
                      meta=meta or {})


def test_a_held_out_conversation_recurs_when_the_memory_holds_its_task() -> None:
    memory = [_logged("7", "You want to cancel order O-1.", "Cancel my order please."),
              _logged("8", "You want a refund.", "Refund me.")]
    held = [_logged("7", "You want to cancel order O-1.", "Hello, I need order O-1 cancelled."),
            _logged("8", "You want to exchange a lamp.", "Please cancel order O-1."),  # the same id, another task
            _logged("9", "You want to cancel order O-1.", "Cancel my order please.")]
    assert [c.recurring for c in cases_of(held, lambda t: t, memory)] == [True, False, False]
    # logs that name no task (chat lines, traces): a request close to a remembered one recurs
    line = {"source": "openai", "line": 3}
    chat = [_logged("line-3", "Cancel my order O-1 today, please.", "Cancel my order O-1 today, please.", meta=line)]
    past = [_logged("line-3", "I want a refund for a lamp.", "I want a refund for a lamp.", meta=line),
            _logged("line-9", "Please cancel my order today.", "Please cancel my order today.",
                    meta={"source": "openai", "line": 9})]
    assert [c.recurring for c in cases_of(chat, lambda t: t, past)] == [True]
    assert [c.recurring for c in cases_of(chat, lambda t: t, past[:1])] == [False]


def test_past_conversations_are_named_after_their_writes_and_anchored_by_their_request() -> None:
    logged = _logged("7", "You want to cancel order O-1.", "I need my order O-1 cancelled, please.")
    [doc] = memory_documents("trajectories", [logged])
    assert doc.aliases == ("cancel order",)
    assert anchors(doc) == [Anchor("I need my order O-1 cancelled, please.")]
    failed = _logged("8", "x", "Cancel it.", ok=False)
    assert [d.name for d in memory_documents("all-trajectories", [logged, failed])] == [
        f"all-trajectories-{logged.id}", f"all-trajectories-{failed.id}"]
    assert len(memory_documents("trajectories", [logged, failed])) == 1


def test_the_integrator_writes_anchors_with_the_exemplars_of_runs_that_did_the_action() -> None:
    cancel = _call(1, "get_order", {"order_id": "O-1"}, '{"status": "pending"}') + \
        _call(2, "cancel_order", {"order_id": "O-1"}, "ok")
    runs = [Trajectory(task_id="t1", task="x", messages=(_say("user", "Please cancel my order O-1."), *cancel),
                       outcome=Outcome(True, 1.0)),
            Trajectory(task_id="t2", task="y", messages=(_say("user", "Could you cancel order O-1 for me?"),
                                                         *cancel[:2]), outcome=Outcome(True, 1.0))]
    backend = OfflineBackend()
    insights = [i for t in runs for i in asyncio.run(backend.reflect(t)) if i.concept == "cancel order"]
    recipe = asyncio.run(backend.integrate("cancel order", [], insights, None, 0))
    # every request, those of runs that did the action first, each with the calls that did it
    assert recipe.section(LEARNED_FROM).splitlines() == [
        '- "Please cancel my order O-1." → `get_order(order_id)`, `cancel_order(order_id)`',
        '- "Could you cancel order O-1 for me?"']
