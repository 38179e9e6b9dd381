from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

import numpy as np
import pytest

from brewkb.lint import lint_text
from brewkb.llm.embed import cosine_matrix, hashed_ngram_embeddings
from brewkb.llm.offline import OfflineBackend
from brewkb.llm.requests import verbs_in
from brewkb.llm.roles import REQUEST, Rubric
from brewkb.recipes import render_recipe
from brewkb.trajectories.schema import Outcome, Trajectory
from brewkb.trajectories.scrub import Scrubber
from brewkb.trajectories.tools import is_handoff, is_lookup, is_talk, parse_step
from tests.conftest import AIRLINE

pytestmark = pytest.mark.skipif(not AIRLINE.is_dir(), reason="needs ../shared/data/tau-bench-airline")


def airline() -> list[Trajectory]:
    runs = json.loads((AIRLINE / "gpt-4o-trajectories.json").read_text())
    return [Trajectory(task_id=str(r["task_id"]), task=r["info"]["task"]["instruction"], messages=tuple(r["traj"]),
                       outcome=Outcome(r["reward"] == 1.0, r["reward"]), meta={"trial": r["trial"]})
            for r in runs]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def insights() -> list[Any]:
    backend = OfflineBackend()

    async def go() -> list[Any]:
        out = []
        for t in airline():
            out.extend(await backend.reflect(Scrubber.build().trajectory(t)))  # as the reflect stage does
        return out

    return run(go())


def test_concepts_come_from_the_state_changing_tools(insights: list[Any]) -> None:
    concepts = Counter(i.concept for i in insights)
    for expected in ("book reservation", "cancel reservation", "update reservation baggages",
                     "update reservation flights"):
        assert concepts[expected] > 0, expected
    assert not any(c.startswith(("get ", "search ", "list ")) and concepts[c] > 20 for c in concepts)
    # a hand-off to a person is named for the request handed off; for the hand-off only when no action was asked
    handed = [i for i in insights if i.concept == "transfer to human agents"]
    assert all(verbs_in(i.task) == [] for i in handed)
    assert concepts["refund reservation"] > 0


def test_a_request_verb_is_neither_a_past_form_nor_a_noun() -> None:
    assert verbs_in("Please check the insurance on my booking; I need it added.") == []  # a thing, a done deed
    assert verbs_in("I am booking a trip and want to change my booking") == ["book", "change"]
    assert verbs_in("Cancel the order I placed, then refund it") == ["cancel", "refund"]


def test_each_concept_keeps_only_its_own_steps_and_pitfalls(insights: list[Any]) -> None:
    for insight in insights:
        if insight.kind == "together":  # another write of the same request, said as such
            assert not insight.steps[0].startswith(insight.concept.replace(" ", "_") + "(")
            continue
        if insight.kind == REQUEST:  # the conversation's calls, all of them: its exemplar
            continue
        tool = insight.concept.replace(" ", "_")
        others = [s for s in insight.steps if not s.startswith(tool + "(") and not is_lookup(s.split("(")[0])
                  and not is_talk(s.split("(")[0]) and not is_handoff(s.split("(")[0])]
        assert others == [], (insight.concept, insight.steps)
    cancel = [i.insight for i in insights if i.concept == "cancel reservation" and i.kind == "pitfall"]
    assert cancel and not any("`book_reservation(" in p.split(" failed")[0] for p in cancel)


def test_passing_runs_give_steps_in_the_recipe_convention(insights: list[Any]) -> None:
    steps = [i for i in insights if i.kind == "steps"]
    assert steps and all(i.polarity == "prescriptive" for i in steps)
    booking = next(i for i in steps if i.concept == "book reservation")
    assert booking.steps[-1].startswith("book_reservation(user_id, origin, destination")
    assert parse_step(f"1. `{booking.steps[0]}`") is not None
    assert all("HAT" not in s for i in steps for s in i.steps)  # argument names, never values


def test_tool_errors_become_pitfalls(insights: list[Any]) -> None:
    pitfalls = [i.insight for i in insights if i.kind == "pitfall"]
    assert any('failed with: "Error: gift card balance is not enough"' in p for p in pitfalls)
    assert any('`book_reservation(' in p and "payment amount does not add up" in p for p in pitfalls)
    assert all(i.polarity == "diagnostic" for i in insights if i.kind == "pitfall")


def test_integrator_samples_differ_are_seeded_and_lint_clean(insights: list[Any]) -> None:
    backend = OfflineBackend(seed=3)
    group = [i for i in insights if i.concept == "cancel reservation"]

    async def samples(b: OfflineBackend) -> list[Any]:
        return [await b.integrate("cancel reservation", ["cancel booking"], group, None, s) for s in range(4)]

    first = run(samples(backend))
    again = run(samples(OfflineBackend(seed=3)))
    assert first == again
    assert len({r.body for r in first}) > 1
    for recipe in first:
        assert recipe.name == "cancel-reservation"
        assert lint_text(f"{recipe.name}.md", render_recipe(recipe))[0] == []
        assert set(recipe.sources) <= {i.source for i in group}
        numbered = [line for line in recipe.section("How to perform").splitlines() if line[:1].isdigit()]
        assert numbered and all(parse_step(line) for line in numbered)
        assert "`cancel_reservation(reservation_id)`" in recipe.section("How to perform")
    improved = run(backend.integrate("cancel reservation", [], group[:1], first[0], 0))
    assert set(first[0].sources) <= set(improved.sources)


def test_examples_ask_for_the_recipes_action_and_pitfalls_are_written_once(insights: list[Any]) -> None:
    from brewkb.llm.requests import names_action

    flights = [i for i in insights if i.concept == "update reservation flights"]
    # an insight quotes the turn that asks for its concept's action, not the conversation's opening
    assert flights and sum(names_action(i.task, i.concept) for i in flights) > len(flights) // 2
    for concept in ("update reservation flights", "cancel reservation", "book reservation"):
        group = [i for i in insights if i.concept == concept]
        for sample in range(4):
            recipe = run(OfflineBackend(seed=sample).integrate(concept, [], group, None, sample))
            when = recipe.section("When to use")
            example = when.split("For example: ", 1)[1] if "For example: " in when else ""
            assert example == "" or names_action(example, concept), (concept, example)
            pitfalls = [line for line in recipe.section("Pitfalls").splitlines() if line.strip()]
            assert not any(a != b and a in b for a in pitfalls for b in pitfalls), pitfalls


def test_relabeller_and_judge() -> None:
    trajectories = airline()
    backend = OfflineBackend()
    failing = next(t for t in trajectories if not t.success and "cancel_reservation" in json.dumps(t.messages))
    task = run(backend.relabel(failing))
    assert task is not None and "cancel reservation with reservation_id=" in task.task
    rubrics = [Rubric("no-tool-errors", "x"), Rubric("no-repeated-calls", "y"), Rubric("concise", "z"),
               Rubric("polite", "Be polite.")]
    scores = run(backend.judge(failing, rubrics))
    assert 0.0 <= scores.scores["no-tool-errors"] <= 1.0
    assert scores.scores["polite"] is None and "cannot score" in scores.notes["polite"]


def test_offline_embedder_groups_similar_names() -> None:
    names = ["cancel reservation", "cancel reservations", "reservation cancellation", "book reservation",
             "update reservation baggages"]
    sims = cosine_matrix(hashed_ngram_embeddings(names))
    assert sims[0, 1] > sims[0, 3] and sims[0, 2] > sims[0, 4]
    assert np.allclose(np.diag(sims), 1.0, atol=1e-5)
    assert hashed_ngram_embeddings([""]).sum() == 0.0


@pytest.mark.parametrize(("tool", "reads"), [("open_claim", False), ("open_ticket", False), ("openAccount", False),
                                             ("open_file", True), ("openUrl", True), ("open_claim_details", True)])
def test_open_creates_unless_it_names_what_it_reads(tool: str, reads: bool) -> None:
    assert is_lookup(tool) is reads
