"""τ² with the tool agent and the ``user`` role against the fake endpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.tau2_policies import (
    USER_OPENING,
    USER_THANKS,
    Tau2Player,
    require_tau2,
    scripted_user,
    tau2_kb,
)

require_tau2()

from brewkb.llm.ledger import read_ledger  # noqa: E402
from brewkb.trajectories.schema import read_jsonl  # noqa: E402
from tests.conftest import git, recipe_text  # noqa: E402
from tests.fakes.openai_server import FakeOpenAI  # noqa: E402
from tests.fakes.roles import embed  # noqa: E402

AIRLINE = """\
[llm]
backend = "openai"
[llm.roles.user]
model = "user-sim"
[env]
name = "tau2"
[env.options]
domain = "airline"
[agent]
name = "tool-agent"
"""


@pytest.fixture
def endpoint() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(default=Tau2Player(), embed=embed) as fake:
        yield fake


def brewkb(cwd: Path, fake: FakeOpenAI, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": "sk-test"}
    return subprocess.run([sys.executable, "-m", "brewkb", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=600)


def test_rollout_writes_graded_conversations_whose_user_turns_come_from_the_user_role(
        tmp_path: Path, endpoint: FakeOpenAI) -> None:
    kb = tau2_kb(tmp_path / "kb", AIRLINE.replace('domain = "airline"\n', 'domain = "airline"\ntasks = 8\n'))
    planned = brewkb(kb, endpoint, "refine", "--plan", "--json")
    assert planned.returncode == 0, planned.stderr
    assert json.loads(planned.stdout)["calls"]["user"] >= 8 * 31  # train rollouts alone: 8 x (max_steps + 1)
    doctor = brewkb(kb, endpoint, "doctor", "--json")
    assert [r["role"] for r in json.loads(doctor.stdout)["roles"]][:2] == ["agent", "user"]
    probes = len(endpoint.requests)
    out = brewkb(kb, endpoint, "rollout", "--run", "r", "--split", "train", "--context", "none")
    assert out.returncode == 0, out.stderr[-3000:]
    runs = list(read_jsonl(kb / "runs" / "r" / "rollouts.jsonl"))
    assert len(runs) == 8 and {t.split for t in runs} == {"train"}
    for t in runs:
        assert t.outcome.detail["grader"] == "tau2", t.outcome.detail
        users = [m["content"] for m in t.messages if m["role"] == "user"]
        assert users == [USER_OPENING, "That is all, thank you."]  # τ²'s ###STOP### is the harness's, not said
        assert t.meta["ended_by"] == "user"
    user_calls = [r for _, r in endpoint.requests[probes:] if r.get("model") == "user-sim"]
    assert len(user_calls) == 16 and not any(r.get("tools") for r in user_calls)
    assert "<scenario>" in user_calls[0]["messages"][0]["content"]
    roles = {e.role for e in read_ledger(kb / "runs" / "r" / "ledger.jsonl") if e.kind == "chat"}
    assert {"agent", "user"} <= roles
    # A read-only conversation succeeds exactly on the tasks that expect no change and no answer.
    assert 0 < sum(t.success for t in runs) < len(runs)


def test_a_user_turn_that_is_only_taus_end_marker_is_not_recorded_and_the_episode_still_grades(
        tmp_path: Path) -> None:
    kb = tau2_kb(tmp_path / "kb", AIRLINE.replace('domain = "airline"\n', 'domain = "airline"\ntasks = 2\n'))
    with FakeOpenAI(default=Tau2Player(user=scripted_user(USER_OPENING, "###TRANSFER###")), embed=embed) as fake:
        out = brewkb(kb, fake, "rollout", "--run", "m", "--split", "train", "--context", "none")
    assert out.returncode == 0, out.stderr[-3000:]
    runs = list(read_jsonl(kb / "runs" / "m" / "rollouts.jsonl"))
    assert len(runs) == 2
    for t in runs:
        assert [m["content"] for m in t.messages if m["role"] == "user"] == [USER_OPENING]
        assert t.meta["ended_by"] == "user" and t.messages[-1]["role"] == "assistant"
        assert t.outcome.detail["grader"] == "tau2" and "error" not in t.outcome.detail, t.outcome.detail
    assert "###TRANSFER###" not in (kb / "runs" / "m" / "rollouts.jsonl").read_text()


USER_CANCEL = "Also, please cancel my reservation EHGLP3."
PER_TURN_RECIPES = {
    "look-up-profile": recipe_text("look-up-profile", "Look up a traveller's profile by the user id.",
                                   "## How to perform\n\n1. Call get_user_details.\n"),
    "cancel-reservation": recipe_text("cancel-reservation", "Cancel a reservation the traveller asks to cancel.",
                                      "## How to perform\n\n1. Call cancel_reservation.\n"),
    "pet-travel": recipe_text("pet-travel", "Bring an animal on board.", "## How to perform\n\n1. Ask.\n"),
}


def test_per_turn_retrieval_refreshes_the_system_prompt_after_each_user_turn(tmp_path: Path) -> None:
    kb = tau2_kb(tmp_path / "kb", AIRLINE + "[retrieval]\nk = 2\nper_turn = true\n")
    for name, text in PER_TURN_RECIPES.items():
        (kb / "recipes" / f"{name}.md").write_text(text)
    git(kb, "add", "-A")
    git(kb, "commit", "-qm", "recipes")
    user = scripted_user(USER_OPENING, USER_CANCEL, USER_THANKS)
    with FakeOpenAI(default=Tau2Player(user=user), embed=embed) as fake:
        out = brewkb(kb, fake, "rollout", "--run", "p", "--split", "eval", "--context", "kb")
        requests = [r for _, r in fake.requests if r.get("tools")]
    assert out.returncode == 0, out.stderr[-3000:]
    runs = list(read_jsonl(kb / "runs" / "p" / "rollouts-eval.jsonl"))
    assert len(runs) == 10
    for t in runs:
        turns = t.meta["retrievals"]  # one per user turn the agent answered (the third one stops)
        assert [(r["turn"], r["query"]) for r in turns] == [
            (0, USER_OPENING), (1, f"{USER_OPENING}\n{USER_CANCEL}")]
        assert "look-up-profile" in turns[0]["recipes"] and "cancel-reservation" not in turns[0]["recipes"]
        assert "cancel-reservation" in turns[1]["recipes"]
        assert set(t.kb.recipes) == {n for r in turns for n in r["recipes"]}
        assert "## Recipe: cancel-reservation" in t.messages[0]["content"]
    # what the endpoint was sent: the recipe enters the agent's prompt only after the user asked for it
    before = [r for r in requests if not any(m.get("content") == USER_CANCEL for m in r["messages"])]
    after = [r for r in requests if any(m.get("content") == USER_CANCEL for m in r["messages"])]
    assert before and after  # identical requests of different tasks are answered from the LLM cache
    assert all("## Recipe: look-up-profile" in r["messages"][0]["content"] for r in before + after)
    assert not any("## Recipe: cancel-reservation" in r["messages"][0]["content"] for r in before)
    assert all("## Recipe: cancel-reservation" in r["messages"][0]["content"] for r in after)


def test_refine_on_tau2_airline_ends_with_a_pr_branch(tmp_path: Path, endpoint: FakeOpenAI) -> None:
    quick = AIRLINE.replace('domain = "airline"\n', 'domain = "airline"\ntasks = 6\n')
    kb = tau2_kb(tmp_path / "kb", quick + "[stages]\nrelabel = false\n"
                                          "[search]\niterations = 1\nwidth = 1\ndepth = 1\nsamples = 1\n")
    out = brewkb(kb, endpoint, "refine", "--run", "r", "--no-eval", "--json")
    assert out.returncode == 0, out.stderr[-3000:]
    learned = {t.task_id for t in read_jsonl(kb / "runs" / "r" / "rollouts.jsonl")}
    assert len(learned) == 6  # env.options.tasks: the first six of the train split
    assert git(kb, "rev-parse", "--verify", "-q", "refs/heads/brew/r/pr").strip()
    roles = {e.role for e in read_ledger(kb / "runs" / "r" / "ledger.jsonl") if e.kind == "chat" and not e.error}
    assert {"agent", "user", "reflector", "integrator"} <= roles


def test_a_tau2_run_results_file_made_against_the_fake_endpoint_imports_with_its_rewards(
        tmp_path: Path, endpoint: FakeOpenAI) -> None:
    from brewkb.envs.tau2 import _tau2

    registry = _tau2().registry
    from tau2.run import run_tasks  # τ²'s own runner, as `tau2 run` calls it

    tasks = [t for t in registry.get_tasks_loader("airline")(None) if t.id in ("6", "18")]
    args = {"api_base": endpoint.base_url, "api_key": "sk-test", "temperature": 0.0}
    results = tmp_path / "results.json"
    run_tasks("airline", tasks, "llm_agent", "user_simulator", llm_agent="openai/agent-model",
              llm_args_agent=args, llm_user="openai/user-model", llm_args_user=args, save_to=results,
              console_display=False, max_concurrency=1, log_level="ERROR")
    rewards = {s["task_id"]: s["reward_info"]["reward"] for s in json.loads(results.read_text())["simulations"]}
    assert rewards == {"6": 1.0, "18": 0.0}  # a lookup solves 6; 18 needs five flight changes
    kb = tau2_kb(tmp_path / "kb", AIRLINE)
    out = brewkb(kb, endpoint, "import", str(results), "--format", "tau2", "--run", "imported", "--json")
    assert out.returncode == 0, out.stderr
    imported = {t.task_id: (t.success, t.outcome.score) for t in read_jsonl(kb / "runs" / "imported" / "rollouts.jsonl")}
    assert imported == {"6": (True, 1.0), "18": (False, 0.0)}


EXAMPLE_AGENT = Path(__file__).resolve().parents[1] / "examples" / "tool_channel_agent.py"


def test_a_command_agent_calls_tools_through_the_channel_and_tau2_grades_it(
        tmp_path: Path, endpoint: FakeOpenAI) -> None:
    kb = tau2_kb(tmp_path / "kb", AIRLINE.replace('name = "tool-agent"', 'name = "command"\ncommand = '
                                                  + json.dumps([sys.executable, str(EXAMPLE_AGENT)])))
    out = brewkb(kb, endpoint, "rollout", "--run", "c", "--split", "eval", "--context", "none")
    assert out.returncode == 0, out.stderr[-3000:]
    runs = list(read_jsonl(kb / "runs" / "c" / "rollouts-eval.jsonl"))
    assert len(runs) == 10
    for t in runs:
        assert t.meta["tool_channel_calls"] == 1, t.meta
        [call] = [m for m in t.messages if m.get("tool_calls")]
        assert call["tool_calls"][0]["function"]["name"] == "get_user_details"
        [result] = [m for m in t.messages if m["role"] == "tool"]
        assert '"user_id": "mia_li_3668"' in result["content"]  # answered by τ²'s airline database
        assert t.outcome.detail["grader"] == "tau2" and "reward_breakdown" in t.outcome.detail


def test_the_channel_refuses_a_wrong_token_and_records_only_served_calls() -> None:
    import urllib.error
    import urllib.request

    from brewkb.agents.channel import ToolChannel

    class Echo:
        def call(self, name: str, arguments: dict[str, object]) -> str:
            return f"{name}:{json.dumps(arguments)}"

    with ToolChannel(Echo(), [{"type": "function", "function": {"name": "f"}}]) as channel:
        def post(token: str) -> tuple[int, dict[str, object]]:
            req = urllib.request.Request(channel.url + "/call", data=b'{"name": "f", "arguments": {"a": 1}}',
                                         headers={"Authorization": f"Bearer {token}"})
            try:
                with urllib.request.urlopen(req, timeout=10) as r:
                    return r.status, json.loads(r.read())
            except urllib.error.HTTPError as exc:
                return exc.code, json.loads(exc.read())

        assert post("wrong")[0] == 401
        assert post(channel.token) == (200, {"content": 'f:{"a": 1}'})
    assert channel.calls == [("f", {"a": 1}, 'f:{"a": 1}')]


def test_a_user_simulator_that_greets_like_an_assistant_is_named_counted_and_refused_by_doctor(
        tmp_path: Path) -> None:
    from tests.fakes.roles import GREETING, SmallModel

    kb = tau2_kb(tmp_path / "kb", AIRLINE.replace('domain = "airline"\n', 'domain = "airline"\ntasks = 2\n')
                 .replace('name = "tool-agent"', 'name = "tool-agent"\nmax_steps = 4'))
    with FakeOpenAI(default=SmallModel(Tau2Player(), user_greets=True), embed=embed) as fake:
        out = brewkb(kb, fake, "eval", "--split", "test", "--context", "none", "--json")
        doctor = brewkb(kb, fake, "doctor", "--long-prompt", "200")
    assert out.returncode == 0, out.stderr[-3000:]
    [column] = json.loads(out.stdout)
    assert column["degenerate"] == column["episodes"] > 0
    assert "conversations are degenerate (a user who never stated a request" in out.stderr
    ledger = read_ledger(Path(column["ledger"]))
    users = [e for e in ledger if e.role == "user"]
    assert users and column["llm_calls"] == sum(1 for e in ledger if e.role in ("agent", "user"))
    assert doctor.returncode == 1 and "answered as an assistant" in doctor.stdout and repr(GREETING[:20]) [1:-1] \
        in doctor.stdout
