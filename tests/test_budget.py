"""Budgets through the real CLI: `refine --plan` bounds what the same run then
spends, and --max-llm-calls / --max-episodes / --max-cost stop a run (exit 75)
that `--resume` with a raised limit finishes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from brewkb.config import Price
from brewkb.errors import BudgetExhausted
from brewkb.llm.ledger import read_ledger
from brewkb.run.budget import Budget, Limits, spent
from tests.conftest import MakeRepo, git
from tests.fakes import servers
from tests.fakes.openai_server import FakeOpenAI

SETTINGS = ("--strategy", "greedy", "--depth", "1", "--width", "2", "--no-relabel")


def kb(make_repo: MakeRepo, llm: str, train: int = 8) -> Path:
    return make_repo({"brewkb.toml": f"{llm}\n[env.options]\ntrain = {train}\neval = 4\n"})


def openai_llm(fake: FakeOpenAI, extra: str = "") -> str:
    return f'[llm]\nbackend = "openai"\nbase_url = "{fake.base_url}"\nmodel = "gpt-4o-mini"\nconcurrency = 4\n{extra}'


def brewkb(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "brewkb", *args], cwd=repo, capture_output=True, text=True)


def posts(fake: FakeOpenAI) -> int:
    return sum(1 for path, _ in fake.requests if not path.endswith("/models"))


def has_branch(repo: Path, ref: str) -> bool:
    return subprocess.run(["git", "rev-parse", "--verify", "-q", ref], cwd=repo, capture_output=True).returncode == 0


def test_plan_calls_nothing_and_bounds_what_the_run_spends_through_the_fallback(make_repo: MakeRepo) -> None:
    """Against a llama-cpp-python-like server, which rejects json_schema: the
    plan calls nothing; the run with the same settings finishes through the
    json_object fallback and spends within the plan, role by role."""
    with servers.llamacpp_python("gpt-4o-mini") as fake:
        repo = kb(make_repo, openai_llm(fake, '[llm.prices."gpt-4o-mini"]\ninput = 0.15\noutput = 0.6\n'))
        planned = brewkb(repo, "refine", "--plan", "--json", "--run", "p", *SETTINGS)
        assert planned.returncode == 0, planned.stderr
        assert posts(fake) == 0 and not (repo / "runs" / "p").exists()
        plan = json.loads(planned.stdout)
        assert plan["concepts_known"] is False and plan["cost"] > 0
        # 8 train rollouts and the 8 episodes of the one expansion round, a repair each; the fallback allowance
        assert plan["calls"]["judge"] == 2 * 8 + 2 * 8 + 2 * 4
        result = brewkb(repo, "refine", "--run", "p", *SETTINGS)
        assert result.returncode == 0, result.stderr[-2000:]
        assert "Traceback" not in result.stderr
        sent = posts(fake)
        rest = json.loads(brewkb(repo, "refine", "--resume", "p", "--plan", "--json").stdout)
        ledger = json.loads(brewkb(repo, "ledger", "p", "--json").stdout)
    assert has_branch(repo, "refs/heads/brew/p/pr")
    entries = read_ledger(repo / "runs" / "p" / "ledger.jsonl")
    episodes, calls, _ = spent(entries, {})
    assert 0 < episodes <= plan["episodes"]
    assert 0 < calls == sent <= plan["llm_calls"]
    for role, bound in plan["calls"].items():
        made = sum(1 for e in entries if e.role == role and e.kind != "episode" and not e.cached)
        assert made <= bound, (role, made, bound)
    assert rest["episodes"] == 0 and rest["llm_calls"] == 0 and rest["concepts_known"] is True
    # the fallback: a few json_schema calls rejected (those in flight), then every role in json_object
    rejected = [e for e in entries if e.mode == "json_schema"]
    assert 0 < len(rejected) <= 4 and all("rejects response_format json_schema" in (e.error or "") for e in rejected)
    for role in ("judge", "reflector", "integrator"):
        assert ledger[role]["modes"]["json_object"] >= 1


def test_a_run_a_signal_stopped_resumes_as_it_is_not_above_its_limit(make_repo: MakeRepo) -> None:
    with FakeOpenAI(default=servers.responder(), models=["gpt-4o-mini"], latency=0.05) as fake:
        repo = kb(make_repo, openai_llm(fake))
        process = subprocess.Popen([sys.executable, "-m", "brewkb", "refine", "--run", "s", "--max-llm-calls", "5000",
                                    "--no-cache", *SETTINGS], cwd=repo, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        ledger = repo / "runs" / "s" / "ledger.jsonl"
        deadline = time.monotonic() + 60
        while not (ledger.exists() and ledger.read_text().count("\n") >= 3) and time.monotonic() < deadline:
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err[-2000:]
    listed = brewkb(repo, "runs").stdout
    assert "continue: brewkb refine --resume s" in listed and "above the run's limit" not in listed, listed


def test_max_llm_calls_stops_cleanly_and_resume_with_a_raised_limit_finishes(make_repo: MakeRepo) -> None:
    with servers.vllm() as fake:
        repo = kb(make_repo, openai_llm(fake), train=20)  # well over 50 calls in all
        stopped = brewkb(repo, "refine", "--run", "r", "--max-llm-calls", "50", "--no-cache", *SETTINGS)
        assert stopped.returncode == 75, stopped.stderr[-2000:]
        assert posts(fake) <= 50
        assert "Traceback" not in stopped.stderr
        last = stopped.stderr.strip().splitlines()[-1]
        assert last.startswith("brewkb: stopped: the budget of 50 LLM calls is spent")
        assert "brewkb refine --resume r --max-llm-calls N" in last
        assert not has_branch(repo, "refs/heads/brew/r/pr")
        # the limit is kept with the run: a plain resume stops at once, sending nothing
        before = posts(fake)
        again = brewkb(repo, "refine", "--resume", "r", "--no-cache")
        assert again.returncode == 75 and posts(fake) == before
        assert "continue: brewkb refine --resume r --max-llm-calls N (N above the run's limit)" in \
            brewkb(repo, "runs").stdout
        done = brewkb(repo, "refine", "--resume", "r", "--max-llm-calls", "5000", "--no-cache")
        assert done.returncode == 0, done.stderr[-2000:]
    assert has_branch(repo, "refs/heads/brew/r/pr")
    manifest = json.loads((repo / "runs" / "r" / "manifest.json").read_text())
    assert manifest["limits"]["llm_calls"] == 5000


def test_max_episodes_cuts_a_batch_and_keeps_what_ran(make_repo: MakeRepo) -> None:
    repo = kb(make_repo, '[llm]\nbackend = "offline"')
    stopped = brewkb(repo, "refine", "--run", "e", "--max-episodes", "10", *SETTINGS)
    assert stopped.returncode == 75, stopped.stderr
    assert "the budget of 10 agent episodes is spent (2 of a batch of 4 not run)" in stopped.stderr
    episodes, _, _ = spent(read_ledger(repo / "runs" / "e" / "ledger.jsonl"), {})
    assert episodes == 10
    assert len((repo / "runs" / "e" / "rollouts.jsonl").read_text().splitlines()) == 8  # the train stage finished
    done = brewkb(repo, "refine", "--resume", "e", "--max-episodes", "100000")
    assert done.returncode == 0, done.stderr
    assert git(repo, "rev-parse", "brew/e/pr").strip()


def test_max_cost_stops_new_calls_once_reached(make_repo: MakeRepo) -> None:
    with servers.vllm() as fake:
        repo = kb(make_repo, openai_llm(fake, '[llm.prices."gpt-4o-mini"]\ninput = 1000\noutput = 1000\n'))
        stopped = brewkb(repo, "refine", "--run", "c", "--max-cost", "0.5", *SETTINGS)
    assert stopped.returncode == 75, stopped.stderr[-2000:]
    assert "the budget of $0.5" in stopped.stderr and "--max-cost N" in stopped.stderr
    _, calls, cost = spent(read_ledger(repo / "runs" / "c" / "ledger.jsonl"), {"gpt-4o-mini": Price(1000, 1000)})
    # a judge prompt is over 100 tokens, $0.1 at these prices: five calls reach the limit, and
    # at most llm.concurrency (4) more were in flight when it was reached
    assert cost >= 0.5 and calls <= 5 + 4


def test_budget_counts_only_what_it_allows() -> None:
    budget = Budget(Limits(episodes=5, llm_calls=2), {}, episodes=3, calls=1, run="x")
    assert budget.take_episodes(4) == 2 and budget.take_episodes(1) == 0
    budget.take_call()
    with pytest.raises(BudgetExhausted, match="--resume x --max-llm-calls N"):
        budget.take_call()


def test_help_and_readme_document_the_budget_options_and_the_doctor() -> None:
    from tests.conftest import REPO_ROOT

    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    refine_help = subprocess.run([sys.executable, "-m", "brewkb", "refine", "--help"], capture_output=True,
                                 text=True).stdout
    for option in ("--plan", "--max-episodes", "--max-llm-calls", "--max-cost"):
        assert option in refine_help and option in readme
    assert "exits 75" in refine_help.replace("\n", " ") and "75" in readme
    top = subprocess.run([sys.executable, "-m", "brewkb", "--help"], capture_output=True, text=True).stdout
    assert "doctor" in top and "`brewkb doctor" in readme


def test_a_tool_agent_run_stops_within_its_call_budget_and_drops_cut_episodes(make_repo: MakeRepo) -> None:
    """Episodes of the LLM agent spend calls too: the limit cuts one midway,
    which is not saved as a failed trajectory, and the run makes no more calls."""
    from tests.fakes.roles import embed, role_player

    repo = make_repo({"brewkb.toml": '[llm]\nbackend = "openai"\n[env.options]\ntrain = 6\neval = 3\n'
                                     '[agent]\nname = "tool-agent"\n'})
    with FakeOpenAI(default=role_player, embed=embed) as fake:
        env = {"OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": "sk-test", "PATH": "/usr/bin:/bin",
               "HOME": str(repo), "BREWKB_LOG_DIR": str(repo / ".logs")}
        stopped = subprocess.run([sys.executable, "-m", "brewkb", "refine", "--run", "t", "--max-llm-calls", "15",
                                  *SETTINGS], cwd=repo, capture_output=True, text=True, env=env)
        assert stopped.returncode == 75, stopped.stderr[-2000:]
        assert posts(fake) <= 15
    assert "Traceback" not in stopped.stderr and "budget of 15 LLM calls" in stopped.stderr
    saved = (repo / "runs" / "t" / "rollouts.partial.jsonl").read_text().splitlines()
    assert saved and not any("budget" in line for line in saved)
    episodes, calls, _ = spent(read_ledger(repo / "runs" / "t" / "ledger.jsonl"), {})
    assert episodes == len(saved) < 6 and calls <= 15  # the train rollouts were cut
