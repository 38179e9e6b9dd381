"""A small local model behind an OpenAI-compatible server, as a user meets it
first: tool calls written as text, a user simulator that greets instead of
asking, a judge that scores no rubric, a reflector that invents a tool, a
server that serves one model and no embeddings. Each through the real CLI
against the fake server answering that way (``tests.fakes.roles.SmallModel``)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from brewkb.llm.ledger import read_ledger, summarise
from tests.conftest import MakeRepo
from tests.fakes import servers
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.roles import GREETING, SmallModel, schema_name, embed

SHOP = """\
[llm]
backend = "openai"
max_retries = 0
[env]
name = "shop"
options = { train = 3, eval = 2, test = 2 }
[agent]
name = "tool-agent"
max_steps = 6
[stages]
relabel = false
"""
MODEL = "qwen2.5-coder-1.5b-instruct"


def brewkb(cwd: Path, fake: FakeOpenAI, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    env["OPENAI_BASE_URL"] = fake.base_url  # a local server: no key, no model named
    return subprocess.run([sys.executable, "-m", "brewkb", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=300)


def posts(fake: FakeOpenAI, kind: str = "") -> list[dict[str, object]]:
    return [body for path, body in fake.requests if path.endswith(kind) and body]


def rejects(root: Path, run: str) -> list[dict[str, str]]:
    path = root / "runs" / run / "invalid-replies.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def shop(make_repo: MakeRepo) -> Path:
    return make_repo({"brewkb.toml": SHOP, "recipes/.keep": ""})


@pytest.mark.parametrize("style", ["fenced", "tags"])
def test_tool_calls_written_as_text_are_run_as_calls_and_recorded(shop: Path, style: str) -> None:
    with FakeOpenAI(default=SmallModel(calls_as=style), embed=embed, models=[MODEL]) as fake:
        out = brewkb(shop, fake, "rollout", "--run", "r", "--split", "train")
        assert all(body["model"] == MODEL for body in posts(fake, "/chat/completions"))
    assert out.returncode == 0, out.stderr
    rollouts = [json.loads(line) for line in (shop / "runs" / "r" / "rollouts.jsonl").read_text().splitlines()]
    assert len(rollouts) == 3
    for t in rollouts:
        called = [c["function"]["name"] for m in t["messages"] for c in m.get("tool_calls") or []]
        assert called and t["meta"]["calls_from_text"] == len(called)
        assert set(called) <= set(t["meta"]["tools"])
        answers = [m for m in t["messages"] if m["role"] == "tool"]
        assert len(answers) == len(called) and all("unknown tool" not in m["content"] for m in answers)
    modes = summarise(read_ledger(shop / "runs" / "r" / "ledger.jsonl"), {})["agent"].modes
    assert modes["text_tools"] == sum(t["meta"]["calls_from_text"] for t in rollouts)


def test_call_shaped_text_that_is_no_call_is_a_recorded_error_not_an_answer(shop: Path) -> None:
    with FakeOpenAI(default=SmallModel(calls_as="broken"), embed=embed, models=[MODEL]) as fake:
        out = brewkb(shop, fake, "rollout", "--run", "r", "--split", "train")
    assert out.returncode == 1
    assert "all 3 episodes failed to run: the agent's reply is neither a tool call nor an answer: a tool call " \
           "written as text is not valid JSON" in out.stderr
    kept = rejects(shop, "r")
    assert len(kept) == 3 and {k["role"] for k in kept} == {"agent"}
    assert all(k["item"].startswith("episode:") and '"arguments": {order_id: W1}' in k["text"] for k in kept)


def test_garbage_replies_are_never_cached_kept_for_reading_and_asked_again_after_a_fix(shop: Path) -> None:
    """A judge that scores no rubric (the newcomer's blocked resume), a reflector
    that invents a tool, one that returns its prompt's example: each fails its
    items after one repair, is kept in invalid-replies.jsonl, is not cached,
    and the same command asks again once the model is fixed."""
    model = SmallModel()
    folder = shop / "runs" / "r"
    with FakeOpenAI(default=model, embed=embed, models=[MODEL]) as fake:
        assert brewkb(shop, fake, "rollout", "--run", "r", "--split", "train").returncode == 0
        model.judge_scores_none = True
        failed = brewkb(shop, fake, "reflect", "r")
        assert failed.returncode == 1
        assert "all 3 grades failed: judge: " in failed.stderr and "scored none of the rubrics" in failed.stderr
        assert f"its replies are kept in {folder / 'invalid-replies.jsonl'}" in failed.stderr
        kept = rejects(shop, "r")
        assert len(kept) == 6 and all(k["role"] == "judge" and k["text"] == '{"scores": []}' for k in kept)
        assert all(k["item"].startswith("grades:") and "scored none of the rubrics" in k["why"] for k in kept)
        model.judge_scores_none = False
        for habit, why in (("invents", "the step 'tool_name(order_id, reason)' names the tool tool_name, which "
                                       "this episode does not have"),
                           ("example", "the concept 'Exchange delivered items' is an example from the "
                                       "instructions")):
            model.reflector = habit
            before = len(posts(fake, "/chat/completions"))
            out = brewkb(shop, fake, "reflect", "r")
            assert out.returncode == 1 and "all 3 reflections failed: reflector: " in out.stderr, out.stderr
            assert why in out.stderr
            mine = [k for k in rejects(shop, "r") if k["role"] == "reflector" and why in k["why"]]
            assert len(mine) == 6 and all(k["item"].startswith("reflections:") for k in mine)
            if habit == "invents":  # the judge was asked again: its bad replies were never cached
                judged = [b for b in posts(fake, "/chat/completions")[before:]
                          if (b.get("response_format") or {}).get("json_schema", {}).get("name") == "judge"]
                assert len(judged) == 3
        assert not (folder / "reflections.jsonl").exists()
        with sqlite3.connect(shop / ".brewkb" / "llm-cache.sqlite") as db:
            assert db.execute("SELECT COUNT(*) FROM responses WHERE role = 'reflector'").fetchone()[0] == 0
        model.reflector = None
        again = brewkb(shop, fake, "reflect", "r")
    assert again.returncode == 0, again.stderr
    assert len((folder / "reflections.jsonl").read_text().splitlines()) >= 3


def test_eval_refuses_an_unknown_run_before_any_episode(shop: Path) -> None:
    with FakeOpenAI(default=SmallModel(), embed=embed, models=[MODEL]) as fake:
        out = brewkb(shop, fake, "eval", "--run", "t2")
        assert out.returncode == 1 and "no run 't2'" in out.stderr
        assert posts(fake) == []
        done = brewkb(shop, fake, "eval", "--json")  # without --run, the calls are in a ledger all the same
    assert done.returncode == 0, done.stderr
    columns = json.loads(done.stdout)
    ledger = read_ledger(shop / ".brewkb" / "eval" / "ledger.jsonl")
    assert {c["ledger"] for c in columns} == {str(shop / ".brewkb" / "eval" / "ledger.jsonl")}
    assert sum(c["llm_calls"] for c in columns) == sum(1 for e in ledger if e.role == "agent") > 0


def test_demo_small_against_a_server_with_one_model_and_no_embeddings(tmp_path: Path) -> None:
    with FakeOpenAI(default=SmallModel(calls_as="fenced"), models=[MODEL], embeddings=False) as fake:
        out = brewkb(tmp_path, fake, "demo", "--backend", "openai", "--small", "--dir", str(tmp_path / "demo"))
        sent = {body.get("model") for body in posts(fake)}
        embeddings = posts(fake, "/embeddings")
    assert out.returncode == 0, out.stderr[-3000:]
    plan = next(line for line in out.stderr.splitlines() if line.startswith("plan: "))
    episodes, calls = (int(plan.split()[i]) for i in (3, 7))
    assert 0 < episodes <= 60 and 0 < calls <= 300, plan
    assert sent == {MODEL} and len(embeddings) == 1  # asked once, then the offline embedder
    assert out.stderr.count("has no embeddings endpoint (HTTP 501") == 1
    assert "learned recipes: 1" in out.stdout or "learned recipes: 2" in out.stdout
    totals = summarise(read_ledger(tmp_path / "demo" / "runs" / "demo" / "ledger.jsonl"), {})
    assert totals["agent"].modes["text_tools"] > 0 and sum(t.calls - t.cached for t in totals.values()) <= calls


@pytest.mark.parametrize("wrong_at", ["stage", "search"])
def test_the_small_demo_goes_on_without_a_reflection_the_model_got_wrong(tmp_path: Path, wrong_at: str) -> None:
    """The model names a tool the episode lacks: in the reflections stage for the first episode it reflects
    on (its repair too), or in the search (once a recipe was asked for) for every episode."""
    model, inventor = SmallModel(calls_as="fenced"), SmallModel(reflector="invents")
    wrong: list[str] = []
    integrated: list[bool] = []

    def answer(body: dict[str, object]) -> dict[str, object]:
        messages = body["messages"]
        assert isinstance(messages, list)
        integrated.extend([True] if schema_name(body) == "recipe" else [])
        if schema_name(body) == "reflection":
            wrong[:] = wrong or [messages[1]["content"]]
            if integrated if wrong_at == "search" else messages[1]["content"] == wrong[0]:
                return inventor(body)
        reply = model(body)
        if integrated and body.get("tools") and reply.get("content") and not reply.get("tool_calls"):  # with the recipe
            reply = {**reply, "content": f"{reply['content']} (as the recipe says)"}
        return reply

    with FakeOpenAI(default=answer, models=[MODEL], embeddings=False) as fake:
        out = brewkb(tmp_path, fake, "demo", "--backend", "openai", "--small", "--dir", str(tmp_path / "demo"))
    assert out.returncode == 0, out.stderr[-3000:]
    if wrong_at == "stage":
        assert "reflections: 1 of 6 reflections failed; the first: reflector:" in out.stderr
        failures = (tmp_path / "demo" / "runs" / "demo" / "failures.jsonl").read_text().splitlines()
        assert len(failures) == 1 and "names the tool tool_name" in failures[0]
    else:
        assert "gives no insight (left out: stages.accept_failed): reflector:" in out.stderr, out.stderr[-3000:]


def test_doctor_names_calls_from_text_and_a_model_it_cannot_choose(shop: Path) -> None:
    with FakeOpenAI(default=SmallModel(servers.responder(), calls_as="tags"), embed=embed, models=[MODEL]) as fake:
        out = brewkb(shop, fake, "doctor", "--json", "--long-prompt", "200")
    assert out.returncode == 0, out.stdout + out.stderr
    roles = {r["role"]: r for r in json.loads(out.stdout)["roles"]}
    assert roles["agent"]["model"] == MODEL and roles["agent"]["checks"]["model"]["short"] == "served"
    assert roles["agent"]["checks"]["tools"]["short"] == "from text"
    assert "text_tools" in roles["agent"]["checks"]["tools"]["detail"]
    with FakeOpenAI(default=SmallModel(), models=[MODEL, "another"]) as fake:
        two = brewkb(shop, fake, "doctor")
    assert two.returncode == 1
    assert "no model is configured and " in two.stdout and "serves 2 models" in two.stdout
    assert "set llm.model (or OPENAI_MODEL)" in two.stdout


def test_a_user_simulator_that_greets_is_refused_by_doctor(make_repo: MakeRepo) -> None:
    """The doctor's user probe needs no τ² install: any config asks it when the user role is used."""
    from brewkb.llm.turns import degenerate, states_nothing

    assert states_nothing(GREETING) and not states_nothing("Hi, I want to move my appointment to Friday.")
    assert degenerate([GREETING] * 3, ["Hi! How can I help you today?"] * 3) is not None
    assert degenerate(["I want to cancel #W1.", "Yes, please."], ["Done.", "Anything else?"]) is None
    with FakeOpenAI(default=SmallModel(user_greets=True), models=[MODEL]) as fake:
        from brewkb.config import LLMConfig
        from brewkb.llm.client import LLMClient
        from brewkb.llm.doctor import diagnose
        import asyncio

        client = LLMClient(LLMConfig(backend="openai", base_url=fake.base_url), environ={})

        async def probe() -> object:
            try:
                return await diagnose(client, ["user"], key_present=False, long_prompt=200)
            finally:
                await client.aclose()

        [report] = asyncio.run(probe())
    assert report.checks["plays_user"].status == "FAIL" and not report.ok  # type: ignore[attr-defined]
    assert "answered as an assistant" in report.checks["plays_user"].detail  # type: ignore[attr-defined]


def test_calls_in_text_are_read_in_every_common_shape_and_only_for_offered_tools() -> None:
    from brewkb.llm.textcalls import read_calls

    offered = ["find_order", "cancel_order"]
    one = '{"name": "find_order", "arguments": {"order_id": "#W1"}}'
    for text in (one, f"Sure.\n```json\n{one}\n```", f"<tool_call>\n{one}\n</tool_call>",
                 one.replace("arguments", "parameters")):
        found = read_calls(text, offered)
        assert found.problem is None and [c["function"]["name"] for c in found.calls] == ["find_order"], text
        assert json.loads(found.calls[0]["function"]["arguments"]) == {"order_id": "#W1"}
    both = read_calls(f"[{one}, {one.replace('find_order', 'cancel_order')}]", offered)
    assert [c["function"]["name"] for c in both.calls] == ["find_order", "cancel_order"]
    assert "not one of the tools offered" in (read_calls(one.replace("find_order", "tool_name"), offered).problem or "")
    assert "not valid JSON" in (read_calls("<tool_call>{name: find_order}</tool_call>", offered).problem or "")
    answer = read_calls("Your order {#W1} is cancelled; the refund is {\"amount\": 12}.", offered)
    assert answer.calls == () and answer.problem is None


def test_concept_names_are_one_whatever_their_case_or_separators_and_a_prompt_example_is_refused() -> None:
    from brewkb.llm.content import reflection_problem
    from brewkb.llm.requests import verb_of
    from brewkb.stages.reflect import clean_concept
    from brewkb.trajectories.schema import Outcome, Trajectory

    names = {clean_concept(n) for n in ("change_flight", "Change-Flight", "change flight", "changeFlight")}
    assert names == {"change flight"} and verb_of("change flight") == verb_of("modify flight")
    episode = Trajectory(task_id="t", task="Move my flight", outcome=Outcome(True, 1.0), messages=(
        {"role": "user", "content": "Move my flight"}, {"role": "assistant", "content": "Done."}))
    example = {"insights": [{"concept": "Cancel-a-pending-order", "insight": "x", "steps": []}]}
    assert "is an example from the instructions" in (reflection_problem(example, episode) or "")
    claims = {"insights": [{"concept": "change flight", "insight": "It calls `update_flight` first.", "steps": []}]}
    assert "made no tool call" in (reflection_problem(claims, episode.with_(
        messages=(*episode.messages, {"role": "system", "content": "tools: update_flight"}))) or "")
    # replies that fit the schema and say nothing: a concept or insight of no word, a procedure of no call
    from brewkb.llm.content import recipe_problem

    for empty in ({"concept": "n a", "insight": "Move it.", "steps": []}, {"concept": "move flight", "insight": "n/a"}):
        assert "says nothing" in (reflection_problem({"insights": [empty]}, episode) or "")
    vague = {"how_to_perform": "Handle the request carefully."}
    assert "names no tool call" in (recipe_problem(vague, ["A run did `update_flight(flight_id)`"]) or "")
