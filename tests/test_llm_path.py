"""The LLM path end to end: the real CLI in a subprocess, LLM roles and the
tool-calling agent against a scripted OpenAI-compatible endpoint."""

from __future__ import annotations

import ast
import asyncio
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from brewkb.api.loop import run_command
from brewkb.errors import BrewError
from brewkb.llm.ledger import read_ledger, summarise
from tests.conftest import MakeRepo, git
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.roles import InvalidFirst, Outage, embed, role_player

PACKAGE = Path(__file__).resolve().parents[1] / "brewkb"
TRACEBACK = re.compile(r"Traceback|Task exception was never retrieved|Event loop is closed|never awaited"
                       r"|this is a bug")

SHOP = """\
[llm]
backend = "openai"
[env]
name = "shop"
options = {{ train = 10, eval = 5, test = 6 }}
[agent]
name = "tool-agent"
[search]
strategy = "{strategy}"
iterations = 1
width = 2
depth = 1
samples = 2
"""


@pytest.fixture
def endpoint() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(default=role_player, embed=embed) as fake:
        yield fake


def brewkb(cwd: Path, fake: FakeOpenAI, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": "sk-test"}
    return subprocess.run([sys.executable, "-m", "brewkb", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=timeout)


def shop_kb(make_repo: MakeRepo, strategy: str = "mcts", extra: str = "", name: str | None = None) -> Path:
    return make_repo({"brewkb.toml": SHOP.format(strategy=strategy) + extra, "recipes/.keep": ""}, name=name)


def assert_clean_run(root: Path, out: subprocess.CompletedProcess[str], run: str) -> None:
    """Exit 0, a PR branch, LLM calls of the agent and the roles in the ledger, no traceback."""
    assert out.returncode == 0, out.stderr[-3000:]
    assert not TRACEBACK.search(out.stderr), out.stderr[-3000:]
    assert git(root, "rev-parse", "--verify", "-q", f"refs/heads/brew/{run}/pr").strip()
    roles = {e.role for e in read_ledger(root / "runs" / run / "ledger.jsonl") if e.kind == "chat" and not e.error}
    assert {"agent", "reflector", "integrator", "judge"} <= roles


def test_no_event_loop_is_started_below_the_api() -> None:
    starters = {"run", "run_until_complete", "new_event_loop", "Runner"}
    found = []
    for path in PACKAGE.rglob("*.py"):
        if path.relative_to(PACKAGE).parts[:1] in (("api",), ("cli",)):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in starters and \
                    isinstance(node.value, ast.Name) and node.value.id == "asyncio":
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert found == []


def test_the_api_refuses_to_nest_in_a_running_loop() -> None:
    async def inner() -> int:
        return 1

    async def outer() -> None:
        coroutine = inner()
        with pytest.raises(BrewError, match="asyncio.to_thread"):
            run_command(coroutine)
        assert coroutine.cr_frame is None  # closed, so no "never awaited" warning

    asyncio.run(outer())
    assert run_command(inner()) == 1


def test_refine_with_the_tool_agent_for_each_strategy(make_repo: MakeRepo, endpoint: FakeOpenAI) -> None:
    root = shop_kb(make_repo)
    for strategy in ("mcts", "greedy", "iterative"):  # later runs replay the stages' calls from the cache
        out = brewkb(root, endpoint, "refine", "--run", strategy, "--strategy", strategy, "--json")
        assert_clean_run(root, out, strategy)
        result = json.loads(out.stdout.splitlines()[-1])
        assert result["nodes"] > len(result["concepts"])  # the search made children, not only roots
        spec = json.loads((root / "runs" / strategy / "manifest.json").read_text())["search_spec"]["spec"]
        assert spec["strategy"] == strategy


def test_demo_with_an_llm_backend(tmp_path: Path, endpoint: FakeOpenAI) -> None:
    out = brewkb(tmp_path, endpoint, "demo", "--backend", "openai", "--small", "--dir", str(tmp_path / "demo"))
    assert_clean_run(tmp_path / "demo", out, "demo")
    assert "openai backend" in out.stdout and "brew/demo/pr" in out.stdout


class Gate:
    """Holds the first integrator request made once the run's ``kb`` branch
    exists (so inside a search iteration) until released."""

    def __init__(self, root: Path, run: str) -> None:
        self.kb_ref = root / ".git" / "refs" / "heads" / "brew" / run / "kb"
        self.holding, self.released = threading.Event(), threading.Event()

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        schema = (body.get("response_format") or {}).get("json_schema", {}).get("name")
        if schema == "recipe" and self.kb_ref.exists() and not self.released.is_set():
            self.holding.set()
            self.released.wait(60)
        return role_player(body)


def test_sigkill_mid_refine_then_resume(make_repo: MakeRepo) -> None:
    root = shop_kb(make_repo)
    gate = Gate(root, "r")
    with FakeOpenAI(default=gate, embed=embed) as fake:
        env = {**os.environ, "OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": "sk-test"}
        process = subprocess.Popen([sys.executable, "-m", "brewkb", "refine", "--run", "r"], cwd=root, env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            assert gate.holding.wait(120), "the search never reached an expansion"
            process.send_signal(signal.SIGKILL)
            process.wait(30)
        finally:
            gate.released.set()
            process.kill()
        assert process.returncode == -signal.SIGKILL
        assert not (root / ".git" / "refs" / "heads" / "brew" / "r" / "pr").exists()
        nodes_before = len(git(root, "for-each-ref", "refs/heads/brew/r/").splitlines())
        out = brewkb(root, fake, "refine", "--resume", "r")
    assert_clean_run(root, out, "r")
    assert len(git(root, "for-each-ref", "refs/heads/brew/r/").splitlines()) > nodes_before


@pytest.mark.xdist_group("ray")  # one local Ray cluster at a time, whatever the parallel workers
def test_ray_executor_with_the_tool_agent(make_repo: MakeRepo, endpoint: FakeOpenAI) -> None:
    pytest.importorskip("ray")
    root = shop_kb(make_repo, extra='[executor]\nname = "ray"\nworkers = 2\n')
    out = brewkb(root, endpoint, "refine", "--run", "r", "--no-cache")
    assert_clean_run(root, out, "r")
    # with Ray the driver runs no episode: the agent's calls were recorded by the workers
    assert any(e.role == "agent" for e in read_ledger(root / "runs" / "r" / "ledger.jsonl"))


def cached_contents(root: Path) -> list[str]:
    with sqlite3.connect(root / ".brewkb" / "llm-cache.sqlite") as db:
        return [json.loads(v).get("content") or "" for (v,) in db.execute(
            "SELECT value FROM responses WHERE kind = 'chat'")]


def test_invalid_json_replies_are_repaired_counted_and_never_cached(make_repo: MakeRepo) -> None:
    root = shop_kb(make_repo)
    with FakeOpenAI(default=InvalidFirst(3), embed=embed) as fake:
        stopped = brewkb(root, fake, "refine", "--run", "r")
        # the items whose repair was invalid too stop the run after their stage; resuming retries only them
        assert stopped.returncode == 1 and " grades failed in stage grades (the first: judge: " in stopped.stderr
        assert "continue with `brewkb refine --resume r`" in stopped.stderr
        out = brewkb(root, fake, "refine", "--resume", "r")
    assert_clean_run(root, out, "r")
    errors = [e.error for e in read_ledger(root / "runs" / "r" / "ledger.jsonl") if e.error]
    assert len(errors) == 6 and all(e.startswith("invalid reply: it is not JSON") for e in errors)
    contents = cached_contents(root)
    assert contents and not any("Here is the JSON" in c for c in contents)
    entries = json.loads(brewkb(root, fake, "cache", "stats", "--json").stdout)["entries"]
    cleared = brewkb(root, fake, "cache", "clear", "--run", "r", "--yes")
    assert cleared.stdout.strip() == f"Deleted {entries} entries." and entries > len(contents)  # chat + embeddings


def stages_done(root: Path, run: str) -> dict[str, Any]:
    manifest = root / "runs" / run / "manifest.json"
    return json.loads(manifest.read_text()).get("stages", {}) if manifest.exists() else {}


def test_a_dead_endpoint_fails_loudly_and_the_same_command_recovers(make_repo: MakeRepo) -> None:
    root = shop_kb(make_repo)
    config = (root / "brewkb.toml").read_text().replace('backend = "openai"', 'backend = "openai"\nmax_retries = 0')
    (root / "brewkb.toml").write_text(config)
    outage = Outage()
    with FakeOpenAI(default=outage, embed=embed) as fake:
        down = brewkb(root, fake, "rollout", "--run", "r")
        assert down.returncode == 1 and not TRACEBACK.search(down.stderr)
        assert "all 10 episodes failed to run: " in down.stderr and "HTTP 500: the model is overloaded" in down.stderr
        assert "run the same command again" in down.stderr
        assert "rollouts" not in stages_done(root, "r")
        assert "(next: rollouts), 10 failed items" in brewkb(root, fake, "runs").stdout
        assert summarise(read_ledger(root / "runs" / "r" / "ledger.jsonl"), {})["agent"].errors == 10
        outage.recover()
        assert brewkb(root, fake, "rollout", "--run", "r").returncode == 0
        outage.down = True
        failed = brewkb(root, fake, "reflect", "r")
        assert failed.returncode == 1 and "all 10 grades failed: judge: " in failed.stderr
        outage.recover()
        before = len(fake.requests)
        again = brewkb(root, fake, "reflect", "r")
        assert again.returncode == 0, again.stderr
        assert brewkb(root, fake, "runs").stdout.rstrip().endswith(", 0 failed items")  # all retried since
        asked = [body for _, body in fake.requests[before:]]
    # the finished rollouts were kept; each failed grade was asked for once more
    assert not any(body.get("tools") for body in asked)
    judged = [b for b in asked if b.get("response_format", {}).get("json_schema", {}).get("name") == "judge"]
    assert len(judged) == 10 + stages_done(root, "r")["relabel"]["relabelled"]


def test_a_missing_key_is_not_a_zero_success_rate(make_repo: MakeRepo) -> None:
    root = shop_kb(make_repo)
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
    out = subprocess.run([sys.executable, "-m", "brewkb", "eval"], cwd=root, capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.returncode == 1 and not TRACEBACK.search(out.stderr)
    assert "all 6 episodes of 'none' failed to run: " in out.stderr and "no API key: set OPENAI_API_KEY" in out.stderr
    assert "success" not in out.stdout


def test_commands_that_need_a_kb_refuse_a_folder_without_brewkb_toml(make_repo: MakeRepo) -> None:
    root = make_repo({"README.md": "not a KB\n"})
    for args in (["refine"], ["rollout"], ["reflect", "r"], ["eval"]):
        out = subprocess.run([sys.executable, "-m", "brewkb", *args], cwd=root, capture_output=True, text=True)
        assert out.returncode == 1, args
        assert out.stderr.strip().endswith("no brewkb.toml there or above, up to " + str(root) +
                                           "); run `brewkb init` there first"), out.stderr
    assert not (root / "runs").exists()


def test_episodes_that_fail_to_run_are_counted_and_named(make_repo: MakeRepo) -> None:
    root = shop_kb(make_repo)
    config = (root / "brewkb.toml").read_text().replace('backend = "openai"', 'backend = "openai"\nmax_retries = 0')
    (root / "brewkb.toml").write_text(config)
    with FakeOpenAI(default=Outage(calls=3), embed=embed) as fake:
        out = brewkb(root, fake, "rollout", "--run", "r", "--split", "train")
        assert out.returncode == 1 and not TRACEBACK.search(out.stderr)
        assert "rollouts: 3 of 10 episodes failed to run (agent or endpoint errors); the first: agent: " in out.stderr
        assert out.stderr.splitlines()[-1].startswith("brewkb: error: 3 of 10 episodes failed to run in stage "
                                                      "rollouts (the first: agent: ")
        assert "rollouts" not in stages_done(root, "r")
        listed = brewkb(root, fake, "runs").stdout
        assert "3 failed items; retry them: brewkb rollout --run r" in listed
        retried = brewkb(root, fake, "rollout", "--run", "r", "--split", "train")
        assert retried.returncode == 0 and "rollouts: 10 items (7 already done)" in retried.stderr
    # going on without them is a choice the config makes, and the run records it
    config = (root / "brewkb.toml").read_text() + "\n[stages]\naccept_failed = true\n"
    (root / "brewkb.toml").write_text(config)
    with FakeOpenAI(default=Outage(calls=3), embed=embed) as fake:
        again = brewkb(root, fake, "rollout", "--run", "r", "--split", "train", "--force", "rollouts")
        listed = brewkb(root, fake, "runs").stdout
    assert again.returncode == 0, again.stderr
    assert "rollouts: 10 episodes (3 failed to run), success rate" in again.stdout
    assert stages_done(root, "r")["rollouts"]["failed_to_run"] == 3
    assert "3 failed items (3 left out: stages.accept_failed)" in listed


def test_relabelled_and_expansion_episodes_are_judged_before_reflection(make_repo: MakeRepo,
                                                                         endpoint: FakeOpenAI) -> None:
    root = shop_kb(make_repo, "greedy")
    out = brewkb(root, endpoint, "refine", "--run", "r", "--no-eval")
    assert_clean_run(root, out, "r")
    reflected = [body["messages"][-1]["content"] for _, body in endpoint.requests
                 if body.get("response_format", {}).get("json_schema", {}).get("name") == "reflection"]
    # only the 5 eval rollouts, which map concepts, reach the Reflector without the judge's scores
    assert len([text for text in reflected if "Rubric scores from the judge" not in text]) == 5
    relabelled = stages_done(root, "r")["relabel"]["relabelled"]
    entries = [e for e in read_ledger(root / "runs" / "r" / "ledger.jsonl") if e.role == "judge" and not e.error]
    # the 10 train rollouts are graded, relabelled runs judged; expansion episodes are judged too (an
    # episode identical to a graded one is judged from the cache, and the ledger counts that)
    assert len(entries) > 10 + relabelled


def test_a_failed_refine_started_elsewhere_names_the_kb_in_its_resume_hint(make_repo: MakeRepo) -> None:
    root = shop_kb(make_repo)
    config = (root / "brewkb.toml").read_text().replace('backend = "openai"', 'backend = "openai"\nmax_retries = 0')
    (root / "brewkb.toml").write_text(config)
    git(root, "commit", "-qam", "no retries")
    with FakeOpenAI(default=Outage(), embed=embed) as fake:
        failed = brewkb(root / "recipes", fake, "refine", "--run", "r")  # started in a folder of the KB
    assert failed.returncode == 1 and not TRACEBACK.search(failed.stderr)
    assert f"continue with `brewkb -C {root} refine --resume r`" in failed.stderr
