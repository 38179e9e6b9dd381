from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from brewkb.config import LLMConfig
from brewkb.errors import LLMError
from brewkb.llm.client import LLMClient
from brewkb.llm.llm_roles import SCHEMAS, LLMBackend, prompt
from brewkb.llm.schema import validate
from brewkb.llm.roles import Insight, Rubric
from brewkb.trajectories.schema import Outcome, Trajectory
from tests.fakes.openai_server import FakeOpenAI

TRAJ = Trajectory(task_id="t1", task="Cancel order #W1", outcome=Outcome(False, 0.0), messages=(
    {"role": "user", "content": "Cancel order #W1"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "cancel_order", "arguments": '{"order_id": "W1"}'}}]},
    {"role": "tool", "tool_call_id": "a", "content": "Error: identify the customer first"},
))


def backend(fake: FakeOpenAI) -> LLMBackend:
    return LLMBackend(LLMClient(LLMConfig(backend="openai", base_url=fake.base_url, model="gpt-4o-mini"), environ={}))


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_reflect_sends_the_prompt_and_parses_insights() -> None:
    with FakeOpenAI() as fake:
        fake.reply({"content": json.dumps({"insights": [
            {"concept": "cancel an order", "insight": "Identify the customer first.", "steps": []}]})})
        insights = run(backend(fake).reflect(TRAJ))
        body = fake.requests[0][1]
    assert insights == [Insight("cancel an order", "Identify the customer first.", "diagnostic", TRAJ.id, "t1",
                                "Cancel order #W1", (), "pitfall")]
    assert body["messages"][0]["content"] == prompt("reflector")
    assert "Error: identify the customer first" in body["messages"][1]["content"]
    assert body["response_format"]["json_schema"]["name"] == "reflection"
    assert body["temperature"] == 0.1


def test_rubric_scores_reach_the_reflector() -> None:
    judged = TRAJ.with_(rubric={"scores": {"no-tool-errors": 0.0, "concise": None},
                                "notes": {"no-tool-errors": "1 of 1 tool calls failed"}})
    with FakeOpenAI() as fake:
        answer = {"content": json.dumps({"insights": [{"concept": "cancel an order", "steps": [],
                                                        "insight": "Look the customer up before cancelling."}]})}
        fake.reply(answer)
        run(backend(fake).reflect(judged))
        fake.reply(answer)
        run(backend(fake).reflect(TRAJ))
        judged_input, plain_input = (fake.requests[i][1]["messages"][1]["content"] for i in (0, 1))
    assert "- no-tool-errors: 0.00 — 1 of 1 tool calls failed" in judged_input and "- concise: unscored" in judged_input
    assert "Rubric scores" not in plain_input and "rubric scores" in prompt("reflector")


def test_integrate_builds_a_recipe_at_integrator_temperature() -> None:
    reply = {"description": "Cancel a pending order.", "when_to_use": "A customer asks to cancel.",
             "how_to_perform": "1. `find_customer(email)`\n2. `cancel_order(order_id, reason)`",
             "pitfalls": "- Identify the customer first.", "example": "Cancel #W1"}
    with FakeOpenAI() as fake:
        fake.reply({"content": json.dumps(reply)})
        insight = Insight("cancel an order", "Identify first.", "diagnostic", "s1", "t1", "Cancel #W1",
                          ("find_customer(email)", "cancel_order(order_id, reason)"))
        recipe = run(backend(fake).integrate("cancel an order", ["order cancellation"], [insight], None, 2))
        body = fake.requests[0][1]
    assert recipe.name == "cancel-an-order" and recipe.sources == ("s1",)
    assert recipe.section("How to perform").startswith("1. `find_customer(email)`")
    assert body["temperature"] == 0.7 and body["seed"] == 2


def test_judge_and_relabel_and_a_nonsense_judge() -> None:
    with FakeOpenAI() as fake:
        fake.reply({"content": json.dumps({"scores": [{"id": "no-tool-errors", "score": 0.5, "note": "one error"}]})},
                   {"content": json.dumps({"summary": "Tried to cancel W1.", "task": "Cancel order W1 now."})},
                   *[{"content": json.dumps({"scores": [{"id": "other", "score": 1, "note": "?"}]})}] * 2)
        b = backend(fake)
        scores = run(b.judge(TRAJ, [Rubric("no-tool-errors", "No tool errors.")]))
        relabelled = run(b.relabel(TRAJ))
        with pytest.raises(LLMError, match="scored none of the rubrics"):
            run(b.judge(TRAJ, [Rubric("no-tool-errors", "No tool errors.")]))
    assert scores.scores == {"no-tool-errors": 0.5}
    assert relabelled is not None and relabelled.task == "Cancel order W1 now."


def test_free_texts_are_bounded_so_a_constrained_server_ends_its_reply() -> None:
    def reflection(insight: str, steps: list[str]) -> dict[str, Any]:
        return {"insights": [{"concept": "cancel an order", "insight": insight, "steps": steps}]}

    assert validate(reflection("i" * 600, ["s" * 200] * 10), SCHEMAS["reflection"]) == []
    assert validate(reflection("i" * 601, []), SCHEMAS["reflection"]) == [
        "$.insights[0].insight: longer than 600 characters"]
    assert validate(reflection("ok", ["s"] * 11), SCHEMAS["reflection"])
    judged = {"scores": [{"id": "concise", "score": 1, "note": "n" * 301}]}
    assert validate(judged, SCHEMAS["judge"]) == ["$.scores[0].note: longer than 300 characters"]
